// Reading HDF5 datasets and attributes into tensors (the C API, behind a small surface).
// Used for reference cases and, later, checkpoints. Errors name the file and the key.
#pragma once
#include <string>

#include "core/tensor.h"

namespace ember::h5 {

bool exists(const std::string& file, const std::string& path);  // dataset or group
// A dataset as a tensor: float64 and float32 keep their type, integers become int64,
// and 8-bit unsigned data becomes bool.
Tensor read(const std::string& file, const std::string& dataset);
double attr_double(const std::string& file, const std::string& object, const std::string& name);
std::string attr_string(const std::string& file, const std::string& object, const std::string& name);

// Writes a new HDF5 file (replacing any file at that path). Datasets are stored
// little-endian in the tensor's own type (bool as uint8); intermediate groups are created.
class Writer {
 public:
  explicit Writer(const std::string& file);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void write(const std::string& dataset, const Tensor& t);
  void attr(const std::string& object, const std::string& name, double value);
  void attr(const std::string& object, const std::string& name, const std::string& value);
  void close();  // flushes; also done by the destructor

 private:
  void make_groups(const std::string& path);
  std::string file_;
  int64_t id_ = -1;
};

}  // namespace ember::h5
