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

// t[adv...]: the indices broadcast to B, checked against their dims' sizes (negative ones
// counting from the end), and the elements picked, B in place of the indexed dims when
// they are adjacent and first otherwise.
Tensor pick(const Tensor& t, const std::vector<Advanced>& adv) {
  Shape B = adv[0].index.shape();
  for (size_t j = 1; j < adv.size(); j++) {
    try {
      B = broadcast_shapes(B, adv[j].index.shape(), "index");
    } catch (const std::exception&) {
      std::string shapes;
      for (const auto& a : adv) shapes += (shapes.empty() ? "" : ", ") + shape_str(a.index.shape());
      throw py::index_error("shape mismatch: indexing tensors could not be broadcast together with shapes " + shapes);
    }
  }
  int64_t count = 1;
  for (int64_t s : B) count *= s;
  // the row-major position of each picked element among the indexed dims
  std::vector<int64_t> linear((size_t)count, 0);
  for (const auto& a : adv) {
    const int64_t size = t.size(a.dim);
    const Tensor idx = a.index.expand(B).contiguous();
    const int64_t* p = idx.data<int64_t>();
    for (int64_t n = 0; n < count; n++) {
      int64_t i = p[n];
      if (i < -size || i >= size)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " +
                              std::to_string(a.dim) + " with size " + std::to_string(size));
      linear[(size_t)n] = linear[(size_t)n] * size + (i < 0 ? i + size : i);
    }
  }
  const Tensor flat_index = from_vector(linear, {count});
  if (adv.size() == 1) {  // along its own dim, with no copy of t
    const int64_t d = adv[0].dim;
    Shape shape(t.shape().begin(), t.shape().begin() + d);
    shape.insert(shape.end(), B.begin(), B.end());
    shape.insert(shape.end(), t.shape().begin() + d + 1, t.shape().end());
    return index_select(t, d, flat_index).reshape(shape);
  }
  // the indexed dims first, flattened into one, then the rest
  std::vector<int64_t> perm;
  std::vector<bool> indexed((size_t)t.dim(), false);
  int64_t rows = 1;
  for (const auto& a : adv) {
    perm.push_back(a.dim);
    indexed[(size_t)a.dim] = true;
    rows *= t.size(a.dim);
  }
  Shape rest;
  for (int64_t d = 0; d < t.dim(); d++)
    if (!indexed[(size_t)d]) {
      perm.push_back(d);
      rest.push_back(t.size(d));
    }
  Shape flat_shape{rows};
  flat_shape.insert(flat_shape.end(), rest.begin(), rest.end());
  Shape shape = B;
  shape.insert(shape.end(), rest.begin(), rest.end());
  Tensor out = index_select(t.permute(perm).reshape(flat_shape), 0, flat_index).reshape(shape);
  bool adjacent = true;
  for (size_t j = 1; j < adv.size(); j++) adjacent = adjacent && adv[j].dim == adv[j - 1].dim + 1;
  const auto first = adv[0].dim, b = (int64_t)B.size();
  if (!adjacent || first == 0) return out;
  // B moves to where the indexed dims were: after the first `first` of the rest
  std::vector<int64_t> order;
  for (int64_t d = 0; d < first; d++) order.push_back(b + d);
  for (int64_t d = 0; d < b; d++) order.push_back(d);
  for (int64_t d = b + first; d < out.dim(); d++) order.push_back(d);
  return out.permute(order);
}

Tensor get(const Tensor& self, const py::object& index, bool* advanced = nullptr) {
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
  if (advanced) *advanced = !adv.empty();
  return adv.empty() ? t : pick(t, adv);
}

// An int64 tensor of t's shape holding each element's offset from t's first element.
Tensor element_offsets(const Tensor& t) {
  std::vector<int64_t> offsets((size_t)t.numel());
  std::vector<int64_t> at((size_t)t.dim(), 0);
  int64_t off = 0;
  for (auto& o : offsets) {
    o = off;
    for (int64_t d = t.dim() - 1; d >= 0; d--) {
      off += t.stride(d);
      if (++at[(size_t)d] < t.size(d)) break;
      off -= t.size(d) * t.stride(d);
      at[(size_t)d] = 0;
    }
  }
  return from_vector(offsets, t.shape());
}

template <class T>
void scatter(const Tensor& dst, const Tensor& offsets, const Tensor& src) {
  T* base = dst.data<T>();
  const int64_t* o = offsets.data<int64_t>();
  const T* s = src.data<T>();
  for (int64_t i = 0, n = offsets.numel(); i < n; i++) base[o[i]] = s[i];
}

// t[index] = value for an advanced index: the picked elements written in place (with
// repeated indices, the last write wins).
void put(const Tensor& t, const py::object& index, const py::object& value) {
  if (grad_enabled() && t.requires_grad())
    throw std::runtime_error("__setitem__: a tensor that requires grad (shape " + shape_str(t.shape()) +
                             ") cannot be changed in place while grad mode is on; do it under ember.no_grad()");
  const Tensor offsets = get(element_offsets(t), index).contiguous();
  Tensor src = empty(offsets.shape(), t.dtype());
  if (py::isinstance<Tensor>(value)) src.copy_(value.cast<const Tensor&>());
  else src.fill_(value.cast<double>());
  switch (t.dtype()) {
    case DType::Float32: scatter<float>(t, offsets, src); break;
    case DType::Float64: scatter<double>(t, offsets, src); break;
    case DType::Int64: scatter<int64_t>(t, offsets, src); break;
    case DType::Bool: scatter<bool>(t, offsets, src); break;
  }
  t.storage()->version++;  // as every in-place write: a tensor saved for backward is now stale
}

}  // namespace

void bind_indexing(TensorClass& cls) {
  cls.def("__getitem__", [](const Tensor& t, const py::object& index) { return get(t, index); });
  // t[index] = value writes into the view the index selects, or the elements an advanced
  // index picks (not recorded by autograd)
  cls.def("__setitem__", [](const Tensor& t, const py::object& index, const py::object& value) {
    bool advanced = false;
    Tensor view = get(t, index, &advanced);
    if (advanced) return put(t, index, value);
    if (py::isinstance<Tensor>(value)) view.copy_(value.cast<const Tensor&>());
    else view.fill_(value.cast<double>());
  });
}

}  // namespace ember::python
