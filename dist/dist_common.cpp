// What dist.h builds on its collectives, the same with MPI or without.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/ops.h"
#include "core/parallel.h"
#include "dist/dist.h"

namespace ember::dist {

int threads_per_process() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : world_size();
  return std::max(1, num_threads() / ranks_here);
}

bool any(bool flag) {
  Tensor t = from_vector(std::vector<int64_t>{flag ? 1 : 0}, {1});
  allreduce(t);
  return t.item() > 0;
}

void broadcast(Generator& gen, int root) {
  const std::vector<uint64_t> state = gen.get_state();
  Tensor t = from_vector(std::vector<int64_t>(state.begin(), state.end()), {(int64_t)state.size()});
  broadcast(t, root);
  const std::vector<int64_t> got = t.to_vector<int64_t>();
  gen.set_state(std::vector<uint64_t>(got.begin(), got.end()));
}

Shard shard(int64_t rows, int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    fail("dist::shard", "rank ", rank, " is not a rank of a world of ", world_size);
  if (rows < 0) fail("dist::shard", "expected a batch of 0 or more rows, got ", rows);
  const int64_t base = rows / world_size, extra = rows % world_size;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

uint64_t checksum(const std::vector<Tensor>& tensors) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto eat = [&](const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  };
  for (const Tensor& t0 : tensors) {
    Tensor t = t0.contiguous();
    const int64_t numel = t.numel();
    eat(reinterpret_cast<const unsigned char*>(&numel), sizeof numel);
    if (numel > 0) eat(static_cast<const unsigned char*>(t.raw_data()), (size_t)numel * dtype_size(t.dtype()));
  }
  return h;
}

void check_same_on_all_ranks(const std::vector<Tensor>& tensors, const std::string& what) {
  check_same_on_all_ranks({Part{what, tensors}});
}

void check_same_on_all_ranks(const std::vector<Part>& parts, const std::string& context) {
  std::vector<int64_t> mine;
  for (const Part& p : parts) mine.push_back((int64_t)checksum(p.tensors));
  const int64_t n = (int64_t)parts.size();
  if (n == 0) return;
  const std::vector<int64_t> all = allgather(from_vector(mine, {n})).to_vector<int64_t>();  // [world, parts]
  // the parts that differ on the same ranks are named together
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // ranks, parts
  for (int64_t i = 0; i < n; i++) {
    std::string ranks;
    for (size_t r = 1; r < all.size() / (size_t)n; r++)
      if (all[r * (size_t)n + (size_t)i] != all[(size_t)i]) ranks += cat_str(ranks.empty() ? "" : ", ", r);
    if (ranks.empty()) continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == ranks; });
    if (g == groups.end()) groups.push_back({ranks, {}}), g = groups.end() - 1;
    g->second.push_back(parts[(size_t)i].name);
  }
  if (groups.empty()) return;
  std::string message;
  for (size_t k = 0; k < groups.size(); k++) {
    const auto& names = groups[k].second;
    std::string list;
    for (size_t j = 0; j < names.size(); j++)
      list += (j == 0 ? "" : j + 1 == names.size() ? " and " : ", ") + names[j];
    message += cat_str(k == 0 ? "" : k + 1 == groups.size() ? " and " : ", ", "the ", list, " of rank(s) ", groups[k].first);
  }
  fail("dist::check_same_on_all_ranks", message, " differ from rank 0's", context.empty() ? "" : " ", context);
}

}  // namespace ember::dist
