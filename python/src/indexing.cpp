// t[index] and t[index] = value, as PyTorch's basic indexing, built from the view ops:
// an int selects (negative counts from the end), a slice slices (any positive step), None
// inserts a dim, ... stands for the dims not named. One int64 tensor (or list of ints)
// among them picks along its dim with index_select, as PyTorch's advanced indexing does
// for a single index tensor. Boolean masks and several index tensors are not supported
// yet: a TypeError says so.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "core/ops.h"

namespace ember::python {

namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw py::type_error("indexing with " + what + " is not supported yet; supported: ints, slices, None, ... "
                       "and one int64 tensor or list of ints");
}

// Elements of `index` along dim d of t, as t[..., index, ...]: dim d replaced by the
// index's dims. Negative indices count from the end, as PyTorch's.
Tensor take(const Tensor& t, int64_t d, Tensor index) {
  if (index.dtype() == kBool) unsupported("a boolean mask");
  if (index.dtype() != kInt64) throw py::index_error("tensors used as indices must be int64 (long) or bool tensors");
  const int64_t size = t.size(d);
  index = where(lt(index, 0.0), add(index, (double)size), index);
  Tensor picked = index_select(t, d, index.reshape({-1}));
  Shape shape(t.shape().begin(), t.shape().begin() + d);
  shape.insert(shape.end(), index.shape().begin(), index.shape().end());
  shape.insert(shape.end(), t.shape().begin() + d + 1, t.shape().end());
  return picked.reshape(shape);
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

Tensor get(const Tensor& self, const py::object& index, bool* advanced = nullptr) {
  std::vector<py::object> items = items_of(index);
  int64_t named = 0;  // dims the items consume
  bool ellipsis = false;
  for (const auto& it : items) {
    if (it.is_none()) continue;
    if (it.is(py::ellipsis())) {
      if (ellipsis) throw py::index_error("an index can only have a single ellipsis ('...')");
      ellipsis = true;
      continue;
    }
    named++;
  }
  if (named > self.dim())
    throw py::index_error("too many indices for tensor of dimension " + std::to_string(self.dim()));
  Tensor t = self;
  int64_t d = 0;  // the dim of t the next item applies to
  bool took = false;
  for (const auto& it : items) {
    if (it.is_none()) {
      t = t.unsqueeze(d++);
    } else if (it.is(py::ellipsis())) {
      d += self.dim() - named;
    } else if (is_int(it)) {
      const int64_t i = int64_of(it, "index");
      t = t.select(d, i);
    } else if (py::isinstance<py::slice>(it)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(it.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      if (step <= 0) throw py::value_error("step must be greater than zero");
      t = t.slice(d++, {.start = start, .end = stop, .step = step});
    } else if (py::isinstance<Tensor>(it) || py::isinstance<py::list>(it)) {
      if (took) unsupported("more than one index tensor");
      took = true;
      Tensor index = py::isinstance<Tensor>(it) ? it.cast<Tensor>()
                                                : py::module_::import("ember").attr("tensor")(it).cast<Tensor>();
      const int64_t dims = index.dim();
      t = take(t, d, index);
      d += dims;
    } else if (py::isinstance<py::bool_>(it)) {
      unsupported("a bool");
    } else {
      unsupported("an object of type " + std::string(py::str(py::type::of(it).attr("__name__"))));
    }
  }
  if (advanced) *advanced = took;
  return t;
}

}  // namespace

void bind_indexing(TensorClass& cls) {
  cls.def("__getitem__", [](const Tensor& t, const py::object& index) { return get(t, index); });
  // t[index] = value writes into the view the index selects (not recorded by autograd)
  cls.def("__setitem__", [](const Tensor& t, const py::object& index, const py::object& value) {
    bool advanced = false;
    Tensor view = get(t, index, &advanced);
    if (advanced) unsupported("an index tensor in an assignment");
    if (py::isinstance<Tensor>(value)) view.copy_(value.cast<const Tensor&>());
    else view.fill_(value.cast<double>());
  });
}

}  // namespace ember::python
