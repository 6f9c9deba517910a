// Thread count control, shared by our OpenMP loops and OpenBLAS.
#include "core/parallel.h"

#include <omp.h>

extern "C" void openblas_set_num_threads(int);

namespace ember {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

bool in_parallel_region() { return omp_in_parallel(); }

}  // namespace ember
