// attention_rows: attention over packed rows equals splitting into heads, padding, the
// masked op, merging and packing again - outputs, gradients (first and second order),
// dropout draws - for fused and separate operands, padded queries, sequences without rows
// and padding inside a sequence.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <vector>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/storage.h"
#include "nn/attention.h"
#include "nn/multihead_attention.h"
#include "nn/packing.h"

using namespace ember;
using namespace ember::nn;
using namespace ember::testing;

namespace {

// ids [B, S] with pad 0: sequence 0 full, 1 short, 2 all padding, 3 with padding inside
Tensor batch_ids(int64_t S) {
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < 4; b++)
    for (int64_t s = 0; s < S; s++) {
      bool kept = b == 0 || (b == 1 && s < 3) || (b == 3 && s % 3 != 1);
      ids.push_back(kept ? 1 + (b + s) % 5 : 0);
    }
  return from_vector(ids, {4, S});
}

// The padded computation: each operand's columns split into heads, unpacked, the tiled op
// with the keys' padding as mask, merged and packed.
Tensor padded_reference(const AttentionRows& q, const AttentionRows& k, const AttentionRows& v, int64_t H, int64_t D,
                        const Packing* qp, int64_t q_length, const Packing& kvp, double p = 0, Generator* gen = nullptr,
                        bool causal = false) {
  const int64_t B = kvp.batch, E = H * D;
  auto split = [&](const AttentionRows& r, const Packing* pk, int64_t length) {
    Tensor x = r.rows.narrow(1, r.col, E);
    Tensor padded = pk ? pk->unpack(x) : x.reshape({B, length, E});
    return padded.reshape({B, padded.size(1), H, D}).transpose(1, 2);
  };
  Tensor qh = split(q, qp, q_length), kh = split(k, &kvp, 0), vh = split(v, &kvp, 0);
  AttentionMask mask = kvp.padding.reshape({B, 1, 1, kvp.length});
  if (causal) mask = mask | causal_mask(qh.size(2), kvp.length);
  Tensor out = scaled_dot_product_attention_tiled(qh, kh, vh, mask, p, p > 0, gen);
  Tensor merged = out.transpose(1, 2).reshape({B, qh.size(2), E});
  return qp ? qp->pack(merged) : merged.reshape({B * qh.size(2), E});
}

void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); i++) {
    INFO("tensor " << i << " max diff " << max_abs_diff(a[i], b[i]));
    CHECK(a[i].shape() == b[i].shape());
    CHECK(allclose(a[i], b[i], tol, tol));
  }
}

}  // namespace

TEST_CASE("attention_rows equals the padded op on packed self-attention (one fused q, k, v tensor)") {
  const int64_t H = 2, D = 4, E = H * D, S = 7;
  Packing pk = Packing::of(batch_ids(S), 0);
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    Generator gen(3);
    Tensor x = normal({pk.count, 3 * E}, 0.0, 1.5, dt, &gen), u = normal({pk.count, E}, 0.0, 1.0, dt, &gen);
    auto run = [&](bool rows) {
      Tensor qkv = x.detach().requires_grad_();
      AttentionRows q{qkv, 0}, k{qkv, E}, v{qkv, 2 * E};
      Tensor out = rows ? attention_rows(q, k, v, H, D, &pk, 0, pk) : padded_reference(q, k, v, H, D, &pk, 0, pk);
      sum(mul(out, u)).backward();
      return std::vector<Tensor>{out, qkv.grad()};
    };
    check_same(run(true), run(false), dt == kFloat32 ? 2e-5 : 1e-12);
  }
}

TEST_CASE("attention_rows equals the padded op for padded queries over packed keys and values") {
  const int64_t H = 3, D = 2, E = H * D, S = 6, T = 5;
  Packing pk = Packing::of(batch_ids(S), 0);
  // k and v in columns 3.. and 3 + E.. of one tensor (gradients zeroed, then added to), or
  // in its only columns (every gradient element written by one head: nothing zeroed first)
  for (int64_t first : {3, 0}) {
    INFO("k from column " << first);
    Generator gen(4);
    Tensor qx = normal({4 * T, E}, 0.0, 1.0, kFloat64, &gen),
           kvx = normal({pk.count, 2 * E + first}, 0.0, 1.0, kFloat64, &gen);
    Tensor u = normal({4 * T, E}, 0.0, 1.0, kFloat64, &gen);
    auto run = [&](bool rows) {
      Tensor q = qx.detach().requires_grad_(), kv = kvx.detach().requires_grad_();
      AttentionRows qa{q, 0}, ka{kv, first}, va{kv, first + E};
      Tensor out = rows ? attention_rows(qa, ka, va, H, D, nullptr, T, pk)
                        : padded_reference(qa, ka, va, H, D, nullptr, T, pk);
      // freed memory of the gradients' sizes full of NaN: what they may be allocated from
      full({4 * T, E}, std::nan(""), kFloat64), full(kvx.shape(), std::nan(""), kFloat64);
      sum(mul(out, u)).backward();
      return std::vector<Tensor>{out, q.grad(), kv.grad()};
    };
    auto a = run(true);
    check_same(a, run(false), 1e-12);
    // sequence 2 has no keys: its queries' outputs and gradients are zero
    CHECK(max_abs_diff(a[0].narrow(0, 2 * T, T), zeros({T, E}, kFloat64)) == 0.0);
    CHECK(max_abs_diff(a[1].narrow(0, 2 * T, T), zeros({T, E}, kFloat64)) == 0.0);
  }
}

TEST_CASE("attention_rows drops the weights the padded op drops from the same generator state") {
  const int64_t H = 2, D = 3, E = H * D, S = 9;
  Packing pk = Packing::of(batch_ids(S), 0);
  Generator init(5);
  Tensor x = normal({pk.count, 3 * E}, 0.0, 1.0, kFloat64, &init), u = normal({pk.count, E}, 0.0, 1.0, kFloat64, &init);
  auto run = [&](bool rows) {
    Generator gen(77);
    Tensor qkv = x.detach().requires_grad_();
    AttentionRows q{qkv, 0}, k{qkv, E}, v{qkv, 2 * E};
    Tensor out = rows ? attention_rows(q, k, v, H, D, &pk, 0, pk, 0.4, true, &gen)
                      : padded_reference(q, k, v, H, D, &pk, 0, pk, 0.4, &gen);
    sum(mul(out, u)).backward();
    CHECK(gen.get_state()[1] == 1u);  // one draw per call
    return std::vector<Tensor>{out, qkv.grad()};
  };
  auto a = run(true);
  check_same(a, run(false), 1e-12);
  Tensor qkv = x.detach();
  Tensor plain = attention_rows({qkv, 0}, {qkv, E}, {qkv, 2 * E}, H, D, &pk, 0, pk);
  CHECK_FALSE(allclose(plain, a[0], 1e-3, 1e-3));  // and dropout is on
}

TEST_CASE("gradcheck: attention_rows, first and second order, on contiguous and non-contiguous rows") {
  const int64_t H = 2, D = 2, E = H * D, S = 5, T = 3;
  Packing pk = Packing::of(batch_ids(S), 0);
  Generator gen(6);
  Tensor q = normal({4 * T, E}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  Tensor kv = normal({pk.count, 2 * E}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  // the same shapes as transposed views: rows not contiguous
  Tensor qt = normal({E, 4 * T}, 0.0, 1.0, kFloat64, &gen).t().detach().requires_grad_();
  Tensor kvt = normal({2 * E, pk.count}, 0.0, 1.0, kFloat64, &gen).t().detach().requires_grad_();
  REQUIRE_FALSE(kvt.is_contiguous());
  auto f = [&](const std::vector<Tensor>& in) {
    return attention_rows({in[0], 0}, {in[1], 0}, {in[1], E}, H, D, nullptr, T, pk);
  };
  for (auto inputs : {std::vector<Tensor>{q, kv}, std::vector<Tensor>{qt, kvt}}) {
    auto r = gradcheck(f, inputs, {}, {"q", "kv"});
    INFO(r.to_string());
    CHECK(r.passed);
    auto r2 = gradgradcheck(f, inputs, {}, {"q", "kv"});
    INFO(r2.to_string());
    CHECK(r2.passed);
  }
  // rows that are all one row (an expanded view, row stride 0)
  Tensor one = normal({1, 2 * E}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  auto expanded = [&](const std::vector<Tensor>& in) {
    Tensor kv_rows = in[1].expand({pk.count, 2 * E});
    return attention_rows({in[0], 0}, {kv_rows, 0}, {kv_rows, E}, H, D, nullptr, T, pk);
  };
  auto re = gradcheck(expanded, {q, one}, {}, {"q", "one row"});
  INFO(re.to_string());
  CHECK(re.passed);
  // packed self-attention on one tensor
  Tensor qkv = normal({pk.count, 3 * E}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  auto self = [&](const std::vector<Tensor>& in) {
    return attention_rows({in[0], 0}, {in[0], E}, {in[0], 2 * E}, H, D, &pk, 0, pk);
  };
  auto r = gradcheck(self, {qkv}, {}, {"qkv"});
  INFO(r.to_string());
  CHECK(r.passed);
  auto r2 = gradgradcheck(self, {qkv}, {}, {"qkv"});
  INFO(r2.to_string());
  CHECK(r2.passed);
}

TEST_CASE("causal attention_rows equals the padded op with the causal mask, packed and padded queries, with dropout") {
  const int64_t H = 2, D = 3, E = H * D, S = 8;
  Packing pk = Packing::of(batch_ids(S), 0);  // sequence 3 has padding inside: positions skip
  Generator init(8);
  Tensor x = normal({pk.count, 3 * E}, 0.0, 1.0, kFloat64, &init), u = normal({pk.count, E}, 0.0, 1.0, kFloat64, &init);
  Tensor qx = normal({4 * S, E}, 0.0, 1.0, kFloat64, &init), kvx = normal({pk.count, 2 * E}, 0.0, 1.0, kFloat64, &init);
  Tensor uq = normal({4 * S, E}, 0.0, 1.0, kFloat64, &init);
  for (double p : {0.0, 0.3}) {
    INFO("dropout " << p);
    auto packed = [&](bool rows) {
      Generator gen(5);
      Tensor qkv = x.detach().requires_grad_();
      AttentionRows q{qkv, 0}, k{qkv, E}, v{qkv, 2 * E};
      Tensor out = rows ? attention_rows(q, k, v, H, D, &pk, 0, pk, p, p > 0, &gen, 0.0, /*causal=*/true)
                        : padded_reference(q, k, v, H, D, &pk, 0, pk, p, &gen, /*causal=*/true);
      sum(mul(out, u)).backward();
      return std::vector<Tensor>{out, qkv.grad()};
    };
    check_same(packed(true), packed(false), 1e-12);
    auto padded = [&](bool rows) {
      Generator gen(6);
      Tensor q = qx.detach().requires_grad_(), kv = kvx.detach().requires_grad_();
      AttentionRows qa{q, 0}, ka{kv, 0}, va{kv, E};
      Tensor out = rows ? attention_rows(qa, ka, va, H, D, nullptr, S, pk, p, p > 0, &gen, 0.0, /*causal=*/true)
                        : padded_reference(qa, ka, va, H, D, nullptr, S, pk, p, &gen, /*causal=*/true);
      sum(mul(out, uq)).backward();
      return std::vector<Tensor>{out, q.grad(), kv.grad()};
    };
    check_same(padded(true), padded(false), 1e-12);
  }
  // first and second derivatives
  Tensor qkv = normal({pk.count, 3 * E}, 0.0, 1.0, kFloat64, &init).requires_grad_();
  auto f = [&](const std::vector<Tensor>& in) {
    return attention_rows({in[0], 0}, {in[0], E}, {in[0], 2 * E}, H, D, &pk, 0, pk, 0.0, false, nullptr, 0.0, true);
  };
  auto r = gradcheck(f, {qkv}, {}, {"qkv"});
  INFO(r.to_string());
  CHECK(r.passed);
  auto r2 = gradgradcheck(f, {qkv}, {}, {"qkv"});
  INFO(r2.to_string());
  CHECK(r2.passed);
  CHECK_THAT(error_of([&] {
               attention_rows({qx, 0}, {kvx, 0}, {kvx, E}, H, D, nullptr, S - 1, pk, 0.0, false, nullptr, 0.0, true);
             }),
             Catch::Contains("causal attention needs queries and keys of one padded length, got 7 and 8"));
}

TEST_CASE("attention_rows leaves nothing behind: its graph is freed with its output, after a double backward too") {
  const int64_t H = 2, D = 2, E = H * D;
  Packing pk = Packing::of(batch_ids(5), 0);
  const int64_t nodes = Node::live_count(), bytes = Storage::live_bytes();
  {  // a graph that is never run backward
    Tensor qkv = normal({pk.count, 3 * E}, 0.0, 1.0, kFloat64).requires_grad_();
    Tensor out = attention_rows({qkv, 0}, {qkv, E}, {qkv, 2 * E}, H, D, &pk, 0, pk, 0.2, true);
  }
  CHECK(Node::live_count() == nodes);
  {
    Tensor qkv = normal({pk.count, 3 * E}, 0.0, 1.0, kFloat64).requires_grad_();
    Tensor out = attention_rows({qkv, 0}, {qkv, E}, {qkv, 2 * E}, H, D, &pk, 0, pk, 0.2, true);
    Tensor g = grad({sum(square(out))}, {qkv}, {}, {.create_graph = true})[0];
    sum(g).backward();
  }
  CHECK(Node::live_count() == nodes);
  CHECK(Storage::live_bytes() == bytes);
}

TEST_CASE("attention_rows names what it expected and what it got") {
  Packing pk = Packing::of(batch_ids(5), 0);
  Tensor kv = zeros({pk.count, 8}), q = zeros({20, 4});
  CHECK_THAT(error_of([&] { attention_rows({q, 0}, {kv, 0}, {kv, 4}, 2, 2, nullptr, 4, pk); }),
             Catch::Contains("attention_rows: expected q rows [16, >= 4]") && Catch::Contains("got shape [20,4]"));
  CHECK_THAT(error_of([&] { attention_rows({q, 0}, {kv, 6}, {kv, 4}, 2, 2, nullptr, 5, pk); }),
             Catch::Contains("expected k rows [") && Catch::Contains("from column 6"));
  CHECK_THAT(error_of([&] { attention_rows({q, 0}, {kv, 0}, {kv, 4}, 0, 2, nullptr, 5, pk); }),
             Catch::Contains("heads and head_dim must be positive"));
  CHECK_THAT(error_of([&] { attention_rows({q.to(kFloat64), 0}, {kv, 0}, {kv, 4}, 2, 2, nullptr, 5, pk); }),
             Catch::Contains("of one dtype"));
}

TEST_CASE("a Packing filled by hand is checked before attention reads its rows") {
  nn::MultiHeadAttention mha(8, 2);
  const Tensor ids = from_vector(std::vector<int64_t>{5, 6, 0, 7, 0, 0}, {2, 3});
  nn::Packing p = nn::Packing::of(ids, 0);
  const Tensor r = p.pack(randn({2, 3, 8}));
  (void)mha.forward(r, r, r, {.query_packing = &p, .kv_packing = &p});  // as made: fine
  nn::Packing bad = p;
  bad.rows = full({3}, 100, kInt64);
  CHECK_THAT(error_of([&] { (void)mha.forward(r, r, r, {.query_packing = &bad, .kv_packing = &bad}); }),
             Catch::Matchers::StartsWith("attention_rows: the Packing's row 0 (position 100"));
  bad = p;
  bad.positions = full({3}, -7, kInt64);
  CHECK_THAT(error_of([&] { (void)mha.forward(r, r, r, {.query_packing = &bad, .kv_packing = &bad}); }),
             Catch::Matchers::Contains("is not what Packing::of makes"));
  bad = p;
  bad.rows = from_vector(std::vector<int64_t>{1, 0, 3}, {3});  // out of order
  CHECK_THAT(error_of([&] { (void)mha.forward(r, r, r, {.query_packing = &bad, .kv_packing = &bad}); }),
             Catch::Matchers::Contains("is not what Packing::of makes"));
  bad = p;
  bad.positions = Tensor();
  CHECK_THAT(error_of([&] { (void)mha.forward(r, r, r, {.query_packing = &bad, .kv_packing = &bad}); }),
             Catch::Matchers::Contains("the Packing's positions is undefined"));
}

TEST_CASE("attention_rows refuses heads, widths, lengths and columns whose products would overflow") {
  const Tensor ids = from_vector(std::vector<int64_t>{5, 6, 0, 7, 0, 0}, {2, 3});
  const nn::Packing p = nn::Packing::of(ids, 0);
  const Tensor r = randn({p.count, 8});
  const nn::AttentionRows a{r, 0};
  const int64_t big = int64_t(1) << 32;
  CHECK_THAT(error_of([&] { (void)nn::attention_rows(a, a, a, big, big, &p, 0, p); }),
             Catch::Matchers::StartsWith("attention_rows: a tensor of shape [4294967296,4294967296] would have more than 2^56"));
  CHECK_THAT(error_of([&] { (void)nn::attention_rows(a, a, a, 2, int64_t(1) << 62, &p, 0, p); }),
             Catch::Matchers::StartsWith("attention_rows: a tensor of shape [2,4611686018427387904]"));
  CHECK_THAT(error_of([&] { (void)nn::attention_rows(a, a, a, 2, 4, nullptr, INT64_MAX, p); }),
             Catch::Matchers::StartsWith("attention_rows: a tensor of shape [2,2,9223372036854775807]"));
  const nn::AttentionRows far{r, INT64_MAX};
  CHECK_THAT(error_of([&] { (void)nn::attention_rows(far, a, a, 2, 4, &p, 0, p); }),
             Catch::Matchers::StartsWith("attention_rows: expected q rows [3, >= 2^63] (2 heads of 4 from column 9223372036854775807)"));
}
