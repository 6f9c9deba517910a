// How a global batch is split between the ranks of a data-parallel run: every row taken
// once, in consecutive parts as even as can be.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <algorithm>
#include <vector>

#include "dist/dist.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::StartsWith;

TEST_CASE("shard cuts a batch into consecutive parts as even as can be, the first ranks taking one more") {
  std::vector<int64_t> counts;
  int64_t next = 0;
  for (int r = 0; r < 3; r++) {
    dist::Shard s = dist::shard(8, r, 3);
    CHECK(s.first == next);
    next += s.count;
    counts.push_back(s.count);
  }
  CHECK(next == 8);
  CHECK(counts == std::vector<int64_t>{3, 3, 2});
  CHECK(dist::shard(2, 2, 3).count == 0);  // more ranks than rows: the last gets none
  CHECK_THAT(error_of([] { dist::shard(8, 3, 3); }), StartsWith("dist::shard: rank 3 is not a rank of a world of 3"));
}
