// A flat, 64-byte aligned buffer shared by a tensor and all of its views. The counters
// let tests and benchmarks see that dropped graphs give their memory back, and that
// training reuses memory instead of asking the system for more (storage.cpp says how).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

// 1 when this file is compiled under AddressSanitizer (gcc says so with
// __SANITIZE_ADDRESS__, clang with __has_feature), else 0. Storage keeps no cache then, so
// that ASan sees every use of a freed block.
#if defined(__SANITIZE_ADDRESS__)
#define EMBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_ASAN 1
#endif
#endif
#ifndef EMBER_ASAN
#define EMBER_ASAN 0
#endif

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

// The memory behind a tensor and its views, held through a shared_ptr (TensorImpl::storage).
struct Storage {
  void* data = nullptr;  // The buffer, 64-byte aligned when ember allocated it.
  size_t nbytes = 0;  // The size asked for (the block may be larger).
  // Bumped by every in-place write, so that a backward can detect that a tensor it saved
  // was modified after the forward.
  uint64_t version = 0;

  // A buffer of nbytes bytes, zeroed unless zero_fill is false (then undefined, for outputs a
  // kernel overwrites whole). Throws std::bad_alloc when the system refuses the memory.
  explicit Storage(size_t nbytes, bool zero_fill = true);
  // nbytes of memory ember did not allocate (a NumPy array's, for the Python module), used
  // in place: `owner` keeps it alive and is released when the storage dies, never freed
  // by ember. The memory need only be aligned to its elements. Counted as live like any
  // storage.
  Storage(void* data, size_t nbytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  static int64_t live_count();  // Storages alive now.
  static int64_t live_bytes();  // Bytes they hold.
  // The most bytes storages have held at once since the process began or the last
  // reset_peak_bytes() (as torch.cuda.max_memory_allocated); the reset sets it to live_bytes().
  ///@{
  static int64_t peak_bytes();
  static void reset_peak_bytes();
  ///@}
  static int64_t total_allocations();  // Storages ever created.
  static int64_t system_allocations();  // Large blocks (32 MiB or more) asked of the system.
  // Bytes of memory malloc holds from the system (its heaps and separately mapped
  // blocks, in use or free, including the cache below); -1 where unknown (not glibc).
  static int64_t system_bytes();
  static int64_t cached_bytes();  // Bytes of freed large blocks kept for reuse.
  static void empty_cache();  // Returns the cached blocks to the system.
  // Switches the allocator policy for the whole process; System also empties the cache.
  static void set_policy(AllocatorPolicy policy);
  static AllocatorPolicy policy();  // The policy in force.

 private:
  std::shared_ptr<void> owner_;  // set for memory ember did not allocate
};

}  // namespace ember
