// HDF5 reading through the C API. Every handle is closed by an RAII guard.
#include "core/h5.h"

#include <hdf5.h>

#include <vector>

namespace ember::h5 {

namespace {

struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Handle() {
    if (id >= 0) close(id);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

hid_t open_file(const std::string& file, const char* op) {
  quiet();
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail(op, "cannot open '", file, "' as an HDF5 file");
  return f;
}

}  // namespace

bool exists(const std::string& file, const std::string& path) {
  Handle f(open_file(file, "h5::exists"), H5Fclose);
  // check each prefix: H5Lexists fails on a missing intermediate group
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    size_t next = path.find('/', pos + 1);
    prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(f.id, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    pos = next;
  }
  return true;
}

Tensor read(const std::string& file, const std::string& dataset) {
  const char* op = "h5::read";
  Handle f(open_file(file, op), H5Fclose);
  if (!exists(file, dataset)) fail(op, "'", file, "' has no dataset '", dataset, "'");
  Handle d(H5Dopen2(f.id, dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.id < 0) fail(op, "cannot open dataset '", dataset, "' in '", file, "'");
  Handle space(H5Dget_space(d.id), H5Sclose);
  int nd = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> dims(nd);
  H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  Shape shape(dims.begin(), dims.end());
  Handle type(H5Dget_type(d.id), H5Tclose);
  H5T_class_t cls = H5Tget_class(type.id);
  size_t size = H5Tget_size(type.id);
  DType dt;
  hid_t mem;
  if (cls == H5T_FLOAT) {
    dt = size == 4 ? kFloat32 : kFloat64;
    mem = size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  } else if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(type.id) == H5T_SGN_NONE) {
    dt = kBool;
    mem = H5T_NATIVE_UINT8;
  } else if (cls == H5T_INTEGER || cls == H5T_ENUM) {
    dt = kInt64;
    mem = H5T_NATIVE_INT64;
  } else {
    fail(op, "dataset '", dataset, "' in '", file, "' has an unsupported element type");
  }
  Tensor t = empty(shape, dt);
  if (t.numel() > 0 && H5Dread(d.id, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)
    fail(op, "cannot read dataset '", dataset, "' in '", file, "'");
  return t;
}

double attr_double(const std::string& file, const std::string& object, const std::string& name) {
  const char* op = "h5::attr_double";
  Handle f(open_file(file, op), H5Fclose);
  if (H5Aexists_by_name(f.id, object.c_str(), name.c_str(), H5P_DEFAULT) <= 0)
    fail(op, "'", file, "' has no attribute '", name, "' on '", object, "'");
  Handle a(H5Aopen_by_name(f.id, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  double v = 0;
  if (H5Aread(a.id, H5T_NATIVE_DOUBLE, &v) < 0)
    fail(op, "cannot read attribute '", name, "' on '", object, "' in '", file, "' as a number");
  return v;
}

std::string attr_string(const std::string& file, const std::string& object, const std::string& name) {
  const char* op = "h5::attr_string";
  Handle f(open_file(file, op), H5Fclose);
  if (H5Aexists_by_name(f.id, object.c_str(), name.c_str(), H5P_DEFAULT) <= 0)
    fail(op, "'", file, "' has no attribute '", name, "' on '", object, "'");
  Handle a(H5Aopen_by_name(f.id, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(a.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_STRING) fail(op, "attribute '", name, "' on '", object, "' in '", file, "' is not a string");
  if (H5Tis_variable_str(type.id) > 0) {
    char* s = nullptr;
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.id, H5T_VARIABLE);
    H5Tset_cset(mt.id, H5Tget_cset(type.id));
    if (H5Aread(a.id, mt.id, &s) < 0) fail(op, "cannot read attribute '", name, "' in '", file, "'");
    std::string r = s ? s : "";
    H5free_memory(s);
    return r;
  }
  size_t n = H5Tget_size(type.id);
  std::vector<char> buf(n + 1, 0);
  if (H5Aread(a.id, type.id, buf.data()) < 0) fail(op, "cannot read attribute '", name, "' in '", file, "'");
  return std::string(buf.data());
}

}  // namespace ember::h5
