// HDF5 through the C API. Every handle is closed by an RAII guard; HDF5's own error
// printing is silenced and each failure becomes an ember::Error naming file and key.
#include "io/h5.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>

#include "core/file_io.h"

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

// No error stack printed (ours names the file and key), and no filter plugin loaded: a
// dataset naming an unknown filter would make HDF5 load a shared library from
// HDF5_PLUGIN_PATH, code a crafted file could choose. ember writes no filtered data.
void quiet() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  H5PLset_loading_state(0);
}

// Throws unless the link at key (whose parent has been checked) is a hard link. HDF5
// follows an external link by opening the file it names (a FIFO there hangs the open,
// /etc/passwd becomes weights) and a soft link may lead through one: only data held in
// the file itself, under its own name, is read.
void check_hard_link(hid_t f, const std::string& file, const std::string& key) {
  H5L_info_t info;
  if (H5Lget_info(f, key.c_str(), &info, H5P_DEFAULT) < 0)
    fail("h5::Reader", "'", file, "': cannot inspect the link at key '", key, "'");
  if (info.type == H5L_TYPE_HARD) return;
  std::vector<char> value(std::min<size_t>(info.u.val_size, 1 << 16) + 1, '\0');
  bool have_value =
      info.u.val_size <= (1 << 16) && H5Lget_val(f, key.c_str(), value.data(), value.size(), H5P_DEFAULT) >= 0;
  if (info.type == H5L_TYPE_EXTERNAL) {
    const char *target_file = nullptr, *target_object = nullptr;
    std::string target;
    if (have_value && H5Lunpack_elink_val(value.data(), info.u.val_size, nullptr, &target_file, &target_object) >= 0)
      target = cat_str(" ('", target_file, "', object '", target_object, "')");
    fail("h5::Reader", "'", file, "': key '", key, "' is an external link to another file", target,
         "; ember reads only data held in the file itself");
  }
  if (info.type == H5L_TYPE_SOFT)
    fail("h5::Reader", "'", file, "': key '", key, "' is a soft link",
         have_value ? cat_str(" to '", value.data(), "'") : "",
         "; ember follows no links, it reads only objects stored under their own names");
  fail("h5::Reader", "'", file, "': key '", key, "' is a user-defined link (type ", int(info.type),
       "); ember reads only data held in the file itself");
}

// Walks the path one link at a time (H5Lexists fails on a missing intermediate group),
// refusing any link that is not a hard link before anything goes through it. Every
// Reader method reaches objects by name only after this check.
bool path_exists(hid_t f, const std::string& file, const std::string& path) {
  if (path.empty() || path == "/") return true;
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    std::string prefix = path.substr(0, pos);
    if (H5Lexists(f, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    check_hard_link(f, file, prefix);
    if (pos == std::string::npos) return true;
  }
}

H5O_type_t object_type(hid_t f, const std::string& file, const std::string& path) {
  if (!path_exists(f, file, path)) return H5O_TYPE_UNKNOWN;
  H5O_info_t info;
  if (H5Oget_info_by_name(f, path.c_str(), &info, H5P_DEFAULT) < 0) return H5O_TYPE_UNKNOWN;
  return info.type;
}

}  // namespace

// ---------------------------------------------------------------- Reader

Reader::Reader(const std::string& file) : file_(file) {
  quiet();
  // H5Fopen opens a FIFO and waits for a writer, where no signal ends the wait
  io::check_regular_file(file, "h5::Reader", "an HDF5 file");
  id_ = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id_ < 0) fail("h5::Reader", "cannot open '", file, "' as an HDF5 file");
}

Reader Reader::from_image(const std::string& name, const void* data, size_t size) {
  quiet();
  Reader r;
  r.file_ = name;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // the core driver reads from memory; no backing store is ever written
  if (H5Pset_fapl_core(fapl.id, 1 << 16, 0) < 0 || H5Pset_file_image(fapl.id, const_cast<void*>(data), size) < 0)
    fail("h5::Reader", "cannot prepare an in-memory image of '", name, "'");
  // the core driver refuses a name that exists on disk, so the image gets one that cannot
  r.id_ = H5Fopen("/proc/self/ember-memory-image", H5F_ACC_RDONLY, fapl.id);
  if (r.id_ < 0) fail("h5::Reader", "cannot open '", name, "' as an HDF5 file");
  return r;
}

Reader::~Reader() {
  if (id_ >= 0) H5Fclose(id_);
}

Reader::Reader(Reader&& o) noexcept : file_(std::move(o.file_)), id_(o.id_) { o.id_ = -1; }

bool Reader::has(const std::string& path) const { return path_exists(id_, file_, path); }
bool Reader::is_group(const std::string& path) const { return object_type(id_, file_, path) == H5O_TYPE_GROUP; }
bool Reader::is_dataset(const std::string& path) const { return object_type(id_, file_, path) == H5O_TYPE_DATASET; }
uint64_t Reader::object_address(const std::string& path) const {
  H5O_info_t info;
  if (!path_exists(id_, file_, path) || H5Oget_info_by_name(id_, path.c_str(), &info, H5P_DEFAULT) < 0)
    fail("h5::Reader::object_address", "'", file_, "' has no object '", path, "'");
  return (uint64_t)info.addr;
}

std::vector<std::string> Reader::children(const std::string& group) const {
  const char* op = "h5::Reader::children";
  if (!is_group(group)) fail(op, "'", file_, "' has no group '", group, "'");
  Handle g(H5Gopen2(id_, group.c_str(), H5P_DEFAULT), H5Gclose);
  if (g.id < 0) fail(op, "cannot open group '", group, "' in '", file_, "'");
  H5G_info_t info;
  if (H5Gget_info(g.id, &info) < 0) fail(op, "cannot list group '", group, "' in '", file_, "'");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; i++) {
    ssize_t n = H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(op, "cannot read link ", i, " of group '", group, "' in '", file_, "'");
    std::string name(size_t(n) + 1, '\0');
    H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(size_t(n));
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Opens a dataset whose elements are stored in the file itself: external storage (raw
// data in other files, named by the file) and virtual datasets (mapped from other
// datasets, possibly in other files) are refused before any element is read.
hid_t open_dataset(hid_t f, const std::string& file, const std::string& dataset, const char* op) {
  if (object_type(f, file, dataset) != H5O_TYPE_DATASET) fail(op, "'", file, "' has no dataset '", dataset, "'");
  Handle d(H5Dopen2(f, dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.id < 0) fail(op, "cannot open dataset '", dataset, "' in '", file, "'");
  Handle dcpl(H5Dget_create_plist(d.id), H5Pclose);
  if (dcpl.id < 0) fail(op, "cannot inspect the storage of dataset '", dataset, "' in '", file, "'");
  int external = H5Pget_external_count(dcpl.id);
  if (external != 0)
    fail(op, "'", file, "': key '", dataset, "' keeps its data in ",
         external == 1 ? "another file" : external > 1 ? cat_str(external, " other files") : "other files",
         " (external storage); ember reads only data held in the file itself");
  if (H5Pget_layout(dcpl.id) == H5D_VIRTUAL)
    fail(op, "'", file, "': key '", dataset,
         "' is a virtual dataset (mapped from other datasets); ember reads only data held in the file itself");
  hid_t id = d.id;
  d.id = -1;
  return id;
}

std::vector<hsize_t> dims_of(hid_t d, const std::string& file, const std::string& dataset, const char* op) {
  Handle space(H5Dget_space(d), H5Sclose);
  int nd = space.id < 0 ? -1 : H5Sget_simple_extent_ndims(space.id);
  if (nd < 0 || nd > 32) fail(op, "dataset '", dataset, "' in '", file, "' has an unreadable shape");
  if (H5Sget_simple_extent_type(space.id) == H5S_NULL)
    fail(op, "dataset '", dataset, "' in '", file, "' has a null dataspace (h5py's Empty): it holds no value to read");
  std::vector<hsize_t> dims(nd);
  if (nd > 0) H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  return dims;
}

// Refuses a dataset whose elements are not all in the file before memory is allocated
// for them: contiguous data cut short, and chunked data declaring far more than it
// stores (chunks never written, which HDF5 would fill in: a small file could otherwise
// ask for gigabytes). No compression HDF5 has built in packs more than about 1032:1.
void check_storage(hid_t d, uint64_t count, size_t elem, const std::string& file, const std::string& dataset,
                   const char* op) {
  Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  if (count == 0 || dcpl.id < 0) return;
  const hsize_t stored = H5Dget_storage_size(d);
  const bool huge = count > (uint64_t(1) << 40) / elem;
  if (stored == 0)
    fail(op, "dataset '", dataset, "' in '", file, "' declares ", count, " elements but was never written (it stores ",
         "none); ember reads only data held in the file itself");
  if (H5Pget_layout(dcpl.id) == H5D_CONTIGUOUS) {
    if (huge || stored < count * elem)
      fail(op, "dataset '", dataset, "' in '", file, "' is truncated: ", count, " elements need ", count * elem,
           " bytes, ", stored, " are stored");
  } else if (huge || count * elem > 1100 * (uint64_t)stored + (uint64_t(1) << 20)) {
    fail(op, "dataset '", dataset, "' in '", file, "' declares ", count, " elements but stores only ", stored,
         " bytes of them (chunks never written); ember reads only data held in the file itself");
  }
}

// An HDF5 element type in a word: float32, int8, uint64, string, compound, ...
std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t bits = 8 * H5Tget_size(type);
  switch (cls) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER: return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_ENUM: return "enum";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ARRAY: return "array";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    default: return "other";
  }
}

uint64_t count_of(const std::vector<hsize_t>& dims) {
  uint64_t n = 1;
  for (hsize_t d : dims) n = (d != 0 && n > (uint64_t(1) << 40) / d) ? (uint64_t(1) << 41) : n * d;
  return n;
}

// h5py stores numpy's bool as an enum of one byte with exactly FALSE = 0 and TRUE = 1.
bool is_bool_enum(hid_t type) {
  if (H5Tget_class(type) != H5T_ENUM || H5Tget_size(type) != 1 || H5Tget_nmembers(type) != 2) return false;
  for (unsigned i = 0; i < 2; i++) {
    char* name = H5Tget_member_name(type, i);
    if (!name) return false;
    const std::string member(name);
    H5free_memory(name);
    unsigned char value = 0xff;  // a one-byte enum's member values are one byte
    if (H5Tget_member_value(type, i, &value) < 0) return false;
    if (!((member == "FALSE" && value == 0) || (member == "TRUE" && value == 1))) return false;
  }
  return true;
}

}  // namespace

// The attribute that marks a float32 dataset as holding a bfloat16 tensor's values.
constexpr const char* kDTypeAttr = "dtype";

// A float32 tensor read from a dataset marked bfloat16, as bfloat16: the top half of each
// value, bit for bit (NaN payloads included) when every value is a bfloat16, as ember
// writes them; else (values changed by another program) each rounded to nearest even.
static Tensor float32_to_bfloat16(const Tensor& t) {
  const int64_t n = t.numel();
  const uint32_t* in = static_cast<const uint32_t*>(t.raw_data());
  for (int64_t i = 0; i < n; i++)
    if (in[i] & 0xffffu) return t.to(kBFloat16);
  Tensor out = empty(t.shape(), kBFloat16);
  BFloat16* o = out.data<BFloat16>();
  for (int64_t i = 0; i < n; i++) o[i] = BFloat16::from_bits(uint16_t(in[i] >> 16));
  return out;
}

Tensor Reader::read(const std::string& dataset) const {
  const char* op = "h5::read";
  Handle d(open_dataset(id_, file_, dataset, op), H5Dclose);
  std::vector<hsize_t> dims = dims_of(d.id, file_, dataset, op);
  Handle type(H5Dget_type(d.id), H5Tclose);
  H5T_class_t cls = H5Tget_class(type.id);
  size_t size = H5Tget_size(type.id);
  DType dt;
  hid_t mem;
  if (cls == H5T_FLOAT && (size == 4 || size == 8)) {
    dt = size == 4 ? kFloat32 : kFloat64;
    mem = size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  } else if ((cls == H5T_INTEGER && size == 1 && H5Tget_sign(type.id) == H5T_SGN_NONE) ||
             is_bool_enum(type.id)) {
    dt = kBool;
    mem = H5T_NATIVE_UINT8;
  } else if ((cls == H5T_INTEGER || cls == H5T_ENUM) && size <= 8) {
    // every integer type but uint64 converts to int64 exactly; HDF5 would clip uint64's
    // values past 2^63 without a word
    if (cls == H5T_INTEGER && size == 8 && H5Tget_sign(type.id) == H5T_SGN_NONE)
      fail(op, "dataset '", dataset, "' in '", file_, "' is stored as uint64, whose values int64 cannot all hold");
    dt = kInt64;
    mem = H5T_NATIVE_INT64;
  } else {
    fail(op, "dataset '", dataset, "' in '", file_, "' is stored as ", type_name(type.id),
         "; ember reads float32, float64, integers, and uint8 and h5py's bool enum (as bool)");
  }
  check_storage(d.id, count_of(dims), size, file_, dataset, op);
  Tensor t = empty(Shape(dims.begin(), dims.end()), dt);
  if (t.numel() > 0 && H5Dread(d.id, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)
    fail(op, "cannot read dataset '", dataset, "' in '", file_, "'");
  if (dt == kBool) {  // a bool holds 0 or 1, nothing else
    const uint8_t* b = static_cast<const uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); i++)
      if (b[i] > 1)
        fail(op, "dataset '", dataset, "' in '", file_, "' holds ", (int)b[i], " at flat index ", i,
             "; data read as bool must be 0 or 1");
  }
  // a bfloat16 tensor is stored as float32 (exact) marked dtype = "bfloat16", a scalar string
  // (another program's attribute of that name - an array, a number, other text - is not the mark)
  bool marked = false;
  if (has_attr(dataset, kDTypeAttr)) {
    Handle a(H5Aopen_by_name(id_, dataset.c_str(), kDTypeAttr, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    Handle space(a.id < 0 ? -1 : H5Aget_space(a.id), H5Sclose), at(a.id < 0 ? -1 : H5Aget_type(a.id), H5Tclose);
    if (space.id >= 0 && at.id >= 0 && H5Sget_simple_extent_type(space.id) == H5S_SCALAR &&
        H5Tget_class(at.id) == H5T_STRING) {
      try {
        marked = attr_string(dataset, kDTypeAttr) == "bfloat16";
      } catch (const Error&) {  // (text ember would not write: a NUL inside it, say)
      }
    }
  }
  if (marked && dt != kFloat32)
    fail(op, "dataset '", dataset, "' in '", file_, "' is marked bfloat16 but stored as ", type_name(type.id),
         "; a bfloat16 tensor is stored as float32");
  return marked ? float32_to_bfloat16(t) : t;
}

std::string Reader::stored_type(const std::string& dataset) const {
  Handle d(open_dataset(id_, file_, dataset, "h5::stored_type"), H5Dclose);
  Handle type(H5Dget_type(d.id), H5Tclose);
  return type_name(type.id);
}

std::vector<uint64_t> Reader::read_u64(const std::string& dataset) const {
  const char* op = "h5::read_u64";
  Handle d(open_dataset(id_, file_, dataset, op), H5Dclose);
  std::vector<hsize_t> dims = dims_of(d.id, file_, dataset, op);
  Handle type(H5Dget_type(d.id), H5Tclose);
  if (dims.size() != 1 || H5Tget_class(type.id) != H5T_INTEGER || H5Tget_size(type.id) != 8 ||
      H5Tget_sign(type.id) != H5T_SGN_NONE)
    fail(op, "dataset '", dataset, "' in '", file_, "' should be a 1-D array of unsigned 64-bit integers");
  check_storage(d.id, dims[0], 8, file_, dataset, op);
  std::vector<uint64_t> v(dims[0]);
  if (!v.empty() && H5Dread(d.id, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(op, "cannot read dataset '", dataset, "' in '", file_, "'");
  return v;
}

std::vector<std::string> Reader::read_strings(const std::string& dataset) const {
  const char* op = "h5::read_strings";
  Handle d(open_dataset(id_, file_, dataset, op), H5Dclose);
  std::vector<hsize_t> dims = dims_of(d.id, file_, dataset, op);
  Handle type(H5Dget_type(d.id), H5Tclose);
  if (dims.size() != 1 || H5Tget_class(type.id) != H5T_STRING || H5Tis_variable_str(type.id) <= 0)
    fail(op, "dataset '", dataset, "' in '", file_, "' should be a 1-D array of variable-length strings");
  if (dims[0] > (uint64_t(1) << 32)) fail(op, "dataset '", dataset, "' in '", file_, "' is implausibly long");
  check_storage(d.id, dims[0], 1, file_, dataset, op);  // each string takes more than a byte in the file
  Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt.id, H5T_VARIABLE);
  H5Tset_cset(mt.id, H5T_CSET_UTF8);
  std::vector<char*> raw(dims[0], nullptr);
  if (!raw.empty() && H5Dread(d.id, mt.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
    fail(op, "cannot read dataset '", dataset, "' in '", file_, "'");
  std::vector<std::string> out;
  for (char* s : raw) {
    out.emplace_back(s ? s : "");
    H5free_memory(s);
  }
  return out;
}

bool Reader::has_attr(const std::string& object, const std::string& name) const {
  return has(object) && H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::string> Reader::attr_names(const std::string& object) const {
  const char* op = "h5::Reader::attr_names";
  if (!has(object)) fail(op, "'", file_, "' has no object '", object, "'");
  H5O_info_t info;
  if (H5Oget_info_by_name(id_, object.c_str(), &info, H5P_DEFAULT) < 0)
    fail(op, "cannot inspect '", object, "' in '", file_, "'");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.num_attrs; i++) {
    ssize_t n = H5Aget_name_by_idx(id_, object.c_str(), H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(op, "cannot read attribute ", i, " of '", object, "' in '", file_, "'");
    std::string name(size_t(n) + 1, '\0');
    H5Aget_name_by_idx(id_, object.c_str(), H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(size_t(n));
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

hid_t open_attr(hid_t f, const std::string& file, const std::string& object, const std::string& name, const char* op) {
  if (!path_exists(f, file, object) || H5Aexists_by_name(f, object.c_str(), name.c_str(), H5P_DEFAULT) <= 0)
    fail(op, "'", file, "' has no attribute '", name, "' on '", object, "'");
  hid_t a = H5Aopen_by_name(f, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) fail(op, "cannot open attribute '", name, "' on '", object, "' in '", file, "'");
  Handle space(H5Aget_space(a), H5Sclose);
  if (space.id < 0 || H5Sget_simple_extent_npoints(space.id) != 1) {
    H5Aclose(a);
    fail(op, "attribute '", name, "' on '", object, "' in '", file, "' should hold one value");
  }
  return a;
}

}  // namespace

bool Reader::attr_is_string(const std::string& object, const std::string& name) const {
  Handle a(open_attr(id_, file_, object, name, "h5::Reader::attr_is_string"), H5Aclose);
  Handle type(H5Aget_type(a.id), H5Tclose);
  return H5Tget_class(type.id) == H5T_STRING;
}

bool Reader::attr_is_integer(const std::string& object, const std::string& name) const {
  Handle a(open_attr(id_, file_, object, name, "h5::Reader::attr_is_integer"), H5Aclose);
  Handle type(H5Aget_type(a.id), H5Tclose);
  return H5Tget_class(type.id) == H5T_INTEGER;
}

double Reader::attr_double(const std::string& object, const std::string& name) const {
  const char* op = "h5::attr_double";
  Handle a(open_attr(id_, file_, object, name, op), H5Aclose);
  Handle type(H5Aget_type(a.id), H5Tclose);
  H5T_class_t cls = H5Tget_class(type.id);
  double v = 0;
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || H5Aread(a.id, H5T_NATIVE_DOUBLE, &v) < 0)
    fail(op, "cannot read attribute '", name, "' on '", object, "' in '", file_, "' as a number");
  return v;
}

int64_t Reader::attr_int(const std::string& object, const std::string& name) const {
  const char* op = "h5::attr_int";
  Handle a(open_attr(id_, file_, object, name, op), H5Aclose);
  Handle type(H5Aget_type(a.id), H5Tclose);
  H5T_class_t cls = H5Tget_class(type.id);
  if (cls == H5T_INTEGER && H5Tget_sign(type.id) == H5T_SGN_NONE && H5Tget_size(type.id) == 8) {
    uint64_t v = 0;  // HDF5 would clip past 2^63 into int64 without a word
    if (H5Aread(a.id, H5T_NATIVE_UINT64, &v) < 0)
      fail(op, "cannot read attribute '", name, "' on '", object, "' in '", file_, "' as an integer");
    if (v > (uint64_t)INT64_MAX)
      fail(op, "attribute '", name, "' on '", object, "' in '", file_, "' holds ", v, ", past what int64 holds");
    return (int64_t)v;
  }
  if (cls == H5T_INTEGER) {
    int64_t v = 0;
    if (H5Aread(a.id, H5T_NATIVE_INT64, &v) < 0)
      fail(op, "cannot read attribute '", name, "' on '", object, "' in '", file_, "' as an integer");
    return v;
  }
  double v = 0;
  if (cls != H5T_FLOAT || H5Aread(a.id, H5T_NATIVE_DOUBLE, &v) < 0 || v != std::floor(v) || std::fabs(v) > 9e15)
    fail(op, "attribute '", name, "' on '", object, "' in '", file_, "' should be an integer");
  return (int64_t)v;
}

std::string Reader::attr_string(const std::string& object, const std::string& name) const {
  const char* op = "h5::attr_string";
  Handle a(open_attr(id_, file_, object, name, op), H5Aclose);
  Handle type(H5Aget_type(a.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_STRING)
    fail(op, "attribute '", name, "' on '", object, "' in '", file_, "' is not a string");
  if (H5Tis_variable_str(type.id) > 0) {
    char* s = nullptr;
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.id, H5T_VARIABLE);
    H5Tset_cset(mt.id, H5Tget_cset(type.id));
    if (H5Aread(a.id, mt.id, &s) < 0) fail(op, "cannot read attribute '", name, "' in '", file_, "'");
    std::string r = s ? s : "";
    H5free_memory(s);
    return r;
  }
  size_t n = H5Tget_size(type.id);
  if (n > (1u << 20)) fail(op, "attribute '", name, "' on '", object, "' in '", file_, "' is implausibly long");
  std::vector<char> buf(n + 1, 0);
  if (H5Aread(a.id, type.id, buf.data()) < 0) fail(op, "cannot read attribute '", name, "' in '", file_, "'");
  // a fixed-length string ends at its first NUL; text after one would be lost unseen
  const size_t len = std::strlen(buf.data());
  if (std::any_of(buf.begin() + (ptrdiff_t)len, buf.end(), [](char c) { return c != 0; }))
    fail(op, "attribute '", name, "' on '", object, "' in '", file_, "' holds a NUL byte inside its text (at byte ",
         len, " of ", n, ")");
  return std::string(buf.data(), len);
}

bool exists(const std::string& file, const std::string& path) { return Reader(file).has(path); }
Tensor read(const std::string& file, const std::string& dataset) { return Reader(file).read(dataset); }
double attr_double(const std::string& file, const std::string& object, const std::string& name) {
  return Reader(file).attr_double(object, name);
}
std::string attr_string(const std::string& file, const std::string& object, const std::string& name) {
  return Reader(file).attr_string(object, name);
}

// ---------------------------------------------------------------- Writer

// A file on disk is built in memory too and written at close() with every system call
// checked: a full disk then fails one write with its reason, and HDF5 is never left
// holding a file it could not close (its exit handler would retry, and crash).
Writer::Writer(const std::string& file, size_t userblock) : Writer(in_memory(file, userblock)) {
  in_memory_ = false;
  uncaught_ = std::uncaught_exceptions();
  // fail early, not at close: what close() would refuse, and a directory it cannot write in
  const char* op = "h5::Writer";
  if (std::filesystem::path(file).filename().empty()) fail(op, "'", file, "' names a directory, not a file");
  io::check_regular_or_missing(file, op);
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(op, "cannot create '", file, "' in '", dir, "': ", std::strerror(errno));
}

Writer Writer::in_memory(const std::string& name, size_t userblock) {
  quiet();
  Writer w;
  w.file_ = name;
  w.in_memory_ = true;
  w.userblock_ = userblock;
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose), fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_obj_track_times(fcpl.id, false);  // the root group's times too
  if (userblock > 0 && H5Pset_userblock(fcpl.id, userblock) < 0)
    fail("h5::Writer", "a user block must be a power of two of at least 512 bytes, got ", userblock);
  if (H5Pset_fapl_core(fapl.id, 1 << 20, 0) < 0) fail("h5::Writer", "cannot prepare an in-memory file for '", name, "'");
  // the core driver without a backing store never opens the name, which only has to be unique
  static std::atomic<uint64_t> counter{0};
  const std::string unique = cat_str("ember-image-", counter++);
  w.id_ = H5Fcreate(unique.c_str(), H5F_ACC_EXCL, fcpl.id, fapl.id);
  if (w.id_ < 0) fail("h5::Writer", "cannot create an in-memory file for '", name, "'");
  return w;
}

Writer::Writer(Writer&& o) noexcept
    : file_(std::move(o.file_)), id_(o.id_), in_memory_(o.in_memory_), userblock_(o.userblock_), uncaught_(o.uncaught_) {
  o.id_ = -1;
}

std::vector<uint8_t> Writer::image() {
  const char* op = "h5::Writer::image";
  if (id_ < 0) fail(op, "'", file_, "' is closed");
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) fail(op, "cannot flush the in-memory file for '", file_, "'");
  ssize_t n = H5Fget_file_image(id_, nullptr, 0);
  if (n < 0) fail(op, "cannot size the in-memory file for '", file_, "'");
  // HDF5 1.10's core driver leaves the user block out of the image (the superblock
  // records it as the base address): put it back in front, zeroed.
  std::vector<uint8_t> bytes(userblock_ + (size_t)n, 0);
  if (H5Fget_file_image(id_, bytes.data() + userblock_, (size_t)n) != n)
    fail(op, "cannot copy the in-memory file for '", file_, "'");
  static const uint8_t kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (userblock_ > 0 && (size_t)n >= userblock_ + 8 && std::memcmp(bytes.data() + userblock_, kSignature, 8) != 0 &&
      std::memcmp(bytes.data() + 2 * userblock_, kSignature, 8) == 0)
    bytes.erase(bytes.begin(), bytes.begin() + (ptrdiff_t)userblock_);  // a library that keeps it
  return bytes;
}

Writer::~Writer() {
  if (std::uncaught_exceptions() > uncaught_ && !in_memory_) {  // unwinding: the file is left as it was
    if (id_ >= 0) H5Fclose(id_);
    return;
  }
  try {
    close();
  } catch (...) {
  }
}

void Writer::close() {
  if (id_ < 0) return;
  std::vector<uint8_t> bytes;
  if (!in_memory_) bytes = image();
  H5Fclose(id_);  // in memory: nothing to fail on
  id_ = -1;
  if (!in_memory_) io::replace_file(file_, bytes.data(), bytes.size(), "h5::Writer::close");
}

namespace {

// HDF5 names and strings are C strings, which end at the first NUL: a string holding one
// would be stored cut short, so it is refused. what says where it was to go.
void check_no_nul(const std::string& s, const char* op, const std::string& file, std::string what) {
  size_t at = s.find('\0');
  if (at == std::string::npos) return;
  for (size_t i = what.find('\0'); i != std::string::npos; i = what.find('\0', i + 2)) what.replace(i, 1, "\\0");
  fail(op, "'", file, "': ", what, " holds a NUL byte at offset ", at, " (of ", s.size(),
       " bytes); HDF5 strings end at the first NUL, so it cannot be stored whole");
}

}  // namespace

void Writer::make_groups(const std::string& path) {
  if (id_ < 0) fail("h5::Writer", "'", file_, "' is closed");
  check_no_nul(path, "h5::Writer", file_, cat_str("the key '", path, "'"));
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string g = path.substr(0, pos);
    if (g.empty() || H5Lexists(id_, g.c_str(), H5P_DEFAULT) > 0) continue;
    Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
    H5Pset_obj_track_times(gcpl.id, false);  // no times: the same contents give the same bytes
    Handle h(H5Gcreate2(id_, g.c_str(), H5P_DEFAULT, gcpl.id, H5P_DEFAULT), H5Gclose);
    if (h.id < 0) fail("h5::Writer", "cannot create group '", g, "' in '", file_, "'");
  }
}

void Writer::group(const std::string& path) {
  make_groups(path + "/");
}

namespace {

void write_dataset(hid_t f, const std::string& file, const std::string& dataset, hid_t file_type, hid_t mem_type,
                   const std::vector<hsize_t>& dims, const void* data, bool scalar) {
  if (f < 0) fail("h5::Writer::write", "'", file, "' is closed");
  if (dataset.empty() || dataset.back() == '/')
    fail("h5::Writer::write", "a dataset needs a name, got '", dataset, "' for '", file, "'");
  if (H5Lexists(f, dataset.c_str(), H5P_DEFAULT) > 0)
    fail("h5::Writer::write", "'", dataset, "' already exists in '", file, "'");
  Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple((int)dims.size(), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_obj_track_times(dcpl.id, false);  // no times: the same contents give the same bytes
  Handle d(H5Dcreate2(f, dataset.c_str(), file_type, space.id, H5P_DEFAULT, dcpl.id, H5P_DEFAULT), H5Dclose);
  if (d.id < 0) fail("h5::Writer::write", "cannot create dataset '", dataset, "' in '", file, "'");
  uint64_t n = 1;
  for (hsize_t x : dims) n *= x;
  if (n > 0 && H5Dwrite(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail("h5::Writer::write", "cannot write dataset '", dataset, "' in '", file, "'");
}

}  // namespace

void Writer::write(const std::string& dataset, const Tensor& t_in) {
  if (!t_in.defined())
    fail_undefined(t_in, "h5::Writer::write", cat_str("the tensor for key '", dataset, "' of '", file_, "'").c_str());
  make_groups(dataset);
  Tensor t = t_in.contiguous();
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  hid_t file_type = -1, mem_type = -1;
  switch (t.dtype()) {
    case DType::Float32: file_type = H5T_IEEE_F32LE; mem_type = H5T_NATIVE_FLOAT; break;
    case DType::Float64: file_type = H5T_IEEE_F64LE; mem_type = H5T_NATIVE_DOUBLE; break;
    case DType::Int64: file_type = H5T_STD_I64LE; mem_type = H5T_NATIVE_INT64; break;
    case DType::Bool: file_type = H5T_STD_U8LE; mem_type = H5T_NATIVE_UINT8; break;
    case DType::BFloat16:  // as float32 (every bfloat16 is one), which h5py and numpy read as is
      t = t.to(kFloat32);
      file_type = H5T_IEEE_F32LE;
      mem_type = H5T_NATIVE_FLOAT;
      break;
  }
  write_dataset(id_, file_, dataset, file_type, mem_type, dims, t.raw_data(), dims.empty());
  if (t_in.dtype() == kBFloat16) attr(dataset, kDTypeAttr, std::string("bfloat16"));
}

void Writer::write_u64(const std::string& dataset, const std::vector<uint64_t>& values) {
  make_groups(dataset);
  write_dataset(id_, file_, dataset, H5T_STD_U64LE, H5T_NATIVE_UINT64, {values.size()}, values.data(), false);
}

void Writer::write_strings(const std::string& dataset, const std::vector<std::string>& values) {
  make_groups(dataset);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, H5T_VARIABLE);
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  std::vector<const char*> ptrs;
  for (size_t i = 0; i < values.size(); i++) {
    check_no_nul(values[i], "h5::Writer::write_strings", file_, cat_str("key '", dataset, "', string ", i));
    ptrs.push_back(values[i].c_str());
  }
  write_dataset(id_, file_, dataset, type.id, type.id, {values.size()}, ptrs.data(), false);
}

namespace {

void write_attr(hid_t f, const std::string& file, const std::string& object, const std::string& name, hid_t file_type,
                hid_t mem_type, const void* value) {
  if (f < 0) fail("h5::Writer::attr", "'", file, "' is closed");
  check_no_nul(object, "h5::Writer::attr", file, cat_str("the key '", object, "'"));
  check_no_nul(name, "h5::Writer::attr", file, cat_str("the name of attribute '", name, "' on '", object, "'"));
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists_by_name(f, object.c_str(), name.c_str(), H5P_DEFAULT) > 0)
    H5Adelete_by_name(f, object.c_str(), name.c_str(), H5P_DEFAULT);
  Handle a(H5Acreate_by_name(f, object.c_str(), name.c_str(), file_type, space.id, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT),
           H5Aclose);
  if (a.id < 0 || H5Awrite(a.id, mem_type, value) < 0)
    fail("h5::Writer::attr", "cannot write attribute '", name, "' on '", object, "' in '", file, "'");
}

}  // namespace

void Writer::attr(const std::string& object, const std::string& name, double value) {
  write_attr(id_, file_, object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void Writer::attr_int(const std::string& object, const std::string& name, int64_t value) {
  write_attr(id_, file_, object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void Writer::attr(const std::string& object, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, H5T_VARIABLE);
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  check_no_nul(value, "h5::Writer::attr", file_, cat_str("attribute '", name, "' on '", object, "'"));
  const char* p = value.c_str();
  write_attr(id_, file_, object, name, type.id, type.id, &p);
}

}  // namespace ember::h5
