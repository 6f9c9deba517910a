// bench_matmul: ember::matmul against raw cblas_sgemm on the same shapes in the same
// run, so the ratio shows our overhead (allocation, dispatch, autograd bookkeeping).
// Each timing is the median of several repetitions after a warm-up, ours and the
// reference alternating. Raw sgemm runs with OpenBLAS's own threading at our thread
// count; ember runs OpenBLAS on one thread per tile and threads the tiles itself. The
// "bf16" rows run ember's side under Autocast (bfloat16 products, float32 sums) against
// the same float32 sgemm: their ratio is bfloat16's speed-up.
//
//   bench_matmul [--reps N] [--threads N] [--json FILE]
#include <cblas.h>

extern "C" void openblas_set_num_threads(int);

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autocast.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "core/parallel.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

// printf into a string
template <class... A>
static std::string format(const char* f, A... a) {
  std::string s((size_t)std::snprintf(nullptr, 0, f, a...), '\0');
  std::snprintf(s.data(), s.size() + 1, f, a...);
  return s;
}

template <class F>
static double seconds(F&& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Times f and g alternately (so that drifts of a shared machine hit both alike) and
// returns the median time of each.
template <class F, class G>
static std::pair<double, double> median_pair(int reps, F&& f, G&& g) {
  f();  // warm-up
  g();
  std::vector<double> tf, tg;
  for (int i = 0; i < reps; i++) {
    tf.push_back(seconds(f));
    tg.push_back(seconds(g));
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
}

struct Case {
  const char* name;
  int64_t batch, M, K, N;
  bool trans_b;  // B given as a transposed view (a weight used as x @ W^T)
  bool grad;     // forward + backward
  bool linear = false;  // ember::linear with a bias (a Linear layer) instead of matmul
  bool bf16 = false;    // ember's side under Autocast: bfloat16 products (sgemm stays float32)
};

static int bench(int reps, const std::string& json) {
  const std::vector<Case> cases = {
      {"[4096x512]x[512x512]", 1, 4096, 512, 512, false, false},
      {"[4096x512]x[512x512]^T (Linear)", 1, 4096, 512, 512, true, false},
      {"[4096x512]x[512x2048]", 1, 4096, 512, 2048, false, false},
      {"[4096x2048]x[2048x512]", 1, 4096, 2048, 512, false, false},
      {"[256 x 64x64]x[64x64] batched", 256, 64, 64, 64, false, false},
      {"[4096x512]x[512x512] fwd+bwd", 1, 4096, 512, 512, true, true},
      {"Linear 512->512 fwd+bwd", 1, 4096, 512, 512, true, true, true},
      {"Linear 512->2048 fwd+bwd", 1, 4096, 512, 2048, true, true, true},
      {"Linear 2048->512 fwd+bwd", 1, 4096, 2048, 512, true, true, true},
      {"bf16 [4096x512]x[512x512]", 1, 4096, 512, 512, false, false, false, true},
      {"bf16 [4096x512]x[512x512]^T (Linear)", 1, 4096, 512, 512, true, false, false, true},
      {"bf16 [4096x512]x[512x2048]", 1, 4096, 512, 2048, false, false, false, true},
      {"bf16 [4096x2048]x[2048x512]", 1, 4096, 2048, 512, false, false, false, true},
      {"bf16 Linear 512->512 fwd+bwd", 1, 4096, 512, 512, true, true, true, true},
      {"bf16 Linear 512->2048 fwd+bwd", 1, 4096, 512, 2048, true, true, true, true},
      {"bf16 Linear 2048->512 fwd+bwd", 1, 4096, 2048, 512, true, true, true, true},
  };
  std::printf("threads: %d\n", num_threads());
  std::printf("%-34s %12s %12s %8s %10s %10s\n", "shape", "ember ms", "sgemm ms", "ratio", "ember GF/s",
              "sgemm GF/s");
  std::string js = format("{\"threads\": %d, \"cases\": [\n", num_threads());
  for (size_t ci = 0; ci < cases.size(); ci++) {
    const Case& c = cases[ci];
    Tensor a = randn({c.batch, c.M, c.K});
    Tensor b = c.trans_b ? randn({c.N, c.K}).t() : randn({c.K, c.N});
    if (c.batch == 1) a = a.reshape({c.M, c.K});
    std::vector<float> out((size_t)(c.batch * c.M * c.N));
    Tensor bc = b.contiguous();  // raw sgemm gets plain row-major memory
    const float* pa = a.contiguous().data<float>();
    const float* pb = bc.data<float>();
    double flops = 2.0 * c.batch * c.M * c.N * c.K * (c.grad ? 3 : 1);
    double ours, ref;
    Autocast autocast(c.bf16);
    if (!c.grad) {
      NoGradGuard ng;
      std::tie(ours, ref) = median_pair(reps, [&] { Tensor y = matmul(a, b); }, [&] {
        openblas_set_num_threads(num_threads());
        for (int64_t i = 0; i < c.batch; i++)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.M, c.N, c.K, 1.f, pa + i * c.M * c.K, c.K, pb,
                      c.N, 0.f, out.data() + i * c.M * c.N, c.N);
      });
    } else {
      Tensor w = b.t().detach().contiguous().requires_grad_();  // [N, K]: a Linear weight
      Tensor x = a.detach().requires_grad_();
      Tensor bias = zeros({c.N}).requires_grad_();
      Tensor gy = randn({c.M, c.N});
      std::vector<float> gx((size_t)(c.M * c.K)), gw((size_t)(c.N * c.K));
      const float* pw = w.data<float>();
      const float* pg = gy.data<float>();
      auto step = [&] {
        Tensor y = c.linear ? linear(x, w, bias) : matmul(x, w.t());
        y.backward(gy);
        x.zero_grad();
        w.zero_grad();
        bias.zero_grad();
      };
      std::tie(ours, ref) = median_pair(reps, step, [&] {
        openblas_set_num_threads(num_threads());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c.M, c.N, c.K, 1.f, pa, c.K, pw, c.K, 0.f, out.data(), c.N);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.M, c.K, c.N, 1.f, pg, c.N, pw, c.K, 0.f, gx.data(), c.K);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c.N, c.K, c.M, 1.f, pg, c.N, pa, c.K, 0.f, gw.data(), c.K);
      });
    }
    std::printf("%-34s %12.3f %12.3f %8.3f %10.1f %10.1f\n", c.name, ours * 1e3, ref * 1e3, ours / ref,
                flops / ours * 1e-9, flops / ref * 1e-9);
    js += format("  {\"shape\": \"%s\", \"ember_ms\": %.4f, \"sgemm_ms\": %.4f, \"ratio\": %.4f, "
                   "\"ember_gflops\": %.2f, \"sgemm_gflops\": %.2f}%s\n",
                 c.name, ours * 1e3, ref * 1e3, ours / ref, flops / ours * 1e-9, flops / ref * 1e-9,
                 ci + 1 < cases.size() ? "," : "");
  }
  js += "]}\n";
  if (!json.empty()) io::replace_file(json, js.data(), js.size(), "bench_matmul");
  return 0;
}

int main(int argc, char** argv) {
  return cli::run("bench_matmul", [&] {
    CLI::App app{"Times ember::matmul and Linear against raw cblas_sgemm on the same shapes.", "bench_matmul"};
    int reps = 15, threads = num_threads();
    std::string json;
    cli::integer(app, "--reps", reps, 1, 1000000, "timed repetitions per case (the median is reported)");
    cli::integer(app, "--threads", threads, 1, cli::kMaxThreads, "threads (default: OMP_NUM_THREADS or the cores)");
    cli::text(app, "--json", json, "also write the table to this file as JSON");
    cli::parse(app, argc, argv);
    if (!json.empty()) cli::check_output_file("bench_matmul", json, "the JSON table (--json)");
    set_num_threads(threads);
    return bench(reps, json);
  });
}
