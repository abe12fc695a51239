// The weight table and what is derived from it: entries for a config, names in each PyTorch
// layout, the parameter list and the parameter count.
#include "engine/model/weights.h"

#include <algorithm>
#include <cmath>
#include <atomic>

namespace attnlab {

uint64_t next_weights_version() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

namespace {

using Shape = std::vector<int64_t>;

int64_t E(const ModelConfig& c) {
  return c.embed_size;
}
bool has_ff(const ModelConfig& c) {
  return c.ff_dim > 0;
}
int64_t KV(const ModelConfig& c) {  // key/value width: kv_heads * head_dim
  return c.num_heads > 0 ? static_cast<int64_t>(c.kv_heads()) * c.head_dim() : 0;
}
int64_t A(const ModelConfig& c) {  // the queries' width: heads * head_dim (E unless head_dim is set apart)
  return c.num_heads > 0 ? c.attn_width() : 0;
}
bool layer_norm_bias(const ModelConfig& c) {  // RMSNorm has a gain only
  return c.norm_kind == NormKind::LayerNorm;
}

// The table. Model-level rows before the layer rows come first, the layer rows are repeated for
// every layer, and the model-level rows after them come last: that order is the parameter
// order (random initialisation draws in it, so it also fixes what a seed produces).
const WeightSpec kTable[] = {
    {"embedding.weight", &ModelWeights::embedding, nullptr, Init::Normal,
     [](const ModelConfig& c) {
       return Shape{c.vocab_size, E(c)};
     }},
    {"pos_embedding.weight", &ModelWeights::pos_embedding, nullptr, Init::Normal,
     [](const ModelConfig& c) {
       return c.positional == Positional::Learned ? Shape{c.max_len + c.pos_offset, E(c)} : Shape{};
     }},
    {"rel_pos.embedding.weight", &ModelWeights::rel_pos, nullptr, Init::Normal,
     [](const ModelConfig& c) {
       return c.positional == Positional::Relative ? Shape{2LL * c.max_len - 1, E(c)} : Shape{};
     }},
    {"token_type_embedding.weight", &ModelWeights::type_embedding, nullptr, Init::Normal,
     [](const ModelConfig& c) {
       return c.type_vocab_size > 0 ? Shape{c.type_vocab_size, E(c)} : Shape{};
     }},
    {"embedding_norm.weight", &ModelWeights::emb_ln_g, nullptr, Init::Ones,
     [](const ModelConfig& c) { return c.embedding_norm ? Shape{E(c)} : Shape{}; }},
    {"embedding_norm.bias", &ModelWeights::emb_ln_b, nullptr, Init::Zeros,
     [](const ModelConfig& c) { return c.embedding_norm ? Shape{E(c)} : Shape{}; }},
    // ---- per layer (the articles' MultiHeadAttention and FeedForward)
    {"attention.query.weight", nullptr, &LayerWeights::wq, Init::FanInUniform,
     [](const ModelConfig& c) {
       return Shape{A(c), E(c)};
     }},
    {"attention.query.bias", nullptr, &LayerWeights::bq, Init::FanInUniform,
     [](const ModelConfig& c) { return c.qkv_bias ? Shape{A(c)} : Shape{}; }},
    {"attention.key.weight", nullptr, &LayerWeights::wk, Init::FanInUniform,
     [](const ModelConfig& c) {
       return Shape{KV(c), E(c)};
     }},
    {"attention.key.bias", nullptr, &LayerWeights::bk, Init::FanInUniform,
     [](const ModelConfig& c) { return c.qkv_bias ? Shape{KV(c)} : Shape{}; }},
    {"attention.value.weight", nullptr, &LayerWeights::wv, Init::FanInUniform,
     [](const ModelConfig& c) {
       return Shape{KV(c), E(c)};
     }},
    {"attention.value.bias", nullptr, &LayerWeights::bv, Init::FanInUniform,
     [](const ModelConfig& c) { return c.qkv_bias ? Shape{KV(c)} : Shape{}; }},
    {"attention.q_norm.weight", nullptr, &LayerWeights::q_norm, Init::Ones,
     [](const ModelConfig& c) { return c.qk_norm ? Shape{c.head_dim()} : Shape{}; }},
    {"attention.k_norm.weight", nullptr, &LayerWeights::k_norm, Init::Ones,
     [](const ModelConfig& c) { return c.qk_norm ? Shape{c.head_dim()} : Shape{}; }},
    {"attention.fc_out.weight", nullptr, &LayerWeights::wo, Init::FanInUniform,
     [](const ModelConfig& c) {
       return Shape{E(c), A(c)};
     }},
    {"attention.fc_out.bias", nullptr, &LayerWeights::bo, Init::FanInUniform,
     [](const ModelConfig& c) { return c.out_bias ? Shape{E(c)} : Shape{}; }},
    {"attention.layer_norm.weight", nullptr, &LayerWeights::ln1_g, Init::Ones,
     [](const ModelConfig& c) { return Shape{E(c)}; }},
    {"attention.layer_norm.bias", nullptr, &LayerWeights::ln1_b, Init::Zeros,
     [](const ModelConfig& c) { return layer_norm_bias(c) ? Shape{E(c)} : Shape{}; }},
    {"attention.post_norm.weight", nullptr, &LayerWeights::ln1_post_g, Init::Ones,
     [](const ModelConfig& c) { return c.sandwich_norm ? Shape{E(c)} : Shape{}; }},
    // ---- an encoder-decoder's cross-attention sub-layer (after the self-attention's)
    {"cross_attention.query.weight", nullptr, &LayerWeights::cwq, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.cross_attention ? Shape{A(c), E(c)} : Shape{};
     }},
    {"cross_attention.query.bias", nullptr, &LayerWeights::cbq, Init::FanInUniform,
     [](const ModelConfig& c) { return c.cross_attention && c.qkv_bias ? Shape{A(c)} : Shape{}; }},
    {"cross_attention.key.weight", nullptr, &LayerWeights::cwk, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.cross_attention ? Shape{KV(c), E(c)} : Shape{};
     }},
    {"cross_attention.key.bias", nullptr, &LayerWeights::cbk, Init::FanInUniform,
     [](const ModelConfig& c) { return c.cross_attention && c.qkv_bias ? Shape{KV(c)} : Shape{}; }},
    {"cross_attention.value.weight", nullptr, &LayerWeights::cwv, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.cross_attention ? Shape{KV(c), E(c)} : Shape{};
     }},
    {"cross_attention.value.bias", nullptr, &LayerWeights::cbv, Init::FanInUniform,
     [](const ModelConfig& c) { return c.cross_attention && c.qkv_bias ? Shape{KV(c)} : Shape{}; }},
    {"cross_attention.fc_out.weight", nullptr, &LayerWeights::cwo, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.cross_attention ? Shape{E(c), A(c)} : Shape{};
     }},
    {"cross_attention.fc_out.bias", nullptr, &LayerWeights::cbo, Init::FanInUniform,
     [](const ModelConfig& c) { return c.cross_attention && c.out_bias ? Shape{E(c)} : Shape{}; }},
    {"cross_attention.layer_norm.weight", nullptr, &LayerWeights::ln3_g, Init::Ones,
     [](const ModelConfig& c) { return c.cross_attention ? Shape{E(c)} : Shape{}; }},
    {"cross_attention.layer_norm.bias", nullptr, &LayerWeights::ln3_b, Init::Zeros,
     [](const ModelConfig& c) { return c.cross_attention && layer_norm_bias(c) ? Shape{E(c)} : Shape{}; }},
    {"ffn.fc1.weight", nullptr, &LayerWeights::w1, Init::FanInUniform,
     [](const ModelConfig& c) {
       return has_ff(c) ? Shape{c.ff_dim, E(c)} : Shape{};
     }},
    {"ffn.fc1.bias", nullptr, &LayerWeights::b1, Init::FanInUniform,
     [](const ModelConfig& c) { return has_ff(c) && c.ff_bias ? Shape{c.ff_dim} : Shape{}; }},
    {"ffn.up.weight", nullptr, &LayerWeights::w3, Init::FanInUniform,
     [](const ModelConfig& c) {
       return has_ff(c) && c.gated_ff ? Shape{c.ff_dim, E(c)} : Shape{};
     }},
    {"ffn.fc2.weight", nullptr, &LayerWeights::w2, Init::FanInUniform,
     [](const ModelConfig& c) {
       return has_ff(c) ? Shape{E(c), c.ff_dim} : Shape{};
     }},
    {"ffn.fc2.bias", nullptr, &LayerWeights::b2, Init::FanInUniform,
     [](const ModelConfig& c) { return has_ff(c) && c.ff_bias ? Shape{E(c)} : Shape{}; }},
    {"ffn.layer_norm.weight", nullptr, &LayerWeights::ln2_g, Init::Ones,
     [](const ModelConfig& c) { return has_ff(c) ? Shape{E(c)} : Shape{}; }},
    {"ffn.layer_norm.bias", nullptr, &LayerWeights::ln2_b, Init::Zeros,
     [](const ModelConfig& c) { return has_ff(c) && layer_norm_bias(c) ? Shape{E(c)} : Shape{}; }},
    {"ffn.post_norm.weight", nullptr, &LayerWeights::ln2_post_g, Init::Ones,
     [](const ModelConfig& c) { return has_ff(c) && c.sandwich_norm ? Shape{E(c)} : Shape{}; }},
    // ---- after the layers: the final LayerNorm, the pooler, the classifier (TextClassifier.fc)
    {"final_norm.weight", &ModelWeights::final_ln_g, nullptr, Init::Ones,
     [](const ModelConfig& c) { return c.final_norm ? Shape{E(c)} : Shape{}; }},
    {"final_norm.bias", &ModelWeights::final_ln_b, nullptr, Init::Zeros,
     [](const ModelConfig& c) { return c.final_norm && layer_norm_bias(c) ? Shape{E(c)} : Shape{}; }},
    {"pooler.dense.weight", &ModelWeights::pooler_w, nullptr, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.pooler ? Shape{E(c), E(c)} : Shape{};
     }},
    {"pooler.dense.bias", &ModelWeights::pooler_b, nullptr, Init::FanInUniform,
     [](const ModelConfig& c) { return c.pooler ? Shape{E(c)} : Shape{}; }},
    {"fc.weight", &ModelWeights::fc_w, nullptr, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.num_classes > 0 ? Shape{c.num_classes, E(c)} : Shape{};
     }},
    {"fc.bias", &ModelWeights::fc_b, nullptr, Init::FanInUniform,
     [](const ModelConfig& c) { return c.num_classes > 0 ? Shape{c.num_classes} : Shape{}; }},
    {"lm_head.weight", &ModelWeights::lm_head, nullptr, Init::FanInUniform,
     [](const ModelConfig& c) {
       return c.lm_head && !c.tied_lm_head ? Shape{c.vocab_size, E(c)} : Shape{};
     }},
    {"lm_head.bias", &ModelWeights::lm_bias, nullptr, Init::Zeros,
     [](const ModelConfig& c) {
       return c.lm_head && c.lm_head_bias ? Shape{1, c.vocab_size} : Shape{};
     }},
};

// Visits every row in parameter order: model rows before the layers, layer rows for each of
// `layers` layers, model rows after. f(spec, layer) with layer -1 for model rows.
template <class F>
void walk(int layers, F f) {
  const size_t n = sizeof kTable / sizeof kTable[0];
  size_t first_layer_row = n, end_layer_rows = n;
  for (size_t i = 0; i < n; ++i)
    if (kTable[i].layer_member) {
      if (first_layer_row == n) first_layer_row = i;
      end_layer_rows = i + 1;
    }
  for (size_t i = 0; i < first_layer_row; ++i) f(kTable[i], -1);
  for (int l = 0; l < layers; ++l)
    for (size_t i = first_layer_row; i < end_layer_rows; ++i) f(kTable[i], l);
  for (size_t i = end_layer_rows; i < n; ++i) f(kTable[i], -1);
}

}  // namespace

std::string WeightEntry::name() const {
  return layer < 0 ? std::string(spec->name) : "layers." + std::to_string(layer) + "." + spec->name;
}

Tensor& WeightEntry::in(ModelWeights& w) const {
  if (layer < 0) return w.*(spec->model_member);
  return w.layers.at(static_cast<size_t>(layer)).*(spec->layer_member);
}
const Tensor& WeightEntry::in(const ModelWeights& w) const {
  return in(const_cast<ModelWeights&>(w));
}

std::vector<Tensor*> rms_gains(const ModelConfig& c, ModelWeights& w) {
  std::vector<Tensor*> out;
  if (c.norm_kind != NormKind::RmsNorm) return out;
  for (LayerWeights& L : w.layers)
    for (Tensor* g : {&L.ln1_g, &L.ln2_g, &L.ln3_g, &L.ln1_post_g, &L.ln2_post_g, &L.q_norm, &L.k_norm})
      if (!g->empty()) out.push_back(g);
  if (!w.final_ln_g.empty()) out.push_back(&w.final_ln_g);
  return out;
}

std::vector<WeightEntry> weight_entries(const ModelConfig& c) {
  std::vector<WeightEntry> out;
  walk(c.num_layers, [&](const WeightSpec& s, int layer) {
    Shape shape = s.shape(c);
    if (!shape.empty()) out.push_back(WeightEntry{&s, layer, std::move(shape)});
  });
  return out;
}

namespace {

// Hugging Face names, without the base model's prefix ("bert.", "distilbert."): modeling_bert.py
// and modeling_distilbert.py. The classifier head's tensors (head = true) sit outside the prefix.
LayoutName hf_name(WeightLayout layout, const WeightEntry& e, LayoutName n) {
  const bool bert = layout == WeightLayout::HfBert;
  static const struct {
    const char* ours;
    const char* bert;
    const char* distilbert;  // nullptr: DistilBERT has no such tensor
    bool head;
  } kNames[] = {
      {"embedding.weight", "embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight", false},
      {"pos_embedding.weight", "embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight", false},
      {"token_type_embedding.weight", "embeddings.token_type_embeddings.weight", nullptr, false},
      {"embedding_norm.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.weight", false},
      {"embedding_norm.bias", "embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias", false},
      {"attention.query.weight", "attention.self.query.weight", "attention.q_lin.weight", false},
      {"attention.query.bias", "attention.self.query.bias", "attention.q_lin.bias", false},
      {"attention.key.weight", "attention.self.key.weight", "attention.k_lin.weight", false},
      {"attention.key.bias", "attention.self.key.bias", "attention.k_lin.bias", false},
      {"attention.value.weight", "attention.self.value.weight", "attention.v_lin.weight", false},
      {"attention.value.bias", "attention.self.value.bias", "attention.v_lin.bias", false},
      {"attention.fc_out.weight", "attention.output.dense.weight", "attention.out_lin.weight", false},
      {"attention.fc_out.bias", "attention.output.dense.bias", "attention.out_lin.bias", false},
      {"attention.layer_norm.weight", "attention.output.LayerNorm.weight", "sa_layer_norm.weight", false},
      {"attention.layer_norm.bias", "attention.output.LayerNorm.bias", "sa_layer_norm.bias", false},
      {"ffn.fc1.weight", "intermediate.dense.weight", "ffn.lin1.weight", false},
      {"ffn.fc1.bias", "intermediate.dense.bias", "ffn.lin1.bias", false},
      {"ffn.fc2.weight", "output.dense.weight", "ffn.lin2.weight", false},
      {"ffn.fc2.bias", "output.dense.bias", "ffn.lin2.bias", false},
      {"ffn.layer_norm.weight", "output.LayerNorm.weight", "output_layer_norm.weight", false},
      {"ffn.layer_norm.bias", "output.LayerNorm.bias", "output_layer_norm.bias", false},
      {"pooler.dense.weight", "pooler.dense.weight", "pre_classifier.weight", false},
      {"pooler.dense.bias", "pooler.dense.bias", "pre_classifier.bias", false},
      {"fc.weight", "classifier.weight", "classifier.weight", true},
      {"fc.bias", "classifier.bias", "classifier.bias", true},
  };
  const std::string own = e.spec->name;
  for (const auto& k : kNames) {
    if (own != k.ours) continue;
    const char* name = bert ? k.bert : k.distilbert;
    if (!name) break;
    n.name = name;
    n.head = k.head || (!bert && own.rfind("pooler.", 0) == 0);  // DistilBERT's pre_classifier is a head tensor
    if (e.layer >= 0)
      n.name = (bert ? "encoder.layer." : "transformer.layer.") + std::to_string(e.layer) + "." + n.name;
    return n;
  }
  throw Error(std::string("internal: no Hugging Face ") + (bert ? "BERT" : "DistilBERT") + " name for " + own);
}

// Hugging Face decoder names, without the base model's prefix ("transformer.", "model."):
// modeling_gpt2.py and modeling_llama.py (Mistral and Qwen2 use Llama's names). GPT-2's Conv1D
// stores weights as [in, out], the transpose of nn.Linear, and c_attn holds q, k, v side by side
// along out. The LM head (lm_head.weight) sits outside the prefix.
LayoutName hf_decoder_name(WeightLayout layout, const WeightEntry& e, LayoutName n, const ModelConfig& c) {
  const bool gpt2 = layout == WeightLayout::HfGpt2;
  static const struct {
    const char* ours;
    const char* gpt2;   // nullptr: GPT-2 has no such tensor
    const char* llama;  // nullptr: Llama has no such tensor
    int third;          // GPT-2's c_attn: q, k, v = 0, 1, 2; -1 otherwise
    bool conv1d;        // GPT-2: stored transposed
  } kNames[] = {
      {"embedding.weight", "wte.weight", "embed_tokens.weight", -1, false},
      {"pos_embedding.weight", "wpe.weight", nullptr, -1, false},
      {"attention.query.weight", "attn.c_attn.weight", "self_attn.q_proj.weight", 0, true},
      {"attention.query.bias", "attn.c_attn.bias", "self_attn.q_proj.bias", 0, false},
      {"attention.key.weight", "attn.c_attn.weight", "self_attn.k_proj.weight", 1, true},
      {"attention.key.bias", "attn.c_attn.bias", "self_attn.k_proj.bias", 1, false},
      {"attention.value.weight", "attn.c_attn.weight", "self_attn.v_proj.weight", 2, true},
      {"attention.value.bias", "attn.c_attn.bias", "self_attn.v_proj.bias", 2, false},
      {"attention.q_norm.weight", nullptr, "self_attn.q_norm.weight", -1, false},
      {"attention.k_norm.weight", nullptr, "self_attn.k_norm.weight", -1, false},
      {"attention.fc_out.weight", "attn.c_proj.weight", "self_attn.o_proj.weight", -1, true},
      {"attention.fc_out.bias", "attn.c_proj.bias", "self_attn.o_proj.bias", -1, false},
      {"attention.layer_norm.weight", "ln_1.weight", "input_layernorm.weight", -1, false},
      {"attention.layer_norm.bias", "ln_1.bias", nullptr, -1, false},
      {"ffn.fc1.weight", "mlp.c_fc.weight", "mlp.gate_proj.weight", -1, true},
      {"ffn.fc1.bias", "mlp.c_fc.bias", "mlp.gate_proj.bias", -1, false},
      {"ffn.up.weight", nullptr, "mlp.up_proj.weight", -1, false},
      {"ffn.fc2.weight", "mlp.c_proj.weight", "mlp.down_proj.weight", -1, true},
      {"ffn.fc2.bias", "mlp.c_proj.bias", "mlp.down_proj.bias", -1, false},
      {"ffn.layer_norm.weight", "ln_2.weight", "post_attention_layernorm.weight", -1, false},
      {"ffn.layer_norm.bias", "ln_2.bias", nullptr, -1, false},
      {"attention.post_norm.weight", nullptr, "post_attention_layernorm.weight", -1, false},  // Gemma 2's
      {"ffn.post_norm.weight", nullptr, "post_feedforward_layernorm.weight", -1, false},
      {"final_norm.weight", "ln_f.weight", "norm.weight", -1, false},
      {"final_norm.bias", "ln_f.bias", nullptr, -1, false},
      {"lm_head.weight", "lm_head.weight", "lm_head.weight", -1, false},
  };
  const std::string own = e.spec->name;
  for (const auto& k : kNames) {
    if (own != k.ours) continue;
    const char* name = gpt2 ? k.gpt2 : k.llama;
    if (!name) break;
    n.name = name;
    n.head = own == "lm_head.weight";
    if (e.layer >= 0) n.name = (gpt2 ? "h." : "layers.") + std::to_string(e.layer) + "." + n.name;
    // modeling_gemma2.py: post_attention_layernorm is the attention output's norm; the one before
    // the MLP (Llama's post_attention_layernorm) is pre_feedforward_layernorm
    if (layout == WeightLayout::HfGemma2 && own == "ffn.layer_norm.weight")
      n.name = "layers." + std::to_string(e.layer) + ".pre_feedforward_layernorm.weight";
    if (layout == WeightLayout::HfPhi3 && e.layer >= 0) {
      // modeling_phi3.py: qkv_proj's rows are q (heads x D), k, v (kv heads x D each), read as
      // qkv[..., :query_pos] etc.; gate_up_proj's first half is the gate, its second the up
      // projection (gate, up = gate_up.chunk(2, dim=-1))
      const int64_t D = c.head_dim(), q_rows = static_cast<int64_t>(c.num_heads) * D;
      const int64_t kv_rows = static_cast<int64_t>(c.kv_heads()) * D, F = c.ff_dim;
      auto fuse = [&](const char* name, int64_t row0, int64_t total) {
        n.name = "layers." + std::to_string(e.layer) + "." + name;
        n.rows = e.shape[0];
        n.row0 = row0;
        n.stored_shape[0] = total;
      };
      if (own == "attention.query.weight") fuse("self_attn.qkv_proj.weight", 0, q_rows + 2 * kv_rows);
      if (own == "attention.key.weight") fuse("self_attn.qkv_proj.weight", q_rows, q_rows + 2 * kv_rows);
      if (own == "attention.value.weight") fuse("self_attn.qkv_proj.weight", q_rows + kv_rows, q_rows + 2 * kv_rows);
      if (own == "ffn.fc1.weight") fuse("mlp.gate_up_proj.weight", 0, 2 * F);
      if (own == "ffn.up.weight") fuse("mlp.gate_up_proj.weight", F, 2 * F);
    }
    if (!gpt2) return n;
    if (k.conv1d) {
      n.transposed = true;
      n.stored_shape = {e.shape[1], e.shape[0]};
    }
    if (k.third >= 0) {  // rows (of the transposed weight) or elements of the fused q, k, v
      n.rows = e.shape[0];
      n.row0 = k.third * n.rows;
      n.stored_shape[n.transposed ? 1 : 0] = 3 * n.rows;
    }
    return n;
  }
  throw Error(std::string("internal: no Hugging Face ") + (gpt2 ? "GPT-2" : "Llama") + " name for " + own);
}

// Hugging Face BART names (modeling_bart.py), without the stack's prefix ("model.encoder.",
// "model.decoder."): the encoder's and the decoder's layers have the same names, the decoder's
// cross-attention is encoder_attn. The token embedding is the model's shared one (engine/model/
// seq2seq.cpp gives each stack its embed_tokens); the LM head and final_logits_bias sit outside.
LayoutName hf_bart_name(const WeightEntry& e, LayoutName n) {
  static const struct {
    const char* ours;
    const char* bart;
  } kNames[] = {
      {"embedding.weight", "embed_tokens.weight"},
      {"pos_embedding.weight", "embed_positions.weight"},
      {"embedding_norm.weight", "layernorm_embedding.weight"},
      {"embedding_norm.bias", "layernorm_embedding.bias"},
      {"attention.query.weight", "self_attn.q_proj.weight"},
      {"attention.query.bias", "self_attn.q_proj.bias"},
      {"attention.key.weight", "self_attn.k_proj.weight"},
      {"attention.key.bias", "self_attn.k_proj.bias"},
      {"attention.value.weight", "self_attn.v_proj.weight"},
      {"attention.value.bias", "self_attn.v_proj.bias"},
      {"attention.fc_out.weight", "self_attn.out_proj.weight"},
      {"attention.fc_out.bias", "self_attn.out_proj.bias"},
      {"attention.layer_norm.weight", "self_attn_layer_norm.weight"},
      {"attention.layer_norm.bias", "self_attn_layer_norm.bias"},
      {"cross_attention.query.weight", "encoder_attn.q_proj.weight"},
      {"cross_attention.query.bias", "encoder_attn.q_proj.bias"},
      {"cross_attention.key.weight", "encoder_attn.k_proj.weight"},
      {"cross_attention.key.bias", "encoder_attn.k_proj.bias"},
      {"cross_attention.value.weight", "encoder_attn.v_proj.weight"},
      {"cross_attention.value.bias", "encoder_attn.v_proj.bias"},
      {"cross_attention.fc_out.weight", "encoder_attn.out_proj.weight"},
      {"cross_attention.fc_out.bias", "encoder_attn.out_proj.bias"},
      {"cross_attention.layer_norm.weight", "encoder_attn_layer_norm.weight"},
      {"cross_attention.layer_norm.bias", "encoder_attn_layer_norm.bias"},
      {"ffn.fc1.weight", "fc1.weight"},
      {"ffn.fc1.bias", "fc1.bias"},
      {"ffn.fc2.weight", "fc2.weight"},
      {"ffn.fc2.bias", "fc2.bias"},
      {"ffn.layer_norm.weight", "final_layer_norm.weight"},
      {"ffn.layer_norm.bias", "final_layer_norm.bias"},
      {"final_norm.weight", "layer_norm.weight"},  // mBART's (add_final_layer_norm); BART has none
      {"final_norm.bias", "layer_norm.bias"},
      {"lm_head.weight", "lm_head.weight"},
      {"lm_head.bias", "final_logits_bias"},
  };
  const std::string own = e.spec->name;
  for (const auto& k : kNames) {
    if (own != k.ours) continue;
    n.name = k.bart;
    n.head = own.rfind("lm_head.", 0) == 0;
    if (e.layer >= 0) n.name = "layers." + std::to_string(e.layer) + "." + n.name;
    return n;
  }
  throw Error("internal: no Hugging Face BART name for " + own);
}

}  // namespace

LayoutName layout_name(WeightLayout layout, const WeightEntry& e, const ModelConfig& c) {
  LayoutName n;
  n.stored_shape = e.shape;
  n.name = e.name();
  if (layout == WeightLayout::TorchEncoder && e.layer < 0) {  // nn.TransformerEncoder(..., norm=LayerNorm)
    if (e.spec->model_member == &ModelWeights::final_ln_g) n.name = "norm.weight";
    if (e.spec->model_member == &ModelWeights::final_ln_b) n.name = "norm.bias";
  }
  if (layout == WeightLayout::HfBert || layout == WeightLayout::HfDistilBert) return hf_name(layout, e, n);
  if (layout == WeightLayout::HfGpt2 || layout == WeightLayout::HfLlama || layout == WeightLayout::HfPhi3 ||
      layout == WeightLayout::HfGemma2)
    return hf_decoder_name(layout, e, n, c);
  if (layout == WeightLayout::HfBart) return hf_bart_name(e, n);
  if (layout == WeightLayout::Article || e.layer < 0) return n;
  const std::string own = e.spec->name;
  if (layout == WeightLayout::ArticleSingleLayer) {  // the one-layer TextClassifier: no "layers.0."
    n.name = own;
    return n;
  }
  // nn.TransformerEncoder(Layer): self_attn.in_proj_{weight,bias} hold q, k, v stacked.
  const std::string p = "layers." + std::to_string(e.layer) + ".";
  static const struct {
    const char* ours;
    const char* torch;
    int third;  // q, k, v: 0, 1, 2 of the stacked in_proj; -1 otherwise
  } kTorch[] = {
      {"attention.query.weight", "self_attn.in_proj_weight", 0},
      {"attention.key.weight", "self_attn.in_proj_weight", 1},
      {"attention.value.weight", "self_attn.in_proj_weight", 2},
      {"attention.query.bias", "self_attn.in_proj_bias", 0},
      {"attention.key.bias", "self_attn.in_proj_bias", 1},
      {"attention.value.bias", "self_attn.in_proj_bias", 2},
      {"attention.fc_out.weight", "self_attn.out_proj.weight", -1},
      {"attention.fc_out.bias", "self_attn.out_proj.bias", -1},
      {"attention.layer_norm.weight", "norm1.weight", -1},
      {"attention.layer_norm.bias", "norm1.bias", -1},
      {"ffn.fc1.weight", "linear1.weight", -1},
      {"ffn.fc1.bias", "linear1.bias", -1},
      {"ffn.fc2.weight", "linear2.weight", -1},
      {"ffn.fc2.bias", "linear2.bias", -1},
      {"ffn.layer_norm.weight", "norm2.weight", -1},
      {"ffn.layer_norm.bias", "norm2.bias", -1},
  };
  for (const auto& t : kTorch)
    if (own == t.ours) {
      n.name = p + t.torch;
      if (t.third >= 0) {
        n.rows = e.shape[0];
        n.row0 = t.third * n.rows;
        n.stored_shape[0] = 3 * n.rows;
      }
      return n;
    }
  throw Error("internal: no nn.TransformerEncoder name for " + own + " (config E=" + std::to_string(c.embed_size) +
              ")");
}

std::vector<Tensor*> parameters(ModelWeights& w) {
  std::vector<Tensor*> out;
  walk(static_cast<int>(w.layers.size()), [&](const WeightSpec& s, int layer) {
    Tensor& t = layer < 0 ? w.*(s.model_member) : w.layers[static_cast<size_t>(layer)].*(s.layer_member);
    if (!t.empty()) out.push_back(&t);
  });
  return out;
}

std::vector<const Tensor*> parameters(const ModelWeights& w) {
  auto p = parameters(const_cast<ModelWeights&>(w));
  return {p.begin(), p.end()};
}

ModelWeights zeros_like(const ModelWeights& w) {
  ModelWeights z;
  z.layers.resize(w.layers.size());
  walk(static_cast<int>(w.layers.size()), [&](const WeightSpec& s, int layer) {
    const Tensor& from = layer < 0 ? w.*(s.model_member) : w.layers[static_cast<size_t>(layer)].*(s.layer_member);
    Tensor& to = layer < 0 ? z.*(s.model_member) : z.layers[static_cast<size_t>(layer)].*(s.layer_member);
    if (!from.empty())
      to = Tensor(from.shape);
    else if (const HalfTensor* h = layer >= 0 ? half_of(w.layers[static_cast<size_t>(layer)], s.layer_member)
                                              : half_of(w, s.model_member))
      to = Tensor(h->shape);
  });
  return z;
}

namespace {
// LayerWeights and ModelWeights keep their 16-bit matrices alike: a list of (member, bits)
template <class W>
const HalfTensor* find_half(const W& w, Tensor W::*member) {
  for (const auto& [m, h] : w.half)
    if (m == member) return &h;
  return nullptr;
}
template <class W>
const Tensor& widened(const W& w, Tensor W::*member, Tensor& scratch) {
  const HalfTensor* h = find_half(w, member);
  if (!h) return w.*member;
  scratch.reshape_for_overwrite(h->shape);
  widen_rows(*h, 0, h->shape[0], scratch.ptr());
  return scratch;
}
}  // namespace

const HalfTensor* half_of(const LayerWeights& L, Tensor LayerWeights::*member) {
  return find_half(L, member);
}
const Tensor& wide(const LayerWeights& L, Tensor LayerWeights::*member, Tensor& scratch) {
  return widened(L, member, scratch);
}
const HalfTensor* half_of(const ModelWeights& w, Tensor ModelWeights::*member) {
  return find_half(w, member);
}
const Tensor& wide(const ModelWeights& w, Tensor ModelWeights::*member, Tensor& scratch) {
  return widened(w, member, scratch);
}

void weight_row(const ModelWeights& w, Tensor ModelWeights::*member, int64_t r, float* out) {
  if (const HalfTensor* h = half_of(w, member)) return widen_rows(*h, r, r + 1, out);
  const Tensor& t = w.*member;
  std::copy_n(t.ptr() + r * t.dim(1), t.dim(1), out);
}

bool has_half(const ModelWeights& w) {
  if (!w.half.empty()) return true;
  for (const LayerWeights& L : w.layers)
    if (!L.half.empty()) return true;
  return false;
}

void widen_all(ModelWeights& w) {
  for (auto& [m, h] : w.half) {
    Tensor t(h.shape);
    widen_rows(h, 0, h.shape[0], t.ptr());
    w.*m = std::move(t);
  }
  w.half.clear();
  for (LayerWeights& L : w.layers) {
    for (auto& [m, h] : L.half) {
      Tensor t(h.shape);
      widen_rows(h, 0, h.shape[0], t.ptr());
      L.*m = std::move(t);
    }
    L.half.clear();
  }
}

double resident_bytes(const ModelWeights& w) {
  double n = 0;
  for (const Tensor* t : parameters(w)) n += static_cast<double>(t->numel()) * 4.0;
  for (const auto& [m, h] : w.half) n += static_cast<double>(h.numel()) * 2.0;
  for (const LayerWeights& L : w.layers)
    for (const auto& [m, h] : L.half) n += static_cast<double>(h.numel()) * 2.0;
  return n;
}

std::vector<double> weight_norms(const ModelConfig& c, const ModelWeights& w) {
  const size_t L = w.layers.size();
  std::vector<double> sq(L + 1, 0.0);
  std::vector<float> chunk;
  for (const WeightEntry& e : weight_entries(c)) {
    double& acc = sq[e.layer < 0 ? L : static_cast<size_t>(e.layer)];
    if (e.layer >= 0 && static_cast<size_t>(e.layer) >= L) continue;  // weights of fewer layers than the config
    const Tensor& t = e.in(w);
    for (int64_t i = 0; i < t.numel(); ++i) acc += static_cast<double>(t.ptr()[i]) * t.ptr()[i];
    const HalfTensor* h = e.layer < 0 ? half_of(w, e.spec->model_member)
                                      : half_of(w.layers[static_cast<size_t>(e.layer)], e.spec->layer_member);
    if (t.numel() > 0 || !h) continue;
    constexpr int64_t kChunk = 1 << 16;  // widened a piece at a time: a 16-bit embedding stays 16-bit
    chunk.resize(kChunk);
    for (int64_t i0 = 0; i0 < h->numel(); i0 += kChunk) {
      const int64_t n = std::min(kChunk, h->numel() - i0);
      widen_bits(h->bits.data() + i0, chunk.data(), n, h->bf16);
      for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(chunk[i]) * chunk[i];
    }
  }
  for (double& v : sq) v = std::sqrt(v);
  return sq;
}

ModelWeights empty_weights(const ModelConfig& c) {
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(std::max(0, c.num_layers)));
  return w;
}

long long ModelConfig::half_matrix_count() const {
  long long n = 0;
  walk(1, [&](const WeightSpec& s, int layer) {
    const Shape shape = s.shape(*this);
    if (layer >= 0 && shape.size() == 2) n += Tensor::numel_of(shape) * num_layers;
    if (layer < 0 && (s.model_member == &ModelWeights::embedding || s.model_member == &ModelWeights::lm_head) &&
        !shape.empty())
      n += Tensor::numel_of(shape);
  });
  return n;
}

long long ModelConfig::parameter_count() const {
  // One layer's rows times num_layers (a config being validated may claim absurd sizes).
  long long n = 0;
  walk(1, [&](const WeightSpec& s, int layer) {
    const Shape shape = s.shape(*this);
    const long long size = shape.empty() ? 0 : Tensor::numel_of(shape);
    n += layer < 0 ? size : size * num_layers;
  });
  return n;
}

}  // namespace attnlab
