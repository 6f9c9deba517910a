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

Writer::Writer(const std::string& file) : file_(file) {
  quiet();
  id_ = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id_ < 0) fail("h5::Writer", "cannot create '", file, "'");
}

Writer::~Writer() {
  try {
    close();
  } catch (...) {
  }
}

void Writer::close() {
  if (id_ < 0) return;
  herr_t rc = H5Fclose(id_);
  id_ = -1;
  if (rc < 0) fail("h5::Writer::close", "cannot close '", file_, "'");
}

void Writer::make_groups(const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string g = path.substr(0, pos);
    if (g.empty() || H5Lexists(id_, g.c_str(), H5P_DEFAULT) > 0) continue;
    Handle h(H5Gcreate2(id_, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (h.id < 0) fail("h5::Writer", "cannot create group '", g, "' in '", file_, "'");
  }
}

void Writer::write(const std::string& dataset, const Tensor& t_in) {
  if (id_ < 0) fail("h5::Writer::write", "'", file_, "' is closed");
  make_groups(dataset);
  Tensor t = t_in.contiguous();
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple((int)dims.size(), dims.data(), nullptr),
               H5Sclose);
  hid_t file_type, mem_type;
  switch (t.dtype()) {
    case DType::Float32: file_type = H5T_IEEE_F32LE; mem_type = H5T_NATIVE_FLOAT; break;
    case DType::Float64: file_type = H5T_IEEE_F64LE; mem_type = H5T_NATIVE_DOUBLE; break;
    case DType::Int64: file_type = H5T_STD_I64LE; mem_type = H5T_NATIVE_INT64; break;
    default: file_type = H5T_STD_U8LE; mem_type = H5T_NATIVE_UINT8; break;
  }
  Handle d(H5Dcreate2(id_, dataset.c_str(), file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (d.id < 0) fail("h5::Writer::write", "cannot create dataset '", dataset, "' in '", file_, "'");
  if (t.numel() > 0 && H5Dwrite(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)
    fail("h5::Writer::write", "cannot write dataset '", dataset, "' in '", file_, "'");
}

void Writer::attr(const std::string& object, const std::string& name, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate_by_name(id_, object.c_str(), name.c_str(), H5T_IEEE_F64LE, space.id, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT),
           H5Aclose);
  if (a.id < 0 || H5Awrite(a.id, H5T_NATIVE_DOUBLE, &value) < 0)
    fail("h5::Writer::attr", "cannot write attribute '", name, "' on '", object, "' in '", file_, "'");
}

void Writer::attr(const std::string& object, const std::string& name, const std::string& value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, value.size() + 1);
  Handle a(H5Acreate_by_name(id_, object.c_str(), name.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT),
           H5Aclose);
  if (a.id < 0 || H5Awrite(a.id, type.id, value.c_str()) < 0)
    fail("h5::Writer::attr", "cannot write attribute '", name, "' on '", object, "' in '", file_, "'");
}

}  // namespace ember::h5
