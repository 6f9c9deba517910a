// Run under mpirun with any number of ranks: every collective (blocking and not) against
// hand-computed results, for every dtype, odd sizes and empty tensors, and its errors; any,
// a generator's broadcast, and the check that names a rank whose tensors differ. Exits non-zero
// on the first rank that sees a wrong result, naming it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/random.h"
#include "dist/dist.h"
#include "expect.h"

using namespace ember;
using dist_test::expect;
using dist_test::failures;

namespace {
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
      // the non-blocking allreduce: the same sums, the same bits on every rank
      for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Mean}) {
        if (op == dist::ReduceOp::Mean && !is_floating(dt)) continue;
        Tensor a = rank_tensor(r, size, dt), c = rank_tensor(r, size, dt);
        auto work = dist::allreduce_async(a, op);
        auto second = dist::allreduce_async(c, op);  // two under way at once
        while (!work->test()) {
        }
        second->wait();
        auto av = a.to_vector<double>();
        bool aok = (int64_t)av.size() == size && equal(a, c);
        for (int64_t i = 0; aok && i < size; i++) {
          const double want = tri * (i + 1) + (is_floating(dt) ? 0.25 * n : 0.0);
          aok = std::fabs(av[i] - (op == dist::ReduceOp::Mean ? want / n : want)) <= 1e-6 * std::fabs(want);
        }
        expect(aok, std::string("allreduce_async ") + (op == dist::ReduceOp::Sum ? "sum, " : "mean, ") + tag);
        Tensor all = dist::allgather(a);
        bool same = true;
        for (int k = 1; k < n; k++) same = same && equal(all.select(0, k), all.select(0, 0));
        expect(same, "allreduce_async bitwise equal on every rank, " + tag);
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
  // any, a generator's state, and the check that ranks agree
  expect(dist::any(r == n - 1) && !dist::any(false), "any");
  Generator gen((uint64_t)(100 + r));
  gen.next_u64();
  if (r == 0) gen.next_u64();
  dist::broadcast(gen, 0);
  Tensor states = dist::allgather(from_vector(std::vector<int64_t>{(int64_t)gen.get_state()[0], (int64_t)gen.get_state()[1]}, {2}));
  expect(states.select(0, n - 1).to_vector<int64_t>() == std::vector<int64_t>{100, 2}, "a generator broadcast from rank 0");
  Tensor mine = from_vector(std::vector<double>{1.5, 2.5}, {2});
  expect(error_of([&] { dist::check_same_on_all_ranks({mine}, "weights"); }).empty(), "the same tensors pass the check");
  if (n > 1) {
    Tensor odd = from_vector(std::vector<double>{1.5, r == n - 1 ? 2.75 : 2.5}, {2});
    const std::string e = error_of([&] { dist::check_same_on_all_ranks({odd}, "weights"); });
    expect(e.rfind("dist::check_same_on_all_ranks: the weights of rank(s) " + std::to_string(n - 1) + " differ", 0) == 0,
           "a rank that differs is named: got '" + e + "'");
    const std::string parts = error_of([&] {
      dist::check_same_on_all_ranks({{"weights", {mine}}, {"moments", {odd}}, {"order", {odd, mine}}}, "(here)");
    });
    expect(parts.rfind("dist::check_same_on_all_ranks: the moments and order of rank(s) " + std::to_string(n - 1) +
                           " differ from rank 0's (here)",
                       0) == 0,
           "the parts that differ are named, those that agree are not: got '" + parts + "'");
  }
  dist::barrier();
  if (r == 0 && failures == 0) std::printf("collectives: all checks passed on %d ranks\n", n);
  dist::finalize();
  return failures == 0 ? 0 : 1;
}
