// Forward mode (core/forward_ad.h) through attention: the fused op, the tiled op, attention
// over packed rows, MultiHeadAttention and the transformer layers.
//
// Each J v is checked in float64 with random, non-uniform tangents, as tests/test_forward_ad.cpp
// checks the core ops: against reverse mode (<u, J v> == <J^T u, v> to 1e-12 relative to the
// terms), against central differences (to 1e-6), and the dual output's primal bitwise the
// output without a level. The attention ops' tangents are also compared with the tangent
// the composed reference gives (primitive ops, each with its own rule) and with each other:
// the tiled kernel's tangent equals the fused op's to 1e-12. Inputs come contiguous or
// strided (transposed views), with tangents on every input or only some.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/storage.h"
#include "nn/attention.h"
#include "nn/attention_inputs.h"
#include "nn/multihead_attention.h"
#include "nn/packing.h"
#include "nn/transformer.h"

using namespace ember;
using namespace ember::nn;
using ember::testing::check_jvp;
using ember::testing::Fn;
using ember::testing::forward_jvp;
using ember::testing::Inputs;
using ember::testing::max_abs_diff;
using ember::testing::strided;

namespace {

double largest(const Tensor& t) { return max_abs_diff(t, zeros_like(t)); }

// The tangent alone.
Tensor jvp_of(const Fn& f, const Inputs& x, const Inputs& v) { return forward_jvp(f, x, v).second; }

// a and b equal to tol relative to their size.
void check_close(const Tensor& a, const Tensor& b, double tol) {
  REQUIRE(a.shape() == b.shape());
  const double err = max_abs_diff(a, b);
  INFO("differ by " << err << " (values up to " << largest(b) << ")");
  CHECK(err <= tol * std::max(1.0, largest(b)));
}

// Which inputs carry a tangent.
struct Subset {
  const char* name;
  std::vector<bool> on;
};
const std::vector<Subset> kSubsets = {{"all", {true, true, true}},
                                      {"k and v", {false, true, true}},
                                      {"q only", {true, false, false}},
                                      {"k only", {false, true, false}},
                                      {"v only", {false, false, true}}};

// Random inputs of these shapes (strided views when asked) and tangents on the subset.
std::pair<Inputs, Inputs> draw_inputs(const std::vector<Shape>& shapes, const std::vector<bool>& on, bool layout_strided,
                                      Generator& gen) {
  Inputs x, v;
  for (size_t i = 0; i < shapes.size(); i++) {
    Tensor xi = randn(shapes[i], kFloat64, &gen), vi = randn(shapes[i], kFloat64, &gen);
    if (layout_strided) xi = strided(xi), vi = strided(vi);
    x.push_back(xi);
    v.push_back(i < on.size() && !on[i] ? Tensor() : vi);
  }
  return {x, v};
}

// One attention call to check: shapes, mask and dropout.
struct AttnCase {
  std::string name;
  Shape q, k, v;
  AttentionMask mask;
  double p = 0.0;  // dropout's probability (training when positive)
};

// A bool mask of this shape, blocked with probability 0.3.
Tensor random_blocked(const Shape& s, Generator& gen) { return lt(rand(s, kFloat64, &gen), 0.3); }

std::vector<AttnCase> attention_cases() {
  Generator gen(21);
  // padding: batch 1 has its last two keys blocked
  std::vector<bool> pad(12, false);
  pad[10] = pad[11] = true;
  const AttentionMask padding = AttentionMask::blocked(from_bools(pad, {2, 1, 1, 6}));
  // row 2 has every key blocked, the others some
  std::vector<bool> row_mask(24, false);
  for (size_t j = 0; j < 24; j++) row_mask[j] = j / 6 == 2 || j % 5 == 1;
  const Tensor rows = from_bools(row_mask, {4, 6});
  // several query and key blocks (64 queries, 128 keys a block)
  std::vector<bool> long_pad(600, false);
  for (int j = 280; j < 300; j++) long_pad[(size_t)(300 + j)] = true;
  const AttentionMask long_mask =
      AttentionMask::blocked(from_bools(long_pad, {2, 1, 1, 300})) | causal_mask(70, 300);
  return {
      {"no mask", {2, 3, 4, 5}, {2, 3, 6, 5}, {2, 3, 6, 7}, {}},
      {"padding and causal masks", {2, 2, 6, 4}, {2, 2, 6, 4}, {2, 2, 6, 3}, padding | causal_mask(6, 6)},
      {"a fully blocked row", {2, 4, 5}, {2, 6, 5}, {2, 6, 3}, AttentionMask::blocked(rows)},
      {"broadcast batch and mask", {2, 3, 4, 5}, {2, 1, 6, 5}, {1, 6, 7},
       AttentionMask::blocked(random_blocked({1, 3, 4, 6}, gen))},
      {"dropout with padding", {2, 2, 5, 4}, {2, 2, 6, 4}, {2, 2, 6, 3}, padding, 0.3},
      {"several query and key blocks, masks and dropout", {2, 1, 70, 4}, {2, 1, 300, 4}, {1, 1, 300, 3}, long_mask,
       0.2},
  };
}

Fn fused_fn(const AttnCase& c) {
  return [c](const Inputs& in) {
    Generator g(5);
    return scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.p, c.p > 0, &g).output;
  };
}
Fn tiled_fn(const AttnCase& c) {
  return [c](const Inputs& in) {
    Generator g(5);
    return scaled_dot_product_attention_tiled(in[0], in[1], in[2], c.mask, c.p, c.p > 0, &g);
  };
}
// The reference composed of primitive ops, with the same dropout decisions.
Fn composed_fn(const AttnCase& c) {
  return [c](const Inputs& in) {
    const nn::detail::Geometry g = nn::detail::check_inputs("test", in[0], in[1], in[2], c.mask);
    Tensor keep;
    if (c.p > 0) {
      Generator gen(5);
      const Shape grid = g.with(g.L, g.S);
      keep = nn::detail::dropout_keep(grid, in[0].dtype(), DropoutDraws::take(gen, c.p, grid));
    }
    return nn::detail::composed_attention(in[0], in[1], in[2], c.mask, nn::detail::default_scale(0.0, g.D), keep).output;
  };
}

bool is_long(const AttnCase& c) { return c.q[c.q.size() - 2] > 64; }

}  // namespace

TEST_CASE("forward mode through fused attention equals reverse mode, finite differences and the composed ops") {
  Generator gen(1);
  for (const AttnCase& c : attention_cases())
    for (bool layout_strided : {false, true})
      for (const Subset& s : kSubsets) {
        if (is_long(c) && (layout_strided || s.on != kSubsets[0].on)) continue;  // kept short
        INFO(c.name << (layout_strided ? ", strided" : ", contiguous") << ", tangents on " << s.name);
        const auto [x, v] = draw_inputs({c.q, c.k, c.v}, s.on, layout_strided, gen);
        const Tensor jv = check_jvp(fused_fn(c), x, v, gen);
        check_close(jv, jvp_of(composed_fn(c), x, v), 1e-12);
      }
}

TEST_CASE("forward mode through tiled attention equals the fused op's to 1e-12, reverse mode and finite differences") {
  Generator gen(2);
  for (const AttnCase& c : attention_cases())
    for (bool layout_strided : {false, true})
      for (const Subset& s : kSubsets) {
        INFO(c.name << (layout_strided ? ", strided" : ", contiguous") << ", tangents on " << s.name);
        const auto [x, v] = draw_inputs({c.q, c.k, c.v}, s.on, layout_strided, gen);
        const Tensor fused = jvp_of(fused_fn(c), x, v);
        // the kernel's tangent (nothing requires grad), and the recorded one in grad mode
        check_close(jvp_of(tiled_fn(c), x, v), fused, 1e-12);
        if (!is_long(c) || (!layout_strided && s.on == kSubsets[0].on)) check_close(check_jvp(tiled_fn(c), x, v, gen), fused, 1e-12);
      }
}

TEST_CASE("tiled attention's tangent in float32 agrees with the fused op's") {
  Generator gen(3);
  for (const AttnCase& c : attention_cases()) {
    INFO(c.name);
    auto [x, v] = draw_inputs({c.q, c.k, c.v}, {true, true, true}, false, gen);
    for (auto* list : {&x, &v})
      for (Tensor& t : *list) t = t.to(kFloat32);
    const Tensor tiled = jvp_of(tiled_fn(c), x, v), fused = jvp_of(fused_fn(c), x, v);
    CHECK(tiled.dtype() == kFloat32);
    check_close(tiled.to(kFloat64), fused.to(kFloat64), 1e-5);
  }
}

TEST_CASE("tiled attention's tangent never holds the [L, S] weights, unlike the fused op's") {
  // [L, S] in float64 is 32 MiB, a block the allocator asks of the system (Storage counts
  // them); the tiled forward and its tangent need none, the fused op one at least
  const int64_t L = 2048, D = 8;
  Generator gen(6);
  Inputs x, v;
  for (int i = 0; i < 3; i++) x.push_back(randn({1, L, D}, kFloat64, &gen)), v.push_back(randn({1, L, D}, kFloat64, &gen));
  Tensor tiled, fused;
  {
    DualLevel level;
    Storage::empty_cache();
    const int64_t before = Storage::system_allocations();
    tiled = unpack_dual(scaled_dot_product_attention_tiled(make_dual(x[0], v[0]), make_dual(x[1], v[1]),
                                                           make_dual(x[2], v[2]))).tangent;
    CHECK(Storage::system_allocations() == before);
    fused = unpack_dual(scaled_dot_product_attention(make_dual(x[0], v[0]), make_dual(x[1], v[1]),
                                                     make_dual(x[2], v[2])).output).tangent;
    CHECK(Storage::system_allocations() > before);
  }
  check_close(tiled, fused, 1e-12);
}

TEST_CASE("attention's tangent can be differentiated backward, as the composed ops' tangent") {
  // d/dx of sum(w * tangent), for the fused op, the tiled op (whose kernel's tangent is one
  // recorded node) and the composition
  Generator gen(4);
  for (const AttnCase& c : attention_cases()) {
    if (is_long(c)) continue;
    INFO(c.name);
    const auto [x, v] = draw_inputs({c.q, c.k, c.v}, {true, false, true}, false, gen);
    std::vector<std::vector<Tensor>> grads;
    Tensor w;
    for (const Fn& f : {composed_fn(c), fused_fn(c), tiled_fn(c)}) {
      Inputs leaves, tangents;
      for (const Tensor& xi : x) leaves.push_back(xi.detach().requires_grad_());
      for (const Tensor& vi : v) tangents.push_back(vi.defined() ? vi.detach().requires_grad_() : Tensor());
      Tensor t;
      {
        DualLevel level;
        Inputs duals;
        for (size_t i = 0; i < 3; i++) duals.push_back(tangents[i].defined() ? make_dual(leaves[i], tangents[i]) : leaves[i]);
        t = unpack_dual(f(duals)).tangent;
      }
      REQUIRE(t.defined());
      if (!w.defined()) w = randn(t.shape(), kFloat64, &gen);
      grads.push_back(grad({sum(mul(t, w))}, {leaves[0], leaves[1], leaves[2], tangents[0], tangents[2]}));
    }
    for (size_t f = 1; f < grads.size(); f++)
      for (size_t i = 0; i < grads[0].size(); i++) {
        INFO("op " << f << ", gradient " << i);
        check_close(grads[f][i], grads[0][i], 1e-12);
      }
  }
}

namespace {

// ids [4, 5] with pad 0: sequence 0 full, 1 short, 2 with padding inside, 3 all padding
Tensor key_ids() {
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < 4; b++)
    for (int64_t s = 0; s < 5; s++) {
      const bool kept = b == 0 || (b == 1 && s < 3) || (b == 2 && s % 2 == 0);
      ids.push_back(kept ? 1 + (b + s) % 5 : 0);
    }
  return from_vector(ids, {4, 5});
}
// ids [4, 4]: queries of every sequence, some short
Tensor query_ids() {
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < 4; b++)
    for (int64_t s = 0; s < 4; s++) ids.push_back(s <= b ? 1 + s : 0);
  return from_vector(ids, {4, 4});
}

// attention_rows' padded computation by the fused op: each operand's columns split into
// heads and unpacked, the keys' padding as mask, merged and packed.
Tensor padded_fused(const AttentionRows& q, const AttentionRows& k, const AttentionRows& v, int64_t H, int64_t D,
                    const Packing* qp, int64_t q_length, const Packing& kvp, double p, bool causal) {
  const int64_t B = kvp.batch, E = H * D;
  auto split = [&](const AttentionRows& r, const Packing* pk, int64_t length) {
    Tensor x = r.rows.narrow(1, r.col, E);
    Tensor padded = pk ? pk->unpack(x) : x.reshape({B, length, E});
    return padded.reshape({B, padded.size(1), H, D}).transpose(1, 2);
  };
  Tensor qh = split(q, qp, q_length), kh = split(k, &kvp, 0), vh = split(v, &kvp, 0);
  AttentionMask mask = kvp.padding.reshape({B, 1, 1, kvp.length});
  if (causal) mask = mask | causal_mask(qh.size(2), kvp.length);
  Generator g(7);
  Tensor out = scaled_dot_product_attention(qh, kh, vh, mask, p, p > 0, &g).output;
  Tensor merged = out.transpose(1, 2).reshape({B, qh.size(2), E});
  return qp ? qp->pack(merged) : merged.reshape({B * qh.size(2), E});
}

}  // namespace

TEST_CASE("forward mode through attention over packed rows equals the padded fused op's, reverse mode and finite differences") {
  Generator gen(5);
  const Packing kvp = Packing::of(key_ids(), 0), qp = Packing::of(query_ids(), 0);
  const int64_t H = 2, D = 3, E = H * D;
  struct RowsCase {
    std::string name;
    const Packing* q_packing;  // null: a padded batch of 4 queries
    bool fused_qkv;  // q, k and v column blocks of one tensor (self-attention)
    bool causal;
    double p;
  };
  const std::vector<RowsCase> cases = {
      {"packed queries", &qp, false, false, 0.0},
      {"padded queries", nullptr, false, false, 0.0},
      {"one fused input, causal", &kvp, true, true, 0.0},
      {"packed queries with dropout", &qp, false, false, 0.25},
      {"one fused input, causal, dropout", &kvp, true, true, 0.3},
  };
  for (const RowsCase& c : cases)
    for (bool layout_strided : {false, true})
      for (const Subset& s : kSubsets) {
        if (c.fused_qkv && s.on != kSubsets[0].on) continue;  // one input: one tangent
        INFO(c.name << (layout_strided ? ", strided" : ", contiguous") << ", tangents on " << s.name);
        const int64_t NQ = c.q_packing ? c.q_packing->count : 4 * 4, NK = kvp.count;
        const Packing& kv = c.fused_qkv ? *c.q_packing : kvp;
        Fn f, ref;
        std::vector<Shape> shapes;
        if (c.fused_qkv) {
          shapes = {{kv.count, 3 * E}};
          f = [&c, &kv, H, D, E](const Inputs& in) {
            Generator g(7);
            return attention_rows({in[0], 0}, {in[0], E}, {in[0], 2 * E}, H, D, c.q_packing, 0, kv, c.p, c.p > 0, &g,
                                  0.0, c.causal);
          };
          ref = [&c, &kv, H, D, E](const Inputs& in) {
            return padded_fused({in[0], 0}, {in[0], E}, {in[0], 2 * E}, H, D, c.q_packing, 0, kv, c.p, c.causal);
          };
        } else {
          // k read from the second column block of a wider tensor
          shapes = {{NQ, E}, {NK, 2 * E}, {NK, E}};
          f = [&c, &kv, H, D, E](const Inputs& in) {
            Generator g(7);
            return attention_rows({in[0], 0}, {in[1], E}, {in[2], 0}, H, D, c.q_packing, 4, kv, c.p, c.p > 0, &g, 0.0,
                                  c.causal);
          };
          ref = [&c, &kv, H, D, E](const Inputs& in) {
            return padded_fused({in[0], 0}, {in[1], E}, {in[2], 0}, H, D, c.q_packing, 4, kv, c.p, c.causal);
          };
        }
        const auto [x, v] = draw_inputs(shapes, s.on, layout_strided, gen);
        const Tensor jv = check_jvp(f, x, v, gen);
        check_close(jv, jvp_of(ref, x, v), 1e-12);
        NoGradGuard no_grad;  // the kernel's tangent without the recorded node: the same
        check_close(jvp_of(f, x, v), jv, 1e-15);
      }
}

namespace {

// The parameters a forward-mode check of a module may perturb, set in place for f and put back after.
struct Swap {
  Tensor& slot;
  Tensor saved;
  Swap(Tensor& s, const Tensor& value) : slot(s), saved(s) { slot = value; }
  ~Swap() { slot = saved; }
};

}  // namespace

TEST_CASE("forward mode through MultiHeadAttention (kdim, vdim and embed_dim differ) equals every implementation's, reverse mode and finite differences") {
  Generator init(8), masks(9), gen(10);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .kdim = 6, .vdim = 5, .dropout_p = 0.2, .gen = &init,
                          .dropout_gen = &masks, .dtype = kFloat64});
  const int64_t B = 2, L = 4, S = 5;
  const AttentionMask pad = AttentionMask::blocked(from_bools({false, false, false, true, true, false, false, false,
                                                               false, false},
                                                              {B, S}));
  const AttentionMask future = causal_mask(L, S);
  struct Call {
    std::string name;
    AttentionCall call;
    bool training;
  };
  const std::vector<Call> calls = {
      {"no mask", {}, false},
      {"key padding and attn_mask, per-head weights", {.key_padding_mask = pad, .attn_mask = future,
                                                       .need_weights = AttnWeights::PerHead}, false},
      {"causal, averaged weights, dropout", {.key_padding_mask = pad, .need_weights = AttnWeights::Averaged,
                                             .is_causal = true}, true},
      {"key padding, dropout", {.key_padding_mask = pad}, true},
  };
  // query, key (a transposed view), value, then q_proj's weight and v_proj's bias (dual parameters)
  const std::vector<Shape> shapes = {{B, L, 8}, {B, S, 6}, {B, S, 5}, {8, 8}, {8}};
  for (const Call& c : calls) {
    mha.train(c.training);
    auto [x, v] = draw_inputs(shapes, {true, true, true, true, true}, false, gen);
    x[1] = strided(x[1]), v[1] = strided(v[1]);
    Inputs inputs_only = v;  // dual inputs alone, the parameters as they are
    inputs_only[3] = inputs_only[4] = Tensor();
    std::vector<Tensor> tangents;
    for (AttentionImpl impl : {AttentionImpl::Composed, AttentionImpl::Fused, AttentionImpl::Tiled}) {
      INFO(c.name << ", implementation " << (int)impl);
      Fn f = [&mha, &masks, &c, impl](const Inputs& in) {
        AttentionImplGuard guard(impl);
        masks.manual_seed(11);
        Swap w(mha.q_proj->weight, in[3]), b(mha.v_proj->bias, in[4]);
        return mha.forward(in[0], in[1], in[2], c.call).output;
      };
      tangents.push_back(check_jvp(f, x, v, gen));
      check_jvp(f, x, inputs_only, gen);
      NoGradGuard no_grad;  // the kernels' tangents, nothing recorded: the same
      check_close(jvp_of(f, x, v), tangents.back(), 1e-12);
    }
    for (size_t i = 1; i < tangents.size(); i++) check_close(tangents[i], tangents[0], 1e-12);
    if (c.call.need_weights == AttnWeights::None) continue;
    // the weights asked for carry their tangent too, with grad mode on or off
    INFO(c.name << ", the weights");
    Fn weights = [&mha, &masks, &c](const Inputs& in) {
      masks.manual_seed(11);
      Swap w(mha.q_proj->weight, in[3]), b(mha.v_proj->bias, in[4]);
      return mha.forward(in[0], in[1], in[2], c.call).weights;
    };
    const Tensor jw = check_jvp(weights, x, v, gen);
    NoGradGuard no_grad;
    check_close(jvp_of(weights, x, v), jw, 1e-12);
  }
}

TEST_CASE("forward mode through MultiHeadAttention on packed keys and values (attention over rows) equals the padded forward's") {
  Generator init(12), gen(13);
  MultiHeadAttention mha({.embed_dim = 6, .num_heads = 3, .kdim = 4, .vdim = 5, .gen = &init, .dtype = kFloat64});
  const Packing kvp = Packing::of(key_ids(), 0);
  const int64_t B = 4, L = 3;
  Fn packed = [&](const Inputs& in) {
    return mha.forward(in[0], in[1], in[2], {.kv_packing = &kvp}).output;
  };
  Fn padded = [&](const Inputs& in) {
    AttentionImplGuard fused(AttentionImpl::Fused);
    return mha.forward(in[0], kvp.unpack(in[1]), kvp.unpack(in[2]), {.key_padding_mask = kvp.padding}).output;
  };
  const auto [x, v] = draw_inputs({{B, L, 6}, {kvp.count, 4}, {kvp.count, 5}}, {true, true, true}, false, gen);
  const Tensor jv = check_jvp(packed, x, v, gen);
  check_close(jv, jvp_of(padded, x, v), 1e-12);
  NoGradGuard no_grad;  // the kernel's tangent, nothing recorded: the same
  check_close(jvp_of(packed, x, v), jv, 1e-12);
}

TEST_CASE("forward mode through an encoder layer and a decoder layer equals reverse mode and finite differences") {
  Generator init(14), masks(15), gen(16);
  const LayerConfig cfg{.d_model = 8, .num_heads = 2, .dim_feedforward = 12, .dropout_p = 0.1,
                        .activation = Activation::GELU, .dropout_gen = &masks};
  EncoderLayer encoder(cfg, &init, kFloat64);
  DecoderLayer decoder(cfg, &init, kFloat64);
  const AttentionMask pad = AttentionMask::blocked(from_bools({false, false, false, false, true, true, false, false,
                                                               false, false},
                                                              {2, 5}));
  for (bool training : {false, true}) {
    INFO((training ? "training" : "evaluation"));
    encoder.train(training);
    decoder.train(training);
    Fn enc = [&](const Inputs& in) {
      masks.manual_seed(17);
      return encoder.forward(in[0], pad);
    };
    Fn dec = [&](const Inputs& in) {
      masks.manual_seed(18);
      return decoder.forward(in[0], in[1], {.memory_key_padding_mask = pad});
    };
    {
      const auto [x, v] = draw_inputs({{2, 5, 8}}, {true}, false, gen);
      check_jvp(enc, x, v, gen);
    }
    for (const Subset& s : {Subset{"target and memory", {true, true}}, Subset{"memory only", {false, true}}}) {
      INFO("tangents on " << s.name);
      const auto [x, v] = draw_inputs({{2, 4, 8}, {2, 5, 8}}, s.on, true, gen);
      check_jvp(dec, x, v, gen);
    }
  }
}
