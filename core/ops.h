// Differentiable ops. Each is one function: compute with a kernel, then, only when some
// input requires grad, record a backward that captures what it needs.
//
// | op                     | saves                  | gradient per input                                   |
// |------------------------|------------------------|------------------------------------------------------|
// | add(a, b)              | -                      | da = g, db = g (summed to each shape by the engine)  |
// | sub(a, b)              | -                      | da = g, db = -g                                      |
// | rsub(s, a)  (s - a)    | -                      | da = -g                                              |
// | mul(a, b)              | a, b                   | da = g*b, db = g*a                                   |
// | div(a, b)              | a, b                   | da = g/b, db = -g*a/b^2                              |
// | rdiv(s, a)  (s / a)    | a                      | da = -g*s/a^2                                        |
// | maximum(a, b)          | a, b                   | g to the larger (half each where equal)              |
// | minimum(a, b)          | a, b                   | g to the smaller (half each where equal)             |
// | pow(a, p)  (p scalar)  | a                      | da = g*p*a^(p-1)                                     |
// | pow(a, b)              | a, b, out              | da = g*b*a^(b-1), db = g*out*log(a)                  |
// | neg(a)                 | -                      | da = -g                                              |
// | exp(a)                 | out                    | da = g*out                                           |
// | log(a)                 | a                      | da = g/a                                             |
// | sqrt(a)                | out                    | da = g/(2*out)                                       |
// | square(a)              | a                      | da = 2*g*a                                           |
// | rsqrt(a)               | out                    | da = -g*out^3/2                                      |
// | abs(a)                 | a                      | da = g*sign(a)                                       |
// | tanh(a)                | out                    | da = g*(1-out^2)                                     |
// | sin(a)                 | a                      | da = g*cos(a)                                        |
// | cos(a)                 | a                      | da = -g*sin(a)                                       |
// | sigmoid(a)             | out                    | da = g*out*(1-out)                                   |
// | relu(a)                | out                    | da = g*(out>0)                                       |
// | gelu(a)  (erf form)    | a                      | da = g*(Phi(a) + a*phi(a))                           |
// | gelu(a, tanh approx)   | a                      | derivative of the tanh approximation                 |
// | sum(a, dims)           | -                      | da = g broadcast back over dims                      |
// | mean(a, dims)          | -                      | da = g/n broadcast back                              |
// | amax / amin(a, dims)   | a, out                 | da = g split evenly among the tied extreme elements  |
// | max(a, dim) -> (v, i)  | indices                | da = g scattered to the indices                      |
// | max(a)  (all elements) | (amax)                 |                                                      |
// | argmax / argmin        | no gradient            | (int64 indices)                                      |
// | eq ne lt le gt ge      | no gradient            | (bool results)                                       |
// | logical_and _or _not   | no gradient            | (bool results)                                       |
// | isclose                | no gradient            | (bool results; allclose: all of them)                |
// | var(a, dims)           | composed of primitives | (mean, sub, mul, sum)                                |
// | norm(a, p, dims)       | a, out                 | da = g*sign(a)*abs(a)^(p-1)/out^(p-1), 0 at out = 0  |
// | norm p = 1, inf        | (sum/amax of abs)      |                                                      |
// | logsumexp(a, dims)     | (exp, sum, log)        | da = g*softmax(a) over dims                          |
// | cumsum(a, dim)         | -                      | da = running sum of g from the other end             |
// | matmul(a, b)           | a, b                   | `da = g@b^T`, `db = a^T@g` (batch dims summed)       |
// | linear(x, w, bias)     | x, w                   | `dx = g@w`, `dw = g^T@x` (all rows), dbias = sum(g)  |
// | outer(a, b)            | (mul of unsqueezed)    | `da = g@b`, `db = g^T@a`                             |
// | diagonal(a, k, d1, d2) | sizes (a view)         | da = diag_embed(g, k, d1, d2)                        |
// | diag_embed(a, k, ...)  | -                      | da = diagonal(g, k, ...)                             |
// | diag / trace           | (diagonal, diag_embed, sum)                                                   |
// | tril / triu(a, k)      | (masked_fill)          | da = g in the kept triangle, 0 elsewhere             |
// | softmax(a, dim)        | out                    | da = out*(g - sum(g*out, dim))                       |
// | log_softmax(a, dim)    | out                    | da = g - exp(out)*sum(g, dim)                        |
// | softmax_backward(g, y) | g, y                   | dg = the same map of h, dy (ops/softmax_dropout.cpp) |
// | masked_fill(a, m, v)   | m                      | da = g where !m, 0 where m                           |
// | where(c, a, b)         | c                      | da = g where c, db = g where !c                      |
// | cat(ts, dim)           | sizes                  | each input gets its slice of g                       |
// | stack(ts, dim)         | (cat of unsqueezed)    |                                                      |
// | index_select(a, d, i)  | i                      | da = index_add of g at i (scatter-add)               |
// | gather(a, d, i)        | i                      | da = scatter_add of g at i                           |
// | split / chunk          | (narrow views)         |                                                      |
// | embedding_lookup(w, i) | (index_select)         | dw = index_add of g at i                             |
// | dropout(a, p)          | seed, row keys         | da = g*keep/(1-p), keep drawn again from the keys    |
// | dropout_keyed(r, ...)  | seed, row keys         | as dropout (relu: as relu_dropout)                   |
// | relu_dropout(a, p)     | out                    | da = g/(1-p) where out > 0, else 0                   |
// | views (tensor.h)       | sizes                  | the inverse view; narrow/select put g into zeros     |
//
// Forward mode (core/forward_ad.h): every op above has a forward rule, written with ops
// next to its backward (dropout's tangent goes through the same mask). The fused ops of
// nn/, not listed here, have none yet: a tangent reaching one is an Error naming it.
//
// Binary ops broadcast as NumPy and PyTorch do and require both operands to have the same
// dtype. Scalars keep the tensor's dtype. Every op takes an optional source location,
// filled in by the compiler, that anomaly mode reports.
#pragma once
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/random.h"
#include "core/tensor.h"

namespace ember {

// A list of dims, as a tuple of dims in PyTorch.
using Dims = std::vector<int64_t>;

// --- elementwise, binary (broadcasting)
// a + b, a - b, a * b, a / b, a to the power b, and the larger or smaller of a and b, as
// torch.add, sub, mul, div, pow, maximum, minimum. Unlike PyTorch, there is no type
// promotion: both operands must have the same dtype (convert one with .to()). add, sub and
// mul take float32, float64 or int64 (int64 wraps on overflow); div, pow, maximum and
// minimum need a float tensor. An Error on an undefined operand, different dtypes, another
// dtype, or shapes that do not broadcast.
///@{
Tensor add(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor sub(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor mul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor div(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor pow(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor maximum(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor minimum(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
///@}
// with a scalar, which takes the tensor's dtype: with an int64 tensor it must be an
// integer (an Error, where PyTorch would return floats). rsub is s - a, rdiv s / a; div,
// rdiv and pow need a float tensor.
///@{
Tensor add(const Tensor& a, double s, Loc loc = Loc::current());
Tensor sub(const Tensor& a, double s, Loc loc = Loc::current());
Tensor rsub(double s, const Tensor& a, Loc loc = Loc::current());
Tensor mul(const Tensor& a, double s, Loc loc = Loc::current());
Tensor div(const Tensor& a, double s, Loc loc = Loc::current());
Tensor rdiv(double s, const Tensor& a, Loc loc = Loc::current());
Tensor pow(const Tensor& a, double p, Loc loc = Loc::current());
///@}

// --- elementwise, unary: -a, exp, log, square root, 1/sqrt, absolute value, tanh,
// sine, cosine, sigmoid, relu, gelu and a^2, as PyTorch's. They need a float32 or float64 tensor (neg
// also takes int64), an Error otherwise: PyTorch's abs, relu and square take integers too.
// gelu is the erf form, or the tanh approximation when tanh_approx (approximate="tanh").
///@{
Tensor neg(const Tensor& a, Loc loc = Loc::current());
Tensor exp(const Tensor& a, Loc loc = Loc::current());
Tensor log(const Tensor& a, Loc loc = Loc::current());
Tensor sqrt(const Tensor& a, Loc loc = Loc::current());
Tensor rsqrt(const Tensor& a, Loc loc = Loc::current());
Tensor abs(const Tensor& a, Loc loc = Loc::current());
Tensor tanh(const Tensor& a, Loc loc = Loc::current());
Tensor sin(const Tensor& a, Loc loc = Loc::current());
Tensor cos(const Tensor& a, Loc loc = Loc::current());
Tensor sigmoid(const Tensor& a, Loc loc = Loc::current());
Tensor relu(const Tensor& a, Loc loc = Loc::current());
Tensor gelu(const Tensor& a, bool tanh_approx = false, Loc loc = Loc::current());
Tensor square(const Tensor& a, Loc loc = Loc::current());
///@}

// --- comparisons and logic (no gradient; results are bool)
// a == b, !=, <, <=, >, >= elementwise, broadcasting, as torch.eq and the like. Two tensors
// must have the same dtype (no promotion, unlike PyTorch). A float tensor compares with a
// scalar in its own dtype, as PyTorch does; an int64 or bool one compares exactly with the
// scalar (eq(int64 0, 0.5) is false).
///@{
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);
///@}
// And, or and not of bool tensors (broadcasting); an Error for another dtype, which
// PyTorch would accept (nonzero as true).
///@{
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
///@}
// |a - b| <= atol + rtol |b| elementwise (broadcasting), as torch.isclose: equal
// infinities are close, NaN is close to NaN only with equal_nan. An Error when the dtypes
// differ, the shapes do not broadcast, or rtol or atol is negative.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Whether isclose holds for every element (true for no elements), as torch.allclose.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// Same shape, same dtype and bitwise-equal values. Unlike torch.equal, -0.0 differs from
// 0.0 and a NaN equals a NaN of the same bits; different dtypes are never equal.
bool equal(const Tensor& a, const Tensor& b);

// --- reductions (dims may be negative; an empty dims list reduces everything). A dim out
// of range or named twice is an Error.
//
// The sum over dims (all without dims), as torch.sum; a bool tensor sums as int64.
///@{
Tensor sum(const Tensor& a, Loc loc = Loc::current());
Tensor sum(const Tensor& a, const Dims& dims, bool keepdim = false, Loc loc = Loc::current());
///@}
// The mean over dims (all without dims), as torch.mean; needs a float tensor.
///@{
Tensor mean(const Tensor& a, Loc loc = Loc::current());
Tensor mean(const Tensor& a, const Dims& dims, bool keepdim = false, Loc loc = Loc::current());
///@}
// The largest (smallest) element over dims, as torch.amax (amin); the gradient is split
// evenly among tied elements.
///@{
Tensor amax(const Tensor& a, const Dims& dims = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor amin(const Tensor& a, const Dims& dims = {}, bool keepdim = false, Loc loc = Loc::current());
///@}
// Values and int64 indices of the maximum along dim (first one on ties).
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
Tensor max(const Tensor& a, Loc loc = Loc::current());  // all elements
// The int64 index of the largest (smallest) element along dim, the first on ties. Unlike
// PyTorch's, dim is required.
///@{
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
///@}
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& a, const Dims& dims, int64_t correction = 1, bool keepdim = false,
           Loc loc = Loc::current());

// The p-norm over dims (all when empty), as torch.linalg.vector_norm: p > 0 or INFINITY
// (the largest |a|); its gradient is 0 where the norm is 0, as PyTorch's.
Tensor norm(const Tensor& a, double p = 2, const Dims& dims = {}, bool keepdim = false, Loc loc = Loc::current());
// log(sum(exp(a))) over dims, computed without overflow (a row of -inf gives -inf).
Tensor logsumexp(const Tensor& a, const Dims& dims, bool keepdim = false, Loc loc = Loc::current());
// Running sums along dim, as torch.cumsum (bool counts as int64; int64 wraps).
Tensor cumsum(const Tensor& a, int64_t dim, Loc loc = Loc::current());

// --- linear algebra: torch.matmul semantics (1-D, 2-D, batched N-D with broadcast). Both
// operands must have the same float dtype; an Error when an operand is 0-dim or the inner
// sizes or batch dims do not match.
Tensor matmul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// x [..., in] @ weight[out, in]^T + bias[out] (bias may be undefined), as
// torch.nn.functional.linear: one GEMM over all leading dims with the bias added by the
// GEMM itself, and one node whose backward makes each gradient with one GEMM (bias: a
// column sum). An Error unless weight is 2-D, x's last dim is weight's in, bias is [out]
// and all have one float dtype.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Loc loc = Loc::current());

// --- matrix structure, as PyTorch's (all differentiable, to any order)
// outer(a, b)[i, j] = a[i] b[j], for 1-D a and b.
Tensor outer(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
// 1-D v: the square matrix with v on diagonal `offset`; 2-D m: a copy of that diagonal.
Tensor diag(const Tensor& a, int64_t offset = 0);
// A tensor whose diagonal (offset, dim1, dim2) of new dims holds a's last dim, zeros
// elsewhere: a [..., n] becomes [..., n + |offset|, n + |offset|] by default.
Tensor diag_embed(const Tensor& a, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);
Tensor trace(const Tensor& a, Loc loc = Loc::current());  // the sum of a 2-D tensor's diagonal
// The lower (upper) triangle of the last two dims: elements (i, j) with j - i <= k
// (j - i >= k) kept, the others 0. An Error under 2 dims.
///@{
Tensor tril(const Tensor& a, int64_t k = 0);
Tensor triu(const Tensor& a, int64_t k = 0);
///@}

// --- fused, numerically stable (max-subtracted)
// softmax and log_softmax along dim, as torch.softmax (dim is required); need a float
// tensor.
///@{
Tensor softmax(const Tensor& a, int64_t dim, Loc loc = Loc::current());
Tensor log_softmax(const Tensor& a, int64_t dim, Loc loc = Loc::current());
///@}
// The gradient through softmax (log = false) or log_softmax along dim: given the op's
// output y and the gradient g reaching it, returns the gradient of its input, with the
// fused row kernel (what their backward runs). It is differentiable in g and y itself,
// which is how softmax is differentiated twice.
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log = false, Loc loc = Loc::current());

// --- masking and selection
// Elements where mask (bool, broadcast to a's shape) is true are replaced by value
// (truncated toward zero in an int64 tensor, as fill_ and PyTorch do).
// An Error unless mask is bool and broadcasts to a's shape.
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value, Loc loc = Loc::current());
// a where cond (bool) holds, else b, broadcasting all three, as torch.where; a and b must
// have the same dtype, and a scalar b must fit a's dtype (an integer for int64, 0 or 1 for
// bool).
///@{
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc = Loc::current());
Tensor where(const Tensor& cond, const Tensor& a, double b, Loc loc = Loc::current());
///@}

// --- joining and splitting
// The tensors joined along an existing dim, as torch.cat. An Error when the list is empty,
// a tensor is undefined or 0-dim, or the dtypes (no promotion, unlike PyTorch) or the
// other sizes differ.
Tensor cat(const std::vector<Tensor>& ts, int64_t dim = 0, Loc loc = Loc::current());
// The tensors joined along a new dim, as torch.stack; an Error when the list is empty or
// the shapes or dtypes differ.
Tensor stack(const std::vector<Tensor>& ts, int64_t dim = 0, Loc loc = Loc::current());
// Views of consecutive parts along dim, as torch.split: parts of split_size (the last may
// be smaller), or of the given sizes, which must add up to the dim's size. An Error on a
// non-positive split_size or a negative size.
///@{
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim = 0);
///@}
// At most chunks views of equal size along dim (the last may be smaller), as torch.chunk;
// an Error when chunks is not positive.
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);

// --- indexing (index is int64; an index out of range is an Error, and negative indices
// are out of range)
// The slices of a at the indices (0-D or 1-D) along dim, as torch.index_select.
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index, Loc loc = Loc::current());
// out[i][j][k] = a[index[i][j][k]][j][k] for dim 0, and so on, as torch.gather; unlike
// PyTorch, index must have a's shape in every dim but dim.
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index, Loc loc = Loc::current());
// weight [V, E], ids int64 of any shape -> [..ids.shape, E]; an Error unless weight is 2-D
Tensor embedding_lookup(const Tensor& weight, const Tensor& ids, Loc loc = Loc::current());

// --- regularisation: zeroes elements with probability p and scales the rest by 1/(1-p)
// when training; identity otherwise. Draws from gen (the default generator if null); an
// element's decision depends on its coordinates, not on the tensor's size (DropoutDraws):
// the same sample gets the same mask in a longer-padded batch, or in a slice of the batch
// held by another process.
Tensor dropout(const Tensor& a, double p, bool training = true, Generator* gen = nullptr,
               Loc loc = Loc::current());
// dropout(relu(a)) in one pass, with the same mask; the backward reads only the output
// (relu(a) when not training).
Tensor relu_dropout(const Tensor& a, double p, bool training = true, Generator* gen = nullptr,
                    Loc loc = Loc::current());
// Dropout (relu first, with relu) of rows [N, C] whose keys the caller gives: row n's
// decisions are those DropoutDraws makes for key row_keys[n]. For layouts core does not
// know: nn::dropout_packed gives each packed row the key of its place in the padded grid.
Tensor dropout_keyed(const Tensor& rows, const DropoutDraws& draws, std::vector<uint64_t> row_keys, bool relu = false,
                     Loc loc = Loc::current());

// --- operators
// The tensor operand binds to TensorAt, whose constructor's default argument records
// the caller's source line, so anomaly mode can point at `a * b` in user code too.
struct TensorAt {
  const Tensor& t;  // The operand.
  Loc loc;  // Where the operator was used.
  // Binds t, with the caller's location.
  TensorAt(const Tensor& t, Loc loc = Loc::current()) : t(t), loc(loc) {}  // NOLINT: implicit on purpose
};
// The operators call add, sub (rsub), mul, div (rdiv) and neg, with their errors.
///@{
Tensor operator+(TensorAt a, const Tensor& b);
Tensor operator-(TensorAt a, const Tensor& b);
Tensor operator*(TensorAt a, const Tensor& b);
Tensor operator/(TensorAt a, const Tensor& b);
Tensor operator+(TensorAt a, double s);
Tensor operator-(TensorAt a, double s);
Tensor operator*(TensorAt a, double s);
Tensor operator/(TensorAt a, double s);
Tensor operator+(double s, TensorAt a);
Tensor operator-(double s, TensorAt a);
Tensor operator*(double s, TensorAt a);
Tensor operator/(double s, TensorAt a);
Tensor operator-(TensorAt a);
///@}

}  // namespace ember
