// Storage allocation with process-wide counters.
#include "core/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace ember {

namespace {
std::atomic<int64_t> g_live{0}, g_bytes{0}, g_total{0};
}

Storage::Storage(size_t n, bool zero_fill) : nbytes(n) {
  size_t rounded = (n + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  data = std::aligned_alloc(64, rounded);
  if (!data) throw std::bad_alloc();
  if (zero_fill) std::memset(data, 0, rounded);
  g_live++;
  g_bytes += (int64_t)n;
  g_total++;
}

Storage::~Storage() {
  std::free(data);
  g_live--;
  g_bytes -= (int64_t)nbytes;
}

int64_t Storage::live_count() { return g_live.load(); }
int64_t Storage::live_bytes() { return g_bytes.load(); }
int64_t Storage::total_allocations() { return g_total.load(); }

}  // namespace ember
