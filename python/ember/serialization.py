"""ember.save and ember.load, as torch.save and torch.load for tensors and dicts of
tensors (a state_dict), over ember's files (io/tensor_file.h): the format follows the
extension - .h5/.hdf5 (HDF5, readable by h5py), .npz (NumPy's np.load), .npy (one tensor)."""

from . import _C


def save(obj, f):
    """Writes a tensor, or a dict of tensors by name, to the path f."""
    if isinstance(obj, _C.Tensor):
        _C._save_tensor(str(f), obj)
        return
    if not isinstance(obj, dict):
        raise TypeError(f"save: ember saves a Tensor or a dict of Tensors, got {type(obj).__name__}")
    for k, v in obj.items():
        if not isinstance(v, _C.Tensor):
            raise TypeError(f'save: "{k}" is a {type(v).__name__}; ember saves Tensors only')
    _C._save_named(str(f), [(str(k), v.detach()) for k, v in obj.items()])


def load(f):
    """What save wrote: a tensor for a .npy file or for a file holding only the unnamed
    tensor save(tensor) writes ("tensor" in HDF5, "arr_0" in .npz); a dict otherwise."""
    named = _C._load_named(str(f))
    if str(f).endswith(".npy"):
        return named[0][1]
    if len(named) == 1 and named[0][0] in ("tensor", "arr_0"):
        return named[0][1]
    return dict(named)
