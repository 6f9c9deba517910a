# Type stubs of ember.serialization (serialization.py).

import os
from typing import Dict, Mapping, Union

from ._C import Tensor

def save(obj: Union[Tensor, Mapping[str, Tensor]], f: Union[str, os.PathLike[str]]) -> None:
    """Writes a tensor, or a dict of tensors by name (a state_dict), to the path f: HDF5 for
    .h5/.hdf5, NumPy's formats for .npz and .npy (one tensor)."""

def load(f: Union[str, os.PathLike[str]]) -> Union[Tensor, Dict[str, Tensor]]:
    """What save wrote: a tensor for a .npy file or a lone unnamed tensor, a dict otherwise."""
