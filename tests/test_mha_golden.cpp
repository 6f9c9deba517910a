// MultiHeadAttention reproduces every multihead_attention reference case in tests/data
// (computed in float64 by an independent implementation; schema in tests/data/README.md):
// output, per-head weights, and the gradients of query, key, value and every parameter.
#include <catch2/catch.hpp>

#include "test_util.h"

#include "io/h5.h"
#include "nn/multihead_attention.h"

using namespace ember;
using namespace ember::testing;
using namespace ember::nn;


static void check_case(const std::string& name) {
  const std::string f = std::string(EMBER_TEST_DATA_DIR) + "/" + name;
  INFO("case " << name);
  REQUIRE(h5::attr_string(f, "/", "kind") == "multihead_attention");
  const auto E = (int64_t)h5::attr_double(f, "/", "embed_dim"), H = (int64_t)h5::attr_double(f, "/", "num_heads");
  const auto kdim = (int64_t)h5::attr_double(f, "/", "kdim"), vdim = (int64_t)h5::attr_double(f, "/", "vdim");
  const bool bias = h5::attr_double(f, "/", "bias") != 0;
  MultiHeadAttention mha({.embed_dim = E, .num_heads = H, .kdim = kdim, .vdim = vdim, .bias = bias, .dtype = kFloat64});
  StateDict state;
  for (auto& [pname, p] : mha.named_parameters()) state[pname] = h5::read(f, "params/" + pname);
  mha.load_state_dict(state);

  Tensor q = h5::read(f, "input/query").requires_grad_();
  Tensor k = h5::read(f, "input/key").requires_grad_();
  Tensor v = h5::read(f, "input/value").requires_grad_();
  AttentionMask pad, attn;
  if (h5::exists(f, "input/key_padding_mask")) pad = AttentionMask::blocked(h5::read(f, "input/key_padding_mask"));
  if (h5::exists(f, "input/attn_mask")) attn = AttentionMask::blocked(h5::read(f, "input/attn_mask"));

  auto r = mha.forward(q, k, v, {.key_padding_mask = pad, .attn_mask = attn, .need_weights = AttnWeights::PerHead});
  CHECK(max_abs_diff(r.output, h5::read(f, "expected/output")) < 1e-9);
  CHECK(max_abs_diff(r.weights, h5::read(f, "expected/attn_weights")) < 1e-9);
  r.output.backward(h5::read(f, "input/grad_output"));
  CHECK(max_abs_diff(q.grad(), h5::read(f, "expected/grad/query")) < 1e-9);
  CHECK(max_abs_diff(k.grad(), h5::read(f, "expected/grad/key")) < 1e-9);
  CHECK(max_abs_diff(v.grad(), h5::read(f, "expected/grad/value")) < 1e-9);
  for (auto& [pname, p] : mha.named_parameters()) {
    INFO("parameter " << pname);
    CHECK(max_abs_diff(p.grad(), h5::read(f, "expected/grad/" + pname)) < 1e-9);
  }
}

TEST_CASE("MultiHeadAttention reproduces the textbook case (E=128, H=8, padding on both rows)") {
  check_case("mha_self_textbook.h5");
}
TEST_CASE("MultiHeadAttention reproduces the causal-plus-padding case") { check_case("mha_self_causal.h5"); }
TEST_CASE("MultiHeadAttention reproduces cross-attention with kdim and vdim different from E") {
  check_case("mha_cross_kdim_vdim.h5");
}
TEST_CASE("MultiHeadAttention reproduces the case with a fully blocked query row") {
  check_case("mha_fully_masked_row.h5");
}
