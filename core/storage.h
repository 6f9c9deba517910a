// A flat, 64-byte aligned buffer shared by a tensor and all of its views. The counters
// let tests and benchmarks see that dropped graphs give their memory back, and that
// training reuses memory instead of asking the system for more (storage.cpp says how).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ember {

// Where storages get their memory (storage.cpp says why it matters):
// - Keep, the default: blocks below 32 MiB from malloc's heap, which ember asks (mallopt,
//   once, at the first allocation) to serve blocks up to 32 MiB itself and to keep what is
//   freed; larger blocks kept in a size-class cache. A training step then reuses the last
//   step's memory instead of faulting in fresh pages. This changes malloc's settings for
//   the whole process.
// - System: plain malloc and free, nothing cached, malloc's settings left alone (or put
//   back to glibc's defaults, if Keep had changed them). For a host program that tunes
//   malloc itself.
// Chosen with Storage::set_policy, or before the first allocation with the environment
// variable EMBER_ALLOCATOR=keep|system.
enum class AllocatorPolicy { Keep, System };

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  // Bumped by every in-place write, so that a backward can detect that a tensor it saved
  // was modified after the forward.
  uint64_t version = 0;

  // zero_fill false leaves the contents undefined (for outputs a kernel overwrites whole).
  explicit Storage(size_t nbytes, bool zero_fill = true);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  static int64_t live_count();   // storages alive now
  static int64_t live_bytes();   // bytes they hold
  static int64_t total_allocations();  // storages ever created
  static int64_t system_allocations(); // large blocks (32 MiB or more) asked of the system
  // Bytes of memory malloc holds from the system (its heaps and separately mapped
  // blocks, in use or free, including the cache below); -1 where unknown (not glibc).
  static int64_t system_bytes();
  static int64_t cached_bytes();       // freed large blocks kept for reuse
  static void empty_cache();           // returns them to the system
  static void set_policy(AllocatorPolicy policy);
  static AllocatorPolicy policy();
};

}  // namespace ember
