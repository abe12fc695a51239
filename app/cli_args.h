// A small command-line parser for attnlab-cli: "--flag value" and "--switch" options, repeatable
// flags, and a clear Error for an unknown flag or a missing value.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace attnlab::cli {

class Args {
 public:
  // valued: flags that take a value; switches: flags that do not.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& switches);

  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  const std::vector<std::string>& all(const std::string& flag) const;
  int get_int(const std::string& flag, int fallback) const;
  double get_double(const std::string& flag, double fallback) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

std::vector<int> parse_int_list(const std::string& text, const std::string& flag);

}  // namespace attnlab::cli
