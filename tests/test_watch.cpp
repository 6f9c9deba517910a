// Watching attention learn: attention hooks hand over scores and weights in the graph,
// score_scale, the per-head statistics against direct computations, the gradient norms
// against retain_grad by hand, and the log's files and figures.
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/autograd.h"
#include "io/h5.h"
#include "nn/curvature.h"
#include "nn/functional.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "test_util.h"
#include "lib/watch/transformer_probe.h"
#include "lib/watch/watch.h"

using namespace ember;
using namespace ember::nn;
using ember::testing::error_of;
using ember::testing::max_abs_diff;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<MultiHeadAttention> make_mha(double score_scale = 1.0, uint64_t seed = 3) {
  Generator gen(seed);
  return std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{
      .embed_dim = 8, .num_heads = 2, .score_scale = score_scale, .gen = &gen, .dtype = kFloat64});
}

// key padding [B=2, S=4]: the second sequence's last two keys are padding
AttentionMask key_padding() {
  return AttentionMask::blocked(from_bools(std::vector<bool>{0, 0, 0, 0, 0, 0, 1, 1}, {2, 4}));
}

std::string scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ember_test_watch_" + std::to_string(::getpid())) / name;
  fs::create_directories(p);
  return p.string();
}

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("an attention hook sees the scores and weights, and the output stays the fused op's") {
  auto mha = make_mha();
  Generator g(7);
  Tensor x = randn({2, 3, 8}, kFloat64, &g), mem = randn({2, 4, 8}, kFloat64, &g);
  const AttentionCall call{.key_padding_mask = key_padding(), .need_weights = AttnWeights::PerHead};
  auto fused = mha->forward(x, mem, mem, call);

  AttentionInternals seen;
  int calls = 0;
  HookHandle h = mha->register_attention_hook([&](MultiHeadAttention&, const AttentionInternals& a) {
    seen = a;
    calls++;
  });
  auto hooked = mha->forward(x, mem, mem, call);
  REQUIRE(calls == 1);
  CHECK(max_abs_diff(hooked.output, fused.output) < 1e-13);
  CHECK(max_abs_diff(hooked.weights, fused.weights) < 1e-14);
  CHECK(max_abs_diff(seen.weights, fused.weights) < 1e-14);
  REQUIRE(seen.scores.shape() == Shape{2, 2, 3, 4});
  CHECK(seen.scores.requires_grad());
  CHECK(seen.weights.requires_grad());
  // the scores are q k^T / sqrt(d) per head, from the projections, where allowed
  NoGradGuard ng;
  Tensor q = mha->q_proj->forward(x).view({2, 3, 2, 4}).transpose(1, 2);
  Tensor k = mha->k_proj->forward(mem).view({2, 4, 2, 4}).transpose(1, 2);
  Tensor expected = mul(matmul(q, k.mT()), 0.5);
  Tensor blocked = seen.blocked.expand({2, 2, 3, 4});
  CHECK(max_abs_diff(where(blocked, zeros({}, kFloat64), seen.scores.detach()),
                     where(blocked, zeros({}, kFloat64), expected)) < 1e-13);
  CHECK(sum(blocked).item() == 2 * 3 * 2);  // the padded keys of the second sequence, every head and query
  h.remove();
  mha->forward(x, mem, mem, call);
  CHECK(calls == 1);
}

TEST_CASE("retained gradients of the hooked scores are the softmax's backward of the weights' gradients") {
  auto mha = make_mha();
  Generator g(11);
  Tensor x = randn({2, 4, 8}, kFloat64, &g);
  AttentionInternals seen;
  mha->register_attention_hook([&](MultiHeadAttention&, const AttentionInternals& a) {
    a.scores.retain_grad();
    a.weights.retain_grad();
    seen = a;
  });
  Tensor out = mha->forward(x, x, x, {.key_padding_mask = key_padding()}).output;
  sum(mul(out, randn(out.shape(), kFloat64, &g))).backward();  // a non-uniform upstream gradient
  const Tensor P = seen.weights.detach(), dP = seen.weights.grad(), dZ = seen.scores.grad();
  REQUIRE(dP.defined());
  REQUIRE(dZ.defined());
  // dZ = P * (dP - sum_j dP_j P_j)
  Tensor expected = mul(P, sub(dP, sum(mul(dP, P), {-1}, true)));
  CHECK(max_abs_diff(dZ, expected) < 1e-14);
  CHECK(sum(abs(dZ)).item() > 0);
}

TEST_CASE("a hooked forward gives the fused op's gradients") {
  auto fused = make_mha(1.0, 5), hooked = make_mha(1.0, 5);
  hooked->register_attention_hook([](MultiHeadAttention&, const AttentionInternals&) {});
  Generator g(13);
  Tensor x = randn({2, 3, 8}, kFloat64, &g), up = randn({2, 3, 8}, kFloat64, &g);
  for (auto& m : {fused, hooked}) {
    const AttentionMask causal = AttentionMask::blocked(from_bools(std::vector<bool>{0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3}));
    sum(mul(m->forward(x, x, x, {.attn_mask = causal}).output, up)).backward();
  }
  auto a = fused->named_parameters(), b = hooked->named_parameters();
  for (size_t i = 0; i < a.size(); i++) {
    INFO(a[i].first);
    CHECK(max_abs_diff(a[i].second.grad(), b[i].second.grad()) < 1e-13);
  }
}

TEST_CASE("score_scale multiplies the scores on top of 1/sqrt(d), and must be positive and finite") {
  auto unscaled = make_mha(2.0);  // head_dim 4: 2 = sqrt(4) leaves q k^T as it is
  CHECK(unscaled->scale() == 1.0);
  CHECK(make_mha()->scale() == 0.5);
  Generator g(17);
  Tensor x = randn({1, 3, 8}, kFloat64, &g);
  Tensor scores;
  unscaled->register_attention_hook([&](MultiHeadAttention&, const AttentionInternals& a) { scores = a.scores; });
  auto out = unscaled->forward(x, x, x, {.need_weights = AttnWeights::PerHead});
  NoGradGuard ng;
  Tensor q = unscaled->q_proj->forward(x).view({1, 3, 2, 4}).transpose(1, 2);
  Tensor k = unscaled->k_proj->forward(x).view({1, 3, 2, 4}).transpose(1, 2);
  CHECK(max_abs_diff(scores.detach(), matmul(q, k.mT())) < 1e-13);
  CHECK(max_abs_diff(out.weights, softmax(matmul(q, k.mT()), -1)) < 1e-14);
  // the fused op (no hook) agrees with the hooked composition
  auto plain = make_mha(2.0);
  CHECK(max_abs_diff(plain->forward(x, x, x).output, out.output) < 1e-13);
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    Generator gen(1);
    const std::string e = error_of([&] {
      MultiHeadAttention({.embed_dim = 8, .num_heads = 2, .score_scale = bad, .gen = &gen});
    });
    CHECK_THAT(e, Catch::Contains("MultiHeadAttention") && Catch::Contains("score_scale must be positive and finite"));
  }
  // a model's configuration is checked once, where the model is built
  TransformerConfig bad{.src_vocab = 9,
                        .tgt_vocab = 7,
                        .layer = {.d_model = 8, .num_heads = 2, .dim_feedforward = 8, .score_scale = -2}};
  CHECK_THAT(error_of([&] { Transformer model(bad); }), Catch::Contains("Transformer: score_scale must be positive"));
  CHECK_THAT(error_of([&] { check_config(bad.layer, "EncoderLayer"); }),
             Catch::Contains("EncoderLayer: score_scale must be positive"));
}

TEST_CASE("head statistics of known weights: entropy, its normalised form, the largest weight, saturation") {
  // one sequence, one head, three queries over three keys; query 2's third key is blocked,
  // query 3 is padding (its numbers must not count)
  const double a = 0.995, b = 0.005;
  std::vector<double> w = {1.0 / 3, 1.0 / 3, 1.0 / 3, a, b, 0, 0.9, 0.05, 0.05};
  std::vector<double> z = {0, 0, 0, std::log(a), std::log(b), -1e300, 5, 2, 2};
  Tensor weights = from_vector(w, {1, 1, 3, 3}), scores = from_vector(z, {1, 1, 3, 3});
  Tensor blocked = from_bools(std::vector<bool>{0, 0, 0, 0, 0, 1, 0, 0, 0}, {1, 1, 3, 3});
  Tensor padding = from_bools(std::vector<bool>{0, 0, 1}, {1, 3});
  Tensor dP = from_vector(std::vector<double>{1, 2, 3, 4, 5, 100, 7, 8, 9}, {1, 1, 3, 3});
  Tensor dZ = from_vector(std::vector<double>{0.5, 0, 0, 1, 1, 100, 9, 9, 9}, {1, 1, 3, 3});
  auto s = watch::head_statistics(scores, weights, dZ, dP, blocked, padding);
  const double h1 = std::log(3.0), h2 = -(a * std::log(a) + b * std::log(b));
  CHECK(s["entropy_mean"][0] == Approx((h1 + h2) / 2).epsilon(1e-14));
  CHECK(s["entropy_p10"][0] == Approx(h2 + 0.1 * (h1 - h2)).epsilon(1e-14));  // linear between order statistics
  CHECK(s["entropy_norm_mean"][0] == Approx((1.0 + h2 / std::log(2.0)) / 2).epsilon(1e-14));
  CHECK(s["max_weight_mean"][0] == Approx((1.0 / 3 + a) / 2).epsilon(1e-14));
  CHECK(s["saturated_share"][0] == 0.5);
  // std over allowed keys: 0 for the uniform query, |log a - log b| / 2 for the other
  CHECK(s["score_std"][0] == Approx(std::abs(std::log(a) - std::log(b)) / 4).epsilon(1e-14));
  // norms over allowed pairs of real queries: the blocked pair and the padding query are out
  CHECK(s["grad_weights_norm"][0] == Approx(std::sqrt(1 + 4 + 9 + 16 + 25.0)).epsilon(1e-14));
  CHECK(s["grad_scores_norm"][0] == Approx(std::sqrt(0.25 + 1 + 1)).epsilon(1e-14));
  CHECK(s["grad_ratio"][0] == Approx(std::sqrt(2.25 / 55)).epsilon(1e-14));
  // the largest logit over allowed pairs of real queries: not the padding query's 5
  CHECK(s["max_logit"][0] == 0);
  // a query with one allowed key has nothing to choose: it does not count
  Tensor one_key = from_bools(std::vector<bool>{0, 1, 1, 0, 0, 1, 0, 0, 0}, {1, 1, 3, 3});
  auto t = watch::head_statistics(scores, weights, dZ, dP, one_key, padding);
  CHECK(t["max_weight_mean"][0] == Approx(a).epsilon(1e-14));
  CHECK(t["saturated_share"][0] == 1.0);
  CHECK(t["max_logit"][0] == Approx(std::log(a)).epsilon(1e-14));  // query 1 no longer counts
  // a NaN weight (a model gone wrong) makes the head's numbers NaN, not "fully peaked"
  std::vector<double> broken = w;
  broken[4] = std::nan("");
  auto n = watch::head_statistics(scores, from_vector(broken, {1, 1, 3, 3}), dZ, dP, blocked, padding);
  for (const std::string& q : {"entropy_mean", "entropy_p10", "entropy_norm_mean", "max_weight_mean", "saturated_share",
                               "grad_ratio", "max_logit"}) {
    INFO(q);
    CHECK(std::isnan(n[q][0]));
  }
  // shapes are checked and named
  CHECK_THAT(error_of([&] { watch::head_statistics(scores, weights, dZ, dP, blocked, from_bools(std::vector<bool>{0, 0}, {1, 2})); }),
             Catch::Contains("watch::head_statistics: expected query_padding [B, L] = [1,3], got shape [1,2]"));
}

namespace {

// A tiny float64 translator and a padded probe batch.
struct Tiny {
  Generator init{21}, drop{22};
  std::shared_ptr<Transformer> model;
  Tensor src, tgt_in, tgt_out;
  std::vector<watch::Site> sites;
  Tiny() {
    TransformerConfig c{.src_vocab = 9,
                        .tgt_vocab = 7,
                        .layer = {.d_model = 8, .num_heads = 2, .dim_feedforward = 16, .dropout_p = 0.2, .dropout_gen = &drop},
                        .num_encoder_layers = 2,
                        .num_decoder_layers = 1};
    model = std::make_shared<Transformer>(c, &init, kFloat64);
    src = from_vector(std::vector<int64_t>{3, 4, 5, 6, 1, 2, 7, 1, 0, 0, 8, 3, 1, 0, 0}, {3, 5});
    tgt_in = from_vector(std::vector<int64_t>{2, 3, 4, 5, 2, 6, 0, 0, 2, 3, 5, 0}, {3, 4});
    tgt_out = from_vector(std::vector<int64_t>{3, 4, 5, 1, 6, 1, 0, 0, 3, 5, 1, 0}, {3, 4});
    for (int64_t i = 0; i < 2; i++) sites.push_back({"encoder_self", i, model->encoder->layer((size_t)i)->self_attn.get()});
    sites.push_back({"decoder_self", 0, model->decoder->layer(0)->self_attn.get()});
    sites.push_back({"decoder_cross", 0, model->decoder->layer(0)->cross_attn.get()});
  }
  Tensor loss() { return cross_entropy(model->forward(src, tgt_in).reshape({-1, 7}), tgt_out.reshape({-1}), 0); }
  watch::Probe probe() {
    watch::Probe p{model.get(), sites, [this] { return loss(); }, {}};
    p.query_padding = {{"encoder_self", eq(src, 0.0)}, {"decoder_self", eq(tgt_in, 0.0)}, {"decoder_cross", eq(tgt_in, 0.0)}};
    return p;
  }
};

}  // namespace

TEST_CASE("measure gives the norms retain_grad gives by hand, and the entropy of the weights") {
  Tiny t;
  const watch::Snapshot snap = watch::measure(t.probe(), 7);
  CHECK(snap.step == 7);

  // by hand: retain the scores' and weights' gradients, one backward in eval mode
  std::vector<AttentionInternals> seen(t.sites.size());
  std::vector<HookHandle> hooks;
  for (size_t i = 0; i < t.sites.size(); i++)
    hooks.push_back(t.sites[i].attention->register_attention_hook([&seen, i](MultiHeadAttention&, const AttentionInternals& a) {
      a.scores.retain_grad();
      a.weights.retain_grad();
      seen[i] = a;
    }));
  t.model->eval();
  t.loss().backward();
  for (size_t i = 0; i < t.sites.size(); i++) {
    const watch::Site& s = t.sites[i];
    INFO(s.module << " layer " << s.layer);
    const Tensor pad = s.module == "encoder_self" ? eq(t.src, 0.0) : eq(t.tgt_in, 0.0);
    const Tensor P = seen[i].weights.detach();
    const int64_t B = P.size(0), H = P.size(1), L = P.size(2);
    // the pairs that count: allowed, of a query that is not padding and has two keys or more
    Tensor allowed = logical_not(seen[i].blocked.expand(P.shape())).to(kFloat64);
    Tensor keys = sum(allowed, {-1}, true);
    Tensor real = mul(logical_not(pad).to(kFloat64).reshape({B, 1, L, 1}), ge(keys, 2.0).to(kFloat64));
    Tensor counted = mul(allowed, real);
    auto per_head = [&](const Tensor& g) {  // sqrt(sum over counted pairs of g^2), per head
      return sqrt(sum(mul(mul(g, g), counted), {0, 2, 3})).to_vector<double>();
    };
    const auto dp = per_head(seen[i].weights.grad()), dz = per_head(seen[i].scores.grad());
    Tensor plogp = where(gt(P, 0.0), mul(P, log(P)), zeros({}, kFloat64));
    Tensor entropy = neg(sum(plogp, {-1}, true));  // [B, H, L, 1]
    const auto mean_entropy = div(sum(mul(entropy, real), {0, 2, 3}), sum(real, {0, 2, 3})).to_vector<double>();
    const auto& v = snap.values.at(s.module);
    const int64_t d = s.attention->head_dim;
    for (int64_t h = 0; h < H; h++) {
      INFO("head " << h);
      const size_t at = (size_t)(s.layer * H + h);
      CHECK(v.at("grad_weights_norm")[at] == Approx(dp[(size_t)h]).epsilon(1e-12));
      CHECK(v.at("grad_scores_norm")[at] == Approx(dz[(size_t)h]).epsilon(1e-12));
      CHECK(v.at("grad_ratio")[at] == Approx(dz[(size_t)h] / dp[(size_t)h]).epsilon(1e-12));
      CHECK(v.at("entropy_mean")[at] == Approx(mean_entropy[(size_t)h]).epsilon(1e-12));
      Tensor gq = s.attention->q_proj->weight.grad().narrow(0, h * d, d);
      Tensor gk = s.attention->k_proj->weight.grad().narrow(0, h * d, d);
      CHECK(v.at("grad_q_proj_norm")[at] == Approx(std::sqrt(sum(mul(gq, gq)).item())).epsilon(1e-12));
      CHECK(v.at("grad_k_proj_norm")[at] == Approx(std::sqrt(sum(mul(gk, gk)).item())).epsilon(1e-12));
      CHECK(dp[(size_t)h] > 0);
      CHECK(dz[(size_t)h] > 0);
      // each example's |dL/dZ| over its counted pairs: their spread over the examples
      const Tensor gz = seen[i].scores.grad().select(1, h), c = counted.select(1, h);
      const std::vector<double> norms = sqrt(sum(mul(mul(gz, gz), c), {1, 2})).to_vector<double>();
      const std::vector<double> has = sum(c, {1, 2}).to_vector<double>();
      std::vector<double> kept;
      for (int64_t b = 0; b < B; b++)
        if (has[(size_t)b] > 0) kept.push_back(norms[(size_t)b]);
      REQUIRE(kept.size() >= 2);
      double mean = 0, var = 0;
      for (double x : kept) mean += x / double(kept.size());
      for (double x : kept) var += (x - mean) * (x - mean) / double(kept.size());
      std::vector<double> sorted = kept;
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                              : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
      CHECK(v.at("grad_scores_example_cv")[at] == Approx(std::sqrt(var) / mean).epsilon(1e-12));
      CHECK(v.at("grad_scores_example_max_ratio")[at] == Approx(sorted.back() / median).epsilon(1e-12));
      // the largest score over the counted pairs
      const std::vector<double> zs = seen[i].scores.detach().select(1, h).contiguous().to_vector<double>();
      const std::vector<double> cs = c.contiguous().to_vector<double>();
      double top = -INFINITY;
      for (size_t j = 0; j < zs.size(); j++)
        if (cs[j] > 0) top = std::max(top, zs[j]);
      CHECK(v.at("max_logit")[at] == top);
    }
  }
}

TEST_CASE("measure leaves training as it was: no gradient, the same mode, no draw, no hook left") {
  Tiny t;
  t.model->train();
  const auto before = t.drop.get_state();
  watch::measure(t.probe(), 0);
  CHECK(t.model->is_training());
  CHECK(t.model->encoder->layer(0)->self_attn->is_training());
  CHECK(t.drop.get_state() == before);
  for (auto& [name, p] : t.model->named_parameters()) {
    INFO(name);
    CHECK_FALSE(p.grad().defined());
  }
  for (auto& s : t.sites) CHECK_FALSE(s.attention->has_attention_hooks());
  // a probe whose forward misses a site says which
  watch::Probe p = t.probe();
  p.loss = [&] { return sum(t.model->encode(t.src)); };
  CHECK_THAT(error_of([&] { watch::measure(p, 0); }),
             Catch::Contains("watch::measure: the probe's forward did not run the decoder self-attention of layer 1"));
  CHECK(t.model->is_training());
  for (auto& s : t.sites) CHECK_FALSE(s.attention->has_attention_hooks());
}

TEST_CASE("a watch log reads back whole from its HDF5 file, and draws the same figures from it") {
  Tiny t;
  watch::Log log = watch::Log::for_sites(t.sites);
  CHECK(log.modules == std::vector<std::string>{"encoder_self", "decoder_self", "decoder_cross"});
  CHECK(log.layers == 2);
  CHECK(log.heads == 2);
  log.info = {{"program", "test"}, {"score_scale", "1"}};
  optim::Adam opt(t.model->named_parameters(), {.lr = 1e-2});
  for (int64_t step = 0; step <= 20; step += 10) {
    log.add(watch::measure(t.probe(), step));
    for (int i = 0; i < 10; i++) {
      opt.zero_grad();
      t.loss().backward();
      opt.step();
    }
  }
  const std::string dir = scratch("roundtrip");
  log.write_h5(dir + "/watch.h5");
  log.write_csv(dir + "/watch.csv");
  const watch::Log back = watch::Log::read_h5(dir + "/watch.h5");
  REQUIRE(back.same_shape(log));
  CHECK(back.info == log.info);
  REQUIRE(back.snapshots.size() == 3);
  for (size_t c = 0; c < 3; c++) {
    CHECK(back.snapshots[c].step == log.snapshots[c].step);
    for (auto& [m, qs] : log.snapshots[c].values)
      for (auto& [q, v] : qs)
        for (size_t i = 0; i < v.size(); i++) {
          INFO(m << "/" << q << "[" << i << "]");
          // decoder layer 2 does not exist: NaN in both
          if (std::isnan(v[i])) CHECK(std::isnan(back.snapshots[c].values.at(m).at(q)[i]));
          else CHECK(back.snapshots[c].values.at(m).at(q)[i] == v[i]);
        }
  }
  // [checkpoints, layers, heads] per quantity
  CHECK(h5::read(dir + "/watch.h5", "/decoder_cross/grad_ratio").shape() == Shape{3, 2, 2});
  CHECK(h5::read(dir + "/watch.h5", "/step").to_vector<int64_t>() == std::vector<int64_t>{0, 10, 20});
  // the CSV: a header and one line per checkpoint, module, layer and head
  std::ifstream csv(dir + "/watch.csv");
  std::string header, line;
  std::getline(csv, header);
  CHECK(header.rfind("step,module,layer,head,score_std,entropy_mean,", 0) == 0);
  int lines = 0;
  while (std::getline(csv, line)) lines++;
  CHECK(lines == 3 * 3 * 2 * 2);
  // figures from the live log and from the file are the same bytes
  const auto live = log.draw(dir, "live"), again = back.draw(dir, "again");
  REQUIRE(live.size() == 7);
  for (size_t i = 0; i < live.size(); i++) {
    INFO(live[i]);
    CHECK(bytes_of(live[i]).size() > 1000);
    CHECK(bytes_of(live[i]) == bytes_of(again[i]));
  }
  fs::remove_all(dir);
}

TEST_CASE("a file that is not a watch, or lacks a quantity, is refused naming the file and the key") {
  const std::string dir = scratch("refused");
  {
    h5::Writer w(dir + "/other.h5");
    w.write("/x", zeros({2}));
    w.close();
  }
  CHECK_THAT(error_of([&] { watch::Log::read_h5(dir + "/other.h5"); }),
             Catch::Contains("other.h5' is not an attention watch file"));
  Tiny t;
  watch::Log log = watch::Log::for_sites(t.sites);
  log.add(watch::measure(t.probe(), 0));
  log.write_h5(dir + "/watch.h5");
  // the same file without one dataset
  {
    h5::Reader r(dir + "/watch.h5");
    h5::Writer w(dir + "/lacking.h5");
    w.write("/step", r.read("/step"));
    for (const auto& m : log.modules)
      for (const auto& q : watch::kQuantities)
        if (!(m == "decoder_self" && q == "entropy_p10")) w.write("/" + m + "/" + q, r.read("/" + m + "/" + q));
    for (const auto& a : r.attr_names("/"))
      if (r.attr_is_string("/", a)) w.attr("/", a, r.attr_string("/", a));
      else w.attr_int("/", a, r.attr_int("/", a));
    w.close();
  }
  CHECK_THAT(error_of([&] { watch::Log::read_h5(dir + "/lacking.h5"); }),
             Catch::Contains("lacking.h5': key '/decoder_self/entropy_p10' is missing"));
  // a file written before the per-example quantities existed reads, with NaN for them
  {
    h5::Reader r(dir + "/watch.h5");
    h5::Writer w(dir + "/older.h5");
    w.write("/step", r.read("/step"));
    for (const auto& m : log.modules)
      for (const auto& q : watch::kQuantities)
        if (!watch::kLaterQuantities.count(q)) w.write("/" + m + "/" + q, r.read("/" + m + "/" + q));
    for (const auto& a : r.attr_names("/"))
      if (r.attr_is_string("/", a)) w.attr("/", a, r.attr_string("/", a));
      else w.attr_int("/", a, r.attr_int("/", a));
    w.close();
  }
  const watch::Log older = watch::Log::read_h5(dir + "/older.h5");
  CHECK(std::isnan(older.snapshots[0].values.at("encoder_self").at("grad_scores_example_cv")[0]));
  CHECK(older.snapshots[0].values.at("encoder_self").at("grad_ratio") ==
        log.snapshots[0].values.at("encoder_self").at("grad_ratio"));
  // absurd sizes are refused before anything is allocated for them
  {
    h5::Writer w(dir + "/huge.h5");
    w.write("/step", zeros({0}, kInt64));
    w.attr("/", "format", "ember attention watch");
    w.attr_int("/", "version", 1);
    w.attr("/", "modules", "encoder_self");
    w.attr_int("/", "layers", int64_t(1) << 20);
    w.attr_int("/", "heads", int64_t(1) << 20);
    w.close();
  }
  CHECK_THAT(error_of([&] { watch::Log::read_h5(dir + "/huge.h5"); }),
             Catch::Contains("huge.h5': attributes 'layers' and 'heads' must be in [1, 1024] and [1, 4096], got 1048576"));
  fs::remove_all(dir);
}

TEST_CASE("a resumed watch keeps the measurements up to the checkpoint's step and goes on from there") {
  Tiny t;
  const std::string dir = scratch("resume");
  {
    watch::Recorder r(t.probe(), dir, 5, "test", {});
    for (int64_t step = 0; step <= 20; step++) r.after_step(step);
    CHECK(r.probes() == 5);
    REQUIRE(r.write());
  }
  watch::Recorder r(t.probe(), dir, 5, "test", {});
  r.resume(12);
  REQUIRE(r.log().snapshots.size() == 3);  // 0, 5, 10
  CHECK(r.log().snapshots.back().step == 10);
  r.after_step(10);  // measured already
  CHECK(r.probes() == 0);
  r.after_step(15);
  CHECK(r.log().snapshots.back().step == 15);
  // a watch of another model starts afresh
  Tiny other;
  other.sites.pop_back();
  watch::Recorder fresh(other.probe(), dir, 5, "test", {});
  fresh.resume(20);
  CHECK(fresh.log().snapshots.empty());
  fs::remove_all(dir);
}

namespace {

// A measured log whose first module is renamed (as a crafted or foreign file may name it).
watch::Log renamed_log(Tiny& t, const std::string& name) {
  watch::Log log = watch::Log::for_sites(t.sites);
  log.add(watch::measure(t.probe(), 0));
  const std::string old = log.modules[0];
  log.modules[0] = name;
  for (watch::Snapshot& s : log.snapshots) {
    s.values[name] = s.values.at(old);
    s.values.erase(old);
  }
  return log;
}

}  // namespace

TEST_CASE("a probe whose module name cannot name a figure file is refused when the recorder is made") {
  Tiny t;
  for (const std::string name : {"", "a/b", ".."}) {
    watch::Probe p = t.probe();
    p.sites[1].module = name;
    CHECK_THAT(error_of([&] { watch::Recorder r(p, scratch("probe_names"), 5, "test", {}); }),
               Catch::StartsWith("watch::Recorder: the probe names module \"" + name + "\", which cannot name a figure file"));
  }
}

TEST_CASE("a module name from a watch file that could name a file outside the output directory is refused") {
  Tiny t;
  const std::string dir = scratch("names");
  for (const std::string name : {"a/b", "../up", "..", ".hidden", "x y"}) {
    INFO(name);
    const std::string path = dir + "/watch.h5";
    renamed_log(t, name).write_h5(path);  // well-formed: its datasets are where the name puts them
    CHECK(error_of([&] { watch::Log::read_h5(path); }) ==
          "watch::Log::read_h5: '" + path + "': attribute 'modules' names module \"" + name +
              "\", which cannot name a figure file (expected up to 64 letters, digits, '_', '-' and '.', not starting "
              "with '.')");
    fs::create_directories(dir + "/out");
    CHECK_THAT(error_of([&] { renamed_log(t, name).draw(dir + "/out"); }),
               Catch::StartsWith("watch::Log::draw: the log names module \"" + name + "\""));
  }
  CHECK(fs::is_empty(dir + "/out"));
  CHECK(!fs::exists(dir + "/up.png"));
  CHECK(!fs::exists(dir + "/watch_up.png"));
  fs::remove_all(dir);
}

TEST_CASE("a watch file of huge finite values draws its figures") {
  Tiny t;
  watch::Log log = watch::Log::for_sites(t.sites);
  log.add(watch::measure(t.probe(), 0));
  log.add(watch::measure(t.probe(), 10));
  for (watch::Snapshot& s : log.snapshots)
    for (auto& [m, qs] : s.values)
      for (auto& [q, v] : qs) std::fill(v.begin(), v.end(), 1e308);
  const std::string dir = scratch("huge_values");
  log.write_h5(dir + "/watch.h5");
  const watch::Log back = watch::Log::read_h5(dir + "/watch.h5");
  std::vector<std::string> written;
  CHECK(error_of([&] { written = back.draw(dir); }) == "<no ember::Error was thrown>");
  CHECK(written.size() == 9);  // the seven, and the curvature's two (its values are there too)
  CHECK(error_of([&] { watch::draw_comparison({back, back}, {"a", "b"}, dir + "/both.png"); }) ==
        "<no ember::Error was thrown>");
  fs::remove_all(dir);
}

TEST_CASE("a watch file whose snapshot steps are negative, repeated or out of order is refused, naming the file and the key") {
  const std::string dir = scratch("steps");
  Tiny t;
  watch::Log log = watch::Log::for_sites(t.sites);
  for (int64_t step : {0, 10, 20}) log.add(watch::measure(t.probe(), step));
  log.write_h5(dir + "/good.h5");
  CHECK(watch::Log::read_h5(dir + "/good.h5").snapshots.size() == 3);
  for (const std::vector<int64_t>& steps :
       {std::vector<int64_t>{20, 10, 0}, std::vector<int64_t>{10, 10, 20}, std::vector<int64_t>{-5, 0, 10}}) {
    watch::Log bad = log;
    for (size_t c = 0; c < 3; c++) bad.snapshots[c].step = steps[c];
    bad.write_h5(dir + "/bad.h5");
    CHECK_THAT(error_of([&] { watch::Log::read_h5(dir + "/bad.h5"); }),
               Catch::StartsWith("watch::Log::read_h5") && Catch::Contains("bad.h5': key '/step'") &&
                   Catch::Contains("strictly increase"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a watch file whose modules attribute holds a NUL byte is refused, naming the file and the attribute") {
  const std::string dir = scratch("nul");
  Tiny t;
  watch::Log log = watch::Log::for_sites(t.sites);
  log.add(watch::measure(t.probe(), 0));
  const std::string path = dir + "/watch.h5";
  log.write_h5(path);
  {  // "encoder_self" then a NUL and more names, as a fixed-length string (the writer refuses NULs)
    const std::string value("encoder_self\0,decoder_self,decoder_cross", 41);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    REQUIRE(H5Adelete(f, "modules") >= 0);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, value.size());
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "modules", type, space, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(a >= 0);
    REQUIRE(H5Awrite(a, type, value.data()) >= 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(f);
  }
  CHECK_THAT(error_of([&] { watch::Log::read_h5(path); }),
             Catch::StartsWith("watch::Log::read_h5") && Catch::Contains("watch.h5': attribute 'modules'") &&
                 Catch::Contains("NUL byte"));
  fs::remove_all(dir);
}

TEST_CASE("the watch's curvature: each head's top eigenvalue and trace are its Hessian block's, the log keeps them") {
  Tiny t;
  t.model->train();
  const auto before = t.drop.get_state();
  watch::Snapshot snap = watch::measure(t.probe(), 10);
  std::vector<std::vector<double>> starts;
  watch::CurvatureOptions o{
      .every = 10, .lanczos_steps = 200, .first_lanczos_steps = 200, .trace_probes = 60, .density_steps = 30, .seed = 4};
  watch::measure_curvature(t.probe(), o, snap, starts);
  CHECK(t.model->is_training());
  CHECK(t.drop.get_state() == before);
  for (auto& [name, p] : t.model->named_parameters()) CHECK_FALSE(p.grad().defined());
  REQUIRE(starts.size() == 4 * 2);

  // the dense blocks, in eval mode as the watch measures
  t.model->eval();
  const nn::LossHessian h([&] { return t.loss(); }, nn::parameters_under(*t.model));
  t.model->train();
  size_t b = 0;
  for (const watch::Site& s : t.sites)
    for (int64_t head = 0; head < 2; head++, b++) {
      INFO(s.module << " layer " << s.layer << " head " << head);
      const nn::ParameterSet block = nn::head_parameters(*s.attention, head);
      const int64_t n = nn::numel(block);
      const std::vector<double> dense = h.dense(block);
      const double top = curvature::dense_eigh(dense, n).first.back();
      double trace = 0;
      for (int64_t i = 0; i < n; i++) trace += dense[(size_t)(i * n + i)];
      const size_t at = (size_t)(s.layer * 2 + head);
      CHECK(snap.values.at(s.module).at("curvature_top")[at] == Approx(top).epsilon(1e-6));
      const double se = snap.values.at(s.module).at("curvature_trace_se")[at];
      CHECK(se > 0);
      CHECK(std::abs(snap.values.at(s.module).at("curvature_trace")[at] - trace) < 4 * se);
    }
  // decoder layer 2 does not exist: NaN
  CHECK(std::isnan(snap.values.at("decoder_self").at("curvature_top")[2]));
  CHECK(snap.density.n == t.model->num_parameters());
  REQUIRE(snap.density.nodes.size() == 1);
  CHECK(snap.density.nodes[0].size() == 30);

  SECTION("from the eigenvectors found before, two Lanczos steps give the same eigenvalues") {
    watch::Snapshot again = watch::measure(t.probe(), 20);
    watch::CurvatureOptions quick = o;
    quick.lanczos_steps = 2, quick.density_steps = 0;
    watch::measure_curvature(t.probe(), quick, again, starts);
    for (const std::string& m : {"encoder_self", "decoder_self", "decoder_cross"})
      for (size_t i = 0; i < 4; i++) {
        const double v = snap.values.at(m).at("curvature_top")[i];
        if (std::isnan(v)) continue;
        CHECK(again.values.at(m).at("curvature_top")[i] == Approx(v).epsilon(1e-8));
      }
    CHECK(again.density.n == 0);
  }
  SECTION("the log writes and reads them back, densities included, and draws their figures") {
    watch::Log log = watch::Log::for_sites(t.sites);
    log.add(watch::measure(t.probe(), 0));  // a snapshot without curvature: NaN
    log.add(snap);
    const std::string dir = scratch("curvature");
    log.write_h5(dir + "/watch.h5");
    const watch::Log back = watch::Log::read_h5(dir + "/watch.h5");
    REQUIRE(back.snapshots.size() == 2);
    CHECK(std::isnan(back.snapshots[0].values.at("encoder_self").at("curvature_top")[0]));
    CHECK(back.snapshots[1].values.at("encoder_self").at("curvature_top") ==
          snap.values.at("encoder_self").at("curvature_top"));
    CHECK(back.snapshots[0].density.n == 0);
    CHECK(back.snapshots[1].density.n == snap.density.n);
    CHECK(back.snapshots[1].density.nodes == snap.density.nodes);
    CHECK(back.snapshots[1].density.weights == snap.density.weights);
    CHECK(h5::read(dir + "/watch.h5", "/density/nodes").shape() == Shape{1, 30});
    const auto files = back.draw(dir);
    REQUIRE(files.size() == 10);
    CHECK(files[7] == dir + "/watch_curvature.png");
    CHECK(files[9] == dir + "/watch_density.png");
    for (const std::string& f : files) CHECK(bytes_of(f).size() > 1000);
    // a density that is not one is refused when read, naming the file and the step
    for (const auto& [nodes, weights] : std::vector<std::pair<std::vector<double>, std::vector<double>>>{
             {{1, 2}, {0.5, 0.6}}, {{1, 2}, {NAN, 0.5}}, {{1, INFINITY}, {0.5, 0.5}}, {{1, 2}, {1.5, -0.5}}}) {
      watch::Log bad = log;
      bad.snapshots[1].density.nodes = {nodes};
      bad.snapshots[1].density.weights = {weights};
      bad.write_h5(dir + "/bad.h5");
      CHECK_THAT(error_of([&] { watch::Log::read_h5(dir + "/bad.h5"); }),
                 Catch::Contains("watch::Log::read_h5: '" + dir + "/bad.h5': the density of step 10 has"));
    }
    fs::remove_all(dir);
  }
  SECTION("the recorder's curvature interval must be a multiple of its own") {
    CHECK_THAT(error_of([&] { watch::Recorder r(t.probe(), scratch("interval"), 5, "test", {}, {.every = 7}); }),
               Catch::Contains("watch::Recorder: expected a curvature interval that is a multiple of the watch's (5) or 0, got 7"));
    watch::CurvatureOptions bad = o;
    bad.trace_probes = 0;
    CHECK_THAT(error_of([&] { watch::measure_curvature(t.probe(), bad, snap, starts); }),
               Catch::Contains("watch::measure_curvature: expected lanczos_steps >= 1, first_lanczos_steps >= 1, trace_probes >= 1"));
  }
}

TEST_CASE("a Transformer probe measures curvature on the batch's first rows") {
  Tiny t;
  t.model->eval();
  const watch::Probe p = watch::transformer_probe(*t.model, t.src, t.tgt_in, t.tgt_out, 0, 2);
  const Tensor first_two =
      cross_entropy(t.model->forward(t.src.narrow(0, 0, 2), t.tgt_in.narrow(0, 0, 2)).reshape({-1, 7}),
                    t.tgt_out.narrow(0, 0, 2).reshape({-1}), 0);
  CHECK(p.curvature_loss().item() == first_two.item());
  CHECK(p.loss().item() == t.loss().item());
  CHECK(watch::transformer_probe(*t.model, t.src, t.tgt_in, t.tgt_out, 0, 100).curvature_loss().item() ==
        t.loss().item());  // more rows than the batch: all of them
  CHECK_THAT(error_of([&] { watch::transformer_probe(*t.model, t.src, t.tgt_in, t.tgt_out, 0, 0); }),
             Catch::Contains("watch::transformer_probe: expected curvature_rows >= 1, got 0"));
}
