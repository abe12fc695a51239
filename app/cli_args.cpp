// attnlab-cli's argument parsing.
#include "app/cli_args.h"

#include <cerrno>
#include <cstdlib>

namespace attnlab::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& switches) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    std::string value;
    bool inline_value = false;
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    if (valued.count(a)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw Error(a + " needs a value");
        value = argv[++i];
      }
      values_[a].push_back(value);
    } else if (switches.count(a)) {
      if (inline_value) throw Error(a + " takes no value");
      values_[a].push_back("");
    } else {
      throw Error("unknown option " + a + " (see attnlab-cli --help)");
    }
  }
}

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second.back();
}

const std::vector<std::string>& Args::all(const std::string& flag) const {
  static const std::vector<std::string> none;
  auto it = values_.find(flag);
  return it == values_.end() ? none : it->second;
}

int Args::get_int(const std::string& flag, int fallback) const {
  if (!has(flag)) return fallback;
  const std::string v = get(flag);
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < -(1L << 30) || n > (1L << 30))
    throw Error(flag + ": expected an integer, got \"" + v + "\"");
  return static_cast<int>(n);
}

double Args::get_double(const std::string& flag, double fallback) const {
  if (!has(flag)) return fallback;
  const std::string v = get(flag);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw Error(flag + ": expected a number, got \"" + v + "\"");
  return d;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* e = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &e, 10);
    if (item.empty() || *e != '\0' || errno != 0 || v < -(1L << 30) || v > (1L << 30))
      throw Error(flag + ": \"" + item + "\" is not an integer (expected a list like 5,17,2)");
    out.push_back(static_cast<int>(v));
    start = end + 1;
  }
  return out;
}

}  // namespace attnlab::cli
