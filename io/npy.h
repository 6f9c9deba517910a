// NumPy's file formats, inside io (not installed): a .npy file is a header naming dtype,
// order and shape, then the raw elements; a .npz file is a zip archive of .npy files.
// The format: numpy.org/doc/stable/reference/generated/numpy.lib.format.html.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember::io::npy {

// A .npy file holding t (format version 1.0, little-endian, C order); Error for bfloat16.
std::vector<uint8_t> encode(const Tensor& t);

// The tensor a .npy image holds. where names it in errors ("'x.npy'", "'x.npz': member
// 'w.npy'"); op names the function.
Tensor decode(const uint8_t* data, size_t size, const std::string& where, const char* op);

using Members = std::vector<std::pair<std::string, std::vector<uint8_t>>>;  // name, bytes

// A zip archive of the members, stored uncompressed (what np.savez writes), with fixed
// timestamps so that the same tensors give the same bytes.
std::vector<uint8_t> zip(const Members& members, const std::string& path, const char* op);

// The members of a zip archive, stored or deflated (np.savez_compressed), zip64 included;
// each checked against its CRC-32.
Members unzip(const std::vector<uint8_t>& file, const std::string& path, const char* op);

}  // namespace ember::io::npy
