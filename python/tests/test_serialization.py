"""ember.save and ember.load: a tensor or a state_dict, in each format."""

import numpy as np
import pytest

import ember
import ember.nn as nn


@pytest.mark.parametrize("ext", [".h5", ".npz", ".npy"])
def test_a_tensor_round_trips(tmp_path, ext):
    t = ember.randn(3, 4, dtype=ember.float64)
    path = tmp_path / ("t" + ext)
    ember.save(t, path)
    back = ember.load(path)
    assert isinstance(back, ember.Tensor) and ember.equal(back, t)


@pytest.mark.parametrize("ext", [".h5", ".npz"])
def test_a_state_dict_round_trips_into_a_model(tmp_path, ext):
    a = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    b = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    path = tmp_path / ("m" + ext)
    ember.save(a.state_dict(), path)
    state = ember.load(path)
    assert set(state) == set(a.state_dict())
    b.load_state_dict(state)
    x = ember.randn(2, 3)
    assert ember.equal(a(x), b(x))


def test_npz_is_numpys(tmp_path):
    path = tmp_path / "d.npz"
    ember.save({"w": ember.arange(6).view(2, 3), "b": ember.ones(2)}, path)
    with np.load(path) as f:
        assert f["w"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_what_cannot_be_saved_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="Tensor or a dict"):
        ember.save([ember.ones(1)], tmp_path / "x.h5")
    with pytest.raises(TypeError, match='"n" is a int'):
        ember.save({"n": 3}, tmp_path / "x.h5")


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(RuntimeError, match="nothing.h5"):
        ember.load(tmp_path / "nothing.h5")
