// save / load of tensors by file extension: HDF5 here, NumPy's formats in npy.cpp.
#include "io/tensor_file.h"

#include <algorithm>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/file_io.h"
#include "io/h5.h"
#include "io/npy.h"

namespace ember::io {

namespace {

enum class Format { H5, Npy, Npz };

Format format_of(const std::string& path, const char* op) {
  auto ends = [&](const std::string& ext) {
    if (path.size() < ext.size()) return false;
    std::string tail = path.substr(path.size() - ext.size());
    std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    return tail == ext;
  };
  if (ends(".h5") || ends(".hdf5")) return Format::H5;
  if (ends(".npy")) return Format::Npy;
  if (ends(".npz")) return Format::Npz;
  fail(op, "'", path, "': the extension names no format ember knows; expected .h5, .hdf5, .npy or .npz");
}

void check_names(const NamedTensors& tensors, const std::string& path, Format f, const char* op) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name.find('\0') != std::string::npos)
      fail(op, "'", path, "': the name ", printable(name), " is empty or holds a NUL byte");
    if (f == Format::Npz && name.find('/') != std::string::npos)
      fail(op, "'", path, "': the name ", printable(name), " holds '/', which an .npz member cannot (use .h5)");
    // every part of a name ('/' separates them in HDF5) is a plain name: not empty, "." or ".."
    for (size_t a = 0; a <= name.size();) {
      size_t b = f == Format::H5 ? name.find('/', a) : std::string::npos;
      if (b == std::string::npos) b = name.size();
      const std::string part = name.substr(a, b - a);
      if (part.empty() || part == "." || part == "..")
        fail(op, "'", path, "': the name ", printable(name), " is not ",
             f == Format::H5 ? "a path of plain names separated by single '/'" : "a plain name", " (no '.' or '..')");
      a = b + 1;
    }
    if (!seen.insert(name).second) fail(op, "'", path, "': the name ", printable(name), " appears twice");
    check_defined(t, op, cat_str("tensor '", name, "'").c_str());
  }
  // an HDF5 name cannot be both a dataset and a group ("a" and "a/b")
  if (f == Format::H5)
    for (const auto& [name, t] : tensors)
      for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', at + 1))
        if (seen.count(name.substr(0, at)))
          fail(op, "'", path, "': '", name.substr(0, at), "' names a tensor and also a group of '", name, "'");
}

// Every dataset under group, with paths relative to the root, sorted.
// Every object once, under the first name found (as h5py's visit): a group linked from
// inside itself would otherwise be walked forever, and one linked twice read twice.
void datasets_under(const h5::Reader& r, const std::string& group, std::vector<std::string>& out,
                    std::set<uint64_t>& seen) {
  for (const std::string& child : r.children(group)) {
    const std::string full = group == "/" ? "/" + child : group + "/" + child;
    if (!seen.insert(r.object_address(full)).second) continue;
    if (r.is_group(full)) datasets_under(r, full, out, seen);
    else if (r.is_dataset(full)) out.push_back(full);
  }
}

// NumPy has no bfloat16: refused in .npy and .npz, naming the file and the tensor.
void check_numpy_dtype(const Tensor& t, const std::string& path, const std::string& name) {
  if (t.dtype() == kBFloat16)
    fail("io::save", "'", path, "': NumPy has no bfloat16, so the bfloat16 tensor ", name, " (shape ", t.shape(),
         ") cannot be saved as .npy or .npz; convert it with .to(kFloat32), or save as .h5 (which keeps bfloat16)");
}

}  // namespace

void save(const std::string& path, const Tensor& t) {
  check_defined(t, "io::save", "the tensor");
  const Format f = format_of(path, "io::save");
  if (f == Format::Npy) {
    check_numpy_dtype(t, path, "given");
    const std::vector<uint8_t> bytes = npy::encode(t);
    replace_file(path, bytes.data(), bytes.size(), "io::save");
    return;
  }
  save(path, NamedTensors{{f == Format::Npz ? "arr_0" : "tensor", t}});
}

void save(const std::string& path, const NamedTensors& tensors) {
  const char* op = "io::save";
  const Format f = format_of(path, op);
  if (f == Format::Npy) fail(op, "'", path, "': a .npy file holds one tensor; save named tensors as .npz or .h5");
  check_names(tensors, path, f, op);
  check_regular_or_missing(path, op);
  NoGradGuard no_grad;
  std::vector<uint8_t> bytes;
  if (f == Format::Npz) {
    npy::Members members;
    for (const auto& [name, t] : tensors) {
      check_numpy_dtype(t, path, "'" + name + "'");
      members.emplace_back(name + ".npy", npy::encode(t));
    }
    bytes = npy::zip(members, path, op);
  } else {
    h5::Writer w = h5::Writer::in_memory(path);
    for (const auto& [name, t] : tensors) w.write("/" + name, t.detach().contiguous());
    bytes = w.image();
  }
  replace_file(path, bytes.data(), bytes.size(), op);
}

namespace {

// Every tensor of the file at path, in its order; errors are op's (the caller's name).
NamedTensors load_all(const std::string& path, const char* op) {
  const Format f = format_of(path, op);
  const std::vector<uint8_t> file = read_file(path, op, f == Format::H5 ? "an HDF5 file" : "a NumPy file");
  NamedTensors out;
  if (f == Format::Npy) {
    out.emplace_back("tensor", npy::decode(file.data(), file.size(), cat_str("'", path, "'"), op));
  } else if (f == Format::Npz) {
    for (const auto& [member, bytes] : npy::unzip(file, path, op)) {
      if (member.size() < 5 || member.compare(member.size() - 4, 4, ".npy") != 0)
        fail(op, "'", path, "': member '", printable(member), "' is not a .npy array (np.savez writes only those)");
      out.emplace_back(member.substr(0, member.size() - 4),
                       npy::decode(bytes.data(), bytes.size(), cat_str("'", path, "': member '", printable(member), "'"), op));
    }
  } else {
    const h5::Reader r = h5::Reader::from_image(path, file.data(), file.size());
    std::vector<std::string> names;
    std::set<uint64_t> seen{r.object_address("/")};
    datasets_under(r, "/", names, seen);
    for (const std::string& name : names) out.emplace_back(name.substr(1), r.read(name));
  }
  return out;
}

}  // namespace

NamedTensors load_named(const std::string& path) { return load_all(path, "io::load_named"); }

void save(const std::string& path, const TensorDict& tensors) {
  save(path, NamedTensors(tensors.begin(), tensors.end()));
}

void save(const std::string& path, std::initializer_list<std::pair<std::string, Tensor>> tensors) {
  save(path, NamedTensors(tensors));
}

TensorDict load_dict(const std::string& path) {
  const NamedTensors all = load_all(path, "io::load_dict");
  return TensorDict(all.begin(), all.end());  // names are unique in every format ember reads
}

Tensor load(const std::string& path) {
  NamedTensors all = load_all(path, "io::load");
  if (all.size() != 1) {
    std::string names;
    for (size_t i = 0; i < all.size() && i < 5; i++) names += (i ? ", " : "") + all[i].first;
    fail("io::load", "'", path, "' holds ", all.size(), " tensors", all.empty() ? "" : " (" + names + (all.size() > 5 ? ", ..." : "") + ")",
         "; load_named reads a set, load one tensor");
  }
  return all[0].second;
}

}  // namespace ember::io
