// Storage: counters and the cache of large blocks.
#include <cstdlib>

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "core/ops.h"
#include "core/storage.h"

using namespace ember;

TEST_CASE("live storage counters follow tensors being created and dropped") {
  const int64_t live = Storage::live_count(), bytes = Storage::live_bytes();
  {
    Tensor a = zeros({10, 10});
    Tensor v = a.transpose(0, 1);  // a view: no new storage
    CHECK(Storage::live_count() == live + 1);
    CHECK(Storage::live_bytes() == bytes + 400);
  }
  CHECK(Storage::live_count() == live);
  CHECK(Storage::live_bytes() == bytes);
}

TEST_CASE("peak_bytes keeps the most bytes held at once until reset_peak_bytes") {
  Storage::reset_peak_bytes();
  const int64_t bytes = Storage::live_bytes();
  CHECK(Storage::peak_bytes() == bytes);
  {
    Tensor a = zeros({1000});
    Tensor b = zeros({500});
    CHECK(Storage::peak_bytes() == bytes + 6000);
  }
  Tensor c = zeros({10});
  CHECK(Storage::peak_bytes() == bytes + 6000);
  Storage::reset_peak_bytes();
  CHECK(Storage::peak_bytes() == bytes + 40);
}

TEST_CASE("zeros and full are filled even when a reused large block held other values") {
  const Shape big{1024, 1024};  // 4 MiB: served from the block cache
  { Tensor junk = full(big, 7.0); }
  Tensor z = zeros(big);
  CHECK(sum(z).item() == 0.0);
  { Tensor junk = full(big, 7.0); }
  Tensor f = full(big, -2.0);
  CHECK(amax(f).item() == -2.0);
  CHECK(amin(f).item() == -2.0);
}

#if !EMBER_ASAN
TEST_CASE("a freed large block is reused for the next storage of the same size") {
  Storage::empty_cache();
  CHECK(Storage::cached_bytes() == 0);
  const void* first;
  {
    Tensor a = empty({16 * 1024, 1024});  // 64 MiB
    first = a.storage()->data;
  }
  CHECK(Storage::cached_bytes() >= 64 * 1024 * 1024);
  Tensor b = empty({16 * 1024, 1024});
  CHECK(b.storage()->data == first);
  CHECK(Storage::cached_bytes() == 0);
  Tensor small = empty({16});
  CHECK(Storage::cached_bytes() == 0);  // small blocks never go through the cache
  Storage::empty_cache();
}

TEST_CASE("large storages of slightly different sizes share a size class and reuse its blocks") {
  Storage::empty_cache();
  { Tensor warm = empty({300 * 32, 1024}); }  // 37.5 MiB: the 40 MiB class
  const int64_t before = Storage::system_allocations();
  for (int64_t rows : {260, 280, 300, 310, 320}) {  // 32.5 to 40 MiB, like batches of varying length
    Tensor t = empty({rows * 32, 1024});
    CHECK(t.numel() == rows * 32 * 1024);
  }
  CHECK(Storage::system_allocations() == before);  // all served by the one cached block
  { Tensor bigger = empty({330 * 32, 1024}); }     // 41.25 MiB: the next class, a new block
  CHECK(Storage::system_allocations() == before + 1);
  Storage::empty_cache();
}

#if defined(__GLIBC__)
TEST_CASE("steps that allocate the same buffers again take no more memory from the system") {
  // like training steps: a few hundred KiB to a few MiB each, of varying sizes, all freed
  // at the end of the step; the first step grows the heap, the next ones reuse it
  auto step = [](int64_t scale) {
    std::vector<Tensor> live;
    for (int64_t rows : {40, 200, 130, 800, 75, 800, 260, 30})
      live.push_back(full({rows * scale, 1024}, 1.0));  // touched, as a step's tensors are
  };
  step(4);
  const int64_t grown = Storage::system_bytes();
  CHECK(grown > 8 * 1024 * 1024);
  for (int i = 0; i < 5; i++) step(i % 2 ? 4 : 3);  // shorter and longer batches
  CHECK(Storage::system_bytes() == grown);
}
#endif
#endif

TEST_CASE("the allocator policy: Keep caches large blocks, System gives them back at once") {
  const AllocatorPolicy before = Storage::policy();
  Storage::set_policy(AllocatorPolicy::System);
  CHECK(Storage::policy() == AllocatorPolicy::System);
  { Tensor big = empty({int64_t(40) << 20}, kFloat32); }  // 160 MiB, freed
  CHECK(Storage::cached_bytes() == 0);                   // nothing kept
  Storage::set_policy(AllocatorPolicy::Keep);
  CHECK(Storage::policy() == AllocatorPolicy::Keep);
#if !EMBER_ASAN
  { Tensor big = empty({int64_t(40) << 20}, kFloat32); }
  CHECK(Storage::cached_bytes() > 0);  // kept for the next request of its size class
#endif
  Storage::set_policy(AllocatorPolicy::System);  // empties the cache
  CHECK(Storage::cached_bytes() == 0);
  Storage::set_policy(before);
}

// Run by CTest with EMBER_ALLOCATOR set (tests/CMakeLists.txt), hidden otherwise.
TEST_CASE("EMBER_ALLOCATOR chooses the policy before the first allocation", "[.env]") {
  const char* env = std::getenv("EMBER_ALLOCATOR");
  REQUIRE(env != nullptr);
  CHECK(Storage::policy() == (std::string(env) == "system" ? AllocatorPolicy::System : AllocatorPolicy::Keep));
}

TEST_CASE("a storage over memory ember did not allocate uses it in place and releases its owner") {
  auto values = std::make_shared<std::vector<double>>(std::vector<double>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<double>> seen = values;
  const int64_t live = Storage::live_count();
  {
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(values->data(), values->size() * sizeof(double), values);
    impl->shape = {2, 3};
    impl->strides = {3, 1};
    impl->dtype = kFloat64;
    values.reset();  // the storage alone keeps the vector alive now
    Tensor t(impl);
    CHECK(Storage::live_count() == live + 1);
    REQUIRE_FALSE(seen.expired());
    CHECK(t.raw_data() == seen.lock()->data());
    CHECK(sum(t).item() == 21.0);
    t.select(0, 1).fill_(0.0);  // a write through the tensor lands in the vector
    CHECK((*seen.lock())[4] == 0.0);
    (*seen.lock())[0] = 10.0;  // and a write to the vector is seen by the tensor
    CHECK(t.at({0, 0}) == 10.0);
  }
  CHECK(seen.expired());
  CHECK(Storage::live_count() == live);
}

TEST_CASE("a storage over memory ember did not allocate needs an owner") {
  double value = 0;
  CHECK_THROWS_WITH(Storage(&value, sizeof value, nullptr),
                    "Storage: memory ember did not allocate needs an owner to keep it alive");
}
