# Turns engine/compute/opencl/kernels/*.cl into a C++ header of raw string literals, so the binary
# carries its kernels. Run as: cmake -DOUT=file.h -DSOURCES="a.cl|b.cl" -P embed_kernels.cmake
set(content "// Generated from engine/compute/opencl/kernels/*.cl by embed_kernels.cmake. Do not edit.\n#pragma once\n\nnamespace attnlab::cl_sources {\nstruct KernelSource { const char* name; const char* source; };\ninline const KernelSource kKernelSources[] = {\n")
string(REPLACE "|" ";" SOURCES "${SOURCES}")
foreach(src IN LISTS SOURCES)
  get_filename_component(name "${src}" NAME)
  file(READ "${src}" text)
  string(APPEND content "  {\"${name}\", R\"attnlab_cl(${text})attnlab_cl\"},\n")
endforeach()
string(APPEND content "};\n}  // namespace attnlab::cl_sources\n")
file(WRITE "${OUT}.tmp" "${content}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
