// bench_mha: nn::MultiHeadAttention (self-attention, batch first, dropout 0, float32)
// timed as ../shared/bench/torch_mha_bench.py times PyTorch's nn.MultiheadAttention, at
// the same shapes [B, L, E, H] and in the same three modes:
//   fwd_nograd  eval mode, no autograd recording, no weights returned
//   fwd_grad    train mode, autograd recording, no backward
//   fwd_bwd     fwd_grad + sum(out).backward() (the input requires grad too)
// The median of at least --runs runs (more for fast cases, so that ~0.5 s is sampled)
// after --warmup untimed ones. FLOPs as in the PyTorch script: forward
// 8 B L E^2 + 4 B L^2 E, forward+backward three times that.
//
//   bench_mha [--runs N] [--warmup N] [--threads N] [--json FILE] [--shape B,L,E,H]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "nn/multihead_attention.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

// printf into a string
template <class... A>
std::string format(const char* f, A... a) {
  std::string s((size_t)std::snprintf(nullptr, 0, f, a...), '\0');
  std::snprintf(s.data(), s.size() + 1, f, a...);
  return s;
}

std::vector<double> time_runs(const std::function<void()>& f, const std::function<void()>& reset, int runs, int warmup) {
  for (int i = 0; i < warmup; i++) {
    if (reset) reset();
    f();
  }
  std::vector<double> ms;
  double total = 0;
  while ((int)ms.size() < runs || total < 0.5) {
    if (reset) reset();
    auto t0 = Clock::now();
    f();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    ms.push_back(s * 1e3);
    total += s;
  }
  return ms;
}

struct Shape4 {
  int64_t B, L, E, H;
};

int bench(int runs, int warmup, const std::string& json, const std::vector<Shape4>& shapes) {
  std::printf("# ember nn::MultiHeadAttention, %d threads; times in ms; GFLOP/s from the median\n", num_threads());
  std::printf("%3s %4s %4s %2s %-11s %9s %9s %5s %8s\n", "B", "L", "E", "H", "mode", "median", "min", "n", "GFLOP/s");
  std::string js = format("{\"threads\": %d, \"results\": [\n", num_threads());
  bool first_row = true;
  for (auto [B, L, E, H] : shapes) {
    Generator gen(1);
    nn::MultiHeadAttention mha({.embed_dim = E, .num_heads = H, .gen = &gen});
    Tensor x = randn({B, L, E}, kFloat32, &gen);
    Tensor xg = x.detach().requires_grad_();
    const double f1 = 8.0 * B * L * E * E + 4.0 * B * L * L * E;
    auto reset = [&] {
      xg.zero_grad();
      mha.zero_grad();
    };
    struct Mode {
      const char* name;
      std::function<void()> f;
      bool train, reset;
      double flops;
    };
    std::vector<Mode> modes = {
        {"fwd_nograd", [&] { NoGradGuard ng; Tensor y = mha.forward(x, x, x).output; }, false, false, f1},
        {"fwd_grad", [&] { Tensor y = mha.forward(xg, xg, xg).output; }, true, false, f1},
        {"fwd_bwd", [&] { sum(mha.forward(xg, xg, xg).output).backward(); }, true, true, 3 * f1},
    };
    for (auto& m : modes) {
      mha.train(m.train);
      auto ms = time_runs(m.f, m.reset ? std::function<void()>(reset) : nullptr, runs, warmup);
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      std::printf("%3lld %4lld %4lld %2lld %-11s %9.3f %9.3f %5zu %8.1f\n", (long long)B, (long long)L, (long long)E,
                  (long long)H, m.name, med, ms.front(), ms.size(), m.flops / (med * 1e-3) / 1e9);
      js += format("%s  {\"batch\": %lld, \"seq\": %lld, \"embed\": %lld, \"heads\": %lld, \"mode\": \"%s\", "
                     "\"median_ms\": %.4f, \"min_ms\": %.4f, \"n\": %zu, \"gflops\": %.2f}",
                     first_row ? "" : ",\n", (long long)B, (long long)L, (long long)E, (long long)H, m.name, med,
                     ms.front(), ms.size(), m.flops / (med * 1e-3) / 1e9);
      first_row = false;
      std::fflush(stdout);
    }
  }
  js += "\n]}\n";
  if (!json.empty()) io::replace_file(json, js.data(), js.size(), "bench_mha");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("bench_mha", [&] {
    CLI::App app{"Times nn::MultiHeadAttention as ../shared/bench/torch_mha_bench.py times PyTorch's.", "bench_mha"};
    int runs = 20, warmup = 5, threads = num_threads();
    std::string json, shape;
    cli::integer(app, "--runs", runs, 1, 1000000, "timed runs at least (more for fast cases)");
    cli::integer(app, "--warmup", warmup, 0, 1000000, "untimed runs first");
    cli::integer(app, "--threads", threads, 1, cli::kMaxThreads, "threads (default: OMP_NUM_THREADS or the cores)");
    cli::text(app, "--json", json, "also write the results to this file as JSON");
    cli::text(app, "--shape", shape, "only this shape, B,L,E,H (E a multiple of H), as 2,5,512,8");
    cli::parse(app, argc, argv);
    std::vector<Shape4> shapes = {{2, 5, 512, 8}, {32, 64, 512, 8}, {32, 128, 256, 4}, {8, 256, 512, 8}};
    if (!shape.empty()) {
      std::vector<int64_t> v;
      size_t at = 0;
      for (int i = 0; i < 4; i++) {
        const size_t comma = i < 3 ? shape.find(',', at) : shape.size();
        if (comma == std::string::npos) throw cli::UsageError{"--shape: expected B,L,E,H, got '" + shape + "'"};
        v.push_back(cli::parse_int("--shape", shape.substr(at, comma - at), 1, cli::kMaxSize));
        at = comma + 1;
      }
      if (v[2] % v[3] != 0)
        throw cli::UsageError{"--shape: E = " + std::to_string(v[2]) + " is not a multiple of H = " + std::to_string(v[3])};
      shapes = {{v[0], v[1], v[2], v[3]}};
    }
    if (!json.empty()) cli::check_output_file("bench_mha", json, "the JSON results (--json)");
    set_num_threads(threads);
    return bench(runs, warmup, json, shapes);
  });
}
