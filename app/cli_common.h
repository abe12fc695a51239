// Helpers shared by attnlab-cli's subcommands (see cli_common.cpp).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "app/cli_args.h"
#include "engine/compute/forward.h"
#include "engine/compute/hooks.h"
#include "engine/text/input.h"

namespace attnlab::cli {

// Flags every model-using command accepts (--model, --random-init's config flags, --backend, --mask).
extern const std::set<std::string> kModelValued;
std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b);
bool ends_with(const std::string& s, const std::string& tail);
// Applies --vocab-size --dim --heads --layers --ff --max-len --classes --positional --norm
// --activation --pooling --tokenizer to defaults, then validates.
ModelConfig config_from_flags(const Args& a, const ModelConfig& defaults);
Model random_model(const ModelConfig& c, uint64_t seed);
// --model DIR, --random-init, or the shipped default model.
Model resolve_model(const Args& a, const std::string& argv0);
// --text/--ids (or the given pair of flags) through the engine's input preparation; more tokens
// than max_len is an error. Empty when neither flag is given.
PreparedInput input_from_flags(const Args& a, const Model& m, const std::string& text_flag, const std::string& ids_flag,
                               int pad_to = 0);
MaskSpec mask_from_flags(const Args& a);
// --text/--ids, --cross-text/--cross-ids, --pad-to and --mask as a request ("CMD needs --text"
// when there is no input).
// `prepared` (optional) receives the prepared inputs (text, cross text) for display transforms.
// What the app marks orange, said in words: "--text: 1 of 5 tokens not in the vocabulary, read as
// [UNK]: "hello"" (input_from_flags prints it as a warning), or empty.
std::string unknown_note(const PreparedInput& in, const std::string& flag);
// --cache NAME[,NAME|GLOB]..., --patch NAME=FILE.npy[:POSITIONS], --add NAME=FILE.npy[*ALPHA][:POSITIONS]
// (each repeatable): the named activations a pass keeps, replaces or adds to (engine/compute/hooks.h).
HookSpec hooks_from_flags(const Args& a);
ForwardRequest request_from_flags(const Args& a, const Model& model, const std::string& cmd,
                                  std::pair<PreparedInput, PreparedInput>* prepared = nullptr);
// --attention FILE [--batch N] (engine/formats/attention_file.h) as a pass's result; its warnings
// go to stderr. Flags that make an input of a model (--model, --text, --ids, ...) are an Error.
ForwardResult result_from_attention_flag(const Args& a, const std::string& cmd);

}  // namespace attnlab::cli
