"""ember.save and ember.load, as torch.save and torch.load for tensors and dicts of
tensors (a state_dict), over ember's files (io/tensor_file.h): the format follows the
extension - .h5/.hdf5 (HDF5, readable by h5py), .npz (NumPy's np.load), .npy (one tensor)."""

import os

from . import _C


def _path(f, what):
    """f as a path string: a str or os.PathLike, without NUL (which would cut the name)."""
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a path (str or os.PathLike), got {type(f).__name__}")
    path = os.fspath(f)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if "\0" in path:
        raise ValueError(f"{what}: the path contains a NUL character: {path!r}")
    return path


def save(obj, f):
    """Writes a tensor, or a dict of tensors by name, to the path f."""
    f = _path(f, "save")
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
    f = _path(f, "load")
    named = _C._load_named(f)
    if str(f).endswith(".npy"):
        return named[0][1]
    if len(named) == 1 and named[0][0] in ("tensor", "arr_0"):
        return named[0][1]
    return dict(named)


def save_checkpoint(f, model, optimizer=None, schedule=None, generators=None, progress=None,
                    config=None, vocab=None, extra=None):
    """Writes a training checkpoint in ember's format (docs/checkpoint-format.md), the file
    the C++ programs write and resume from: model is a state_dict (name -> tensor);
    optimizer and schedule are ember.optim's; generators maps names to ember.Generator;
    progress holds step, epoch and position; config maps names to int, float or str;
    vocab maps names to lists of tokens; extra maps names to tensors. Written atomically:
    a failure leaves any previous file at f as it was."""
    _C._save_checkpoint(
        _path(f, "save_checkpoint"), {str(k): v.detach() for k, v in model.items()},
        optimizer._impl if optimizer is not None else None,
        schedule._impl if schedule is not None else None,
        dict(generators or {}), dict(progress or {}), dict(config or {}),
        {k: list(v) for k, v in (vocab or {}).items()}, dict(extra or {}))


def read_checkpoint(f):
    """A checkpoint, checked (header, checksum, layout), as a dict: "model" (name ->
    tensor), "optimizer" (its state, for an optimizer's _impl.load_state, or None),
    "schedule" (kind, settings, last_step, or None), "progress" (step, epoch, position),
    "generators" (name -> [seed, counter], for Generator.set_state), "config", "vocab"
    (name -> tokens) and "extra" (name -> tensor)."""
    return _C._read_checkpoint(_path(f, "read_checkpoint"))
