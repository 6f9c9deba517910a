# Type stubs of ember._C, the extension module (python/src/): what editors and type
# checkers read instead of the compiled module, which has no Python source. Its names
# reach users through ember (__init__.pyi re-exports them); python/tests/test_stubs.py
# fails when these drift from the module.

import builtins
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, overload

import numpy as _np

__version__: str

_Number = Union[int, builtins.float, builtins.bool]
_Size = Union[int, Sequence[int]]
_Dims = Union[int, Sequence[int], None]
_TensorOrNumber = Union["Tensor", builtins.float]

class dtype:
    """A tensor's element type: ember.float32, float64, int64, bool or bfloat16 (which holds
    and converts values; compute in float32)."""

    @property
    def is_floating_point(self) -> builtins.bool:
        """True for float32, float64 and bfloat16."""
    @property
    def itemsize(self) -> int:
        """The size of one element in bytes."""
    def __eq__(self, other: object) -> builtins.bool: ...
    def __hash__(self) -> int: ...

_dtype = dtype

float32: dtype
float64: dtype
int64: dtype
bool: dtype
bfloat16: dtype
float: dtype
double: dtype
long: dtype

class Generator:
    """A random number generator (ember's, not PyTorch's stream); Generator(seed)."""

    def __init__(self, seed: int = 0) -> None:
        """A generator seeded with `seed`."""
    def manual_seed(self, seed: int) -> Generator:
        """Reseeds the generator and returns it."""
    def initial_seed(self) -> int:
        """The seed it was last seeded with."""
    def get_state(self) -> List[int]:
        """The whole state, for set_state."""
    def set_state(self, state: List[int]) -> None:
        """Restores a state returned by get_state."""

class Node:
    """The op that produced a tensor (its grad_fn), as autograd records it."""

    def name(self) -> str:
        """The op's name, such as "matmul"."""

class RemovableHandle:
    """Returned by register_hook: remove() takes the hook off."""

    def remove(self) -> None:
        """Removes the hook (harmless when done twice)."""

class ForwardGradCheck:
    """Forward mode's result for one input (gradcheck with check_forward_ad)."""

    @property
    def passed(self) -> builtins.bool:
        """Whether every element agreed within the tolerances."""
    @property
    def max_abs_err(self) -> builtins.float:
        """The largest absolute difference between forward-mode and numeric derivatives."""
    @property
    def max_rel_err(self) -> builtins.float:
        """The largest relative difference between forward-mode and numeric derivatives."""
    @property
    def worst_index(self) -> Tuple[int, ...]:
        """The index of the element with the largest error."""
    @property
    def forward(self) -> builtins.float:
        """The forward-mode derivative at the worst element."""
    @property
    def numeric(self) -> builtins.float:
        """The finite-difference derivative at the worst element."""

class InputGradCheck:
    """One input's row of a GradcheckReport: its worst element and both derivatives."""

    @property
    def name(self) -> str:
        """The input's name (given to gradcheck, or its position)."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """The input's shape."""
    @property
    def passed(self) -> builtins.bool:
        """Whether every element agreed within the tolerances."""
    @property
    def max_abs_err(self) -> builtins.float:
        """The largest absolute difference between analytic and numeric derivatives."""
    @property
    def max_rel_err(self) -> builtins.float:
        """The largest relative difference between analytic and numeric derivatives."""
    @property
    def worst_index(self) -> int:
        """The flat index of the element with the largest error."""
    @property
    def analytic(self) -> builtins.float:
        """The analytic derivative at the worst element."""
    @property
    def numeric(self) -> builtins.float:
        """The finite-difference derivative at the worst element."""
    @property
    def forward(self) -> ForwardGradCheck:
        """Forward mode's result (passed, with no error, when not checked)."""

class GradcheckReport:
    """What gradcheck and gradgradcheck return: true when passed, a table when printed."""

    @property
    def passed(self) -> builtins.bool:
        """Whether every input passed."""
    @property
    def order(self) -> int:
        """1 for gradcheck, 2 for gradgradcheck."""
    @property
    def inputs(self) -> List[InputGradCheck]:
        """One row per checked input."""
    def __bool__(self) -> builtins.bool: ...

class Tensor:
    """An n-dimensional array with reverse-mode autograd, over ember's C++ tensor."""

    def __init__(self, data: Tensor) -> None:
        """A new tensor sharing data's memory (how nn.Parameter is made)."""

    # --- what it is -----------------------------------------------------------------

    @property
    def shape(self) -> Tuple[int, ...]:
        """The sizes of the dims, outermost first, as a tuple."""
    @property
    def dtype(self) -> _dtype:
        """The element type."""
    @property
    def ndim(self) -> int:
        """The number of dims."""
    def dim(self) -> int:
        """The number of dims."""
    def numel(self) -> int:
        """The number of elements."""
    @overload
    def size(self, dim: None = None) -> Tuple[int, ...]: ...
    @overload
    def size(self, dim: int) -> int:
        """The shape, or the size of one dim."""
    @overload
    def stride(self, dim: None = None) -> Tuple[int, ...]: ...
    @overload
    def stride(self, dim: int) -> int:
        """The strides in elements, or the stride of one dim."""
    def storage_offset(self) -> int:
        """Where the tensor starts in its storage, in elements."""
    def is_contiguous(self) -> builtins.bool:
        """Whether the elements are in row-major order without gaps."""
    def is_floating_point(self) -> builtins.bool:
        """Whether the dtype is float32, float64 or bfloat16."""
    def element_size(self) -> int:
        """The size of one element in bytes."""
    def data_ptr(self) -> int:
        """The address of the first element."""
    def __len__(self) -> int: ...
    def __hash__(self) -> int: ...
    def item(self) -> Union[builtins.float, int, builtins.bool]:
        """The value of a one-element tensor as a Python number."""
    def tolist(self) -> Any:
        """The values as nested Python lists (a number for a 0-d tensor)."""
    def __format__(self, format_spec: str) -> str:
        """A 0-d tensor formats as its value (f"{loss:.3f}"); others only with an empty spec."""
    def __float__(self) -> builtins.float: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...
    def __bool__(self) -> builtins.bool: ...

    # --- autograd -------------------------------------------------------------------

    @property
    def requires_grad(self) -> builtins.bool:
        """Whether ops record a graph through this tensor (settable on a leaf)."""
    @requires_grad.setter
    def requires_grad(self, requires_grad: builtins.bool) -> None: ...
    def requires_grad_(self, requires_grad: builtins.bool = True) -> Tensor:
        """Sets requires_grad in place and returns the tensor."""
    @property
    def grad(self) -> Optional[Tensor]:
        """The gradient accumulated by backward(), or None (settable)."""
    @grad.setter
    def grad(self, grad: Optional[Tensor]) -> None: ...
    @property
    def is_leaf(self) -> builtins.bool:
        """True for a tensor no recorded op produced."""
    @property
    def grad_fn(self) -> Optional[Node]:
        """The op that produced this tensor, or None for a leaf."""
    @property
    def retains_grad(self) -> builtins.bool:
        """Whether retain_grad() was called on this non-leaf tensor."""
    def backward(self, gradient: Optional[Tensor] = None, retain_graph: Optional[builtins.bool] = None,
                 create_graph: builtins.bool = False) -> None:
        """Accumulates d self / d leaf into each leaf's .grad, weighted by `gradient` (ones
        for a one-element tensor); create_graph records the backward for higher derivatives."""
    def retain_grad(self) -> None:
        """Keeps .grad for this non-leaf tensor after backward()."""
    def register_hook(self, hook: Callable[[Tensor], Optional[Tensor]]) -> RemovableHandle:
        """hook(grad) runs when this tensor's gradient is computed; a tensor it returns replaces it."""
    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> RemovableHandle:
        """hook(tensor) runs on a leaf after its .grad has been accumulated."""
    def detach(self) -> Tensor:
        """The same memory, out of the graph (requires_grad False)."""

    # --- copies and conversions -----------------------------------------------------

    def clone(self) -> Tensor:
        """A copy, with the gradient flowing back to self."""
    def contiguous(self) -> Tensor:
        """Self when contiguous, else a row-major copy."""
    @overload
    def to(self, dtype: _dtype, non_blocking: builtins.bool = False, copy: builtins.bool = False) -> Tensor:
        """The tensor converted to dtype (a tensor over the same memory when it already is,
        unless copy); as PyTorch's, also to(other) for other's dtype, and to(device) and
        to(device, dtype) with device "cpu", the only one. non_blocking has no effect."""
    @overload
    def to(self, other: Tensor, non_blocking: builtins.bool = False, copy: builtins.bool = False) -> Tensor: ...
    @overload
    def to(self, device: Any = None, dtype: Optional[_dtype] = None, non_blocking: builtins.bool = False,
           copy: builtins.bool = False) -> Tensor: ...
    def float(self) -> Tensor:
        """to(ember.float32)."""
    def double(self) -> Tensor:
        """to(ember.float64)."""
    def long(self) -> Tensor:
        """to(ember.int64)."""
    def bool(self) -> Tensor:
        """to(ember.bool)."""
    def bfloat16(self) -> Tensor:
        """to(ember.bfloat16): rounded to nearest, ties to even."""
    def fill_(self, value: builtins.float) -> Tensor:
        """Sets every element to value, in place (not recorded by autograd)."""
    def zero_(self) -> Tensor:
        """Sets every element to 0, in place."""
    def copy_(self, src: Tensor) -> Tensor:
        """Copies src (broadcast to this shape) into self, in place."""
    def __dlpack__(self, stream: Optional[int] = None) -> Any:
        """A DLPack capsule over the tensor's memory (the DLPack protocol)."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """(1, 0): the CPU, in DLPack's terms."""
    def numpy(self) -> _np.ndarray[Any, Any]:
        """A NumPy array over the same memory (refused when requires_grad: detach first, and
        for bfloat16, which NumPy lacks: convert with .float() first)."""
    def __array__(self, dtype: Any = None) -> _np.ndarray[Any, Any]: ...

    # --- views ------------------------------------------------------------------------

    def view(self, *shape: Union[int, Sequence[int]]) -> Tensor:
        """The same memory with another shape (-1 infers one size); needs compatible strides."""
    def reshape(self, *shape: Union[int, Sequence[int]]) -> Tensor:
        """view() when possible, else a copy with the new shape."""
    def expand(self, *sizes: Union[int, Sequence[int]]) -> Tensor:
        """A broadcast view: dims of size 1 repeated to sizes (-1 keeps a size)."""
    def permute(self, *dims: Union[int, Sequence[int]]) -> Tensor:
        """A view with the dims reordered."""
    def view_as(self, other: Tensor) -> Tensor:
        """view(other.shape)."""
    def reshape_as(self, other: Tensor) -> Tensor:
        """reshape(other.shape)."""
    def expand_as(self, other: Tensor) -> Tensor:
        """expand(other.shape)."""
    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """The dims start_dim..end_dim merged into one."""
    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """A view with two dims swapped."""
    def t(self) -> Tensor:
        """The transpose of a matrix (a 1-d tensor as it is)."""
    @property
    def T(self) -> Tensor:
        """All dims reversed."""
    @property
    def mT(self) -> Tensor:
        """The last two dims swapped (a batch of matrices transposed)."""
    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """A view of `length` entries of dim from start."""
    def select(self, dim: int, index: int) -> Tensor:
        """A view at one index of dim, without that dim."""
    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """A view of the diagonal of dims dim1 and dim2, as the last dim."""
    def unsqueeze(self, dim: int) -> Tensor:
        """A view with a dim of size 1 inserted at dim."""
    def squeeze(self, dim: Optional[int] = None) -> Tensor:
        """A view without the dims of size 1 (or without dim, when it has size 1)."""
    def __getitem__(self, index: Any) -> Tensor:
        """Ints, slices, None, ... and one int64 index tensor or list; a view except for the tensor index."""
    def __setitem__(self, index: Any, value: Union[Tensor, builtins.float]) -> None:
        """Writes value into the selected elements (not recorded by autograd)."""

    # --- elementwise ------------------------------------------------------------------

    def add(self, other: _TensorOrNumber) -> Tensor:
        """self + other, broadcast."""
    def sub(self, other: _TensorOrNumber) -> Tensor:
        """self - other, broadcast."""
    def mul(self, other: _TensorOrNumber) -> Tensor:
        """self * other, broadcast."""
    def div(self, other: _TensorOrNumber) -> Tensor:
        """self / other, broadcast."""
    def pow(self, other: _TensorOrNumber) -> Tensor:
        """self ** other, broadcast."""
    def maximum(self, other: Tensor) -> Tensor:
        """The larger of the two, elementwise."""
    def minimum(self, other: Tensor) -> Tensor:
        """The smaller of the two, elementwise."""
    def neg(self) -> Tensor:
        """-self."""
    def exp(self) -> Tensor:
        """e ** self."""
    def log(self) -> Tensor:
        """The natural logarithm."""
    def sqrt(self) -> Tensor:
        """The square root."""
    def rsqrt(self) -> Tensor:
        """1 / sqrt(self)."""
    def abs(self) -> Tensor:
        """|self|."""
    def tanh(self) -> Tensor:
        """The hyperbolic tangent."""
    def sin(self) -> Tensor:
        """The sine."""
    def cos(self) -> Tensor:
        """The cosine."""
    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-self))."""
    def relu(self) -> Tensor:
        """max(self, 0)."""
    def square(self) -> Tensor:
        """self * self."""
    def eq(self, other: _TensorOrNumber) -> Tensor:
        """self == other, a bool tensor."""
    def ne(self, other: _TensorOrNumber) -> Tensor:
        """self != other, a bool tensor."""
    def lt(self, other: _TensorOrNumber) -> Tensor:
        """self < other, a bool tensor."""
    def le(self, other: _TensorOrNumber) -> Tensor:
        """self <= other, a bool tensor."""
    def gt(self, other: _TensorOrNumber) -> Tensor:
        """self > other, a bool tensor."""
    def ge(self, other: _TensorOrNumber) -> Tensor:
        """self >= other, a bool tensor."""
    def logical_and(self, other: Tensor) -> Tensor:
        """Elementwise and of two bool tensors."""
    def logical_or(self, other: Tensor) -> Tensor:
        """Elementwise or of two bool tensors."""
    def logical_not(self) -> Tensor:
        """Elementwise not of a bool tensor."""
    def isclose(self, other: Tensor, rtol: builtins.float = 1e-05, atol: builtins.float = 1e-08, equal_nan: builtins.bool = False) -> Tensor:
        """|self - other| <= atol + rtol * |other|, elementwise, as a bool tensor."""
    def allclose(self, other: Tensor, rtol: builtins.float = 1e-05, atol: builtins.float = 1e-08) -> builtins.bool:
        """Whether isclose holds for every element."""
    def equal(self, other: Tensor) -> builtins.bool:
        """Whether the shapes and every value are the same."""

    # --- reductions -------------------------------------------------------------------

    def sum(self, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
        """The sum over dim (an int, a tuple, or None for every dim)."""
    def mean(self, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
        """The mean over dim (an int, a tuple, or None for every dim)."""
    def amax(self, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
        """The largest value over dim; the gradient is shared among ties."""
    def amin(self, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
        """The smallest value over dim; the gradient is shared among ties."""
    def logsumexp(self, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
        """log(sum(exp(self))) over dim, computed stably."""
    def max(self, dim: Union[int, Tensor, None] = None, keepdim: builtins.bool = False) -> Any:
        """The largest value; with an int dim, (values, indices) along it; with a tensor, maximum."""
    def min(self, dim: Union[int, Tensor, None] = None, keepdim: builtins.bool = False) -> Any:
        """The smallest value; with an int dim, (values, indices) along it; with a tensor, minimum."""
    def argmax(self, dim: Optional[int] = None, keepdim: builtins.bool = False) -> Tensor:
        """The int64 index of the largest value (flat when dim is None)."""
    def argmin(self, dim: Optional[int] = None, keepdim: builtins.bool = False) -> Tensor:
        """The int64 index of the smallest value (flat when dim is None)."""
    def var(self, dim: _Dims = None, unbiased: builtins.bool = True, keepdim: builtins.bool = False, *,
            correction: Optional[int] = None) -> Tensor:
        """The variance over dim, divided by n - 1 when unbiased (or n - correction)."""
    def std(self, dim: _Dims = None, unbiased: builtins.bool = True, keepdim: builtins.bool = False, *,
            correction: Optional[int] = None) -> Tensor:
        """The standard deviation over dim, as var's square root."""
    def norm(self, p: builtins.float = 2.0, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
        """The p-norm over dim (every element when None)."""
    def cumsum(self, dim: int) -> Tensor:
        """Running sums along dim."""

    # --- matrices, softmax, selection ---------------------------------------------------

    def matmul(self, other: Tensor) -> Tensor:
        """The matrix product, batched and broadcast as torch.matmul (also `@`)."""
    def mm(self, mat2: Tensor) -> Tensor:
        """The product of two matrices (2-D each)."""
    def bmm(self, mat2: Tensor) -> Tensor:
        """The product of two batches of matrices [B, n, m] @ [B, m, p] (3-D each, no broadcasting)."""
    def outer(self, vec2: Tensor) -> Tensor:
        """The outer product of two vectors."""
    def diag(self, diagonal: int = 0) -> Tensor:
        """A vector's diagonal matrix, or a matrix's diagonal, offset by `diagonal`."""
    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
        """Matrices whose diagonal (dims dim1, dim2) holds the last dim of self."""
    def trace(self) -> Tensor:
        """The sum of a matrix's diagonal."""
    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle of the last two dims; the rest zero."""
    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle of the last two dims; the rest zero."""
    def softmax(self, dim: int) -> Tensor:
        """exp(x) / sum(exp(x)) along dim."""
    def log_softmax(self, dim: int) -> Tensor:
        """log(softmax(x)) along dim, computed stably."""
    def masked_fill(self, mask: Tensor, value: builtins.float) -> Tensor:
        """value where the bool mask (broadcast) is True, self elsewhere."""
    def split(self, split_size_or_sections: Union[int, Sequence[int]], dim: int = 0) -> Tuple[Tensor, ...]:
        """Views of pieces of split_size along dim (the last smaller), or of the sizes given."""
    def chunk(self, chunks: int, dim: int = 0) -> Tuple[Tensor, ...]:
        """At most `chunks` views of equal size along dim (the last smaller)."""
    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The entries of dim at the int64 indices of a 1-d index."""
    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[i][j] = self[index[i][j]][j] for dim 0 (and so on): values picked along dim."""

    # --- operators ----------------------------------------------------------------------

    def __add__(self, other: _TensorOrNumber) -> Tensor: ...
    def __radd__(self, other: builtins.float) -> Tensor: ...
    def __sub__(self, other: _TensorOrNumber) -> Tensor: ...
    def __rsub__(self, other: builtins.float) -> Tensor: ...
    def __mul__(self, other: _TensorOrNumber) -> Tensor: ...
    def __rmul__(self, other: builtins.float) -> Tensor: ...
    def __truediv__(self, other: _TensorOrNumber) -> Tensor: ...
    def __rtruediv__(self, other: builtins.float) -> Tensor: ...
    def __pow__(self, other: _TensorOrNumber) -> Tensor: ...
    def __rpow__(self, other: builtins.float) -> Tensor: ...
    def __matmul__(self, other: Tensor) -> Tensor: ...
    def __neg__(self) -> Tensor: ...
    def __abs__(self) -> Tensor: ...
    def __invert__(self) -> Tensor: ...
    def __and__(self, other: Tensor) -> Tensor: ...
    def __or__(self, other: Tensor) -> Tensor: ...
    def __eq__(self, other: _TensorOrNumber) -> Tensor: ...  # type: ignore[override]
    def __ne__(self, other: _TensorOrNumber) -> Tensor: ...  # type: ignore[override]
    def __lt__(self, other: _TensorOrNumber) -> Tensor: ...
    def __le__(self, other: _TensorOrNumber) -> Tensor: ...
    def __gt__(self, other: _TensorOrNumber) -> Tensor: ...
    def __ge__(self, other: _TensorOrNumber) -> Tensor: ...
    def __iadd__(self, other: _TensorOrNumber) -> Tensor: ...
    def __isub__(self, other: _TensorOrNumber) -> Tensor: ...
    def __imul__(self, other: _TensorOrNumber) -> Tensor: ...
    def __itruediv__(self, other: _TensorOrNumber) -> Tensor: ...

# --- creation -------------------------------------------------------------------------

def tensor(data: Any, *, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """A tensor holding a copy of data (numbers, nested lists, an array, a tensor): Python
    floats give float32, ints int64 and bools bool, an array or tensor keeps its dtype,
    unless dtype says otherwise."""
def zeros(*size: _Size, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """A tensor of zeros, zeros(2, 3) or zeros((2, 3)); float32 by default."""
def ones(*size: _Size, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """A tensor of ones, ones(2, 3) or ones((2, 3)); float32 by default."""
def empty(*size: _Size, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """A tensor whose values are not set; float32 by default."""
def full(size: _Size, fill_value: _Number, *, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """A tensor of the given size filled with fill_value: int64 for an int, float32 for a
    float, unless dtype says otherwise."""
def zeros_like(input: Tensor, *, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """Zeros of input's shape and (unless given) dtype."""
def ones_like(input: Tensor, *, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """Ones of input's shape and (unless given) dtype."""
def full_like(input: Tensor, fill_value: builtins.float, *, dtype: Optional[_dtype] = None,
              requires_grad: builtins.bool = False) -> Tensor:
    """fill_value in input's shape and (unless given) dtype."""
def arange(start: _Number, end: Optional[_Number] = None, step: _Number = 1, *, dtype: Optional[_dtype] = None,
           requires_grad: builtins.bool = False) -> Tensor:
    """start, start + step, ... below end (arange(n) is 0..n-1); int64 when every argument
    is an int, float32 otherwise."""
def eye(n: int, m: Optional[int] = None, *, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """The n x m (default n x n) identity matrix."""
def randn(*size: _Size, generator: Optional[Generator] = None, dtype: Optional[_dtype] = None,
          requires_grad: builtins.bool = False) -> Tensor:
    """Standard normal values from generator (the default generator when None)."""
def rand(*size: _Size, generator: Optional[Generator] = None, dtype: Optional[_dtype] = None,
         requires_grad: builtins.bool = False) -> Tensor:
    """Uniform values in [0, 1) from generator (the default generator when None)."""
def randint(*args: Union[int, Sequence[int]], generator: Optional[Generator] = None, dtype: Optional[_dtype] = None,
            requires_grad: builtins.bool = False) -> Tensor:
    """randint(high, size) or randint(low, high, size): whole values in [low, high), int64
    unless dtype says otherwise."""
def rand_like(input: Tensor, *, generator: Optional[Generator] = None, dtype: Optional[_dtype] = None,
              requires_grad: builtins.bool = False) -> Tensor:
    """rand in input's shape and (unless given) dtype."""
def randn_like(input: Tensor, *, generator: Optional[Generator] = None, dtype: Optional[_dtype] = None,
               requires_grad: builtins.bool = False) -> Tensor:
    """randn in input's shape and (unless given) dtype."""
def empty_like(input: Tensor, *, dtype: Optional[_dtype] = None, requires_grad: builtins.bool = False) -> Tensor:
    """A tensor whose values are not set, of input's shape and (unless given) dtype."""
def from_numpy(ndarray: _np.ndarray[Any, Any]) -> Tensor:
    """A tensor over the array's memory, without a copy (float32, float64, int64, bool)."""
def from_dlpack(ext_tensor: Any) -> Tensor:
    """A tensor over the memory of anything with __dlpack__ (a PyTorch tensor, a NumPy
    array) or of a DLPack capsule, without a copy."""
def to_dlpack(tensor: Tensor) -> Any:
    """A DLPack capsule over the tensor's memory (torch.utils.dlpack.from_dlpack takes it)."""
def manual_seed(seed: int) -> Generator:
    """Seeds the default generator and returns it."""
def set_num_threads(n: int) -> None:
    """The number of threads ember's kernels use (results do not depend on it)."""
def get_num_threads() -> int:
    """The number of threads ember's kernels use."""
def get_rng_state() -> List[int]:
    """The default generator's state: [seed, draws so far]."""
def set_rng_state(new_state: List[int]) -> None:
    """Restores a state from get_rng_state: the same numbers follow."""
def initial_seed() -> int:
    """The default generator's seed."""
def memory_stats() -> Dict[str, int]:
    """The allocator's counters: live_storages, live_bytes, peak_bytes, total_allocations,
    system_allocations, system_bytes, cached_bytes."""
def empty_cache() -> None:
    """Returns the allocator's cached large blocks to the system."""
def reset_peak_memory_stats() -> None:
    """Sets memory_stats()["peak_bytes"] (the most bytes storages held at once) to the bytes held now."""
def default_generator() -> Generator:
    """The generator random functions use when given none."""
def set_printoptions(precision: Optional[int] = None, threshold: Optional[int] = None,
                     edgeitems: Optional[int] = None, sci_mode: Optional[builtins.bool] = None) -> None:
    """How tensors print: digits, the element count above which they are summarised, the
    items shown at each end then, scientific notation; None leaves a setting as it is."""
def is_grad_enabled() -> builtins.bool:
    """Whether ops record a graph on this thread (see ember.no_grad)."""
def is_autocast_enabled() -> builtins.bool:
    """Whether float32 matrix products on this thread take bfloat16 inputs (see ember.autocast)."""
def bf16_products_available() -> builtins.bool:
    """Whether this processor runs ember's bfloat16 products (AVX512_BF16), unless the
    environment variable EMBER_NO_BF16 says otherwise."""
def is_anomaly_enabled() -> builtins.bool:
    """Whether anomaly mode is on (see ember.autograd.detect_anomaly)."""
def graphviz_available() -> builtins.bool:
    """Whether Graphviz's dot program can be run (ember.draw_graph renders SVG, PNG and PDF
    through it)."""

# --- elementwise ----------------------------------------------------------------------

def add(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input + other, broadcast."""
def sub(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input - other, broadcast."""
def mul(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input * other, broadcast."""
def div(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input / other, broadcast."""
def pow(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input ** other, broadcast."""
def maximum(input: Tensor, other: Tensor) -> Tensor:
    """The larger of the two, elementwise."""
def minimum(input: Tensor, other: Tensor) -> Tensor:
    """The smaller of the two, elementwise."""
def neg(input: Tensor) -> Tensor:
    """-input."""
def exp(input: Tensor) -> Tensor:
    """e ** input."""
def log(input: Tensor) -> Tensor:
    """The natural logarithm."""
def sqrt(input: Tensor) -> Tensor:
    """The square root."""
def rsqrt(input: Tensor) -> Tensor:
    """1 / sqrt(input)."""
def abs(input: Tensor) -> Tensor:
    """|input|."""
def tanh(input: Tensor) -> Tensor:
    """The hyperbolic tangent."""
def sin(input: Tensor) -> Tensor:
    """The sine."""
def cos(input: Tensor) -> Tensor:
    """The cosine."""
def sigmoid(input: Tensor) -> Tensor:
    """1 / (1 + exp(-input))."""
def relu(input: Tensor) -> Tensor:
    """max(input, 0)."""
def square(input: Tensor) -> Tensor:
    """input * input."""
def eq(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input == other, a bool tensor."""
def ne(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input != other, a bool tensor."""
def lt(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input < other, a bool tensor."""
def le(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input <= other, a bool tensor."""
def gt(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input > other, a bool tensor."""
def ge(input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input >= other, a bool tensor."""
def logical_and(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise and of two bool tensors."""
def logical_or(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise or of two bool tensors."""
def logical_not(input: Tensor) -> Tensor:
    """Elementwise not of a bool tensor."""
def isclose(input: Tensor, other: Tensor, rtol: builtins.float = 1e-05, atol: builtins.float = 1e-08,
            equal_nan: builtins.bool = False) -> Tensor:
    """|input - other| <= atol + rtol * |other|, elementwise, as a bool tensor."""
def allclose(input: Tensor, other: Tensor, rtol: builtins.float = 1e-05, atol: builtins.float = 1e-08) -> builtins.bool:
    """Whether isclose holds for every element."""
def equal(input: Tensor, other: Tensor) -> builtins.bool:
    """Whether the shapes and every value are the same."""

# --- reductions -----------------------------------------------------------------------

def sum(input: Tensor, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
    """The sum over dim (an int, a tuple, or None for every dim)."""
def mean(input: Tensor, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
    """The mean over dim (an int, a tuple, or None for every dim)."""
def amax(input: Tensor, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
    """The largest value over dim; the gradient is shared among ties."""
def amin(input: Tensor, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
    """The smallest value over dim; the gradient is shared among ties."""
def logsumexp(input: Tensor, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
    """log(sum(exp(input))) over dim, computed stably."""
def max(input: Tensor, dim: Union[int, Tensor, None] = None, keepdim: builtins.bool = False) -> Any:
    """The largest value; with an int dim, (values, indices) along it; with a tensor, maximum."""
def min(input: Tensor, dim: Union[int, Tensor, None] = None, keepdim: builtins.bool = False) -> Any:
    """The smallest value; with an int dim, (values, indices) along it; with a tensor, minimum."""
def argmax(input: Tensor, dim: Optional[int] = None, keepdim: builtins.bool = False) -> Tensor:
    """The int64 index of the largest value (flat when dim is None)."""
def argmin(input: Tensor, dim: Optional[int] = None, keepdim: builtins.bool = False) -> Tensor:
    """The int64 index of the smallest value (flat when dim is None)."""
def var(input: Tensor, dim: _Dims = None, unbiased: builtins.bool = True, keepdim: builtins.bool = False, *,
        correction: Optional[int] = None) -> Tensor:
    """The variance over dim, divided by n - 1 when unbiased (or n - correction)."""
def std(input: Tensor, dim: _Dims = None, unbiased: builtins.bool = True, keepdim: builtins.bool = False, *,
        correction: Optional[int] = None) -> Tensor:
    """The standard deviation over dim, as var's square root."""
def norm(input: Tensor, p: builtins.float = 2.0, dim: _Dims = None, keepdim: builtins.bool = False) -> Tensor:
    """The p-norm over dim (every element when None)."""
def cumsum(input: Tensor, dim: int) -> Tensor:
    """Running sums along dim."""

# --- matrices, softmax, selection, joining --------------------------------------------

def matmul(input: Tensor, other: Tensor) -> Tensor:
    """The matrix product, batched and broadcast as torch.matmul (also `@`)."""
def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """The product of two matrices (2-D each)."""
def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """The product of two batches of matrices [B, n, m] @ [B, m, p] (3-D each, no broadcasting)."""
def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two vectors."""
def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A vector's diagonal matrix, or a matrix's diagonal, offset by `diagonal`."""
def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Matrices whose diagonal (dims dim1, dim2) holds the last dim of input."""
def trace(input: Tensor) -> Tensor:
    """The sum of a matrix's diagonal."""
def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims; the rest zero."""
def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims; the rest zero."""
def softmax(input: Tensor, dim: int) -> Tensor:
    """exp(x) / sum(exp(x)) along dim."""
def log_softmax(input: Tensor, dim: int) -> Tensor:
    """log(softmax(x)) along dim, computed stably."""
def masked_fill(input: Tensor, mask: Tensor, value: builtins.float) -> Tensor:
    """value where the bool mask (broadcast) is True, input elsewhere."""
def where(condition: Tensor, input: Tensor, other: _TensorOrNumber) -> Tensor:
    """input where the bool condition is True, other elsewhere (broadcast)."""
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors joined along an existing dim."""
def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The same as cat."""
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Tensors of one shape joined along a new dim."""
def split(input: Tensor, split_size_or_sections: Union[int, Sequence[int]], dim: int = 0) -> Tuple[Tensor, ...]:
    """Views of pieces of split_size along dim (the last smaller), or of the sizes given."""
def chunk(input: Tensor, chunks: int, dim: int = 0) -> Tuple[Tensor, ...]:
    """At most `chunks` views of equal size along dim (the last smaller)."""
def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """The entries of dim at the int64 indices of a 1-d index."""
def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = input[index[i][j]][j] for dim 0 (and so on): values picked along dim."""
