// Helpers shared by attnlab-cli's subcommands (see cli_common.cpp).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "app/cli_args.h"
#include "engine/forward.h"

namespace attnlab::cli {

// Flags every model-using command accepts (--model, --random-init's config flags, --backend, --mask).
extern const std::set<std::string> kModelValued;
std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b);
// Applies --vocab-size --dim --heads --layers --ff --max-len --classes --positional --norm
// --activation --pooling --tokenizer to defaults, then validates.
ModelConfig config_from_flags(const Args& a, const ModelConfig& defaults);
Model random_model(const ModelConfig& c, uint64_t seed);
// --model DIR, --random-init, or the shipped default model.
Model resolve_model(const Args& a, const std::string& argv0);
std::vector<int> input_ids(const Args& a, const Model& m, const std::string& text_flag, const std::string& ids_flag,
                           std::vector<std::string>* tokens);
MaskSpec mask_from_flags(const Args& a);
// --text/--ids, --cross-text/--cross-ids, --pad-to and --mask as a request ("CMD needs --text"
// when there is no input).
ForwardRequest request_from_flags(const Args& a, const Model& model, const std::string& cmd,
                                  std::vector<std::string>* tokens, std::vector<std::string>* cross_tokens);
std::vector<std::string> display_tokens(const Model& m, const std::vector<int>& ids, std::vector<std::string> tokens);

}  // namespace attnlab::cli
