// Tensors to and from files, as torch.save / torch.load and NumPy's np.save / np.load:
// one tensor, or a named set (a module's state_dict, a few arrays to compare in Python).
// The format follows the file's extension:
//   .h5 / .hdf5  HDF5, one dataset per name ("a/b" makes a group a), readable by h5py;
//   .npy         one tensor, NumPy's format (np.load reads it, and ember reads np.save's);
//   .npz         named tensors, NumPy's zip of .npy files (np.savez / np.savez_compressed).
// Every dtype ember has is written as itself (bool as NumPy's bool, uint8 in HDF5); reading
// also takes NumPy's other integer types (as int64, exactly) and Fortran order. Writing
// replaces the file whole or not at all (a crash or a full disk leaves the old one); a
// symbolic link at the path is replaced too, not written through. A file
// that is damaged, foreign or does not match what it declares is refused with an Error
// naming the function, the file and what is wrong.
//
//   io::save("weights.npz", model.state_dict());
//   model.load_state_dict(io::load_dict("weights.npz"));
//   Tensor x = io::load("x.npy");               // np.save("x.npy", a) in Python
#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // as nn::NamedTensors
using TensorDict = std::map<std::string, Tensor>;  // as nn::StateDict

// One tensor: the whole .npy file, the dataset "tensor" of an HDF5 file, or the array
// "arr_0" of an .npz (NumPy's name for an unnamed array).
void save(const std::string& path, const Tensor& t);
// Named tensors, in order; names are unique, non-empty, without NUL (.npz: without '/').
void save(const std::string& path, const NamedTensors& tensors);
void save(const std::string& path, const TensorDict& tensors);  // in name order
void save(const std::string& path, std::initializer_list<std::pair<std::string, Tensor>> tensors);  // {{"w", w}, ...}

// The one tensor a file holds (.npy, or an .h5/.npz holding exactly one).
Tensor load(const std::string& path);
// Every tensor of an .h5 (names by path, "a/b", sorted) or .npz file (in the file's
// order). A .npy file gives one, named "tensor".
NamedTensors load_named(const std::string& path);
TensorDict load_dict(const std::string& path);  // load_named as a map: what load_state_dict takes

}  // namespace ember::io
