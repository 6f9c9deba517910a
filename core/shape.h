// Shape: a tensor's sizes, outermost first (row-major), and the helpers every layer uses
// on them: printing ("[2,3,4]"), element counts, contiguous strides (in elements),
// negative dims, NumPy broadcasting. Errors name the op that asked.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace ember {

// A tensor's sizes, outermost first; {} is the shape of a 0-dim (scalar) tensor.
using Shape = std::vector<int64_t>;

// The largest tensor, in elements and in bytes: far beyond any memory, and small enough
// that sizes, byte counts and their roundings never overflow 64 bits.
constexpr int64_t kMaxElements = int64_t(1) << 56;

// "[2,3,4]"
std::string shape_str(const Shape& s);
std::ostream& operator<<(std::ostream& os, const Shape& s);  // as shape_str

// The product of the sizes (1 for {}), unchecked; see checked_numel for a new tensor.
int64_t numel_of(const Shape& shape);
// The number of elements of a new tensor of this shape; throws naming op when a size is
// negative or the product would pass 2^56 (no multiplication overflows).
int64_t checked_numel(const Shape& shape, const char* op);
// Row-major strides in elements; a size of 0 counts as 1, so no stride is 0.
Shape contiguous_strides(const Shape& shape);
// dim in [-ndim, ndim) made non-negative; throws naming op when it is out of range. A 0-dim
// tensor accepts -1 and 0, as PyTorch does.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// wrap_dim for an op that reads the dim's size or stride, which a 0-dim tensor has none of.
int64_t wrap_indexed_dim(int64_t dim, int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; throws naming op when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace ember
