// t[index] and t[index] = value, as PyTorch's indexing. Basic indexing is built from the
// view ops: an int selects (negative counts from the end), a slice slices (any positive
// step), None inserts a dim, ... stands for the dims not named. Advanced indexing - int64
// tensors or lists of ints, and bool masks (each one the int64 indices of its true
// elements, one per dim it covers) - picks with index_select, so that gradients flow:
// the index tensors broadcast together to a shape B, which replaces the indexed dims where
// they are adjacent, and comes first otherwise (NumPy's rule; as in PyTorch, and unlike
// NumPy, an int selects first and is not one of them). An advanced assignment writes the
// picked elements in place, as index_put_ does.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember::python {

namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw py::type_error("indexing with " + what + " is not supported; supported: ints, slices, None, ..., "
                       "int64 tensors or lists of ints, and bool tensors");
}

// The index as items: a tuple's, or the index alone.
std::vector<py::object> items_of(const py::object& index) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(index)) {
    for (py::handle h : index) items.push_back(py::reinterpret_borrow<py::object>(h));
  } else {
    items.push_back(index);
  }
  return items;
}

bool is_int(const py::handle& h) {
  return !py::isinstance<py::bool_>(h) && !py::isinstance<Tensor>(h) && py::hasattr(h, "__index__");
}

// A list of ints (or of bools) as a tensor, as ember.tensor makes it.
Tensor tensor_of_list(const py::object& list) {
  if (py::len(list) == 0) return from_vector(std::vector<int64_t>{}, {0});
  return py::module_::import("ember").attr("tensor")(list).cast<Tensor>();
}

// The int64 indices of a bool mask's true elements, one tensor per dim, in row-major order
// (torch.nonzero(mask, as_tuple=True)).
std::vector<Tensor> nonzero(const Tensor& mask) {
  const Tensor m = mask.contiguous();
  const bool* p = m.data<bool>();
  const int64_t k = m.dim(), n = m.numel();
  std::vector<std::vector<int64_t>> idx((size_t)k);
  std::vector<int64_t> at((size_t)k, 0);  // the multi-index of element i
  for (int64_t i = 0; i < n; i++) {
    if (p[i])
      for (int64_t d = 0; d < k; d++) idx[(size_t)d].push_back(at[(size_t)d]);
    for (int64_t d = k - 1; d >= 0 && ++at[(size_t)d] == m.size(d); d--) at[(size_t)d] = 0;
  }
  std::vector<Tensor> out;
  for (auto& v : idx) {
    const auto count = (int64_t)v.size();
    out.push_back(from_vector(v, {count}));
  }
  return out;
}

// One advanced index: the dim of the (basic-indexed) tensor it applies to, and its indices.
struct Advanced {
  int64_t dim;
  Tensor index;
};

// The advanced indices broadcast together: their shape B, and for each element of B the
// position it picks along each indexed dim (checked against the dim's size, negative ones
// counted from the end).
struct Broadcast {
  Shape B;
  int64_t count = 1;
  std::vector<std::vector<int64_t>> at;  // per advanced index, count positions
};

Broadcast broadcast(const Tensor& t, const std::vector<Advanced>& adv) {
  Broadcast r;
  r.B = adv[0].index.shape();
  for (size_t j = 1; j < adv.size(); j++) {
    try {
      r.B = broadcast_shapes(r.B, adv[j].index.shape(), "index");
    } catch (const std::exception&) {
      std::string shapes;
      for (const auto& a : adv) shapes += (shapes.empty() ? "" : ", ") + shape_str(a.index.shape());
      throw py::index_error("shape mismatch: indexing tensors could not be broadcast together with shapes " + shapes);
    }
  }
  for (int64_t s : r.B) r.count *= s;
  for (const auto& a : adv) {
    const int64_t size = t.size(a.dim);
    const Tensor idx = a.index.expand(r.B).contiguous();
    const int64_t* p = idx.data<int64_t>();
    std::vector<int64_t> at((size_t)r.count);
    for (int64_t n = 0; n < r.count; n++) {
      const int64_t i = p[n];
      if (i < -size || i >= size)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " +
                              std::to_string(a.dim) + " with size " + std::to_string(size));
      at[(size_t)n] = i < 0 ? i + size : i;
    }
    r.at.push_back(std::move(at));
  }
  return r;
}

// The dims of t no advanced index applies to, in order.
std::vector<int64_t> rest_dims(const Tensor& t, const std::vector<Advanced>& adv) {
  std::vector<bool> indexed((size_t)t.dim(), false);
  for (const auto& a : adv) indexed[(size_t)a.dim] = true;
  std::vector<int64_t> rest;
  for (int64_t d = 0; d < t.dim(); d++)
    if (!indexed[(size_t)d]) rest.push_back(d);
  return rest;
}

// Where B goes in the result: in place of the indexed dims when they are adjacent (after
// the first `first` of the other dims), first otherwise.
int64_t b_position(const std::vector<Advanced>& adv) {
  for (size_t j = 1; j < adv.size(); j++)
    if (adv[j].dim != adv[j - 1].dim + 1) return 0;
  return adv[0].dim;
}

// The permutation taking [B..., rest...] to the result's order.
std::vector<int64_t> result_order(int64_t b_dims, int64_t rest, int64_t first) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < first; d++) order.push_back(b_dims + d);
  for (int64_t d = 0; d < b_dims; d++) order.push_back(d);
  for (int64_t d = b_dims + first; d < b_dims + rest; d++) order.push_back(d);
  return order;
}

// t[adv...]: the elements picked, with index_select (so that gradients flow).
Tensor pick(const Tensor& t, const std::vector<Advanced>& adv) {
  const Broadcast b = broadcast(t, adv);
  // the row-major position of each picked element among the indexed dims
  std::vector<int64_t> linear((size_t)b.count, 0);
  for (size_t j = 0; j < adv.size(); j++)
    for (int64_t n = 0; n < b.count; n++)
      linear[(size_t)n] = linear[(size_t)n] * t.size(adv[j].dim) + b.at[j][(size_t)n];
  const Tensor flat_index = from_vector(linear, {b.count});
  if (adv.size() == 1) {  // along its own dim, with no copy of t
    const int64_t d = adv[0].dim;
    Shape shape(t.shape().begin(), t.shape().begin() + d);
    shape.insert(shape.end(), b.B.begin(), b.B.end());
    shape.insert(shape.end(), t.shape().begin() + d + 1, t.shape().end());
    return index_select(t, d, flat_index).reshape(shape);
  }
  // the indexed dims first, flattened into one, then the rest
  std::vector<int64_t> perm;
  int64_t rows = 1;
  for (const auto& a : adv) {
    perm.push_back(a.dim);
    rows *= t.size(a.dim);
  }
  const std::vector<int64_t> rest = rest_dims(t, adv);
  Shape flat_shape{rows}, shape = b.B;
  for (int64_t d : rest) {
    perm.push_back(d);
    flat_shape.push_back(t.size(d));
    shape.push_back(t.size(d));
  }
  Tensor out = index_select(t.permute(perm).reshape(flat_shape), 0, flat_index).reshape(shape);
  const int64_t first = b_position(adv);
  if (first == 0) return out;
  return out.permute(result_order((int64_t)b.B.size(), (int64_t)rest.size(), first));
}

// One index, applied: the view the basic items select, and the advanced ones left.
struct Indexed {
  Tensor view;
  std::vector<Advanced> adv;
};

Indexed basic(const Tensor& self, const py::object& index) {
  std::vector<py::object> items = items_of(index);
  // lists become tensors; find whether any item is a tensor, and how many dims they name
  int64_t named = 0;
  bool ellipsis = false;
  for (auto& it : items) {
    if (py::isinstance<py::list>(it)) it = py::cast(tensor_of_list(it));
    if (it.is_none()) continue;
    if (it.is(py::ellipsis())) {
      if (ellipsis) throw py::index_error("an index can only have a single ellipsis ('...')");
      ellipsis = true;
      continue;
    }
    if (py::isinstance<Tensor>(it)) {
      const Tensor& idx = it.cast<const Tensor&>();
      named += idx.dtype() == kBool ? idx.dim() : 1;
      continue;
    }
    named++;
  }
  if (named > self.dim())
    throw py::index_error("too many indices for tensor of dimension " + std::to_string(self.dim()));
  Tensor t = self;
  int64_t d = 0;  // the dim of t the next item applies to
  std::vector<Advanced> adv;
  for (const auto& it : items) {
    if (it.is_none()) {
      t = t.unsqueeze(d++);
    } else if (it.is(py::ellipsis())) {
      d += self.dim() - named;
    } else if (is_int(it)) {
      t = t.select(d, int64_of(it, "index"));
    } else if (py::isinstance<py::slice>(it)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(it.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      if (step <= 0) throw py::value_error("step must be greater than zero");
      t = t.slice(d++, {.start = start, .end = stop, .step = step});
    } else if (py::isinstance<Tensor>(it)) {
      const Tensor& idx = it.cast<const Tensor&>();
      if (idx.dtype() == kBool) {
        if (idx.dim() == 0) unsupported("a 0-dim bool tensor");
        for (int64_t j = 0; j < idx.dim(); j++)
          if (idx.size(j) != t.size(d + j))
            throw py::index_error("the shape of the mask " + shape_str(idx.shape()) + " at index " + std::to_string(j) +
                                  " does not match the shape of the indexed tensor " + shape_str(t.shape()) +
                                  " at index " + std::to_string(d + j));
        for (Tensor& i : nonzero(idx)) adv.push_back({d++, std::move(i)});
      } else if (idx.dtype() == kInt64) {
        adv.push_back({d++, idx});
      } else {
        throw py::index_error("tensors used as indices must be int64 (long) or bool tensors, got " +
                              std::string(dtype_name(idx.dtype())));
      }
    } else if (py::isinstance<py::bool_>(it)) {
      unsupported("a bool");
    } else {
      unsupported("an object of type " + std::string(py::str(py::type::of(it).attr("__name__"))));
    }
  }
  return {t, std::move(adv)};
}

Tensor get(const Tensor& self, const py::object& index) {
  Indexed ix = basic(self, index);
  return ix.adv.empty() ? ix.view : pick(ix.view, ix.adv);
}

template <class T>
void scatter(const Tensor& view, const std::vector<int64_t>& offsets, const Tensor& src) {
  T* base = view.data<T>();
  const T* s = src.data<T>();
  for (size_t i = 0; i < offsets.size(); i++) base[offsets[i]] = s[i];
}

// What an assignment writes: a tensor, a Python number, or what ember.tensor takes (a
// list, an array), converted to dtype.
Tensor value_of(const py::object& value, DType dtype) {
  if (py::isinstance<Tensor>(value)) return value.cast<Tensor>();
  if (py::isinstance<py::str>(value) || py::isinstance<py::bytes>(value) || value.is_none())
    throw py::type_error("__setitem__: can't assign a " + std::string(py::str(py::type::of(value).attr("__name__"))) +
                         " to a tensor; expected a Tensor, a number or a sequence of numbers");
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value))
    return full({}, value.cast<double>(), dtype);
  return py::module_::import("ember").attr("tensor")(value, py::arg("dtype") = dtype).cast<Tensor>();
}

// t[index] = value for an advanced index: the picked elements written in place (with
// repeated indices, the last write wins), computing the offsets of those elements only.
void put(const Tensor& t, const Indexed& ix, const py::object& value) {
  if (grad_enabled() && t.requires_grad())
    throw std::runtime_error("__setitem__: a tensor that requires grad (shape " + shape_str(t.shape()) +
                             ") cannot be changed in place while grad mode is on; do it under ember.no_grad()");
  const Tensor& v = ix.view;
  for (int64_t d = 0; d < v.dim(); d++)
    if (v.stride(d) == 0 && v.size(d) > 1)
      throw std::runtime_error("__setitem__: several elements of the tensor (shape " + shape_str(v.shape()) +
                               ") are one memory location (an expanded view); clone() it first");
  const Broadcast b = broadcast(v, ix.adv);
  const std::vector<int64_t> rest = rest_dims(v, ix.adv);
  // the offsets, in the order [B..., rest...]
  Shape rest_shape;
  int64_t rest_count = 1;
  for (int64_t d : rest) {
    rest_shape.push_back(v.size(d));
    rest_count *= v.size(d);
  }
  std::vector<int64_t> offsets;
  offsets.reserve((size_t)(b.count * rest_count));
  std::vector<int64_t> at(rest.size(), 0);
  for (int64_t n = 0; n < b.count; n++) {
    int64_t base = 0;
    for (size_t j = 0; j < ix.adv.size(); j++) base += b.at[j][(size_t)n] * v.stride(ix.adv[j].dim);
    std::fill(at.begin(), at.end(), 0);
    for (int64_t r = 0; r < rest_count; r++) {
      int64_t off = base;
      for (size_t k = 0; k < rest.size(); k++) off += at[k] * v.stride(rest[k]);
      offsets.push_back(off);
      for (int64_t k = (int64_t)rest.size() - 1; k >= 0 && ++at[(size_t)k] == rest_shape[(size_t)k]; k--)
        at[(size_t)k] = 0;
    }
  }
  // the value, broadcast to the result's shape, then laid out as [B..., rest...]
  Shape canonical = b.B;
  canonical.insert(canonical.end(), rest_shape.begin(), rest_shape.end());
  const int64_t first = b_position(ix.adv);
  const std::vector<int64_t> order = result_order((int64_t)b.B.size(), (int64_t)rest.size(), first);
  Shape result((size_t)canonical.size());
  for (size_t i = 0; i < order.size(); i++) result[i] = canonical[(size_t)order[i]];
  Tensor src = empty(result, t.dtype());
  src.copy_(value_of(value, t.dtype()));  // broadcasting, dtype and grad checks as copy_'s
  if (first != 0) {
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); i++) inverse[(size_t)order[i]] = (int64_t)i;
    src = src.permute(inverse);
  }
  src = src.contiguous();
  switch (t.dtype()) {
    case DType::Float32: scatter<float>(v, offsets, src); break;
    case DType::Float64: scatter<double>(v, offsets, src); break;
    case DType::Int64: scatter<int64_t>(v, offsets, src); break;
    case DType::Bool: scatter<bool>(v, offsets, src); break;
    case DType::BFloat16: scatter<BFloat16>(v, offsets, src); break;
  }
  t.storage()->version++;  // as every in-place write: a tensor saved for backward is now stale
}

}  // namespace

void bind_indexing(TensorClass& cls) {
  cls.def("__getitem__", [](const Tensor& t, const py::object& index) { return get(t, index); });
  // t[index] = value writes into the view the index selects, or the elements an advanced
  // index picks (not recorded by autograd)
  cls.def("__setitem__", [](const Tensor& t, const py::object& index, const py::object& value) {
    const Indexed ix = basic(t, index);
    if (!ix.adv.empty()) return put(t, ix, value);
    Tensor view = ix.view;
    if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value))
      view.fill_(value.cast<double>());
    else
      view.copy_(value_of(value, t.dtype()));
  });
}

}  // namespace ember::python
