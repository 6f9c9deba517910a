// Run under mpirun with any number of ranks: every collective against hand-computed
// results, for every dtype, odd sizes and empty tensors, and its errors. Exits non-zero
// on the first rank that sees a wrong result, naming it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops.h"
#include "dist/dist.h"

using namespace ember;

namespace {
int failures = 0;
void expect(bool ok, const std::string& what) {
  if (ok) return;
  failures++;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", dist::rank(), what.c_str());
}
// rank r's tensor: element i = (r + 1) * (i + 1) (+ 0.25 for floats), of n elements
Tensor rank_tensor(int r, int64_t n, DType dt) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; i++) v.push_back((r + 1) * (i + 1) + (is_floating(dt) ? 0.25 : 0.0));
  return from_vector(v, {n}, dt);
}
}  // namespace

int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  const int r = dist::rank(), n = dist::world_size();
  const double tri = n * (n + 1) / 2.0;  // sum of (r + 1)
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    for (int64_t size : {0, 1, 7, 1001}) {
      const std::string tag = std::string(dtype_name(dt)) + " of " + std::to_string(size);
      Tensor t = rank_tensor(r, size, dt);
      dist::allreduce(t);
      auto v = t.to_vector<double>();
      bool ok = (int64_t)v.size() == size;
      for (int64_t i = 0; ok && i < size; i++)
        ok = v[i] == tri * (i + 1) + (is_floating(dt) ? 0.25 * n : 0.0);
      expect(ok, "allreduce sum, " + tag);
      if (is_floating(dt)) {
        Tensor m = rank_tensor(r, size, dt);
        dist::allreduce(m, dist::ReduceOp::Mean);
        auto mv = m.to_vector<double>();
        bool mok = true;
        for (int64_t i = 0; i < size; i++)
          mok = mok && std::fabs(mv[i] - (tri * (i + 1) + 0.25 * n) / n) <= 1e-6 * std::fabs(mv[i]);
        expect(mok, "allreduce mean, " + tag);
        // bitwise the same on every rank
        Tensor all = dist::allgather(m);
        bool same = true;
        for (int k = 1; k < n; k++) same = same && equal(all.select(0, k), all.select(0, 0));
        expect(same, "allreduce mean bitwise equal on every rank, " + tag);
      }
      Tensor b = rank_tensor(r, size, dt);
      dist::broadcast(b, n - 1);
      expect(equal(b, rank_tensor(n - 1, size, dt)), "broadcast from the last rank, " + tag);
      Tensor g = dist::allgather(rank_tensor(r, size, dt));
      bool gok = g.shape() == Shape{n, size};
      for (int k = 0; gok && k < n; k++) gok = equal(g.select(0, k), rank_tensor(k, size, dt));
      expect(gok, "allgather, " + tag);
    }
  }
  // errors name the function and say what was expected
  auto error_of = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  Tensor strided = zeros({4, 4}).t();
  expect(error_of([&] { dist::allreduce(strided); }).rfind("dist::allreduce: expected a contiguous tensor", 0) == 0,
         "allreduce of a transposed tensor is refused");
  Tensor flags = zeros({3}, kBool);
  expect(error_of([&] { dist::allreduce(flags); }).rfind("dist::allreduce: expected a float32, float64 or int64", 0) == 0,
         "allreduce of bools is refused");
  Tensor ints = zeros({3}, kInt64);
  expect(error_of([&] { dist::allreduce(ints, dist::ReduceOp::Mean); }).find("a mean needs a float32 or float64") !=
             std::string::npos,
         "a mean of ints is refused");
  expect(error_of([&] { dist::broadcast(ints, n); }).find("is not a rank of a world of") != std::string::npos,
         "broadcast from a rank that does not exist is refused");
  dist::barrier();
  if (r == 0 && failures == 0) std::printf("collectives: all checks passed on %d ranks\n", n);
  dist::finalize();
  return failures == 0 ? 0 : 1;
}
