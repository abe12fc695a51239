// What the views show of a result's tokens: every token, or without the tokenizer's special
// tokens ([CLS], [SEP], padding), or with word pieces merged into words. A transform of the
// probabilities for display only (the pass itself is unchanged), as BertViz and exBERT offer:
// merged keys are summed (the attention a query pays to the whole word), merged queries are
// averaged (a word's pieces share one row). Hidden rows and columns are removed, never
// renormalised: a row without [CLS] / [SEP] sums to less than 1, and the views say so.
#pragma once

#include <string>
#include <vector>

#include "engine/compute/forward.h"

namespace attnlab {

struct TokenViewOptions {
  bool hide_special = false;
  bool merge_pieces = false;
  bool active() const { return hide_special || merge_pieces; }
};

// Which tokens make each shown position, and its label.
struct TokenGroups {
  std::vector<std::vector<int>> members;  // shown position -> token positions, in order
  std::vector<std::string> labels;        // "unbelievably" for un ##bel ##ie ##va ##bly
};

// tokens / special / words as PreparedInput has them (words: -1 for special tokens). Pieces of
// one word are merged when they are adjacent; "##" continuation marks are dropped from labels.
TokenGroups group_tokens(const std::vector<std::string>& tokens, const std::vector<uint8_t>& special,
                         const std::vector<int>& words, const TokenViewOptions& options);

// Applies the groups to every kept layer's probabilities (rows: queries, cols: keys) and to the
// effective mask (a merged cell is blocked when every cell in it is), and relabels the result.
// The reference: loops over the members, no shortcuts.
void apply_token_view(ForwardResult& r, const TokenGroups& rows, const TokenGroups& cols);

}  // namespace attnlab
