"""ember.optim over a Python model's parameters: steps against torch.optim's in float64,
zero_grad, param_groups, state_dict, schedules."""

import numpy as np
import pytest

import ember
import ember.nn as nn

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

RNG = np.random.default_rng(13)
X = RNG.standard_normal((6, 4))
TARGET = [0, 2, 1, 1, 0, 2]


class Net(nn.Module):
    """A Python parameter and a C++ child: the optimizer updates both."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3, dtype=ember.float64, generator=ember.Generator(8))
        self.temp = nn.Parameter(ember.full((3,), 0.7, dtype=ember.float64))

    def forward(self, x):
        return self.lin(x) * self.temp


def torch_twin(model):
    t = torch.nn.Linear(4, 3).double()
    temp = torch.nn.Parameter(torch.full((3,), 0.7, dtype=torch.float64))
    with torch.no_grad():
        t.weight.copy_(torch.tensor(model.lin.weight.detach().numpy()))
        t.bias.copy_(torch.tensor(model.lin.bias.detach().numpy()))
    return t, temp


def train(model, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ember.tensor(X.tolist(), dtype=ember.float64)),
                                           ember.tensor(TARGET))
        loss.backward()
        opt.step()


def train_torch(t, temp, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(t(torch.tensor(X)) * temp, torch.tensor(TARGET))
        loss.backward()
        opt.step()


def assert_same(model, t, temp):
    np.testing.assert_allclose(model.lin.weight.detach().numpy(), t.weight.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.lin.bias.detach().numpy(), t.bias.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.temp.detach().numpy(), temp.detach().numpy(), rtol=0, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("kind,kwargs", [
    ("Adam", dict(lr=0.1, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01)),
    ("Adam", dict(lr=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
])
def test_steps_match_pytorch(kind, kwargs):
    model = Net()
    t, temp = torch_twin(model)
    train(model, getattr(ember.optim, kind)(model.parameters(), **kwargs), 3)
    train_torch(t, temp, getattr(torch.optim, kind)(list(t.parameters()) + [temp], **kwargs), 3)
    assert_same(model, t, temp)


@needs_torch
def test_param_groups_set_the_learning_rate():
    model = Net()
    t, temp = torch_twin(model)
    opt = ember.optim.Adam(model.named_parameters(), lr=0.1)
    topt = torch.optim.Adam(list(t.parameters()) + [temp], lr=0.1)
    train(model, opt, 1)
    train_torch(t, temp, topt, 1)
    opt.param_groups[0]["lr"] = 0.01
    topt.param_groups[0]["lr"] = 0.01
    train(model, opt, 1)
    train_torch(t, temp, topt, 1)
    assert_same(model, t, temp)
    assert opt.param_groups[0]["lr"] == 0.01


def test_state_dict_by_parameter_name_and_back():
    model = Net()
    opt = ember.optim.Adam(model.named_parameters(), lr=0.1)
    train(model, opt, 2)
    state = opt.state_dict()
    assert set(state["state"]) == {"lin.weight", "lin.bias", "temp"}
    assert state["state"]["temp"]["step"] == 2 and "exp_avg" in state["state"]["temp"]
    assert state["param_groups"][0]["lr"] == 0.1
    other = Net()
    other.load_state_dict(model.state_dict())
    opt2 = ember.optim.Adam(other.named_parameters(), lr=0.1)
    opt2.load_state_dict(state)
    train(model, opt, 1)
    train(other, opt2, 1)
    assert ember.equal(model.temp, other.temp)


def test_zero_grad_and_errors():
    model = Net()
    opt = ember.optim.SGD(model.parameters(), lr=0.1)
    train(model, opt, 1)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="empty"):
        ember.optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="unknown option 'betas'; the options are lr, momentum"):
        ember.optim.SGD([{"params": list(model.parameters()), "betas": (0.9, 0.9)}], lr=0.1)
    with pytest.raises(ValueError, match="appear in more than one parameter group"):
        ember.optim.SGD([{"params": [model.temp]}, {"params": [model.temp]}], lr=0.1)
    with pytest.raises(TypeError, match="params must be an iterable"):
        ember.optim.SGD(3, lr=0.1)
    with pytest.raises(TypeError, match="parameter '1' is a int, not a Tensor"):
        ember.optim.SGD([model.temp, 1], lr=0.1)


@needs_torch
@pytest.mark.parametrize("kind,defaults,override", [
    ("Adam", dict(lr=0.1, betas=(0.8, 0.99)), dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9), dict(lr=0.3, nesterov=True, momentum=0.5)),
    ("AdamW", dict(lr=0.1), dict(weight_decay=0.5, amsgrad=True)),
])
def test_parameter_groups_match_pytorch(kind, defaults, override):
    model = Net()
    t, temp = torch_twin(model)
    opt = getattr(ember.optim, kind)([{"params": model.lin.parameters()},
                                      dict(override, params=[model.temp])], **defaults)
    topt = getattr(torch.optim, kind)([{"params": t.parameters()}, dict(override, params=[temp])], **defaults)
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == topt.param_groups[1]["lr"]
    train(model, opt, 2)
    train_torch(t, temp, topt, 2)
    opt.param_groups[0]["lr"] = topt.param_groups[0]["lr"] = 0.05  # a rate set per group
    train(model, opt, 2)
    train_torch(t, temp, topt, 2)
    assert_same(model, t, temp)
    # its state, groups included, restores into a new optimizer that goes on the same
    state = opt.state_dict()
    assert [g["params"] for g in state["param_groups"]] == [["0", "1"], ["2"]]
    other = Net()
    with ember.no_grad():
        for (_, a), (_, b) in zip(other.named_parameters(), model.named_parameters()):
            a.copy_(b)
    opt2 = getattr(ember.optim, kind)([{"params": other.lin.parameters()},
                                       dict(override, params=[other.temp])], **defaults)
    opt2.load_state_dict(state)
    train(model, opt, 1)
    train(other, opt2, 1)
    assert ember.equal(model.temp, other.temp) and ember.equal(model.lin.weight, other.lin.weight)
    with pytest.raises(ValueError, match="the state has 2 parameter groups, this optimizer 1"):
        getattr(ember.optim, kind)(other.parameters(), **defaults).load_state_dict(state)


def test_add_param_group_and_schedules_over_groups():
    model = Net()
    opt = ember.optim.SGD(model.lin.parameters(), lr=0.1)
    opt.add_param_group({"params": model.temp, "lr": 0.7})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.7]
    sched = ember.optim.ConstantSchedule(0.2)
    assert sched.step(opt) == 0.2
    assert [g["lr"] for g in opt.param_groups] == [0.2, 0.2]
    with pytest.raises(RuntimeError, match="has 2 parameter groups"):
        opt._impl


def test_a_schedule_sets_the_rate_before_the_step():
    model = Net()
    opt = ember.optim.Adam(model.parameters(), lr=1.0)
    sched = ember.optim.WarmupCosineSchedule(peak_lr=0.5, warmup=2, total=10)
    assert sched.step(opt) == pytest.approx(0.25)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25) and sched.last_step == 1
    assert sched.lr_at(2) == pytest.approx(0.5)
