// Display transform of a result's tokens (see token_view.h).
#include "engine/text/token_view.h"

namespace attnlab {

TokenGroups group_tokens(const std::vector<std::string>& tokens, const std::vector<uint8_t>& special,
                         const std::vector<int>& words, const TokenViewOptions& o) {
  TokenGroups g;
  const size_t n = tokens.size();
  for (size_t i = 0; i < n; ++i) {
    const bool is_special = i < special.size() && special[i];
    if (o.hide_special && is_special) continue;
    const int word = i < words.size() ? words[i] : -1;
    std::string piece = tokens[i];
    const bool continues = o.merge_pieces && !is_special && word >= 0 && !g.members.empty() &&
                           g.members.back().back() == static_cast<int>(i) - 1 &&
                           words[static_cast<size_t>(i - 1)] == word;
    if (piece.rfind("##", 0) == 0 && o.merge_pieces && piece.size() > 2) piece = piece.substr(2);
    if (continues) {
      g.members.back().push_back(static_cast<int>(i));
      g.labels.back() += piece;
    } else {
      g.members.push_back({static_cast<int>(i)});
      g.labels.push_back(o.merge_pieces ? piece : tokens[i]);
    }
  }
  return g;
}

namespace {

Tensor regroup(const Tensor& p, const TokenGroups& rows, const TokenGroups& cols) {
  // p: [H, T, S] -> [H, T', S']; cell = mean over row members of the sum over column members
  const int64_t H = p.shape[0], S = p.shape[2];
  const int64_t T2 = static_cast<int64_t>(rows.members.size()), S2 = static_cast<int64_t>(cols.members.size());
  Tensor out({H, T2, S2});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T2; ++i) {
      const auto& rm = rows.members[static_cast<size_t>(i)];
      for (int64_t j = 0; j < S2; ++j) {
        double sum = 0;
        for (int r : rm)
          for (int c : cols.members[static_cast<size_t>(j)]) sum += p.data[static_cast<size_t>((h * p.shape[1] + r) * S + c)];
        out.data[static_cast<size_t>((h * T2 + i) * S2 + j)] = static_cast<float>(sum / static_cast<double>(rm.size()));
      }
    }
  return out;
}

AttnMask regroup_mask(const AttnMask& m, const TokenGroups& rows, const TokenGroups& cols) {
  AttnMask out;
  out.planes = m.planes;
  out.T = static_cast<int>(rows.members.size());
  out.S = static_cast<int>(cols.members.size());
  if (m.blocked.empty()) return out;  // additive terms are not shown once cells are merged
  out.blocked.assign(static_cast<size_t>(out.planes) * out.T * out.S, 0);
  for (int pl = 0; pl < m.planes; ++pl)
    for (int i = 0; i < out.T; ++i)
      for (int j = 0; j < out.S; ++j) {
        bool all = true;
        for (int r : rows.members[static_cast<size_t>(i)])
          for (int c : cols.members[static_cast<size_t>(j)]) all = all && m.blocked[m.index(pl, r, c)] != 0;
        out.blocked[out.index(pl, i, j)] = all ? 1 : 0;
      }
  return out;
}

std::vector<int> pick_ids(const std::vector<int>& ids, const TokenGroups& g) {
  std::vector<int> out;
  for (const auto& m : g.members) out.push_back(ids.at(static_cast<size_t>(m.front())));
  return out;
}

}  // namespace

void apply_token_view(ForwardResult& r, const TokenGroups& rows, const TokenGroups& cols) {
  for (Tensor& p : r.attention)
    if (!p.empty()) p = regroup(p, rows, cols);
  for (Tensor& p : r.cross_attention)
    if (!p.empty()) p = regroup(p, rows, cols);
  r.mask = regroup_mask(r.mask, rows, cols);
  r.ids = pick_ids(r.ids, rows);
  r.tokens = rows.labels;
  if (r.is_cross()) {
    r.cross_ids = pick_ids(r.cross_ids, cols);
    r.cross_tokens = cols.labels;
  }
}

}  // namespace attnlab
