// The checks of the programs run under mpirun: a failed one is counted and reported with
// the rank that saw it; the program exits non-zero when any failed.
#pragma once
#include <cstdio>
#include <string>

#include "dist/dist.h"

namespace ember::dist_test {

inline int failures = 0;

inline void expect(bool ok, const std::string& what) {
  if (ok) return;
  failures++;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", dist::rank(), what.c_str());
}

}  // namespace ember::dist_test
