// HDF5 files through the C API, behind a small surface: reading datasets and attributes
// into tensors (reference cases, checkpoints) and writing them. Errors name the file and
// the key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::h5 {

// An HDF5 file open for reading, from a path or from a file image held in memory (the
// image must outlive the Reader). Every method throws ember::Error naming the file and
// the key when something is missing or of the wrong kind.
class Reader {
 public:
  explicit Reader(const std::string& file);  // Error when the file cannot be opened as HDF5
  // A Reader of the HDF5 file image data[0, size); name is used in messages only.
  static Reader from_image(const std::string& name, const void* data, size_t size);
  ~Reader();
  Reader(Reader&& other) noexcept;  // takes over other's file; other is left closed
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  Reader& operator=(Reader&&) = delete;

  const std::string& file() const { return file_; }  // the path or name it was opened with
  bool has(const std::string& path) const;  // a dataset or a group
  // Whether path names a group, or a dataset; false when it names nothing.
  ///@{
  bool is_group(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  ///@}
  std::vector<std::string> children(const std::string& group) const;  // names, sorted
  // Where the object at path lives in the file: two paths (hard links) to one object
  // give the same address. Error when there is no object at path.
  uint64_t object_address(const std::string& path) const;

  // A dataset as a tensor: float64 and float32 keep their type, integers become int64
  // (uint64, which int64 cannot hold whole, is refused), and 8-bit unsigned data becomes
  // bool (it must hold 0 and 1 only). A float32 dataset with the string attribute
  // dtype = "bfloat16" (as write() stores a bfloat16 tensor) becomes bfloat16, bit for bit.
  Tensor read(const std::string& dataset) const;
  // The element type a dataset is stored with, as read() would not tell: "float32",
  // "float64", "int8" ... "int64", "uint8" ... "uint64", "enum", "string", "compound", ...
  std::string stored_type(const std::string& dataset) const;
  std::vector<uint64_t> read_u64(const std::string& dataset) const;  // 1-D unsigned 64-bit
  std::vector<std::string> read_strings(const std::string& dataset) const;  // 1-D strings

  // Whether object (a group or dataset) exists and has the attribute name.
  bool has_attr(const std::string& object, const std::string& name) const;
  std::vector<std::string> attr_names(const std::string& object) const;  // sorted
  // The stored type of an attribute: a string, or an integer.
  ///@{
  bool attr_is_string(const std::string& object, const std::string& name) const;
  bool attr_is_integer(const std::string& object, const std::string& name) const;
  ///@}
  // An integer or real attribute as a double; Error for any other type.
  double attr_double(const std::string& object, const std::string& name) const;
  int64_t attr_int(const std::string& object, const std::string& name) const;  // must hold an integer
  std::string attr_string(const std::string& object, const std::string& name) const;  // must be a string

 private:
  Reader() = default;
  std::string file_;
  int64_t id_ = -1;
};

// One-shot helpers: open file with a Reader and call its method of the same name.
///@{
bool exists(const std::string& file, const std::string& path);
Tensor read(const std::string& file, const std::string& dataset);
double attr_double(const std::string& file, const std::string& object, const std::string& name);
std::string attr_string(const std::string& file, const std::string& object, const std::string& name);
///@}

// Writes a new HDF5 file (replacing any file at that path). The file is built in memory
// and put in place whole by close(), as io::save does: a crash, a kill or a full disk
// leaves the old file or the new one, never a part; close() throws with the system's
// reason when the write fails (call it: the destructor writes too, but cannot report, and
// a Writer destroyed by an exception writes nothing). Datasets are stored
// little-endian in the tensor's own type (bool as uint8; bfloat16 as float32, which holds
// each value exactly, with the string attribute dtype = "bfloat16"); intermediate groups
// are created. userblock reserves that many bytes (0, or a power of two >= 512) at the start
// of the file for the caller's own header; HDF5 readers skip it.
class Writer {
 public:
  // Error at once when file names a directory, a device or a FIFO, or a directory that
  // does not exist or cannot be written, or for a bad userblock; the file itself is left
  // alone until close().
  explicit Writer(const std::string& file, size_t userblock = 0);
  // A file built in memory only (HDF5's core driver): nothing touches the disk, and
  // image() hands over its bytes for the caller to write as it sees fit (checkpoints do,
  // checking every system call). name is used in messages.
  static Writer in_memory(const std::string& name, size_t userblock = 0);
  ~Writer();
  Writer(Writer&& other) noexcept;  // takes over other's file; other is left closed
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  Writer& operator=(Writer&&) = delete;
  std::vector<uint8_t> image();  // the whole file, user block included (in_memory only)
  void group(const std::string& path);  // creates a (possibly empty) group
  void write(const std::string& dataset, const Tensor& t);  // t's values; Error when t is undefined
  void write_u64(const std::string& dataset, const std::vector<uint64_t>& values);  // 1-D unsigned 64-bit
  void write_strings(const std::string& dataset, const std::vector<std::string>& values);  // UTF-8
  // Sets attribute name on object (a group or dataset already written): a double, an
  // int64 or a string (which must not contain NUL).
  ///@{
  void attr(const std::string& object, const std::string& name, double value);
  void attr_int(const std::string& object, const std::string& name, int64_t value);
  void attr(const std::string& object, const std::string& name, const std::string& value);
  ///@}
  void close();  // writes the file (a file on disk); also done by the destructor

 private:
  Writer() = default;
  void make_groups(const std::string& path);
  std::string file_;
  int64_t id_ = -1;
  bool in_memory_ = false;
  size_t userblock_ = 0;
  int uncaught_ = 0;  // std::uncaught_exceptions() when made: more at destruction means unwinding
};

}  // namespace ember::h5
