"""Ctrl-C during a long loop of ember ops, and during a long backward, is a
KeyboardInterrupt, promptly, and ember goes on working afterwards."""

import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import sys, time
    import ember
    x = ember.randn(256, 256, generator=ember.Generator(0), requires_grad=True)
    try:
        if sys.argv[1] == "loop":
            print("started", flush=True)
            while True:
                y = (x @ x).softmax(-1).sum()
        else:
            y = x
            for _ in range(1000):  # a deep graph: backward through it takes a while
                y = (y @ x.detach()).tanh()
            print("started", flush=True)
            while True:
                y.sum().backward(retain_graph=True)
    except KeyboardInterrupt:
        z = ember.ones(3) * 2  # usable afterwards
        print("interrupted", z.sum().item(), flush=True)
""")


def run_and_interrupt(mode):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.3)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    return out, err, time.monotonic() - sent, p.returncode


def test_ctrl_c_in_a_loop_of_ops():
    out, err, seconds, rc = run_and_interrupt("loop")
    assert rc == 0, err
    assert out.strip() == "interrupted 6.0"
    assert seconds < 30  # the op running at the time finishes first


def test_ctrl_c_during_backward():
    out, err, seconds, rc = run_and_interrupt("backward")
    assert rc == 0, err
    assert out.strip() == "interrupted 6.0"
    assert seconds < 30  # after the backward running at the time, at the latest
