# Type stubs of ember.serialization (serialization.py).

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ._C import Tensor

def save(obj: Union[Tensor, Mapping[str, Tensor]], f: Union[str, os.PathLike[str]]) -> None:
    """Writes a tensor, or a dict of tensors by name (a state_dict), to the path f: HDF5 for
    .h5/.hdf5, NumPy's formats for .npz and .npy (one tensor)."""

def load(f: Union[str, os.PathLike[str]]) -> Union[Tensor, Dict[str, Tensor]]:
    """What save wrote: a tensor for a .npy file or a lone unnamed tensor, a dict otherwise."""

def save_checkpoint(f: Union[str, os.PathLike[str]], model: Mapping[str, Tensor], optimizer: Any = None,
                    schedule: Any = None, generators: Optional[Mapping[str, Any]] = None,
                    progress: Optional[Mapping[str, int]] = None, config: Optional[Mapping[str, Any]] = None,
                    vocab: Optional[Mapping[str, Sequence[str]]] = None,
                    extra: Optional[Mapping[str, Tensor]] = None) -> None:
    """Writes a training checkpoint in the format the C++ programs write and resume from
    (docs/checkpoint-format.md), atomically."""

def read_checkpoint(f: Union[str, os.PathLike[str]]) -> Dict[str, Any]:
    """A checkpoint, checked, as a dict: model, optimizer, schedule, progress, generators,
    config, vocab, extra."""
