// Input preparation (see input.h): tokenizing, the max_len policy, padding, labels.
#include "engine/input.h"

namespace attnlab {

namespace {

void apply_policy(const Model& m, PreparedInput& in, const InputOptions& o) {
  const int max_len = m.config.max_len;
  if (static_cast<int>(in.ids.size()) > max_len) {
    const std::string msg = "the " + o.what + " has " + std::to_string(in.ids.size()) +
                            " tokens, more than the model's max_len " + std::to_string(max_len);
    if (o.overflow == Overflow::Error) throw Error(msg);
    in.notices.push_back(msg + "; it was cut to " + std::to_string(max_len) + " tokens");
    in.tokens.resize(static_cast<size_t>(max_len));
    in.ids.resize(static_cast<size_t>(max_len));
    in.unknown.resize(static_cast<size_t>(max_len));
    in.special.resize(static_cast<size_t>(max_len));
  }
  const int n = std::min(o.pad_to, max_len);
  if (n > static_cast<int>(in.ids.size()) && !in.ids.empty()) {
    const int pad = m.vocab.pad_id();
    if (pad < 0) throw Error("cannot pad: the vocabulary has no [PAD] token");
    in.tokens.resize(static_cast<size_t>(n), kPadToken);
    in.ids.resize(static_cast<size_t>(n), pad);
    in.unknown.resize(static_cast<size_t>(n), 0);
    in.special.resize(static_cast<size_t>(n), 1);
  }
}

}  // namespace

PreparedInput prepare_text(const Model& m, const std::string& text, const InputOptions& o) {
  const Tokenized t = tokenize(text, m.config, m.vocab);
  PreparedInput in;
  in.tokens = t.tokens;
  in.ids = t.ids;
  in.unknown.assign(t.unknown.begin(), t.unknown.end());
  in.special.assign(t.ids.size(), 0);
  if (m.config.add_cls && !in.ids.empty()) in.special[0] = 1;
  if (in.ids.size() == (m.config.add_cls ? 1u : 0u)) {  // nothing typed: no input at all
    PreparedInput none;
    none.notices = in.notices;
    return none;
  }
  apply_policy(m, in, o);
  return in;
}

PreparedInput prepare_ids(const Model& m, const std::vector<int>& ids, const InputOptions& o) {
  const Tokenized t = from_ids(ids, m.config, m.vocab);
  PreparedInput in;
  in.tokens = t.tokens;
  in.ids = t.ids;
  in.unknown.assign(t.ids.size(), 0);
  in.special.assign(t.ids.size(), 0);
  apply_policy(m, in, o);
  return in;
}

}  // namespace attnlab
