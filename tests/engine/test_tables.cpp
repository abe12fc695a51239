// Things listed once (issue [structure]): the config's enum names, read back from what is
// written; the analysis method table, its names and aliases and its one map dispatch.
#include <catch2/catch.hpp>
#include <map>
#include <tuple>

#include "engine/analysis/method_table.h"
#include "engine/core/config.h"
#include "engine/model/hf_model.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"

using namespace attnlab;
using namespace attnlab::test;

TEST_CASE("config enum names: every value written is read back, unknown names list the choices", "[tables]") {
  for (Positional v :
       {Positional::None, Positional::Sinusoidal, Positional::Learned, Positional::Relative, Positional::Rotary})
    CHECK(parse_positional(to_string(v)) == v);
  for (Activation v : {Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu})
    CHECK(parse_activation(to_string(v)) == v);
  for (NormPlacement v : {NormPlacement::Post, NormPlacement::Pre}) CHECK(parse_norm(to_string(v)) == v);
  for (NormKind v : {NormKind::LayerNorm, NormKind::RmsNorm}) CHECK(parse_norm_kind(to_string(v)) == v);
  for (Pooling v : {Pooling::Mean, Pooling::MaskedMean, Pooling::Cls}) CHECK(parse_pooling(to_string(v)) == v);
  for (TokenizerKind v : {TokenizerKind::Word, TokenizerKind::Char}) CHECK(parse_tokenizer(to_string(v)) == v);
  CHECK_THROWS_WITH(parse_positional("alibi"),
                    "positional: unknown value \"alibi\" (expected none | sinusoidal | learned | relative | rotary)");
  CHECK_THROWS_WITH(parse_activation("swish"), Catch::Contains("relu | gelu | gelu_tanh | silu"));

  // a folder with rotary positions and SiLU (written before, unreadable before) opens again
  ModelConfig c = small_config();
  c.positional = Positional::Rotary;
  c.activation = Activation::Silu;
  const ModelConfig back = parse_config_json(config_to_json(c));
  CHECK(back.positional == Positional::Rotary);
  CHECK(back.activation == Activation::Silu);
  CHECK(config_to_json(back) == config_to_json(c));
}

TEST_CASE("analysis method table: names, aliases, page order, one dispatch", "[tables][analysis]") {
  const auto& rows = method_table();
  REQUIRE(rows.size() == static_cast<size_t>(MethodId::Compare) + 1);
  for (size_t k = 0; k < rows.size(); ++k) {
    CHECK(static_cast<size_t>(rows[k].id) == k);
    CHECK(&method_row(rows[k].id) == &rows[k]);
    if (rows[k].cli) CHECK(find_method(rows[k].name).id == rows[k].id);
    if (rows[k].page_index >= 0) CHECK(find_method(rows[k].name, true).page_index == rows[k].page_index);
    for (const char* alias : rows[k].aliases)
      CHECK(find_method(alias, rows[k].page_index >= 0 && !rows[k].cli).id == rows[k].id);
  }
  // the app's names on the CLI and the CLI's in the app
  CHECK(find_method("relevance").id == MethodId::GradAttention);
  CHECK(find_method("value-weighted").id == MethodId::ValueNorm);
  CHECK(find_method("attention-rollout").id == MethodId::Rollout);  // Abnar & Zuidema's own name
  CHECK(find_method("attention-rollout", true).page_index == 0);
  CHECK(find_method("grad-attention", true).page_index == 1);
  CHECK(method_names() ==
        "rollout, grad-attention, value-norm, mean-heads, mean-layers, head-importance, "
        "head-patterns, logit-lens, induction, previous-token, duplicate-token, logit-attribution");
  CHECK(method_names(true) ==
        "rollout, grad-attention, value-norm, mean-heads, mean-layers, selected-queries, selected-keys, compare");
  CHECK_THROWS_WITH(find_method("nope"),
                    Catch::StartsWith("expected one of rollout (attention-rollout), grad-attention"));
  CHECK_THROWS_WITH(find_method("compare"), Catch::Contains("got \"compare\""));  // a page method only

  // the one dispatch equals the methods it names
  const Model m = random_model(small_config(16, 2, 2, 24, 16));
  auto cpu = make_backend("cpu");
  ForwardRequest req;
  req.ids = random_ids(7, m.config.vocab_size);
  CHECK(max_abs_diff(compute_method_map(MethodId::Rollout, m, *cpu, req), attention_rollout(m, *cpu, req)) == 0);
  const Tensor all = run_forward(m, *cpu, req).stacked_probs();
  CHECK(max_abs_diff(compute_method_map(MethodId::MeanHeads, m, *cpu, req), mean_over_heads(all)) == 0);
  CHECK(max_abs_diff(compute_method_map(MethodId::MeanLayers, m, *cpu, req), mean_over_layers(all)) == 0);
  CHECK_THROWS_WITH(compute_method_map(MethodId::HeadPatterns, m, *cpu, req), Catch::Contains("not a map"));
}

TEST_CASE("Hugging Face architecture table: names, decoders, class names, messages", "[tables][hf]") {
  CHECK(supported_hf_model_types() ==
        "bert, distilbert, gpt2, llama, mistral, qwen2, phi3, qwen3, gemma2, gemma3_text, bart");
  for (const char* t : {"gpt2", "llama", "mistral", "qwen2", "phi3", "qwen3", "gemma2", "gemma3_text"})
    CHECK(is_decoder_type(t));
  CHECK(hf_class_name("gemma2", true) == "Gemma2ForCausalLM");
  CHECK(hf_class_name("gemma3_text", true) == "Gemma3ForCausalLM");
  CHECK(hf_class_name("phi3", true) == "Phi3ForCausalLM");
  for (const char* t : {"bert", "distilbert", "t5", "bart", ""}) CHECK_FALSE(is_decoder_type(t));
  CHECK(is_seq2seq_type("bart"));  // an encoder-decoder: the encoder in Model::encoder
  for (const char* t : {"bert", "gpt2", "t5", ""}) CHECK_FALSE(is_seq2seq_type(t));
  CHECK(hf_class_name("bart", true) == "BartForConditionalGeneration");
  CHECK(hf_class_name("bert", true) == "BertForSequenceClassification");
  CHECK(hf_class_name("distilbert", false) == "DistilBertModel");
  CHECK(hf_class_name("qwen2", true) == "Qwen2ForCausalLM");
  CHECK(hf_class_name("gpt2", true) == "GPT2LMHeadModel");
  CHECK_THROWS(hf_class_name("t5", true));
  HfInfo info;
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "t5"})", info),
                    Catch::Contains("model_type \"t5\" is not supported (supported: bert, distilbert, gpt2"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"hidden_size": 8})", info), Catch::Contains("no \"model_type\""));
  // Phi-3's fused projections: q, k, v as rows of qkv_proj (4 heads and 2 key/value heads of 4),
  // gate and up as the halves of gate_up_proj; its defaults where the folder says nothing
  const ModelConfig c = parse_hf_config(
      R"({"model_type": "phi3", "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 24, "num_hidden_layers": 1, "vocab_size": 50})",
      info);
  CHECK(c.layer_norm_eps == 1e-5f);
  CHECK(c.max_len == 4096);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.ff_bias);
  std::map<std::string, std::tuple<std::string, int64_t, int64_t, int64_t>> got;
  for (const WeightEntry& e : weight_entries(c))
    if (e.layer == 0) {
      const LayoutName n = layout_name(WeightLayout::HfPhi3, e, c);
      got[e.spec->name] = {n.name, n.row0, n.rows, n.stored_shape.empty() ? 0 : n.stored_shape[0]};
    }
  CHECK(got["attention.query.weight"] == std::make_tuple(std::string("layers.0.self_attn.qkv_proj.weight"), 0, 16, 32));
  CHECK(got["attention.key.weight"] == std::make_tuple(std::string("layers.0.self_attn.qkv_proj.weight"), 16, 8, 32));
  CHECK(got["attention.value.weight"] == std::make_tuple(std::string("layers.0.self_attn.qkv_proj.weight"), 24, 8, 32));
  CHECK(got["ffn.fc1.weight"] == std::make_tuple(std::string("layers.0.mlp.gate_up_proj.weight"), 0, 24, 48));
  CHECK(got["ffn.up.weight"] == std::make_tuple(std::string("layers.0.mlp.gate_up_proj.weight"), 24, 24, 48));
  CHECK(std::get<0>(got["attention.fc_out.weight"]) == "layers.0.self_attn.o_proj.weight");
}
