// Dataset reading and preparation.
#include "engine/train/dataset.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <set>

#include "engine/text/input.h"
#include "engine/core/io_util.h"

namespace attnlab {

namespace {

std::string lower_trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  s = s.substr(i);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

bool valid_utf8(const std::string& s, size_t& bad) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return bad = i, false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return bad = i, false;
    i += n;
  }
  return true;
}

struct Record {
  std::vector<std::string> fields;
  int line;
};

// RFC 4180 style: quoted fields may hold delimiters, newlines and "" for a quote.
std::vector<Record> split_records(const std::string& text, char delim, const std::string& where) {
  std::vector<Record> out;
  Record cur{{}, 1};
  std::string field;
  bool in_quotes = false, field_started_quoted = false, any = false;
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_quotes) {
      if (ch == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"')
          field += '"', ++i;
        else
          in_quotes = false;
      } else {
        if (ch == '\n') ++line;
        field += ch;
      }
      continue;
    }
    if (ch == '"' && field.empty() && !field_started_quoted) {
      in_quotes = field_started_quoted = any = true;
    } else if (ch == delim) {
      cur.fields.push_back(field_started_quoted ? field : trim(field));
      field.clear();
      field_started_quoted = false;
      any = true;
    } else if (ch == '\n' || ch == '\r') {
      if (ch == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        cur.fields.push_back(field_started_quoted ? field : trim(field));
        out.push_back(std::move(cur));
      }
      ++line;
      cur = Record{{}, line};
      field.clear();
      field_started_quoted = any = false;
    } else {
      field += ch;
      any = true;
    }
  }
  if (in_quotes) throw Error(where + ":" + std::to_string(cur.line) + ": a quoted field is never closed");
  if (any || !field.empty()) {
    cur.fields.push_back(field_started_quoted ? field : trim(field));
    out.push_back(std::move(cur));
  }
  return out;
}

int find_column(const std::vector<std::string>& names, const std::string& want, const std::string& what,
                bool has_header, const std::string& where) {
  if (want.empty()) return -1;
  if (std::all_of(want.begin(), want.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
    const int k = std::atoi(want.c_str()) - 1;
    if (k < 0 || k >= static_cast<int>(names.size()))
      throw Error(where + ": no column " + want + " for the " + what + " (the file has " +
                  std::to_string(names.size()) + " columns)");
    return k;
  }
  for (size_t k = 0; k < names.size(); ++k)
    if (lower_trim(names[k]) == lower_trim(want)) return static_cast<int>(k);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw Error(where + ": no column named \"" + want + "\" for the " + what +
              (has_header ? " (columns: " + list + ")" : " (the file has no header row)"));
}

const std::set<std::string> kTextNames = {"text",  "sentence", "name",    "review",
                                          "input", "document", "content", "tweet"};
const std::set<std::string> kLabelNames = {"label",     "class", "category", "target",
                                           "sentiment", "y",     "output",   "gender"};

}  // namespace

std::vector<std::string> Dataset::label_set() const {
  std::set<std::string> s;
  for (const auto& r : rows) s.insert(r.label);
  return {s.begin(), s.end()};
}

Dataset parse_dataset(const std::string& bytes, const std::string& where, const DatasetOptions& opt) {
  Dataset d;
  d.source = where;
  std::string text = bytes;
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text = text.substr(3);  // UTF-8 byte order mark
  char delim = opt.delimiter;
  if (!delim) {
    const auto dot = where.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : lower_trim(where.substr(dot));
    const std::string first_line = text.substr(0, text.find('\n'));
    delim = ext == ".tsv" ? '\t' : ext == ".csv" ? ',' : first_line.find('\t') != std::string::npos ? '\t' : ',';
  }
  const std::vector<Record> recs = split_records(text, delim, where);
  if (recs.empty()) throw Error(where + ": the file has no rows");
  const size_t ncols = recs[0].fields.size();
  if (ncols < 2)
    throw Error(where + ": expected at least two columns (text and label) separated by " +
                (delim == '\t' ? std::string("tabs") : std::string("'") + delim + "'"));

  // A header names its columns with words we know, or the user named a column that is in it.
  bool header = false;
  for (const auto& f : recs[0].fields) {
    const std::string n = lower_trim(f);
    if (kTextNames.count(n) || kLabelNames.count(n) || n == lower_trim(opt.text_column) ||
        n == lower_trim(opt.label_column))
      header = true;
  }
  d.has_header = header;
  if (header)
    d.columns = recs[0].fields;
  else
    for (size_t k = 0; k < ncols; ++k) d.columns.push_back("column " + std::to_string(k + 1));

  int tc = find_column(d.columns, opt.text_column, "text", header, where);
  int lc = find_column(d.columns, opt.label_column, "label", header, where);
  for (size_t k = 0; k < d.columns.size() && header; ++k) {
    const std::string n = lower_trim(d.columns[k]);
    if (tc < 0 && kTextNames.count(n)) tc = static_cast<int>(k);
    if (lc < 0 && kLabelNames.count(n) && static_cast<int>(k) != tc) lc = static_cast<int>(k);
  }
  if (tc < 0) tc = lc == 0 ? 1 : 0;
  if (lc < 0) lc = static_cast<int>(ncols) - 1 == tc ? 0 : static_cast<int>(ncols) - 1;
  if (tc == lc) throw Error(where + ": the text and label columns are the same column");
  d.text_column = tc;
  d.label_column = lc;

  for (size_t r = header ? 1 : 0; r < recs.size(); ++r) {
    const Record& rec = recs[r];
    auto issue = [&](const std::string& msg) {
      if (opt.strict) throw Error(where + ":" + std::to_string(rec.line) + ": " + msg);
      d.issues.push_back({rec.line, msg});
    };
    if (rec.fields.size() != ncols) {
      issue("expected " + std::to_string(ncols) + " fields, found " + std::to_string(rec.fields.size()));
      continue;
    }
    Example e{rec.fields[static_cast<size_t>(tc)], trim(rec.fields[static_cast<size_t>(lc)]), rec.line};
    size_t bad = 0;
    if (!valid_utf8(e.text, bad) || !valid_utf8(e.label, bad)) {
      issue("invalid UTF-8 (byte " + std::to_string(bad) + " of a field)");
      continue;
    }
    if (trim(e.text).empty()) {
      issue("the text is empty");
      continue;
    }
    if (e.label.empty()) {
      issue("the label is empty");
      continue;
    }
    d.rows.push_back(std::move(e));
  }
  if (d.rows.empty())
    throw Error(where + ": no usable rows" +
                (d.issues.empty()
                     ? ""
                     : " (first problem, line " + std::to_string(d.issues[0].line) + ": " + d.issues[0].message + ")"));
  return d;
}

Dataset load_dataset(const std::string& path, const DatasetOptions& options) {
  return parse_dataset(read_file_bytes(path), path, options);
}

void split_dataset(const std::vector<Example>& all, double val_fraction, uint64_t seed, std::vector<Example>& train,
                   std::vector<Example>& val) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) throw Error("the validation fraction must be between 0 and 1");
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  size_t nval = static_cast<size_t>(static_cast<double>(all.size()) * val_fraction + 0.5);
  if (all.size() >= 2) nval = std::clamp<size_t>(nval, 1, all.size() - 1);
  train.clear();
  val.clear();
  for (size_t i = 0; i < order.size(); ++i) (i < nval ? val : train).push_back(all[order[i]]);
}

Vocab build_vocab(const std::vector<Example>& rows, TokenizerKind kind, bool lowercase, int max_size, int min_count) {
  std::map<std::string, int> counts;
  for (const auto& r : rows)
    for (auto& p : split_text(r.text, kind, lowercase)) ++counts[p];
  std::vector<std::pair<std::string, int>> items(counts.begin(), counts.end());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> tokens = {kPadToken, kUnkToken, kClsToken};
  for (const auto& [piece, n] : items) {
    if (max_size > 0 && static_cast<int>(tokens.size()) >= max_size) break;
    if (n < min_count) break;
    if (piece == kPadToken || piece == kUnkToken || piece == kClsToken) continue;
    tokens.push_back(piece);
  }
  return Vocab(std::move(tokens));
}

EncodedData encode_examples(const Model& model, const std::vector<Example>& rows) {
  EncodedData out;
  std::map<std::string, int> index;
  for (size_t k = 0; k < model.config.labels.size(); ++k) index[model.config.labels[k]] = static_cast<int>(k);
  for (const auto& r : rows) {
    auto it = index.find(r.label);
    if (it == index.end())
      throw Error("line " + std::to_string(r.line) + ": label \"" + r.label +
                  "\" was not seen in training (the model knows " + std::to_string(index.size()) + " labels)");
    InputOptions o;
    o.what = "line " + std::to_string(r.line);
    PreparedInput in = prepare_text(model, r.text, o);  // cut at max_len, counted
    if (in.ids.empty()) throw Error("line " + std::to_string(r.line) + ": the text has no tokens");
    if (!in.notices.empty()) ++out.truncated;
    out.seqs.push_back(std::move(in.ids));
    out.labels.push_back(it->second);
  }
  return out;
}

EncodedData encode_lm_text(const Model& model, const std::string& text, int seq) {
  if (seq < 2) throw Error("a language model's training sequences need at least 2 tokens, got " + std::to_string(seq));
  if (seq > model.config.max_len)
    throw Error("sequences of " + std::to_string(seq) + " tokens are longer than the model's max_len (" +
                std::to_string(model.config.max_len) + ")");
  InputOptions o;
  o.overflow = Overflow::Keep;
  o.what = "training text";
  const std::vector<int> ids = prepare_text(model, text, o).ids;
  if (ids.size() < 2)
    throw Error("the training text has " + std::to_string(ids.size()) + " token(s); it needs 2 or more");
  EncodedData d;
  for (size_t start = 0; start + static_cast<size_t>(seq) <= ids.size(); start += static_cast<size_t>(seq))
    d.seqs.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(start),
                        ids.begin() + static_cast<std::ptrdiff_t>(start) + seq);
  if (d.seqs.empty()) d.seqs.push_back(ids);  // shorter than one sequence: the whole text
  return d;
}

LmData split_lm_text(const Model& model, const std::string& text, int seq) {
  const EncodedData all = encode_lm_text(model, text, seq);
  const size_t n_val = all.size() >= 2 ? std::max<size_t>(1, all.size() / 10) : 0;
  LmData d;
  d.train.seqs.assign(all.seqs.begin(), all.seqs.end() - static_cast<std::ptrdiff_t>(n_val));
  d.val.seqs.assign(all.seqs.end() - static_cast<std::ptrdiff_t>(n_val), all.seqs.end());
  return d;
}

}  // namespace attnlab
