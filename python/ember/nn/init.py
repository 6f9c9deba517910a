"""ember.nn.init, as torch.nn.init: fill a tensor in place from a Generator, drawing
exactly what ember's C++ initialisers draw (nn/init.h over core/factories.cpp), so that a
model built in Python starts from the bits the same model starts from in C++.

A Generator's draw i is a pure function of (seed, i) (core/random.h: SplitMix64 of
seed + (i + 1) * golden); a fill of n elements takes the next n draws (normal_: the next
2 * ceil(n / 2), Box-Muller pairs) and moves the generator's counter past them."""

import math

import numpy as np

from .. import _C
from ..grad_mode import no_grad

_MASK = (1 << 64) - 1


def _uniforms(generator, n):
    """The generator's next n uniforms in [0, 1) (53 random bits each, float64), as
    Generator::uniform draws them; the counter moves past them."""
    g = generator if generator is not None else _C.default_generator()
    seed, counter = g.get_state()
    i = np.arange(counter + 1, counter + 1 + n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    g.set_state([seed, (counter + n) & _MASK])
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def next_u64(generator):
    """The generator's next 64 random bits, as Generator::next_u64 (for shuffles)."""
    seed, counter = generator.get_state()
    z = (seed + (counter + 1) * 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    generator.set_state([seed, (counter + 1) & _MASK])
    return z ^ (z >> 31)


def _numpy_dtype(tensor):
    if tensor.dtype == _C.float32:
        return np.float32
    if tensor.dtype == _C.float64:
        return np.float64
    raise TypeError(f"init: expected a float32 or float64 tensor, got {tensor.dtype}")


def _fill(tensor, values):
    with no_grad():
        tensor.copy_(_C.from_numpy(np.ascontiguousarray(values.reshape(tuple(tensor.shape)))))
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Uniform in [a, b), as core's uniform(): a + (b - a) * u in float64, rounded to the
    tensor's dtype (a value rounded up to b becomes a)."""
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b) and a <= b):
        raise ValueError(f"uniform_: expected finite bounds a <= b, got {a} and {b}")
    t = _numpy_dtype(tensor)
    v = (a + (b - a) * _uniforms(generator, tensor.numel())).astype(t)
    return _fill(tensor, np.where(v < t(b), v, t(a)))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """N(mean, std^2) by Box-Muller, as core's normal(): draws 2i and 2i+1 give elements 2i
    and 2i+1 (with the C library's log, cos and sin, as C++ calls them)."""
    mean, std = float(mean), float(std)
    if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
        raise ValueError(f"normal_: expected a finite mean and a finite std >= 0, got {mean} and {std}")
    n = tensor.numel()
    u = _uniforms(generator, 2 * ((n + 1) // 2)).tolist()
    out = []
    for i in range(0, len(u), 2):
        r = math.sqrt(-2.0 * math.log(1.0 - u[i]))
        th = 2.0 * math.pi * u[i + 1]
        out.append(mean + std * r * math.cos(th))
        out.append(mean + std * r * math.sin(th))
    return _fill(tensor, np.array(out[:n], dtype=np.float64).astype(_numpy_dtype(tensor)))


def _fans(tensor):
    if tensor.dim() < 2:
        raise ValueError(f"init: fans need a weight with at least 2 dims, got shape {tuple(tensor.shape)}")
    receptive = 1
    for s in tuple(tensor.shape)[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010)."""
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def kaiming_uniform_(tensor, a=0.0, generator=None):
    """U(-b, b) with b = sqrt(2 / (1 + a^2)) * sqrt(3 / fan_in) (He et al., 2015), leaky
    ReLU's gain; nn.Linear's weights are kaiming_uniform_(a=sqrt(5))."""
    fan_in, _ = _fans(tensor)
    gain = math.sqrt(2.0 / (1.0 + a * a))
    bound = gain * math.sqrt(3.0 / float(fan_in))
    return uniform_(tensor, -bound, bound, generator)


def zeros_(tensor):
    with no_grad():
        return tensor.fill_(0.0)


def ones_(tensor):
    with no_grad():
        return tensor.fill_(1.0)
