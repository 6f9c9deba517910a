// Storage allocation with process-wide counters.
//
// Training allocates much the same buffers every step. Returning them to the system and
// asking again costs a page fault per 4 KiB on first touch, which on a virtual machine
// costs more than the arithmetic of a small layer. So, under the Keep policy (the
// default; storage.h), nothing is returned:
//  - blocks below kCacheMin come from malloc's heap, tuned by the first Storage so that it
//    serves them all (glibc would mmap each block over 128 KiB and unmap it on free) and
//    keeps its free memory (no trimming): a step's tensors reuse the memory the previous
//    step freed, whatever their sizes, as the heap coalesces and splits free chunks;
//  - larger blocks (a [4096, 8192] logits tensor) are rounded up to a size class - four
//    classes per doubling, so at most a quarter is wasted - and kept, on free, in a free
//    list per class (up to kCacheCap bytes in all), for any later request of that class.
// system_bytes() tells how much memory all of it holds; a training loop checks that it
// stops growing. Under the System policy blocks come from malloc and go back to it, and
// malloc's settings are glibc's. Sanitizer builds skip the class cache so that
// use-after-free stays detectable.
#include "core/storage.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ember {

namespace {
std::atomic<int64_t> g_live{0}, g_bytes{0}, g_total{0}, g_system{0};
std::atomic<int64_t> g_peak{0};  // the most g_bytes has been since the last reset

// Counts n more live bytes, raising the peak when they pass it.
void count_bytes(size_t n) {
  const int64_t now = g_bytes.fetch_add((int64_t)n, std::memory_order_relaxed) + (int64_t)n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

#if EMBER_ASAN
constexpr bool kUseCache = false;
#else
constexpr bool kUseCache = true;
#endif
constexpr size_t kCacheMin = size_t(32) << 20;
constexpr size_t kCacheCap = size_t(1) << 30;

// 64-byte aligned blocks from plain malloc, the address malloc gave kept just before the
// aligned one. (aligned_alloc leaves the heap's free chunks split around each block;
// repeated steps then fragment it to several times their working set.)
void* aligned_block(size_t n) {
  void* raw = std::malloc(n + 64);
  if (!raw) return nullptr;
  // malloc aligns to 16, so there are at least 16 bytes before the next multiple of 64
  auto* p = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(raw) + 64) & ~uintptr_t(63));
  p[-1] = raw;
  return p;
}
void free_block(void* p) { std::free(static_cast<void**>(p)[-1]); }

struct BlockCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  size_t cached = 0;

  void* take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = free_lists.find(rounded);
    if (it == free_lists.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached -= rounded;
    return p;
  }
  bool give(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu);
    if (cached + rounded > kCacheCap) return false;
    free_lists[rounded].push_back(p);
    cached += rounded;
    return true;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [size, list] : free_lists)
      for (void* p : list) free_block(p);
    free_lists.clear();
    cached = 0;
  }
};

BlockCache& cache() {
  static BlockCache* c = new BlockCache;  // never destroyed: storages may outlive statics
  return *c;
}

// Large sizes round up to the next of 2^k * {1, 1.25, 1.5, 1.75}; small ones to 64 bytes.
size_t round_size(size_t n) {
  if (n > (SIZE_MAX >> 2)) throw std::bad_alloc();  // no rounding below overflows
  if (n >= kCacheMin) {
    size_t top = kCacheMin;
    while (top * 2 < n) top *= 2;  // top < n <= 2 top, or n == kCacheMin
    for (size_t q = 4; q <= 8; q++)
      if (top / 4 * q >= n) return top / 4 * q;
  }
  size_t r = (n + 63) / 64 * 64;
  return r == 0 ? 64 : r;
}

// The policy: -1 until decided (from EMBER_ALLOCATOR at the first allocation), then an
// AllocatorPolicy. tuned: whether malloc's settings are ember's now.
std::atomic<int> g_policy{-1};
std::mutex g_policy_mu;
bool g_tuned = false;

void apply(AllocatorPolicy p) {  // under g_policy_mu
#if defined(__GLIBC__)
  if (p == AllocatorPolicy::Keep && !g_tuned) {
    mallopt(M_MMAP_THRESHOLD, int(kCacheMin));
    mallopt(M_TRIM_THRESHOLD, int(kCacheCap));
    g_tuned = true;
  } else if (p == AllocatorPolicy::System && g_tuned) {
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);  // glibc's defaults
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
    g_tuned = false;
  }
#endif
  g_policy = int(p);
}

AllocatorPolicy current_policy() {
  int p = g_policy.load(std::memory_order_relaxed);
  if (p >= 0) return AllocatorPolicy(p);
  std::lock_guard<std::mutex> lock(g_policy_mu);
  if (g_policy.load() < 0) {
    const char* env = std::getenv("EMBER_ALLOCATOR");
    const std::string choice = env ? env : "";
    if (!choice.empty() && choice != "keep" && choice != "system")
      throw Error("Storage: the environment variable EMBER_ALLOCATOR must be 'keep' or 'system', got '" + choice + "'");
    apply(choice == "system" ? AllocatorPolicy::System : AllocatorPolicy::Keep);
  }
  return AllocatorPolicy(g_policy.load());
}

}  // namespace

Storage::Storage(size_t n, bool zero_fill) : nbytes(n) {
  const bool keep = current_policy() == AllocatorPolicy::Keep;
  size_t rounded = round_size(n);
  if (kUseCache && keep && rounded >= kCacheMin) data = cache().take(rounded);
  if (!data) {
    data = aligned_block(rounded);
    if (!data) throw std::bad_alloc();
    if (rounded >= kCacheMin) g_system++;
  }
  if (zero_fill) std::memset(data, 0, n);
  g_live++;
  count_bytes(n);
  g_total++;
}

Storage::Storage(void* external, size_t n, std::shared_ptr<void> owner)
    : data(external), nbytes(n), owner_(std::move(owner)) {
  if (!owner_) throw Error("Storage: memory ember did not allocate needs an owner to keep it alive");
  g_live++;
  count_bytes(n);
  g_total++;
}

Storage::~Storage() {
  g_live--;
  g_bytes -= (int64_t)nbytes;
  if (owner_) return;  // the owner's last reference, dropped with this storage, frees it
  size_t rounded = round_size(nbytes);
  const bool keep = g_policy.load(std::memory_order_relaxed) == int(AllocatorPolicy::Keep);
  if (!(kUseCache && keep && rounded >= kCacheMin && cache().give(data, rounded))) free_block(data);
}

int64_t Storage::live_count() { return g_live.load(); }
int64_t Storage::live_bytes() { return g_bytes.load(); }
int64_t Storage::peak_bytes() { return g_peak.load(); }
void Storage::reset_peak_bytes() { g_peak.store(g_bytes.load()); }
int64_t Storage::total_allocations() { return g_total.load(); }
int64_t Storage::system_allocations() { return g_system.load(); }
int64_t Storage::system_bytes() {
#if defined(__GLIBC__)
  struct mallinfo2 m = mallinfo2();  // the heaps, and the blocks mmapped one by one
  return (int64_t)(m.arena + m.hblkhd);
#else
  return -1;
#endif
}

int64_t Storage::cached_bytes() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return (int64_t)cache().cached;
}
void Storage::empty_cache() { cache().clear(); }

void Storage::set_policy(AllocatorPolicy policy) {
  {
    std::lock_guard<std::mutex> lock(g_policy_mu);
    apply(policy);
  }
  if (policy == AllocatorPolicy::System) empty_cache();
}

AllocatorPolicy Storage::policy() { return current_policy(); }

}  // namespace ember
