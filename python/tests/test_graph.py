"""ember.draw_graph, as torchviz's make_dot: the DOT names the ops and the parameters
(given as a Module or a dict), ops run under graph_scopes are grouped by module, norms
recorded under record_grad_norms are the gradients' norms, the graph of a gradient shows
the backward's ops, and misuse is named."""

import re

import numpy as np
import pytest

import ember
from ember import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 6, dtype=ember.float64)
        self.head = nn.Linear(6, 2, dtype=ember.float64)

    def forward(self, x):
        return self.head(ember.tanh(self.proj(x)))


def leaf(*shape, seed=0):
    rng = np.random.default_rng(seed)
    return ember.tensor(rng.standard_normal(shape).tolist(), dtype=ember.float64, requires_grad=True)


def test_dot_names_ops_and_the_parameters_of_a_module_or_a_dict():
    net = Net()
    x = leaf(3, 4)
    loss = net(x).sum()
    dot = ember.draw_graph(loss, params=net)
    assert dot.startswith("digraph")
    for name, _ in net.named_parameters():
        assert f'label="{name}\\n' in dot
    assert 'label="tanh\\n[3,6] float64' in dot
    g = ember.describe_graph(loss, params=dict(net.named_parameters()))
    assert len(re.findall(r"\n\s*n\d+ \[", dot)) == len(g["ops"])
    assert dot.count(" -> ") == len(g["edges"])
    assert sorted(l["name"] for l in g["leaves"] if l["name"]) == sorted(n for n, _ in net.named_parameters())


def test_graph_scopes_group_ops_by_module():
    net = Net()
    x = leaf(3, 4)
    with ember.graph_scopes(net):
        loss = net(x).sum()
    modules = {op["name"] + str(op["shape"]): op["module"] for op in ember.describe_graph(loss)["ops"]}
    assert modules["tanh(3, 6)"] is None  # the Net's own op: the model is unnamed
    assert modules["linear(3, 6)"] == "proj"
    assert modules["linear(3, 2)"] == "head"
    dot = ember.draw_graph(loss, params=net)
    assert 'label="proj"' in dot and 'label="head"' in dot and dot.count("subgraph cluster_") == 2


def test_a_cpp_layer_labels_its_sub_layers():
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=ember.float64)
    x = leaf(1, 3, 8)
    with ember.graph_scopes(mha, "attn"):
        out, _ = mha(x, x, x, need_weights=False)
    scopes = {op["module"] for op in ember.describe_graph(out.sum())["ops"]}
    assert "attn" in scopes and "attn.out_proj" in scopes


def test_recorded_norms_are_the_norms_of_the_gradients():
    x = leaf(3, 4)
    h = ember.tanh(x * 2.0)
    loss = (h * h).sum()
    (gh,) = ember.autograd.grad(loss, [h], retain_graph=True)
    with ember.record_grad_norms():
        loss.backward(retain_graph=True)
    ops = ember.describe_graph(loss)["ops"]
    tanh = next(op for op in ops if op["name"] == "tanh")
    assert tanh["grad_norm"] == pytest.approx(float(np.linalg.norm(gh.numpy())), rel=1e-12)
    assert "grad norm" in ember.draw_graph(loss)


def test_saturated_softmax_is_marked():
    s = ember.tensor([[0.0, 30.0], [0.1, 0.0]], dtype=ember.float64, requires_grad=True)
    g = ember.describe_graph(ember.softmax(s, -1).sum())
    assert g["ops"][1]["saturated_share"] == pytest.approx(0.5)
    assert "saturated: 50% of rows" in ember.draw_graph(ember.softmax(s, -1).sum())
    assert ember.describe_graph(ember.softmax(s * 0.001, -1).sum())["ops"][1]["saturated_share"] == 0


def test_the_graph_of_a_gradient_holds_the_backward_ops():
    x = leaf(2, 5)
    loss = (ember.softmax(x, -1) * x).sum()
    (gx,) = ember.autograd.grad(loss, [x], create_graph=True)
    assert 'label="softmax_backward\\n' in ember.draw_graph(gx)


def test_writes_dot_and_renders_svg(tmp_path):
    loss = (leaf(3) * 2.0).sum()
    dot = ember.draw_graph(loss, path=tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text() == dot
    if ember.graphviz_available():
        ember.draw_graph(loss, path=str(tmp_path / "g.svg"))
        assert "<svg" in (tmp_path / "g.svg").read_text()


def test_misuse_is_named(tmp_path):
    with pytest.raises(TypeError, match="draw_graph: expected a Tensor"):
        ember.draw_graph([1, 2])
    with pytest.raises(RuntimeError, match="does not require grad"):
        ember.draw_graph(ember.ones(2, 3))
    with pytest.raises(RuntimeError, match="draw_graph.*no-such-dir"):
        ember.draw_graph((leaf(2) * 2.0).sum(), path=tmp_path / "no-such-dir" / "g.dot")
    with pytest.raises(TypeError, match="params must be a Module or a dict"):
        ember.draw_graph((leaf(2) * 2.0).sum(), params={"w": 3})


def test_graph_scopes_and_params_misuse_is_named():
    import ember.nn as nn
    lin = nn.Linear(3, 3)
    a, b = ember.graph_scopes(lin, "a"), ember.graph_scopes(lin, "b")
    with pytest.raises(RuntimeError, match="graph_scopes: __exit__ without a matching __enter__"):
        a.__exit__(None, None, None)
    a.__enter__(), b.__enter__()
    a.__exit__(None, None, None)  # out of order: a leaves, b stays the innermost
    assert ember.graph._active() is b
    b.__exit__(None, None, None)
    assert ember.graph._active() is None
    y = lin(ember.randn(2, 3)).sum()
    with pytest.raises(TypeError, match="draw_graph: params must be a Module or a dict of name -> Tensor, got an item of type int"):
        ember.draw_graph(y, params=[1, 2])
    for bad in (float("nan"), -1, 5):
        with pytest.raises(ValueError, match="draw_graph: saturation must be a number in"):
            ember.draw_graph(y, saturation=bad)
