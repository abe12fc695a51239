// Text classification datasets: TSV/CSV reading (header detection, quoted fields, UTF-8
// checks, row-by-row problems), train/validation split, vocabulary building, encoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model.h"

namespace attnlab {

struct Example {
  std::string text, label;
  int line = 0;  // 1-based line in the file where the row starts
};

struct DatasetIssue {
  int line = 0;
  std::string message;
};

struct Dataset {
  std::string source;
  std::vector<std::string> columns;  // header names, or "column 1", ... without a header
  bool has_header = false;
  int text_column = 0, label_column = 1;
  std::vector<Example> rows;
  std::vector<DatasetIssue> issues;  // rows that were skipped, and why

  std::vector<std::string> label_set() const;  // sorted, distinct
};

struct DatasetOptions {
  std::string text_column;   // name or 1-based index; empty = "text"/"sentence"/"name"/... or the first column
  std::string label_column;  // name or 1-based index; empty = "label"/"class"/... or the last column
  char delimiter = 0;        // 0 = from the extension (.tsv tab, .csv comma), else sniffed
  bool strict = true;        // true: any bad row is an Error; false: skipped and listed in issues
};

Dataset parse_dataset(const std::string& bytes, const std::string& where, const DatasetOptions& options = {});
Dataset load_dataset(const std::string& path, const DatasetOptions& options = {});

// Shuffles (by seed) and splits off a validation fraction (at least one row each when possible).
void split_dataset(const std::vector<Example>& all, double val_fraction, uint64_t seed, std::vector<Example>& train,
                   std::vector<Example>& val);

// [PAD], [UNK], [CLS], then pieces by frequency (ties alphabetical), at most max_size in all,
// each seen at least min_count times.
Vocab build_vocab(const std::vector<Example>& rows, TokenizerKind kind, bool lowercase, int max_size, int min_count);

struct EncodedData {
  std::vector<std::vector<int>> seqs;
  std::vector<int> labels;  // classifiers: one per sequence; empty for a language model
  // Language models: per sequence, the first position whose next token is scored (a task's prompt
  // before it is context only); empty = every position.
  std::vector<int> loss_from;
  int truncated = 0;  // sequences cut to max_len
  size_t size() const { return seqs.size(); }
};

// Tokenizes and truncates to max_len; labels are looked up in model.config.labels.
// Error naming the row for a label the model does not know.
EncodedData encode_examples(const Model& model, const std::vector<Example>& rows);

// A language model's text: the whole of it tokenized as the model's tokenizer does (its special
// tokens once, at the start), cut into sequences of `seq` tokens (the last shorter one dropped
// unless it is the only one); every position scored. Error when the text has fewer than 2 tokens.
EncodedData encode_lm_text(const Model& model, const std::string& text, int seq);

// A language model's training and held-out sequences.
struct LmData {
  EncodedData train, val;
};
// encode_lm_text's sequences, the last tenth (at least one, when there are two or more) held out:
// how a text is trained on, by fine-tuning a folder or by a new model.
LmData split_lm_text(const Model& model, const std::string& text, int seq);

}  // namespace attnlab
