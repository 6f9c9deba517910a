// Index kernels: the lookups behind index_select (embeddings) and gather, and the
// additions of their backward.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::kernel {

// out[.., i, ..] = x[.., index[i], ..] along dim; x contiguous, index int64 1-D.
void index_select(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
// gx[.., index[i], ..] += g[.., i, ..]; gx zero-filled contiguous.
void index_add(const Tensor& gx, int64_t dim, const Tensor& index, const Tensor& g);
// out[i][j][k] = x[i][index[i][j][k]][k] (dim = 1); all contiguous.
void gather(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
// gx[i][index[i][j][k]][k] += g[i][j][k]
void scatter_add(const Tensor& gx, int64_t dim, const Tensor& index, const Tensor& g);

}  // namespace ember::kernel
