// bench_suite: the workloads of the benchmark table that are not plain matmul or
// MultiHeadAttention at fixed shapes (bench_matmul and bench_mha do those), each timed as
// bench/torch_suite.py times the same workload in PyTorch:
//
//   bench_suite ops [--json FILE]     LayerNorm, softmax and cross-entropy forward+backward
//                                     at training shapes; MultiHeadAttention forward+backward
//                                     for L = 64 .. 1024 at B = 4, E = 256, H = 4
//   bench_suite train --data DIR [--precision fp32|bf16] [--json FILE] [--steps-only N]
//                                     one training step of the date translator (d_model 128,
//                                     4 heads, 2+2 layers, FFN 512, batch 64), with the GFLOP/s
//                                     of its matrix products, and greedy decoding throughput of
//                                     its validation sources; --precision bf16 times the step
//                                     under Autocast and nothing else; --steps-only N times N
//                                     steps and nothing else (perf record -g bench_suite train --steps-only 300)
//   bench_suite attn-mem L            one MultiHeadAttention forward+backward at [4, L, 256, 4]
//                                     in this fresh process; prints the peak resident memory
//                                     it added, in MB
//   bench_suite hvp --data DIR [--json FILE]
//                                     a Hessian-vector product with respect to every parameter,
//                                     by forward-over-reverse (func::hvp) against
//                                     reverse-over-reverse (hvp), alternating: time, and the
//                                     peak bytes of tensors each adds; through MultiHeadAttention
//                                     [4, 64, 256, 4] and the date model (eval mode, batch 64)
//   bench_suite per-sample --data DIR [--json FILE]
//                                     per-example gradients of the date model (training mode,
//                                     batch 64) by nn::per_sample_grads against the loop of 64
//                                     backward passes it replaces, alternating: time, and the
//                                     peak bytes of tensors each adds
//   bench_suite cores                 the time a cache line takes to go from one of two
//                                     threads to the other and back: how far apart the
//                                     machine has put its cores at this moment
//   bench_suite big [--precision fp32|bf16] [--steps N] [--json FILE]
//                                     one training step of a larger model (d_model 512,
//                                     8 heads, 6+6 layers, FFN 2048, dropout 0.1, batch 32 of
//                                     48-token sources and targets, vocabularies of 64, Adam):
//                                     the median of N steps after 2 untimed ones, the GFLOP/s
//                                     of its matrix products, the peak bytes of tensors and
//                                     the peak resident memory of this process
//   bench_suite sgemm [--shape date|big] [--json FILE]
//                                     raw cblas_sgemm (OpenBLAS threaded at --threads) on the
//                                     matrix products of the date model or the larger one:
//                                     the rate a training step's GFLOP/s is compared with,
//                                     measured in the same round as the step
//
// Times are medians over at least 5 runs and 0.3 s, after 3 untimed ones (big: over its N
// steps, after 2). Every command takes --threads N (default: OMP_NUM_THREADS or the cores).
#include <sys/resource.h>

#include <cblas.h>
#include <omp.h>

extern "C" void openblas_set_num_threads(int);

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/autograd_functional.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/func.h"
#include "core/kernels/gemm.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/storage.h"
#include "nn/functional.h"
#include "nn/multihead_attention.h"
#include "nn/per_sample.h"
#include "lib/watch/transformer_probe.h"
#include "lib/watch/watch.h"
#include "optim/optimizer.h"
#include "lib/text/text.h"
#include "lib/seq2seq/seq2seq.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

double median_ms(const std::function<void()>& f, int min_runs = 5, double min_seconds = 0.3) {
  for (int i = 0; i < 3; i++) f();
  std::vector<double> ms;
  double total = 0;
  while ((int)ms.size() < min_runs || total < min_seconds) {
    auto t0 = Clock::now();
    f();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    ms.push_back(s * 1e3);
    total += s;
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

long minor_faults() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;
}

struct Row {
  std::string workload, shape;
  double ms = 0, gflops = 0;
  std::vector<std::pair<std::string, double>> extras;  // a workload's own figures (tokens/s, peak MB)
};

void print_row(const Row& r) {
  std::printf("%-26s %-22s %10.3f ms", r.workload.c_str(), r.shape.c_str(), r.ms);
  if (r.gflops > 0) std::printf("  %7.1f GF/s", r.gflops);
  for (const auto& [name, value] : r.extras) std::printf("  %.1f %s", value, name.c_str());
  std::printf("\n");
  std::fflush(stdout);
}

// printf into a string
template <class... A>
std::string format(const char* f, A... a) {
  std::string s((size_t)std::snprintf(nullptr, 0, f, a...), '\0');
  std::snprintf(s.data(), s.size() + 1, f, a...);
  return s;
}

void write_json(const std::string& path, const std::vector<Row>& rows) {
  if (path.empty()) return;
  std::string js = format("{\"threads\": %d, \"results\": [\n", num_threads());
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    js += format("  {\"workload\": \"%s\", \"shape\": \"%s\", \"ms\": %.5f, \"gflops\": %.3f", r.workload.c_str(),
                 r.shape.c_str(), r.ms, r.gflops);
    for (const auto& [name, value] : r.extras) js += format(", \"%s\": %.3f", name.c_str(), value);
    js += format("}%s\n", i + 1 < rows.size() ? "," : "");
  }
  js += "]}\n";
  io::replace_file(path, js.data(), js.size(), "bench_suite");
}

std::string shape_of(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? "," : "") + std::to_string(d);
  return s + "]";
}

// MultiHeadAttention self-attention forward+backward, dropout 0, no weights returned.
// One attention shape [B, L, E] with H heads.
struct AttnShape {
  int64_t B = 4, L = 64, E = 256, H = 4;
};

struct MhaCase {
  nn::MultiHeadAttention mha;
  Tensor x, gy;
  MhaCase(const AttnShape& s, Generator& gen)
      : mha({.embed_dim = s.E, .num_heads = s.H, .gen = &gen}),
        x(randn({s.B, s.L, s.E}, kFloat32, &gen).requires_grad_()),
        gy(randn({s.B, s.L, s.E}, kFloat32, &gen)) {
    mha.train();
  }
  void step() {
    Tensor y = mha.forward(x, x, x).output;
    y.backward(gy);
    x.zero_grad();
    for (auto& p : mha.parameters()) p.zero_grad();
  }
};

double mha_fwd_bwd_flops(int64_t B, int64_t L, int64_t E) { return 3.0 * (8.0 * B * L * E * E + 4.0 * B * L * L * E); }

std::vector<Row> run_ops() {
  std::vector<Row> rows;
  Generator gen(7);
  // LayerNorm [rows, C]: the translator's activations and a wider model's
  for (auto [N, C] : {std::pair<int64_t, int64_t>{64 * 32, 128}, {8 * 256, 512}}) {
    Tensor x = randn({N, C}, kFloat32, &gen).requires_grad_();
    Tensor w = ones({C}).requires_grad_(), b = zeros({C}).requires_grad_();
    Tensor gy = randn({N, C}, kFloat32, &gen);
    Row r{"layer_norm fwd+bwd", shape_of({N, C})};
    r.ms = median_ms([&] {
      nn::layer_norm(x, w, b).backward(gy);
      x.zero_grad(), w.zero_grad(), b.zero_grad();
    });
    rows.push_back(r), print_row(r);
  }
  // softmax over the last dim of attention scores [B, H, L, S]
  for (auto s : {Shape{64, 4, 32, 32}, Shape{8, 8, 256, 256}}) {
    Tensor x = randn(s, kFloat32, &gen).requires_grad_();
    Tensor gy = randn(s, kFloat32, &gen);
    Row r{"softmax fwd+bwd", shape_of({s[0], s[1], s[2], s[3]})};
    r.ms = median_ms([&] {
      softmax(x, -1).backward(gy);
      x.zero_grad();
    });
    rows.push_back(r), print_row(r);
  }
  // cross-entropy of logits [N, V] against targets, mean over rows
  for (auto [N, V] : {std::pair<int64_t, int64_t>{64 * 11, 64}, {4096, 8192}}) {
    Tensor z = randn({N, V}, kFloat32, &gen).requires_grad_();
    Tensor t = randint(0, V, {N}, &gen);
    Row r{"cross_entropy fwd+bwd", shape_of({N, V})};
    r.ms = median_ms([&] {
      nn::cross_entropy(z, t).backward();
      z.zero_grad();
    });
    rows.push_back(r), print_row(r);
  }
  // attention scaling
  for (int64_t L : {64, 128, 256, 512, 1024}) {
    MhaCase c({.B = 4, .L = L, .E = 256, .H = 4}, gen);
    Row r{"attention L-scaling", shape_of({4, L, 256, 4})};
    r.ms = median_ms([&] { c.step(); });
    r.gflops = mha_fwd_bwd_flops(4, L, 256) / (r.ms * 1e6);
    rows.push_back(r), print_row(r);
  }
  return rows;
}

// steps_only > 0: time that many training steps and nothing else (for a profiler)
// bf16: the step under Autocast (bfloat16 products, float32 sums; rows named so)
std::vector<Row> run_train(const std::string& dir, int64_t steps_only, bool bf16) {
  using seq2seq::Example;
  using text::CharVocab;
  auto train_pairs = text::read_pairs(dir + "/train.tsv");
  const int64_t batch = 64;
  if ((int64_t)train_pairs.size() < batch)
    fail("bench_suite train", "'", dir, "/train.tsv' holds ", train_pairs.size(), " pairs; expected at least ", batch,
         " (one batch)");
  auto valid_pairs = text::read_pairs(dir + "/valid.tsv");
  std::vector<std::string> sources, targets;
  for (auto& p : train_pairs) sources.push_back(p.source), targets.push_back(p.target);
  CharVocab src_vocab = CharVocab::build(sources), tgt_vocab = CharVocab::build(targets);
  auto train_set = seq2seq::encode_pairs(train_pairs, dir + "/train.tsv", src_vocab, tgt_vocab);
  auto valid_set = seq2seq::encode_pairs(valid_pairs, dir + "/valid.tsv", src_vocab, tgt_vocab);
  const int64_t max_len = 64;
  // the model's positions: a source of max_len, a target of max_len - 1 after <s>
  auto check_lengths = [&](const std::vector<text::Pair>& pairs, const std::vector<seq2seq::Example>& set,
                           const std::string& file) {
    for (size_t i = 0; i < set.size(); i++)
      if ((int64_t)set[i].source.size() > max_len || (int64_t)set[i].target.size() + 1 > max_len)
        fail("bench_suite train", file, ":", pairs[i].line, ": a pair of ", set[i].source.size(), " and ",
             set[i].target.size(), " characters; expected at most ", max_len, " and ", max_len - 1);
  };
  check_lengths(train_pairs, train_set, dir + "/train.tsv");
  check_lengths(valid_pairs, valid_set, dir + "/valid.tsv");

  nn::TransformerConfig cfg;
  cfg.src_vocab = src_vocab.size();
  cfg.tgt_vocab = tgt_vocab.size();
  cfg.layer = {.d_model = 128, .num_heads = 4, .dim_feedforward = 512, .dropout_p = 0.1};
  cfg.num_encoder_layers = 2, cfg.num_decoder_layers = 2, cfg.max_len = max_len;
  manual_seed(1);
  Generator init_gen(1);
  nn::Transformer model(cfg, &init_gen);
  seq2seq::xavier_init(model, &init_gen);
  auto params = model.named_parameters();
  optim::Adam opt(params, {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  model.train();

  // batches of 64 consecutive pairs of the file, as bench/torch_suite.py takes them
  std::vector<seq2seq::Batch> batches;
  for (size_t first = 0; first + batch <= train_set.size() && batches.size() < 50; first += batch) {
    std::vector<const Example*> rows;
    for (int64_t k = 0; k < batch; k++) rows.push_back(&train_set[first + k]);
    batches.push_back(seq2seq::make_batch(rows));
  }
  size_t next = 0;
  int64_t tokens = 0;
  double phase[3] = {0, 0, 0};  // forward and loss, backward, optimizer: seconds
  auto since = [](Clock::time_point& t) {
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - t).count();
    t = now;
    return s;
  };
  auto step = [&] {
    const seq2seq::Batch& b = batches[next++ % batches.size()];
    auto t = Clock::now();
    Autocast autocast(bf16);
    opt.zero_grad();
    Tensor logits = model.forward(b.src, b.tgt_in);
    Tensor loss = nn::cross_entropy(logits.reshape({-1, cfg.tgt_vocab}), b.tgt_out.reshape({-1}), CharVocab::kPad);
    phase[0] += since(t);
    loss.backward();
    phase[1] += since(t);
    opt.step();
    phase[2] += since(t);
    tokens += b.target_tokens;
  };
  for (int i = 0; i < 5; i++) step();
  next = 0, tokens = 0, phase[0] = phase[1] = phase[2] = 0;
  const int steps = steps_only > 0 ? (int)steps_only : (int)batches.size();
  const long faults0 = minor_faults();
  const int64_t flops0 = kernel::matmul_flops();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; i++) step();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double flops = double(kernel::matmul_flops() - flops0) / steps;
  std::fprintf(stderr, "page faults per step: %.0f\n", double(minor_faults() - faults0) / steps);
  std::vector<Row> rows;
  Row r{bf16 ? "training step bf16 (batch 64)" : "training step (batch 64)", "date model"};
  r.ms = s * 1e3 / steps;
  // every matrix product's FLOPs, forward and backward, as run (the encoder on packed rows)
  r.gflops = flops / (r.ms * 1e6);
  std::printf("matrix products: %.2f GFLOP a step; forward and loss %.1f ms, backward %.1f ms, optimizer %.1f ms\n",
              flops * 1e-9, phase[0] * 1e3 / steps, phase[1] * 1e3 / steps, phase[2] * 1e3 / steps);
  r.extras = {{"tokens_per_s", (double)tokens / s}};
  rows.push_back(r), print_row(r);
  if (steps_only > 0 || bf16) return rows;

  std::vector<std::vector<int64_t>> valid_sources;
  for (auto& e : valid_set) valid_sources.push_back(e.source);
  Row d{"greedy decoding", std::to_string(valid_sources.size()) + " sentences"};
  d.ms = median_ms([&] { seq2seq::greedy_decode(model, valid_sources, 12); }, 3, 1.0);
  d.extras = {{"sentences_per_s", (double)valid_sources.size() / (d.ms * 1e-3)}};
  rows.push_back(d), print_row(d);
  return rows;
}

// The date model of `train` at its initial weights, and its first 64 pairs as one batch.
struct DateBatch {
  nn::TransformerConfig cfg;
  std::unique_ptr<nn::Transformer> model;
  seq2seq::Batch batch;
};
DateBatch date_batch(const std::string& dir, const char* op) {
  auto pairs = text::read_pairs(dir + "/train.tsv");
  if (pairs.size() < 64) fail(op, "'", dir, "/train.tsv' holds ", pairs.size(), " pairs; expected at least 64");
  std::vector<std::string> sources, targets;
  for (auto& pr : pairs) sources.push_back(pr.source), targets.push_back(pr.target);
  text::CharVocab src_vocab = text::CharVocab::build(sources), tgt_vocab = text::CharVocab::build(targets);
  pairs.resize(64);
  auto set = seq2seq::encode_pairs(pairs, dir + "/train.tsv", src_vocab, tgt_vocab);
  std::vector<const seq2seq::Example*> rows;
  for (auto& e : set) rows.push_back(&e);
  DateBatch d;
  d.batch = seq2seq::make_batch(rows);
  d.cfg.src_vocab = src_vocab.size();
  d.cfg.tgt_vocab = tgt_vocab.size();
  d.cfg.layer = {.d_model = 128, .num_heads = 4, .dim_feedforward = 512, .dropout_p = 0.1};
  d.cfg.num_encoder_layers = 2, d.cfg.num_decoder_layers = 2, d.cfg.max_len = 64;
  Generator init_gen(1);
  d.model = std::make_unique<nn::Transformer>(d.cfg, &init_gen);
  seq2seq::xavier_init(*d.model, &init_gen);
  return d;
}

// Two ways of computing the same thing (way(true), way(false)), timed in alternating rounds
// after one untimed run each: a row per way with its median time and the peak bytes of
// tensors it added over what was live before it (Storage::peak_bytes), in MB.
void two_ways(const std::function<void(bool)>& way, int rounds, const std::string& first_name,
              const std::string& second_name, const std::string& shape, std::vector<Row>& rows) {
  auto run = [&](bool first, double& peak_mb) {
    const int64_t live = Storage::live_bytes();
    Storage::reset_peak_bytes();
    const auto t0 = Clock::now();
    way(first);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    peak_mb = double(Storage::peak_bytes() - live) / (1 << 20);
    return ms;
  };
  double peak[2] = {0, 0}, p = 0;
  run(true, p), run(false, p);  // warm-up
  std::vector<double> ms[2];
  for (int round = 0; round < rounds; round++)
    for (int w = 0; w < 2; w++) ms[w].push_back(run(w == 0, peak[w]));
  for (int w = 0; w < 2; w++) {
    std::sort(ms[w].begin(), ms[w].end());
    Row r{w == 0 ? first_name : second_name, shape};
    r.ms = ms[w][ms[w].size() / 2];
    r.extras = {{"peak_MB", peak[w]}};
    rows.push_back(r), print_row(r);
  }
}

// A Hessian-vector product of loss(parameters) with respect to every parameter of a
// module, both ways, alternating rounds: the medians of each way's time and the peak bytes
// of tensors each added over what was live before it (Storage::peak_bytes).
void hvp_both_ways(nn::Module& module, const std::function<Tensor()>& loss, const std::string& name,
                   const std::string& shape, std::vector<Row>& rows) {
  std::vector<std::string> names;
  std::vector<Tensor> params, vs;
  Generator gen(11);
  for (auto& [n, p] : module.named_parameters()) {
    names.push_back(n);
    params.push_back(p.detach());
    vs.push_back(randn(p.shape(), p.dtype(), &gen));
  }
  TensorsFn f = [&](const std::vector<Tensor>& ps) {
    nn::StateDict replace;
    for (size_t i = 0; i < ps.size(); i++) replace[names[i]] = ps[i];
    return module.functional_call(replace, loss);
  };
  two_ways([&](bool forward) { forward ? func::hvp(f, params, vs) : hvp(f, params, vs); }, 5,
           "hvp forward-over-reverse", "hvp reverse-over-reverse", name + " " + shape, rows);
}

std::vector<Row> run_hvp(const std::string& dir) {
  std::vector<Row> rows;
  Generator gen(9);
  {
    MhaCase c({.B = 4, .L = 64, .E = 256, .H = 4}, gen);
    c.mha.eval();
    const Tensor x = c.x.detach(), u = c.gy;
    hvp_both_ways(c.mha, [&] { return sum(mul(c.mha.forward(x, x, x).output, u)); }, "MultiHeadAttention",
                  shape_of({4, 64, 256, 4}), rows);
  }
  // the date model of `train`, at its initial weights, on the first 64 pairs
  DateBatch d = date_batch(dir, "bench_suite hvp");
  nn::Transformer& model = *d.model;
  const seq2seq::Batch& b = d.batch;
  const nn::TransformerConfig& cfg = d.cfg;
  model.eval();
  hvp_both_ways(model, [&] {
    Tensor logits = model.forward(b.src, b.tgt_in);
    return nn::cross_entropy(logits.reshape({-1, cfg.tgt_vocab}), b.tgt_out.reshape({-1}), text::CharVocab::kPad);
  }, "date model", "batch 64", rows);
  return rows;
}

// Per-example gradients of the date model in training mode, both ways, alternating rounds.
std::vector<Row> run_per_sample(const std::string& dir) {
  DateBatch d = date_batch(dir, "bench_suite per-sample");
  nn::Transformer& model = *d.model;
  model.train();
  const int64_t B = d.batch.src.size(0);
  auto losses = [&] {
    manual_seed(3);  // the same dropout masks every time
    Tensor logits = model.forward(d.batch.src, d.batch.tgt_in);
    std::vector<Tensor> l;
    for (int64_t b = 0; b < B; b++)
      l.push_back(nn::cross_entropy(logits.select(0, b), d.batch.tgt_out.select(0, b), text::CharVocab::kPad));
    return stack(l, 0);
  };
  std::vector<Tensor> params = model.parameters();
  auto loop = [&] {
    const Tensor L = losses();
    std::vector<std::vector<Tensor>> per(params.size());
    for (int64_t b = 0; b < B; b++) {
      auto g = grad({L.select(0, b)}, params, {}, {.retain_graph = b + 1 < B, .allow_unused = true});
      for (size_t i = 0; i < params.size(); i++) per[i].push_back(g[i].defined() ? g[i] : zeros_like(params[i]));
    }
    std::vector<Tensor> out;
    for (auto& p : per) out.push_back(stack(p, 0));
    return out;
  };
  std::vector<Row> rows;
  two_ways([&](bool fast) { fast ? (void)nn::per_sample_grads(model, B, losses) : (void)loop(); }, 3,
           "per-sample gradients", "per-sample gradients by a loop", "date model batch 64", rows);
  return rows;
}

// The watch's curvature measurement (translate train --watch-curvature) against a
// training step of the date model (batch 64, Adam), alternating rounds; the probe batch is
// the same 64 pairs. Prints the share of training time curvature takes at a few intervals.
std::vector<Row> run_curvature(const std::string& dir) {
  DateBatch d = date_batch(dir, "bench_suite curvature");
  nn::Transformer& model = *d.model;
  model.train();
  optim::Adam adam(model.named_parameters(), {.lr = 1e-4});
  const int64_t vocab = d.cfg.tgt_vocab;
  auto step = [&] {
    adam.zero_grad();
    Tensor logits = model.forward(d.batch.src, d.batch.tgt_in);
    nn::cross_entropy(logits.reshape({-1, vocab}), d.batch.tgt_out.reshape({-1}), text::CharVocab::kPad).backward();
    adam.step();
  };
  const watch::Probe probe =
      watch::transformer_probe(model, d.batch.src, d.batch.tgt_in, d.batch.tgt_out, text::CharVocab::kPad);
  std::vector<std::vector<double>> starts;
  auto measure = [&] {
    watch::Snapshot snap;
    watch::measure_curvature(probe, watch::CurvatureOptions{.every = 1}, snap, starts);
  };
  // the first measurement has no eigenvectors to start from: it runs more Lanczos steps
  const auto t0 = Clock::now();
  measure();
  const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<Row> rows;
  two_ways([&](bool curvature) { curvature ? measure() : step(); }, 3, "watch curvature measurement",
           "training step", "date model batch 64", rows);
  const double ratio = rows[0].ms / rows[1].ms;
  std::printf("the first measurement: %.0f ms (%.0f training steps); each later one %.0f training steps\n", first_ms,
              first_ms / rows[1].ms, ratio);
  for (int every : {250, 500, 1000})
    std::printf("curvature every %d steps: %.1f%% of training time\n", every, 100 * ratio / every);
  return rows;
}

// The larger model's batch, sequence length and vocabularies (torch_suite.py big: the same).
constexpr int64_t kBigBatch = 32, kBigLength = 48, kBigVocab = 64;

// One training step of the larger model (post-norm, as the date model; no padding: token
// ids drawn from [1, 64) with a fixed seed), under Autocast when bf16: the median of steps
// timed steps after 2 untimed ones, the GFLOP/s of every matrix product run, the peak bytes
// of tensors in this process (parameters, gradients, Adam's moments, activations) and its
// peak resident memory.
std::vector<Row> run_big(bool bf16, int steps) {
  nn::TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = kBigVocab;
  cfg.layer = {.d_model = 512, .num_heads = 8, .dim_feedforward = 2048, .dropout_p = 0.1};
  cfg.num_encoder_layers = cfg.num_decoder_layers = 6, cfg.max_len = kBigLength;
  manual_seed(1);
  Generator gen(1);
  nn::Transformer model(cfg, &gen);
  seq2seq::xavier_init(model, &gen);
  int64_t params = 0;
  for (const Tensor& p : model.parameters()) params += p.numel();
  optim::Adam opt(model.named_parameters(), {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  model.train();
  const Tensor src = randint(1, kBigVocab, {kBigBatch, kBigLength}, &gen);
  const Tensor tgt_in = randint(1, kBigVocab, {kBigBatch, kBigLength}, &gen);
  const Tensor tgt_out = randint(1, kBigVocab, {kBigBatch, kBigLength}, &gen);
  auto step = [&] {
    Autocast autocast(bf16);
    opt.zero_grad();
    Tensor logits = model.forward(src, tgt_in);
    nn::cross_entropy(logits.reshape({-1, kBigVocab}), tgt_out.reshape({-1})).backward();
    opt.step();
  };
  for (int i = 0; i < 2; i++) step();
  const int64_t flops0 = kernel::matmul_flops();
  std::vector<double> ms;
  for (int i = 0; i < steps; i++) {
    const auto t0 = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double flops = double(kernel::matmul_flops() - flops0) / steps;
  std::sort(ms.begin(), ms.end());
  Row r{bf16 ? "larger model step bf16" : "larger model step fp32", "[32,48] d512 6+6 layers"};
  r.ms = ms[ms.size() / 2];
  r.gflops = flops / (r.ms * 1e6);
  const double tensors_mb = double(Storage::peak_bytes()) / (1 << 20);
  r.extras = {{"tokens_per_s", double(kBigBatch * kBigLength) / (r.ms * 1e-3)},
              {"peak_tensors_MB", tensors_mb},
              {"peak_rss_MB", peak_rss_mb()}};
  std::printf("parameters: %.1fM; matrix products: %.1f GFLOP a step; steps %.0f .. %.0f ms; peak tensors %.0f MB, "
              "peak resident memory %.0f MB\n",
              double(params) * 1e-6, flops * 1e-9, ms.front(), ms.back(), tensors_mb, peak_rss_mb());
  print_row(r);
  return {r};
}

// Raw cblas_sgemm, OpenBLAS threaded at the run's thread count (as bench_matmul's
// reference), on a model's products, row-major, C = A B:
//   date: the date model's at its decoder's 704 rows (64 targets of 11 tokens), width 128, FFN 512
//   big:  the larger model's at its 1536 rows (32 x 48 tokens), width 512, FFN 2048
// A row per product, and one for the products run one after another (their FLOPs over
// their time together): the rate report.py compares the training step of the same round with.
std::vector<Row> run_sgemm(const std::string& model) {
  struct Product {
    int64_t M, K, N;
  };
  const std::vector<Product> products = model == "big"
                                            ? std::vector<Product>{{1536, 512, 512}, {1536, 512, 2048}, {1536, 2048, 512}}
                                            : std::vector<Product>{{704, 128, 128}, {704, 128, 512}, {704, 512, 128}};
  Generator gen(5);
  std::vector<Tensor> a, b, c;
  for (const Product& p : products) {
    a.push_back(randn({p.M, p.K}, kFloat32, &gen));
    b.push_back(randn({p.K, p.N}, kFloat32, &gen));
    c.push_back(zeros({p.M, p.N}));
  }
  auto product = [&](size_t i) {
    const Product& p = products[i];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p.M, (int)p.N, (int)p.K, 1.f, a[i].data<float>(),
                (int)p.K, b[i].data<float>(), (int)p.N, 0.f, c[i].data<float>(), (int)p.N);
  };
  std::vector<Row> rows;
  double flops_all = 0;
  for (size_t i = 0; i < products.size(); i++) {
    const Product& p = products[i];
    const double flops = 2.0 * double(p.M) * double(p.K) * double(p.N);
    flops_all += flops;
    Row r{"raw sgemm", format("[%lldx%lld]x[%lldx%lld]", (long long)p.M, (long long)p.K, (long long)p.K, (long long)p.N)};
    r.ms = median_ms([&] {
      openblas_set_num_threads(num_threads());
      product(i);
    });
    r.gflops = flops / (r.ms * 1e6);
    rows.push_back(r), print_row(r);
  }
  Row all{"raw sgemm", model == "big" ? "larger model's products" : "date model's products"};
  all.ms = median_ms([&] {
    openblas_set_num_threads(num_threads());
    for (size_t i = 0; i < products.size(); i++) product(i);
  }, 5, 1.0);
  all.gflops = flops_all / (all.ms * 1e6);
  rows.push_back(all), print_row(all);
  return rows;
}

// The longest sequence attn-mem takes: its attention runs tiled, in memory linear in L.
constexpr int64_t kMaxMemLength = int64_t(1) << 16;

int attention_memory(int64_t L) {
  Generator gen(3);
  MhaCase c({.B = 4, .L = L, .E = 256, .H = 4}, gen);
  const double before = peak_rss_mb();
  c.step();
  std::printf("%.2f\n", peak_rss_mb() - before);
  return 0;
}

// A cache line passed between two threads and back, 20,000 times a batch: the median
// batch's time per round trip. On a virtual machine whose two cores share a cache this is
// well under 100 ns; when the host puts them further apart, several times that, and
// everything one thread writes and the other reads (a parallel step's data) crosses too.
int core_round_trip() {
  constexpr int64_t kTrips = 20000;
  constexpr int kBatches = 7;
  alignas(64) std::atomic<int64_t> flag{0};
  std::vector<double> ns;
  bool two = false;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    two = omp_get_num_threads() == 2;  // (the implied barrier: both threads see it)
    if (two) {
      const bool first = omp_get_thread_num() == 0;
      for (int batch = 0; batch < kBatches; batch++) {
#pragma omp barrier
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < kTrips; i++) {
          const int64_t base = (int64_t(batch) * kTrips + i) * 2;
          if (first) {
            flag.store(base + 1, std::memory_order_release);
            while (flag.load(std::memory_order_acquire) != base + 2) {
            }
          } else {
            while (flag.load(std::memory_order_acquire) != base + 1) {
            }
            flag.store(base + 2, std::memory_order_release);
          }
        }
        if (first) ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kTrips);
      }
    }
  }
  if (!two) {
    std::printf("cores: only one thread, no round trip\n");
    return 0;
  }
  std::sort(ns.begin(), ns.end());
  std::printf("cores: a cache line's round trip between two threads: %.0f ns\n", ns[ns.size() / 2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* op = "bench_suite";
  return cli::run(op, [&] {
    CLI::App app{"Times the benchmark table's layer ops, attention scaling and memory, training steps, and raw "
                 "sgemm at their products.", op};
    app.require_subcommand(1);
    app.fallthrough();  // --threads after the command, too
    int threads = num_threads();
    std::string json, data = "data/dates";
    int64_t L = 0;
    cli::integer(app, "--threads", threads, 1, cli::kMaxThreads, "threads (default: OMP_NUM_THREADS or the cores)");
    CLI::App* ops = app.add_subcommand("ops", "LayerNorm, softmax, cross-entropy; attention for L = 64 .. 1024");
    cli::text(*ops, "--json", json, "also write the results to this file as JSON");
    CLI::App* train = app.add_subcommand("train", "one training step of the date translator, and greedy decoding");
    cli::text(*train, "--data", data, "the directory holding train.tsv and valid.tsv");
    cli::text(*train, "--json", json, "also write the results to this file as JSON");
    int64_t steps_only = 0;
    std::string precision = "fp32";
    cli::choice(*train, "--precision", precision, {"fp32", "bf16"},
                "bf16: the step under Autocast (bfloat16 matrix products, float32 sums), no decoding");
    cli::integer(*train, "--steps-only", steps_only, 0, 1000000,
                 "time this many training steps and nothing else (no decoding): for a profiler");
    CLI::App* mem = app.add_subcommand("attn-mem", "the peak memory one attention forward+backward adds, in MB");
    cli::integer(*mem, "L", L, 1, kMaxMemLength, "the sequence length")->required();
    CLI::App* hvp_cmd = app.add_subcommand("hvp", "a Hessian-vector product by forward-over-reverse and by "
                                                  "reverse-over-reverse: MultiHeadAttention, the date model");
    cli::text(*hvp_cmd, "--data", data, "the directory holding train.tsv");
    cli::text(*hvp_cmd, "--json", json, "also write the results to this file as JSON");
    CLI::App* per_sample = app.add_subcommand("per-sample", "per-example gradients of the date model against a "
                                                            "loop of backward passes");
    cli::text(*per_sample, "--data", data, "the directory holding train.tsv");
    cli::text(*per_sample, "--json", json, "also write the results to this file as JSON");
    CLI::App* curvature_cmd = app.add_subcommand("curvature", "the watch's curvature measurement of the date model "
                                                               "against its training step");
    cli::text(*curvature_cmd, "--data", data, "the directory holding train.tsv");
    cli::text(*curvature_cmd, "--json", json, "also write the results to this file as JSON");
    CLI::App* cores = app.add_subcommand("cores", "a cache line's round trip between two threads, in ns");
    CLI::App* big = app.add_subcommand("big", "one training step of a larger model: d_model 512, 8 heads, 6+6 "
                                              "layers, FFN 2048, batch 32 of 48 tokens");
    cli::choice(*big, "--precision", precision, {"fp32", "bf16"},
                "bf16: the step under Autocast (bfloat16 matrix products, float32 sums)");
    int big_steps = 5;
    cli::integer(*big, "--steps", big_steps, 1, 1000, "timed steps, after 2 untimed ones (the median is reported)");
    cli::text(*big, "--json", json, "also write the results to this file as JSON");
    CLI::App* sgemm = app.add_subcommand("sgemm", "raw cblas_sgemm on the matrix products of the date model or "
                                                  "the larger one");
    std::string sgemm_model = "date";
    cli::choice(*sgemm, "--shape", sgemm_model, {"date", "big"},
                "whose products: the date model's (704 rows, width 128) or the larger model's (1536 rows, width 512)");
    cli::text(*sgemm, "--json", json, "also write the results to this file as JSON");
    cli::parse(app, argc, argv);
    set_num_threads(threads);
    if (cores->parsed()) return core_round_trip();
    if (mem->parsed()) {
      // x, its gradient, q, k, v, the output and their gradients, tiled: linear in L
      cli::check_fits_in_memory(op, 40.0 * 4 * 4 * double(L) * 256, cat_str("attention at L = ", L));
      return attention_memory(L);
    }
    if (!json.empty()) cli::check_output_file(op, json, "the JSON results (--json)");
    std::printf("threads: %d\n", num_threads());
    if (ops->parsed()) write_json(json, run_ops());
    else if (hvp_cmd->parsed()) write_json(json, run_hvp(data));
    else if (per_sample->parsed()) write_json(json, run_per_sample(data));
    else if (curvature_cmd->parsed()) write_json(json, run_curvature(data));
    else if (big->parsed()) write_json(json, run_big(precision == "bf16", big_steps));
    else if (sgemm->parsed()) write_json(json, run_sgemm(sgemm_model));
    else write_json(json, run_train(data, steps_only, precision == "bf16"));
    return 0;
  });
}
