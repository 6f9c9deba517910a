"""Several Python threads using ember at once: the GIL is released while ember computes,
so they run together, and each gets what it would get alone."""

import sys
import threading

import numpy as np

import ember


def work(seed):
    """A forward and backward through softmax and a Python hook; returns the gradient."""
    g = ember.Generator(seed)
    x = ember.randn(64, 32, dtype=ember.float64, generator=g, requires_grad=True)
    w = ember.randn(32, 32, dtype=ember.float64, generator=g, requires_grad=True)
    y = ember.softmax(x @ w, -1)
    y.register_hook(lambda grad: grad * 2.0)
    (y * y).sum().backward()
    return x.grad.numpy().copy(), w.grad.numpy().copy()


def test_threads_get_what_they_would_alone():
    alone = [work(s) for s in range(8)]
    results = [None] * 8
    errors = []

    def run(i):
        try:
            for _ in range(5):
                results[i] = work(i)
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (gx, gw), (ax, aw) in zip(results, alone):
        assert np.array_equal(gx, ax) and np.array_equal(gw, aw)


def test_shared_tensors_read_from_several_threads():
    w = ember.randn(128, 128, dtype=ember.float64, generator=ember.Generator(3))
    want = (w @ w).sum().item()
    got = []
    threads = [threading.Thread(target=lambda: got.append((w @ w).sum().item())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 6


def test_the_gil_is_released_while_ember_computes():
    """With a long switch interval no thread takes the GIL from another: the counter can
    move during one matmul only if ember lets go of it."""
    a = ember.randn(1200, 1200, generator=ember.Generator(1))
    started, stop = threading.Event(), threading.Event()
    count = [0]

    def counter():
        started.set()
        while not stop.is_set():
            count[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        t = threading.Thread(target=counter)
        t.start()
        started.wait()
        before = count[0]
        a @ a
        during = count[0] - before
        stop.set()
        t.join()
    finally:
        sys.setswitchinterval(interval)
    assert during > 0


FORK_SCRIPT = """
import os
import ember

ember.set_num_threads(2)
a = ember.randn(512, 512)
(a @ a).sum().item()                      # the parent's OpenMP threads have run
pid = os.fork()
if pid == 0:
    ok = ember.get_num_threads() == 1
    b = ember.randn(512, 512)
    ok = ok and (b @ b).shape == (512, 512)   # would wait forever on the parent's threads
    try:
        ember.set_num_threads(2)
        ok = False
    except RuntimeError as e:
        ok = ok and "forked" in str(e)
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_runs_on_one_thread_and_finishes(run_python):
    done = run_python(FORK_SCRIPT, omp=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
