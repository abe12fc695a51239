// attnlab._engine: the engine as a Python module (pybind11). The model and the pass are the
// engine's own (engine/model/model_folder.h, engine/compute/forward.h): a Python call runs the
// same code as attnlab-cli, with the GIL released during the pass. Arrays come back as numpy
// views of the engine's tensors (read-only, kept alive by the Result that owns them): no copies
// of the probabilities on the way, except `attentions`, which stacks the layers into one
// [L, H, T, S] array once.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engine/analysis/method_table.h"
#include "engine/compute/backend.h"
#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/compute/mask.h"
#include "engine/compute/plan.h"
#include "engine/core/memory.h"
#include "engine/formats/attention_file.h"
#include "engine/model/model_folder.h"
#include "engine/text/input.h"

namespace py = pybind11;
using namespace attnlab;

namespace {

// A float32 numpy array over `data` with `shape`, kept alive by `owner`, read-only (the engine's
// tensors are its own; a caller who wants to write takes .copy()).
py::array view(const float* data, const std::vector<int64_t>& shape, py::handle owner) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end()), strides(shape.size());
  py::ssize_t step = sizeof(float);
  for (size_t k = shape.size(); k-- > 0;) {
    strides[k] = step;
    step *= static_cast<py::ssize_t>(shape[k]);
  }
  py::array a(py::dtype::of<float>(), dims, strides, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

py::array copy_of(const Tensor& t) {
  std::vector<py::ssize_t> dims(t.shape.begin(), t.shape.end());
  py::array_t<float> a(dims);
  std::copy(t.data.begin(), t.data.end(), a.mutable_data());
  return std::move(a);
}

template <class T>
py::array_t<T> array_of(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// A float32 numpy array (any shape, any strides) as an engine tensor (copied: the engine owns its values).
Tensor tensor_of(const py::handle& obj, const std::string& what) {
  py::array_t<float, py::array::c_style | py::array::forcecast> a;
  try {
    a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(obj);
  } catch (const py::error_already_set&) {
  }
  if (!a) throw Error(what + ": expected an array of numbers");
  Tensor t;
  t.shape.assign(a.shape(), a.shape() + a.ndim());
  t.data.assign(a.data(), a.data() + a.size());
  return t;
}

// Where the shipped default model lives: $ATTNLAB_MODEL, the source tree's the module was built
// from (the attnlab-cli built beside it opens the same one, app/default_model.h), else the
// installed Debian package's.
std::string default_model_dir() {
  if (const char* env = std::getenv("ATTNLAB_MODEL"); env && *env) return env;
  for (const std::string dir :
       {std::string(ATTNLAB_RESOURCE_DIR) + "/models/default", std::string("/usr/share/attnlab/models/default")})
    if (std::filesystem::exists(dir + "/config.json")) return dir;
  throw Error("no model folder given and no default model found (set ATTNLAB_MODEL or pass a folder)");
}

// A backend keeps per-shape state (oneDNN primitives, buffers) and is not thread-safe: the calls on
// one Model take turns (the lock is taken with the GIL released, so other Python threads run);
// separate Models run in parallel.
struct PyModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<Backend> backend;
  std::shared_ptr<std::mutex> busy = std::make_shared<std::mutex>();
};

// One pass's result. Holds the model (attention on demand recomputes layers from it).
struct PyResult {
  std::shared_ptr<const Model> model;
  ForwardResult r;
  std::string backend;
  py::object stacked;  // attentions, stacked on first use
};

PreparedInput input_of(const Model& m, const py::object& text, const py::object& ids, const py::object& pair,
                       const std::string& truncation, const std::string& what) {
  InputOptions o;
  o.overflow = Overflow::Error;  // as the CLI: a silent cut would change a user's numbers
  o.what = what;
  if (!pair.is_none()) o.pair = pair.cast<std::string>();
  if (!truncation.empty()) o.truncation = parse_truncation(truncation);
  if (!text.is_none() && !ids.is_none()) throw Error(what + " and its ids are exclusive: pass one");
  if (!text.is_none()) {
    if (!py::isinstance<py::str>(text)) throw Error(what + " must be a str (token ids go in ids=[...])");
    PreparedInput in = prepare_text(m, text.cast<std::string>(), o);
    if (in.ids.empty()) throw Error(what + ": the text has no tokens");
    return in;
  }
  if (!ids.is_none()) {
    if (o.pair) throw Error("pair needs text (sentence A), not ids");
    // a list, a numpy array or a torch tensor of ints (tolist() on either)
    const py::object list = py::hasattr(ids, "tolist") ? ids.attr("tolist")() : ids;
    std::vector<int> v;
    try {
      v = list.cast<std::vector<int>>();
    } catch (const py::cast_error&) {
      throw Error("ids must be a sequence of ints (a list, a numpy array or a tensor of token ids)");
    }
    return prepare_ids(m, v, o);
  }
  return {};
}

// The request of forward / analyze: text or ids (and a pair, a cross text), masks as the CLI's --mask.
ForwardRequest request_of(const Model& m, const py::object& text, const py::object& ids, const py::object& pair,
                          const py::object& cross_text, const std::vector<std::string>& masks,
                          const std::string& truncation, std::vector<std::string>* warnings) {
  const PreparedInput in = input_of(m, text, ids, pair, truncation, "text");
  if (in.ids.empty()) throw Error("forward needs text=\"...\" or ids=[...]");
  ForwardRequest req;
  req.ids = in.ids, req.tokens = in.tokens, req.token_types = in.token_types;
  const PreparedInput cross = input_of(m, cross_text, py::none(), py::none(), truncation, "cross text");
  req.cross_ids = cross.ids, req.cross_tokens = cross.tokens, req.cross_token_types = cross.token_types;
  for (const std::string& spec : masks) add_mask_arg(req.mask, spec);
  for (const PreparedInput* p : {&in, &cross}) {
    size_t unknown = 0;
    for (uint8_t u : p->unknown) unknown += u;
    if (unknown)
      warnings->push_back(std::to_string(unknown) + " of " + std::to_string(p->ids.size()) +
                          " tokens not in the vocabulary, read as [UNK]");
    for (const std::string& n : p->notices) warnings->push_back(n);
  }
  return req;
}

// A str or a sequence of str, as a list (masks="causal" and masks=["causal"] alike).
std::vector<std::string> names_of(const py::object& o, const std::string& what) {
  if (o.is_none()) return {};
  if (py::isinstance<py::str>(o)) return {o.cast<std::string>()};
  try {
    return o.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    throw Error(what + " must be a str or a list of str");
  }
}

HookEdit edit_of(const std::string& name, const py::handle& value, HookEdit::Kind kind) {
  HookEdit e;
  e.kind = kind;
  e.name = name;
  py::object v = py::reinterpret_borrow<py::object>(value);
  if (py::isinstance<py::tuple>(v)) {  // (array, positions) or, to add, (array, positions, alpha)
    const auto t = v.cast<py::tuple>();
    if (t.size() < 2 || t.size() > 3) throw Error(name + ": expected an array, or (array, positions[, alpha])");
    if (!t[1].is_none()) e.positions = t[1].cast<std::vector<int>>();
    if (t.size() == 3) e.alpha = t[2].cast<float>();
    v = t[0];
  }
  e.value = tensor_of(v, name);
  return e;
}

}  // namespace

PYBIND11_MODULE(_engine, m) {
  m.doc() = "attnlab's engine: models, passes and attention files (the package attnlab wraps it)";
  static py::exception<Error> error(m, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      error(e.what());
    }
  });
  m.attr("__version__") = ATTNLAB_VERSION;
  m.def("backends", &backend_names, "The backends this machine can run: cpu, cpu-bf16, reference, opencl:N");
  m.def("default_model_dir", &default_model_dir);

  py::class_<PyResult, std::shared_ptr<PyResult>>(m, "Result", "One forward pass: tokens, attention, activations")
      .def_property_readonly("tokens", [](const PyResult& s) { return s.r.tokens; })
      .def_property_readonly("pieces",
                             [](const PyResult& s) {  // the vocabulary's strings ("Ġthe"), as tokenizers give them
                               std::vector<std::string> out = s.r.tokens;
                               if (s.model->is_hf())
                                 for (size_t t = 0; t < s.r.ids.size(); ++t) out[t] = s.model->token_name(s.r.ids[t]);
                               return out;
                             })
      .def_property_readonly("ids", [](const PyResult& s) { return array_of(s.r.ids); })
      .def_property_readonly("cross_tokens", [](const PyResult& s) { return s.r.cross_tokens; })
      .def_property_readonly("cross_ids", [](const PyResult& s) { return array_of(s.r.cross_ids); })
      .def_property_readonly("num_layers", [](const PyResult& s) { return s.model->config.num_layers; })
      .def(
          "attention",
          [](py::object self, int layer) {
            const PyResult& s = self.cast<const PyResult&>();
            const int asked = layer, L = s.model->config.num_layers;
            if (layer < 0) layer += L;
            if (layer < 0 || layer >= L)
              throw py::index_error("layer " + std::to_string(asked) + ": the model has " + std::to_string(L) +
                                    " layers (0 to " + std::to_string(L - 1) + ")");
            std::shared_ptr<const Tensor> p;
            {
              py::gil_scoped_release free;  // a layer on demand is one attention op
              p = s.r.layer_probs(layer);
            }
            // kept layers are the result's own; recomputed ones live in this capsule
            if (p.get() == &s.r.probs(layer)) return view(p->data.data(), p->shape, self);
            auto* keep = new std::shared_ptr<const Tensor>(p);
            py::capsule owner(keep, [](void* q) { delete static_cast<std::shared_ptr<const Tensor>*>(q); });
            return view(p->data.data(), p->shape, owner);
          },
          py::arg("layer"), "Layer `layer`'s probabilities [heads, T, S], without a copy")
      .def_property_readonly(
          "attentions",
          [](py::object self) -> py::object {
            PyResult& s = self.cast<PyResult&>();
            if (!s.stacked) {
              Tensor t;
              {
                py::gil_scoped_release free;
                t = s.r.stacked_probs();
              }
              auto* keep = new Tensor(std::move(t));
              py::capsule owner(keep, [](void* q) { delete static_cast<Tensor*>(q); });
              s.stacked = view(keep->data.data(), keep->shape, owner);
            }
            return s.stacked;
          },
          "Every layer's probabilities [layers, heads, T, S] (stacked once)")
      .def_property_readonly("hidden",
                             [](py::object self) {
                               const PyResult& s = self.cast<const PyResult&>();
                               return view(s.r.hidden.data.data(), s.r.hidden.shape, self);
                             })
      .def_property_readonly("logits",
                             [](const PyResult& s) {
                               // a classifier's class logits; a language model's next-token logits
                               return array_of(s.r.logits.empty() ? s.r.next_logits : s.r.logits);
                             })
      .def_property_readonly("probabilities", [](const PyResult& s) { return array_of(s.r.class_probs); })
      .def_property_readonly("predicted",
                             [](const PyResult& s) -> py::object {
                               if (s.r.predicted < 0) return py::none();
                               return py::str(s.model->label(s.r.predicted));
                             })
      .def_property_readonly("next_tokens",
                             [](const PyResult& s) {
                               std::vector<std::tuple<int, std::string, float>> out;
                               for (const auto& [id, p] : s.r.next_tokens)
                                 out.emplace_back(id, s.model->readable_token(id), p);
                               return out;
                             })
      .def_property_readonly("cache",
                             [](py::object self) {
                               const PyResult& s = self.cast<const PyResult&>();
                               py::dict d;
                               for (const auto& [name, t] : s.r.cache)
                                 d[py::str(name)] = view(t.data.data(), t.shape, self);
                               return d;
                             })
      .def_property_readonly("mask",
                             [](const PyResult& s) {
                               return copy_of(s.r.mask.as_tensor());  // 0 where a key is blocked
                             })
      .def_property_readonly("warnings", [](const PyResult& s) { return s.r.warnings; })
      .def_property_readonly("millis", [](const PyResult& s) { return s.r.millis; })
      .def_property_readonly("backend", [](const PyResult& s) { return s.backend; })
      .def("__repr__", [](const PyResult& s) {
        return "<attnlab.Result " + std::to_string(s.r.ids.size()) + " tokens, " +
               std::to_string(s.model->config.num_layers) + " layers x " + std::to_string(s.model->config.num_heads) +
               " heads, " + s.backend + ">";
      });

  py::class_<PyModel>(m, "Model", "A model folder attnlab opens (its own, or an unmodified Hugging Face one)")
      .def(py::init([](const py::object& path, const std::string& backend) {
             PyModel p;
             const std::string dir = path.is_none() ? default_model_dir() : py::str(path).cast<std::string>();
             {
               py::gil_scoped_release free;
               p.model = std::make_shared<Model>(load_model(dir));
               p.backend = make_backend(backend);
             }
             return p;
           }),
           py::arg("path") = py::none(), py::arg("backend") = "cpu")
      .def_property_readonly("source", [](const PyModel& p) { return p.model->source; })
      .def_property_readonly("summary", [](const PyModel& p) { return p.model->summary(); })
      .def_property_readonly("backend", [](const PyModel& p) { return p.backend->name(); })
      .def_property_readonly("num_layers", [](const PyModel& p) { return p.model->config.num_layers; })
      .def_property_readonly("num_heads", [](const PyModel& p) { return p.model->config.num_heads; })
      .def_property_readonly("dim", [](const PyModel& p) { return p.model->config.embed_size; })
      .def_property_readonly("vocab_size", [](const PyModel& p) { return p.model->config.vocab_size; })
      .def_property_readonly("max_len", [](const PyModel& p) { return p.model->config.max_len; })
      .def_property_readonly("is_language_model", [](const PyModel& p) { return p.model->config.is_language_model(); })
      .def_property_readonly("hook_names", [](const PyModel& p) { return hook_names(p.model->config); })
      .def(
          "tokenize",
          [](const PyModel& p, const std::string& text, const py::object& pair) {
            const PreparedInput in = input_of(*p.model, py::str(text), py::none(), pair, "", "text");
            return py::make_tuple(in.tokens, array_of(in.ids));
          },
          py::arg("text"), py::arg("pair") = py::none(), "(tokens, ids) as the model's tokenizer gives them")
      .def(
          "forward",
          [](const PyModel& p, const py::object& text, const py::object& pair, const py::object& ids,
             const py::object& cross_text, const py::object& mask_specs, const std::string& truncation,
             const py::object& cache_names, const py::dict& patch, const py::dict& add,
             const std::vector<std::pair<int, int>>& ablate, bool on_demand) {
            const std::vector<std::string> masks = names_of(mask_specs, "masks"),
                                           cache = names_of(cache_names, "cache");
            auto out = std::make_shared<PyResult>();
            out->model = p.model;
            out->backend = p.backend->name();
            std::vector<std::string> warnings;
            ForwardRequest req = request_of(*p.model, text, ids, pair, cross_text, masks, truncation, &warnings);
            HookSpec hooks;
            hooks.cache = cache;
            for (const auto& [k, v] : patch) hooks.edits.push_back(edit_of(py::str(k), v, HookEdit::Kind::Replace));
            for (const auto& [k, v] : add) hooks.edits.push_back(edit_of(py::str(k), v, HookEdit::Kind::Add));
            if (!hooks.empty()) req.hooks = &hooks;
            req.ablate = ablate;
            if (on_demand) {  // queries and keys kept; attention(l) recomputes a layer in one op
              req.attention_on_demand = true;
              req.keep_attention.assign(static_cast<size_t>(p.model->config.num_layers), false);
            }
            {
              py::gil_scoped_release free;
              const std::lock_guard<std::mutex> turn(*p.busy);
              out->r = run_forward(*p.model, *p.backend, req);
            }
            for (const std::string& pattern : cache) {  // each name or glob must match something
              bool hit = false;
              for (const auto& kept : out->r.cache) hit = hit || glob_match(pattern, kept.first);
              if (!hit)
                throw Error("cache: no activation of this model's pass matches " + pattern +
                            " (Model.hook_names lists them)");
            }
            out->r.warnings.insert(out->r.warnings.begin(), warnings.begin(), warnings.end());
            return out;
          },
          py::arg("text") = py::none(), py::arg("pair") = py::none(), py::kw_only(), py::arg("ids") = py::none(),
          py::arg("cross_text") = py::none(), py::arg("masks") = py::none(), py::arg("truncation") = "",
          py::arg("cache") = py::none(), py::arg("patch") = py::dict(), py::arg("add") = py::dict(),
          py::arg("ablate") = std::vector<std::pair<int, int>>{}, py::arg("on_demand") = false)
      .def(
          "analyze",
          [](const PyModel& p, const std::string& method, const py::object& text, const py::object& pair,
             const py::object& ids, const py::object& mask_specs, int target) {
            const std::vector<std::string> masks = names_of(mask_specs, "masks");
            const MethodRow* found = nullptr;
            try {
              found = &find_method(method);
            } catch (const Error&) {
            }
            const std::vector<MethodId> maps = {MethodId::Rollout, MethodId::GradAttention, MethodId::ValueNorm,
                                                MethodId::MeanHeads, MethodId::MeanLayers};
            if (!found || std::find(maps.begin(), maps.end(), found->id) == maps.end())
              throw Error("analyze: \"" + method +
                          "\" is not one of the maps of one input: rollout, grad-attention, value-norm, "
                          "mean-heads, mean-layers (the other methods are attnlab-cli analyze's)");
            const MethodRow& row = *found;
            std::vector<std::string> warnings;
            const ForwardRequest req = request_of(*p.model, text, ids, pair, py::none(), masks, "", &warnings);
            Tensor map;
            {
              py::gil_scoped_release free;
              const std::lock_guard<std::mutex> turn(*p.busy);
              map = compute_method_map(row.id, *p.model, *p.backend, req, target);
            }
            Tensor* keep = new Tensor(std::move(map));
            py::capsule owner(keep, [](void* q) { delete static_cast<Tensor*>(q); });
            return view(keep->data.data(), keep->shape, owner);
          },
          py::arg("method"), py::arg("text") = py::none(), py::arg("pair") = py::none(), py::kw_only(),
          py::arg("ids") = py::none(), py::arg("masks") = py::none(), py::arg("target") = -1,
          "A map of one input, as attnlab-cli analyze --method computes it: rollout, grad-attention, "
          "value-norm, mean-heads, mean-layers")
      .def("__repr__", [](const PyModel& p) { return "<attnlab.Model " + p.model->summary() + ">"; });

  m.def(
      "load_attention",
      [](const std::string& path, int batch) {
        AttentionFile f;
        {
          py::gil_scoped_release free;
          f = load_attention_file(path, batch, available_bytes());
        }
        py::list layers;
        for (Tensor& t : f.layers) {  // each layer moved into the array that shows it: no copy
          auto* keep = new Tensor(std::move(t));
          py::capsule owner(keep, [](void* q) { delete static_cast<Tensor*>(q); });
          layers.append(view(keep->data.data(), keep->shape, owner));
        }
        py::dict d;
        d["layers"] = layers;
        d["tokens"] = f.tokens;
        d["tokens_b"] = f.tokens_b;
        d["mask"] = array_of(f.key_kept);
        d["layout"] = f.layout;
        d["warnings"] = f.warnings;
        return d;
      },
      py::arg("path"), py::arg("batch") = -1,
      "An attention file as attnlab reads it (docs/attention-files.md): a dict of layers [heads, T, S], "
      "tokens, tokens_b, mask, layout and warnings; attnlab.Error for a file it refuses");
}
