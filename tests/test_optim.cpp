// Optimizers, gradient clipping and learning-rate schedules: the float64 reference
// trajectories in tests/data (adam.h5, adamw.h5), worked examples computed by hand,
// a reference loop written out here for every update rule, convergence on a quadratic
// bowl and on a small MLP, state save/restore, and the errors bad settings give.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "io/h5.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace ember;
using namespace ember::optim;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

namespace {

std::string data(const char* f) { return std::string(EMBER_TEST_DATA_DIR) + "/" + f; }

Tensor leaf(const std::vector<double>& values, DType dtype = kFloat64) {
  return from_vector(values, {(int64_t)values.size()}, dtype).requires_grad_();
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Gradients that change sign and size from element to element and step to step.
std::vector<double> grads_at(int64_t step, size_t n) {
  std::vector<double> g(n);
  for (size_t i = 0; i < n; i++) g[i] = std::sin(0.7 * double(i + 1) + 1.3 * double(step)) * (1.0 + 0.5 * double(i));
  return g;
}

// Adam and AdamW written out element by element, as in PyTorch's documentation.
struct AdamReference {
  double lr, b1, b2, eps, wd;
  bool amsgrad, decoupled;
  std::vector<double> p, m, v, vmax;
  int64_t t = 0;

  void step(const std::vector<double>& grad) {
    if (m.empty()) m = v = vmax = std::vector<double>(p.size(), 0.0);
    t++;
    for (size_t i = 0; i < p.size(); i++) {
      double g = grad[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mhat = m[i] / (1 - std::pow(b1, double(t)));
      vmax[i] = std::max(vmax[i], v[i]);
      double vhat = (amsgrad ? vmax[i] : v[i]) / (1 - std::pow(b2, double(t)));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

struct SGDReference {
  double lr, momentum, dampening, wd;
  bool nesterov;
  std::vector<double> p, buf;

  void step(const std::vector<double>& grad) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); i++) {
      double g = grad[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); i++) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Replays a golden trajectory file with opt over param, step by step.
void check_golden(const char* file, bool decoupled) {
  const std::string f = data(file);
  h5::Reader r(f);
  REQUIRE(r.attr_string("/", "kind") == (decoupled ? "adamw" : "adam"));
  AdamOptions o;
  o.lr = r.attr_double("/", "lr");
  o.beta1 = r.attr_double("/", "beta1");
  o.beta2 = r.attr_double("/", "beta2");
  o.eps = r.attr_double("/", "eps");
  o.weight_decay = r.attr_double("/", "weight_decay");
  o.amsgrad = r.attr_int("/", "amsgrad") != 0;
  const int64_t steps = r.attr_int("/", "steps");
  Tensor p = r.read("input/param").requires_grad_();
  Tensor grads = r.read("input/grads"), expected = r.read("expected/params");
  REQUIRE(p.dtype() == kFloat64);
  REQUIRE(grads.shape() == Shape{steps, p.numel()});
  REQUIRE(expected.shape() == Shape{steps, p.numel()});
  std::unique_ptr<Adam> opt = decoupled ? std::make_unique<AdamW>(NamedParams{{"p", p}}, o)
                                        : std::make_unique<Adam>(NamedParams{{"p", p}}, o);
  for (int64_t s = 0; s < steps; s++) {
    INFO(file << " step " << s + 1);
    p.set_grad(grads.select(0, s).contiguous());
    opt->step();
    CHECK(max_abs_diff(p.detach(), expected.select(0, s)) < 1e-12);
  }
}

}  // namespace

// ---------------------------------------------------------------- golden trajectories

TEST_CASE("Adam reproduces the reference trajectory in float64") { check_golden("adam.h5", false); }

TEST_CASE("AdamW reproduces the reference trajectory in float64") { check_golden("adamw.h5", true); }

// ---------------------------------------------------------------- hand-computed steps

TEST_CASE("SGD with Nesterov momentum takes the hand-computed steps") {
  // lr 0.1, momentum 0.9, p0 = 1, gradients 1 then 0.5:
  //   buf = 1,               d = 1 + 0.9*1 = 1.9,       p = 1 - 0.19 = 0.81
  //   buf = 0.9*1 + 0.5 = 1.4, d = 0.5 + 0.9*1.4 = 1.76, p = 0.81 - 0.176 = 0.634
  Tensor p = leaf({1.0});
  SGD opt({{"p", p}}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  p.set_grad(from_vector(std::vector<double>{1.0}, {1}));
  opt.step();
  CHECK(p.item() == Approx(0.81).margin(1e-15));
  p.set_grad(from_vector(std::vector<double>{0.5}, {1}));
  opt.step();
  CHECK(p.item() == Approx(0.634).margin(1e-15));
  CHECK(opt.state().params.at("p").slots.at("momentum_buffer").item() == Approx(1.4).margin(1e-15));
  CHECK(opt.state().params.at("p").step == 2);
}

TEST_CASE("Adam with amsgrad takes the hand-computed steps and keeps the largest second moment") {
  // lr 0.1, betas 0.5, eps 0, p0 = 0, gradients 2 then 0:
  //   step 1: m = 1, v = 2, vmax = 2; mhat = 2, vhat = 4: p = -0.1*2/2 = -0.1
  //   step 2: m = 0.5, v = 1, vmax = 2; mhat = 0.5/0.75, vhat = 2/0.75:
  //           p = -0.1 - 0.05/sqrt(1.5) with amsgrad, -0.1 - 0.05/sqrt(0.75) without
  for (bool amsgrad : {true, false}) {
    INFO("amsgrad " << amsgrad);
    Tensor p = leaf({0.0});
    Adam opt({{"p", p}}, {.lr = 0.1, .beta1 = 0.5, .beta2 = 0.5, .eps = 0.0, .amsgrad = amsgrad});
    p.set_grad(from_vector(std::vector<double>{2.0}, {1}));
    opt.step();
    CHECK(p.item() == Approx(-0.1).margin(1e-15));
    p.set_grad(from_vector(std::vector<double>{0.0}, {1}));
    opt.step();
    const double expected = -0.1 - 0.05 / std::sqrt(amsgrad ? 1.5 : 0.75);
    CHECK(p.item() == Approx(expected).margin(1e-15));
    auto st = opt.state().params.at("p");
    CHECK(st.slots.count("max_exp_avg_sq") == (amsgrad ? 1u : 0u));
    if (amsgrad) CHECK(st.slots.at("max_exp_avg_sq").item() == 2.0);
    CHECK(st.slots.at("exp_avg_sq").item() == 1.0);
  }
}

// ---------------------------------------------------------------- against the reference loops

TEST_CASE("Adam, AdamW and amsgrad follow the reference loop over many steps with weight decay") {
  struct Case {
    bool decoupled, amsgrad;
    double wd;
  };
  for (Case c : {Case{false, false, 0.0}, Case{false, true, 0.05}, Case{true, false, 0.1}, Case{true, true, 0.02}}) {
    INFO("decoupled " << c.decoupled << " amsgrad " << c.amsgrad << " weight_decay " << c.wd);
    std::vector<double> p0 = {0.5, -1.25, 2.0, 0.0, -0.3, 1e-3};
    AdamOptions o{.lr = 0.03, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = c.wd, .amsgrad = c.amsgrad};
    Tensor p = leaf(p0);
    std::unique_ptr<Adam> opt = c.decoupled ? std::make_unique<AdamW>(NamedParams{{"w", p}}, o)
                                            : std::make_unique<Adam>(NamedParams{{"w", p}}, o);
    CHECK(opt->kind() == (c.decoupled ? "AdamW" : "Adam"));
    AdamReference ref{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, c.decoupled, p0};
    for (int64_t s = 1; s <= 40; s++) {
      auto g = grads_at(s, p0.size());
      p.set_grad(from_vector(g, {(int64_t)g.size()}));
      opt->step();
      ref.step(g);
    }
    CHECK(max_diff(values(p), ref.p) < 1e-12);
    auto st = opt->state().params.at("w");
    CHECK(st.step == 40);
    CHECK(max_diff(values(st.slots.at("exp_avg")), ref.m) < 1e-13);
    CHECK(max_diff(values(st.slots.at("exp_avg_sq")), ref.v) < 1e-13);
  }
}

TEST_CASE("SGD with momentum, dampening, Nesterov and weight decay follows the reference loop") {
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (Case c : {Case{0, 0, 0, false}, Case{0, 0, 0.1, false}, Case{0.9, 0, 0, false}, Case{0.9, 0.3, 0.01, false},
                 Case{0.8, 0, 0.05, true}}) {
    INFO("momentum " << c.momentum << " dampening " << c.dampening << " wd " << c.wd << " nesterov " << c.nesterov);
    std::vector<double> p0 = {1.0, -2.0, 0.25, 3.5};
    SGDOptions o{.lr = 0.05, .momentum = c.momentum, .dampening = c.dampening, .weight_decay = c.wd,
                 .nesterov = c.nesterov};
    Tensor p = leaf(p0);
    SGD opt({{"w", p}}, o);
    SGDReference ref{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, p0, {}};
    for (int64_t s = 1; s <= 25; s++) {
      auto g = grads_at(s, p0.size());
      p.set_grad(from_vector(g, {(int64_t)g.size()}));
      opt.step();
      ref.step(g);
    }
    CHECK(max_diff(values(p), ref.p) < 1e-13);
    CHECK(opt.state().params.at("w").slots.size() == (c.momentum != 0 ? 1u : 0u));
  }
}

TEST_CASE("float32 parameters are updated in float32 close to the float64 result") {
  std::vector<double> p0 = {0.5, -1.0, 2.0};
  Tensor p32 = leaf(p0, kFloat32), p64 = leaf(p0);
  Adam a32({{"p", p32}}, {.lr = 0.01}), a64({{"p", p64}}, {.lr = 0.01});
  for (int64_t s = 1; s <= 10; s++) {
    auto g = grads_at(s, 3);
    p32.set_grad(from_vector(g, {3}, kFloat32));
    p64.set_grad(from_vector(g, {3}));
    a32.step();
    a64.step();
  }
  CHECK(p32.dtype() == kFloat32);
  CHECK(a32.state().params.at("p").slots.at("exp_avg").dtype() == kFloat32);
  CHECK(max_diff(values(p32), values(p64)) < 1e-5);
}

TEST_CASE("parameters without a gradient are left alone and get no state") {
  Tensor a = leaf({1.0, 2.0}), b = leaf({3.0});
  Adam opt({{"a", a}, {"b", b}}, {.lr = 0.1});
  a.set_grad(from_vector(std::vector<double>{1.0, -1.0}, {2}));
  opt.step();
  CHECK(b.item() == 3.0);
  auto st = opt.state();
  CHECK(st.params.count("a") == 1);
  CHECK(st.params.count("b") == 0);
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  opt.step();  // nothing has a gradient: nothing moves
  CHECK(opt.state().params.at("a").step == 1);
}

TEST_CASE("non-contiguous gradients are read through their strides") {
  Tensor p = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor q = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor g = from_vector(std::vector<double>{1, -2, 3, -4, 5, -6}, {3, 2});
  p.set_grad(g.mT());  // strides [1, 2]
  q.set_grad(g.mT().contiguous());
  REQUIRE_FALSE(p.grad().is_contiguous());
  SGD sp({{"p", p}}, {.lr = 0.1, .momentum = 0.5}), sq({{"q", q}}, {.lr = 0.1, .momentum = 0.5});
  sp.step();
  sq.step();
  CHECK(equal(p.detach(), q.detach()));
}

// ---------------------------------------------------------------- hyper-parameters

TEST_CASE("hyper-parameters are readable and changeable between steps") {
  std::vector<double> p0 = {1.0, -1.0};
  Tensor p = leaf(p0);
  Adam opt({{"p", p}}, {.lr = 0.1});
  auto h = opt.hyper();
  CHECK(h.at("lr") == 0.1);
  CHECK(h.at("beta1") == 0.9);
  CHECK(h.at("beta2") == 0.999);
  CHECK(h.at("eps") == 1e-8);
  CHECK(h.at("weight_decay") == 0.0);
  CHECK(h.at("amsgrad") == 0.0);

  AdamReference ref{0.1, 0.9, 0.999, 1e-8, 0.0, false, false, p0};
  for (int64_t s = 1; s <= 6; s++) {
    if (s == 3) {
      opt.set_lr(0.02);
      ref.lr = 0.02;
    }
    if (s == 4) {
      opt.set_hyper("beta1", 0.5);
      opt.set_hyper("weight_decay", 0.1);
      ref.b1 = 0.5;
      ref.wd = 0.1;
    }
    auto g = grads_at(s, 2);
    p.set_grad(from_vector(g, {2}));
    opt.step();
    ref.step(g);
  }
  CHECK(opt.lr() == 0.02);
  CHECK(opt.hyper().at("beta1") == 0.5);
  CHECK(max_diff(values(p), ref.p) < 1e-13);

  SGD sgd({{"p", leaf({1.0})}}, {.lr = 0.5, .momentum = 0.9});
  sgd.set_hyper("nesterov", 1);
  CHECK(sgd.options().nesterov);
  CHECK(sgd.hyper().at("momentum") == 0.9);
}

TEST_CASE("bad hyper-parameters are clear errors that change nothing") {
  Tensor p = leaf({1.0});
  Adam opt({{"p", p}}, {.lr = 0.1});
  CHECK_THAT(error_of([&] { opt.set_lr(-1); }), Contains("Adam::set_lr") && Contains("lr") && Contains("-1"));
  CHECK_THAT(error_of([&] { opt.set_hyper("beta1", 1.0); }), Contains("Adam::set_hyper") && Contains("beta1"));
  CHECK_THAT(error_of([&] { opt.set_hyper("momentum", 0.9); }),
             Contains("unknown hyper-parameter 'momentum'") && Contains("beta1"));
  CHECK_THAT(error_of([&] { opt.set_hyper("amsgrad", 0.5); }), Contains("amsgrad must be 0 or 1"));
  CHECK(opt.hyper().at("lr") == 0.1);
  CHECK(opt.hyper().at("beta1") == 0.9);
  p.set_grad(from_vector(std::vector<double>{1.0}, {1}));
  opt.step();
  CHECK_THAT(error_of([&] { opt.set_hyper("amsgrad", 1); }), Contains("amsgrad cannot change after the first step"));
  // through options() it is refused at the next step, before anything changes
  const std::vector<double> before = p.to_vector<double>();
  opt.options().amsgrad = true;
  CHECK_THAT(error_of([&] { opt.step(); }),
             Equals("Adam::step: amsgrad was turned on after the first step: the state of 'p' lacks max_exp_avg_sq. Set "
                    "amsgrad before the first step, or build a new optimizer"));
  CHECK(p.to_vector<double>() == before);
  CHECK(opt.state().params.at("p").step == 1);
  opt.options().amsgrad = false;
  opt.step();
  CHECK(opt.state().params.at("p").step == 2);

  SGD sgd({{"p", leaf({1.0})}}, {.lr = 0.1});
  CHECK_THAT(error_of([&] { sgd.set_hyper("nesterov", 1); }),
             Contains("SGD::set_hyper") && Contains("nesterov needs momentum > 0"));
  CHECK_THAT(error_of([&] { sgd.set_hyper("beta1", 0.5); }), Contains("unknown hyper-parameter 'beta1'"));
  CHECK_FALSE(sgd.options().nesterov);
}

TEST_CASE("bad optimizer construction names the optimizer, the parameter and the problem") {
  CHECK_THAT(error_of([] { Adam opt(NamedParams{}); }), Contains("Adam") && Contains("no parameters"));
  CHECK_THAT(error_of([] { SGD opt({{"a", leaf({1.0})}, {"a", leaf({2.0})}}); }),
             Contains("SGD") && Contains("'a' appears twice"));
  CHECK_THAT(error_of([] { Adam opt({{"a/b", leaf({1.0})}}); }), Contains("'a/b'"));
  CHECK_THAT(error_of([] { Adam opt({{"x", from_vector(std::vector<double>{1.0}, {1})}}); }),
             Contains("parameter 'x' must be a leaf tensor that requires grad"));
  Tensor base = leaf({1.0, 2.0});
  CHECK_THAT(error_of([&] { Adam opt({{"y", mul(base, 2.0)}}); }), Contains("'y' must be a leaf"));
  CHECK_THAT(error_of([] { Adam opt({{"i", from_vector(std::vector<int64_t>{1}, {1})}}); }),
             Contains("'i' must be float32 or float64") && Contains("int64"));
  CHECK_THAT(error_of([] { AdamW opt({{"a", leaf({1.0})}}, {.lr = -0.5}); }),
             Contains("AdamW") && Contains("lr") && Contains("-0.5"));
  CHECK_THAT(error_of([] { Adam opt({{"a", leaf({1.0})}}, {.beta2 = 1.0}); }), Contains("beta2 must be in [0, 1)"));
  CHECK_THAT(error_of([] { SGD opt({{"a", leaf({1.0})}}, {.lr = 0.1, .nesterov = true}); }),
             Contains("SGD") && Contains("nesterov needs momentum > 0 and dampening 0"));
  CHECK_THAT(error_of([] { SGD opt({{"a", leaf({1.0})}}, {.weight_decay = NAN}); }), Contains("weight_decay"));
}

// ---------------------------------------------------------------- state

TEST_CASE("an optimizer restored from another's state continues bit for bit") {
  for (std::string kind : {"SGD", "Adam", "AdamW"}) {
    INFO(kind);
    auto make = [&](Tensor w, Tensor b) -> std::unique_ptr<Optimizer> {
      NamedParams ps{{"layer.weight", w}, {"layer.bias", b}};
      if (kind == "SGD") return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
      if (kind == "Adam") return std::make_unique<Adam>(ps, AdamOptions{.lr = 0.05, .amsgrad = true});
      return std::make_unique<AdamW>(ps, AdamOptions{.lr = 0.05, .weight_decay = 0.1});
    };
    Tensor w1 = leaf({1, 2, 3}, kFloat32), b1 = leaf({0.5}, kFloat32);
    auto o1 = make(w1, b1);
    auto feed = [](Tensor& w, Tensor& b, int64_t s) {
      auto g = grads_at(s, 4);
      w.set_grad(from_vector(std::vector<double>(g.begin(), g.begin() + 3), {3}, kFloat32));
      b.set_grad(from_vector(std::vector<double>{g[3]}, {1}, kFloat32));
    };
    for (int64_t s = 1; s <= 3; s++) {
      feed(w1, b1, s);
      o1->step();
    }
    // a second optimizer over copies of the parameters, given the first one's state
    Tensor w2 = w1.detach().clone().requires_grad_(), b2 = b1.detach().clone().requires_grad_();
    auto o2 = make(w2, b2);
    o2->load_state(o1->state());
    for (int64_t s = 4; s <= 7; s++) {
      feed(w1, b1, s);
      feed(w2, b2, s);
      o1->step();
      o2->step();
    }
    CHECK(equal(w1.detach(), w2.detach()));
    CHECK(equal(b1.detach(), b2.detach()));
    auto s1 = o1->state(), s2 = o2->state();
    CHECK(s1.hyper == s2.hyper);
    for (auto& [name, ps] : s1.params) {
      CHECK(s2.params.at(name).step == ps.step);
      for (auto& [slot, t] : ps.slots) CHECK(equal(t, s2.params.at(name).slots.at(slot)));
    }
  }
}

TEST_CASE("a state that does not fit is refused and the optimizer keeps its own") {
  Tensor w = leaf({1, 2, 3}), b = leaf({0.5});
  Adam opt({{"w", w}, {"b", b}}, {.lr = 0.1});
  w.set_grad(from_vector(std::vector<double>{1, 1, 1}, {3}));
  b.set_grad(from_vector(std::vector<double>{1}, {1}));
  opt.step();
  const OptimizerState good = opt.state();
  const std::vector<double> m_before = values(good.params.at("w").slots.at("exp_avg"));

  auto refused = [&](OptimizerState bad, const std::string& expected) {
    INFO(expected);
    CHECK_THAT(error_of([&] { opt.load_state(bad); }), Contains("load_state") && Contains(expected));
    auto now = opt.state();
    CHECK(now.params.at("w").step == 1);
    CHECK(values(now.params.at("w").slots.at("exp_avg")) == m_before);
    CHECK(opt.lr() == 0.1);
  };
  OptimizerState s = good;
  s.kind = "SGD";
  refused(s, "SGD");

  s = good;
  s.params["v"] = s.params.at("w");
  refused(s, "'v'");

  s = good;
  s.params.at("w").slots.erase("exp_avg_sq");
  refused(s, "exp_avg_sq");

  s = good;
  s.params.at("w").slots["exp_avg"] = zeros({4}, kFloat64);
  refused(s, "exp_avg");

  s = good;
  s.params.at("b").slots["exp_avg"] = zeros({1}, kFloat32);
  refused(s, "float32");

  s = good;
  s.params.at("w").step = 0;
  refused(s, "step must be in [1, 2^62]");

  s = good;
  s.hyper["beta1"] = 1.5;
  refused(s, "beta1 must be in [0, 1)");

  s = good;
  s.hyper["momentum"] = 0.9;
  refused(s, "'momentum' is not a hyper-parameter of Adam");

  s = good;
  s.hyper.erase("eps");
  refused(s, "lacks the hyper-parameter 'eps'");

  s = good;
  s.hyper["amsgrad"] = 1;  // amsgrad needs a max_exp_avg_sq slot the state lacks
  refused(s, "max_exp_avg_sq");
  CHECK(opt.hyper().at("amsgrad") == 0);

  // A state with fresh moments and a different lr does load, and replaces everything.
  s = good;
  s.hyper["lr"] = 0.25;
  s.params.at("w").slots["exp_avg"] = zeros({3}, kFloat64);
  opt.load_state(s);
  CHECK(opt.lr() == 0.25);
  CHECK(values(opt.state().params.at("w").slots.at("exp_avg")) == std::vector<double>{0, 0, 0});
  // amsgrad comes with the state that has its slot
  Tensor wa = leaf({1, 2, 3});
  Adam ams({{"w", wa}}, {.lr = 0.1, .amsgrad = true});
  wa.set_grad(from_vector(std::vector<double>{1, 1, 1}, {3}));
  ams.step();
  Adam plain({{"w", leaf({1, 2, 3})}}, {.lr = 0.1});
  plain.load_state(ams.state());
  CHECK(plain.options().amsgrad);
  CHECK(plain.state().params.at("w").slots.count("max_exp_avg_sq") == 1);
  // the optimizer owns copies: changing the state it was given changes nothing
  s.params.at("w").slots.at("exp_avg").fill_(7.0);
  CHECK(values(opt.state().params.at("w").slots.at("exp_avg")) == std::vector<double>{0, 0, 0});
}

// ---------------------------------------------------------------- convergence

TEST_CASE("every optimizer finds the minimum of a quadratic bowl") {
  // f(x) = 1/2 sum a_i (x_i - c_i)^2 with curvatures from 1 to 10
  const std::vector<double> a = {1, 2.5, 4, 7, 10}, c = {3, -1, 0.5, 2, -4};
  Tensor curv = from_vector(a, {5}), centre = from_vector(c, {5});
  auto run = [&](const std::function<std::unique_ptr<Optimizer>(NamedParams)>& make, std::unique_ptr<Schedule> sched,
                 int steps) {
    Tensor x = zeros({5}, kFloat64).requires_grad_();
    auto opt = make({{"x", x}});
    for (int s = 0; s < steps; s++) {
      if (sched) sched->step(*opt);
      opt->zero_grad();
      Tensor f = mul(sum(mul(curv, square(sub(x, centre)))), 0.5);
      f.backward();
      opt->step();
    }
    return max_diff(values(x), c);
  };
  CHECK(run([](NamedParams p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05}); }, nullptr, 400) < 1e-6);
  CHECK(run([](NamedParams p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.02, .momentum = 0.9}); }, nullptr,
            400) < 1e-6);
  CHECK(run([](NamedParams p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.02, .momentum = 0.9, .nesterov = true}); },
            nullptr, 400) < 1e-6);
  CHECK(run([](NamedParams p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.1}); },
            std::make_unique<WarmupCosineSchedule>(0.2, 10, 400), 400) < 1e-3);
  CHECK(run([](NamedParams p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.1, .amsgrad = true}); },
            std::make_unique<WarmupCosineSchedule>(0.2, 10, 400), 400) < 1e-3);
  CHECK(run([](NamedParams p) { return std::make_unique<AdamW>(p, AdamOptions{.lr = 0.1, .weight_decay = 0}); },
            std::make_unique<WarmupCosineSchedule>(0.2, 10, 400), 400) < 1e-3);
}

TEST_CASE("a small MLP learns a smooth function with Adam, AdamW and SGD") {
  // 64 points of y = sin(2x) on [-1.5, 1.5], fitted by 1 -> 32 -> 1 with tanh
  std::vector<double> xs, ys;
  for (int i = 0; i < 64; i++) {
    double x = -1.5 + 3.0 * i / 63.0;
    xs.push_back(x);
    ys.push_back(std::sin(2 * x));
  }
  Tensor x = from_vector(xs, {64, 1}, kFloat32), y = from_vector(ys, {64, 1}, kFloat32);
  for (std::string kind : {"Adam", "AdamW", "SGD"}) {
    INFO(kind);
    Generator gen(11);
    nn::Linear l1(1, 32, true, &gen), l2(32, 1, true, &gen);
    NamedParams params;
    for (auto& [n, t] : l1.named_parameters()) params.push_back({"l1." + n, t});
    for (auto& [n, t] : l2.named_parameters()) params.push_back({"l2." + n, t});
    std::unique_ptr<Optimizer> opt;
    if (kind == "Adam") opt = std::make_unique<Adam>(params, AdamOptions{.lr = 0.01});
    else if (kind == "AdamW") opt = std::make_unique<AdamW>(params, AdamOptions{.lr = 0.01, .weight_decay = 1e-4});
    else opt = std::make_unique<SGD>(params, SGDOptions{.lr = 0.05, .momentum = 0.9});
    auto loss_now = [&] { return mean(square(sub(l2(tanh(l1(x))), y))); };
    const double first = loss_now().item();
    for (int s = 0; s < 600; s++) {
      opt->zero_grad();
      Tensor loss = loss_now();
      loss.backward();
      clip_grad_norm(params, 5.0);
      opt->step();
    }
    const double last = loss_now().item();
    INFO("loss " << first << " -> " << last);
    CHECK(last < 5e-3);
    CHECK(last < first / 50);
  }
}

// ---------------------------------------------------------------- clipping

TEST_CASE("clip_grad_norm returns the norm before clipping and scales every gradient by one factor") {
  Tensor a = leaf({0, 0}), b = leaf({0}), c = leaf({0});
  auto set = [&] {
    a.set_grad(from_vector(std::vector<double>{3, -4}, {2}));
    b.set_grad(from_vector(std::vector<double>{12}, {1}));
  };
  NamedParams ps{{"a", a}, {"b", b}, {"c", c}};  // c has no gradient: skipped
  set();
  CHECK(clip_grad_norm(ps, 100.0) == Approx(13.0).margin(1e-12));
  CHECK(values(a.grad()) == std::vector<double>{3, -4});  // below the limit: untouched

  CHECK(clip_grad_norm(ps, 6.5) == Approx(13.0).margin(1e-12));
  const double f = 6.5 / (13.0 + 1e-6);
  CHECK(max_diff(values(a.grad()), {3 * f, -4 * f}) < 1e-15);
  CHECK(max_diff(values(b.grad()), {12 * f}) < 1e-15);
  CHECK_FALSE(c.grad().defined());

  set();
  CHECK(clip_grad_norm(ps, 1.0, INFINITY) == 12.0);
  CHECK(values(b.grad())[0] == Approx(12.0 / (12.0 + 1e-6)).epsilon(1e-15));
  set();
  CHECK(clip_grad_norm(ps, 100.0, 1.0) == Approx(19.0).margin(1e-12));
  set();
  CHECK(clip_grad_norm(std::vector<Tensor>{a, b}, 100.0, 3.0) == Approx(std::cbrt(27.0 + 64 + 1728)).epsilon(1e-14));

  CHECK_THAT(error_of([&] { clip_grad_norm(ps, -1.0); }), Contains("clip_grad_norm") && Contains("max_norm"));
  CHECK_THAT(error_of([&] { clip_grad_norm(ps, 1.0, 0.0); }), Contains("norm_type"));
}

TEST_CASE("a leaf's gradient is dense even when backward gave an expanded one, and clip_grad_norm scales any gradient") {
  Tensor x = zeros({3, 4}, kFloat64).requires_grad_();
  sum(x).backward();  // sum's backward expands one value over the shape
  CHECK(x.grad().is_contiguous());
  CHECK(clip_grad_norm(std::vector<Tensor>{x}, 1.0) == Approx(std::sqrt(12.0)).epsilon(1e-15));
  CHECK(values(x.grad())[11] == Approx(1 / (std::sqrt(12.0) + 1e-6)).epsilon(1e-15));
  x.set_grad(full({1}, 2.0, kFloat64).expand({3, 4}));  // an expanded gradient, given by hand
  CHECK(clip_grad_norm(std::vector<Tensor>{x}, 1.0) == Approx(std::sqrt(48.0)).epsilon(1e-15));
  CHECK(values(x.grad()) == std::vector<double>(12, 2 / (std::sqrt(48.0) + 1e-6)));
}

TEST_CASE("clip_grad_norm refuses a tensor given twice and gradients sharing memory, which it would scale twice") {
  Tensor a = zeros({4}, kFloat64).requires_grad_(), b = zeros({4}, kFloat64).requires_grad_();
  const Tensor g = full({4}, 4.0, kFloat64);
  a.set_grad(g);
  b.set_grad(g);
  CHECK_THAT(error_of([&] { clip_grad_norm(std::vector<Tensor>{a, b}, 1.0); }),
             Contains("clip_grad_norm: the gradients of parameters 0 and 1 share memory"));
  CHECK(values(g) == std::vector<double>(4, 4.0));  // nothing scaled
  const Tensor wide = full({6}, 4.0, kFloat64);
  b.set_grad(wide.narrow(0, 2, 4));
  a.set_grad(wide.narrow(0, 0, 4));
  CHECK_THAT(error_of([&] { clip_grad_norm(std::vector<Tensor>{a, b}, 1.0); }), Contains("share memory"));
  b.set_grad(full({4}, 4.0, kFloat64));
  CHECK_THAT(error_of([&] { clip_grad_norm(std::vector<Tensor>{b, b}, 1.0); }),
             Contains("clip_grad_norm: parameters 0 and 1 are the same tensor"));
  a.set_grad(wide.narrow(0, 0, 1).expand({4}));  // an expanded view apart from b: accepted
  CHECK(clip_grad_norm(std::vector<Tensor>{a, b}, 1.0) > 1.0);
  CHECK_THAT(error_of([&] { clip_grad_norm(std::vector<Tensor>{a}, NAN); }),
             Contains("max_norm must be a non-negative number, got nan"));
}

TEST_CASE("clip_grad_norm in float32 accumulates in double and gives the same norm with 1 and 2 threads") {
  Generator gen(5);
  Tensor w = randn({300, 300}, kFloat32, &gen).requires_grad_();
  Tensor g = randn({300, 300}, kFloat32, &gen);
  double expected = 0;
  for (double v : values(g)) expected += v * v;
  expected = std::sqrt(expected);
  w.set_grad(g.clone());
  CHECK(clip_grad_norm(std::vector<Tensor>{w}, 1e9) == Approx(expected).epsilon(1e-12));
  std::vector<Tensor> clipped;
  for (int threads : {1, 2}) {
    NumThreadsGuard guard(threads);
    w.set_grad(g.clone());
    CHECK(clip_grad_norm(std::vector<Tensor>{w}, 1.0) == Approx(expected).epsilon(1e-12));
    clipped.push_back(w.grad().clone());
  }
  CHECK(equal(clipped[0], clipped[1]));
}

// ---------------------------------------------------------------- schedules

TEST_CASE("the inverse-square-root schedule warms up linearly, peaks at warmup and decays as step^-0.5") {
  InverseSqrtSchedule s(512, 4000, 2.0);
  auto formula = [](double step) { return 2.0 / std::sqrt(512.0) * std::min(1 / std::sqrt(step), step * std::pow(4000.0, -1.5)); };
  for (int64_t step : {1, 10, 1000, 3999, 4000, 4001, 10000, 100000}) CHECK(s.lr_at(step) == Approx(formula(step)).epsilon(1e-15));
  CHECK(s.lr_at(2000) == Approx(s.lr_at(1000) * 2).epsilon(1e-14));      // linear warmup
  CHECK(s.lr_at(16000) == Approx(s.lr_at(4000) / 2).epsilon(1e-14));     // inverse square root
  CHECK(s.lr_at(4000) > s.lr_at(3999));
  CHECK(s.lr_at(4000) > s.lr_at(4001));
  CHECK(s.lr_at(4000) == Approx(2.0 / std::sqrt(512.0 * 4000.0)).epsilon(1e-14));
  CHECK_THAT(error_of([&] { s.lr_at(0); }), Contains("InverseSqrtSchedule::lr_at") && Contains("got 0"));
}

TEST_CASE("the warmup-cosine schedule rises to its peak, follows half a cosine and stays at its floor") {
  WarmupCosineSchedule s(1e-3, 10, 110, 1e-5);
  CHECK(s.lr_at(1) == Approx(1e-4).epsilon(1e-14));
  CHECK(s.lr_at(5) == Approx(5e-4).epsilon(1e-14));
  CHECK(s.lr_at(10) == Approx(1e-3).epsilon(1e-14));
  CHECK(s.lr_at(60) == Approx((1e-3 + 1e-5) / 2).epsilon(1e-14));  // halfway through the decay
  CHECK(s.lr_at(35) == Approx(1e-5 + (1e-3 - 1e-5) * (1 + std::cos(M_PI / 4)) / 2).epsilon(1e-14));
  CHECK(s.lr_at(110) == 1e-5);
  CHECK(s.lr_at(5000) == 1e-5);
  for (int64_t t = 11; t < 110; t++) CHECK(s.lr_at(t + 1) < s.lr_at(t));
  WarmupCosineSchedule no_warmup(0.5, 0, 4);
  CHECK(no_warmup.lr_at(1) == Approx(0.5 * (1 + std::cos(M_PI / 4)) / 2).epsilon(1e-14));
}

TEST_CASE("a schedule drives any optimizer's learning rate step by step") {
  Tensor p = leaf({1.0});
  SGD sgd({{"p", p}}, {.lr = 123});
  Adam adam({{"q", leaf({1.0})}}, {.lr = 123});
  InverseSqrtSchedule s(64, 5);
  CHECK(s.last_step() == 0);
  for (int64_t t = 1; t <= 8; t++) {
    const double lr = s.step(sgd);
    CHECK(s.last_step() == t);
    CHECK(lr == s.lr_at(t));
    CHECK(sgd.lr() == lr);
  }
  ConstantSchedule k(0.003);
  k.step(adam);
  CHECK(adam.lr() == 0.003);
  CHECK(adam.hyper().at("lr") == 0.003);
  s.set_last_step(100);
  s.step(adam);
  CHECK(adam.lr() == s.lr_at(101));
  CHECK_THAT(error_of([&] { s.set_last_step(-1); }), Contains("set_last_step") && Contains("-1"));
}

TEST_CASE("make_schedule rebuilds a schedule from its kind and settings and refuses bad ones") {
  std::vector<std::unique_ptr<Schedule>> all;
  all.push_back(std::make_unique<InverseSqrtSchedule>(128, 400, 0.5));
  all.push_back(std::make_unique<WarmupCosineSchedule>(3e-4, 50, 1000, 1e-6));
  all.push_back(std::make_unique<ConstantSchedule>(0.01));
  for (auto& s : all) {
    INFO(s->kind());
    auto r = make_schedule(s->kind(), s->settings());
    CHECK(r->kind() == s->kind());
    CHECK(r->settings() == s->settings());
    for (int64_t t : {1, 49, 50, 51, 399, 400, 401, 999, 1000, 5000}) CHECK(r->lr_at(t) == s->lr_at(t));
  }
  CHECK_THAT(error_of([] { make_schedule("Linear", {}); }), Contains("make_schedule") && Contains("'Linear'"));
  CHECK_THAT(error_of([] { make_schedule("Constant", {}); }), Contains("Constant needs the setting 'lr'"));
  CHECK_THAT(error_of([] { make_schedule("Constant", {{"lr", 1.0}, {"warmup", 3}}); }),
             Contains("Constant has no setting 'warmup'"));
  CHECK_THAT(error_of([] { make_schedule("InverseSqrt", {{"d_model", 64.5}, {"warmup", 3}, {"factor", 1}}); }),
             Contains("'d_model' must be an integer") && Contains("64.5"));
  CHECK_THAT(error_of([] { InverseSqrtSchedule s(0, 10); }), Contains("InverseSqrtSchedule") && Contains("d_model"));
  CHECK_THAT(error_of([] { WarmupCosineSchedule s(1e-3, 100, 100); }),
             Contains("WarmupCosineSchedule") && Contains("total (100) must be larger than warmup (100)"));
  CHECK_THAT(error_of([] { WarmupCosineSchedule s(1e-3, 10, 100, 1e-2); }), Contains("min_lr"));
  CHECK_THAT(error_of([] { ConstantSchedule s(-1); }), Contains("ConstantSchedule") && Contains("-1"));
}

TEST_CASE("one tensor under two names is refused by every optimizer, naming both names") {
  // it would be updated twice a step (as torch.optim refuses a parameter in two groups)
  Tensor w = leaf({0.5, 0.5});
  CHECK_THAT(error_of([&] { Adam opt({{"a", w}, {"b", w}}); }),
             StartsWith("Adam") && Contains("'a' and 'b' are the same tensor"));
  CHECK_THAT(error_of([&] { AdamW opt({{"enc", w}, {"x", leaf({1.0})}, {"dec", w}}); }),
             StartsWith("AdamW") && Contains("'enc' and 'dec'"));
  CHECK_THAT(error_of([&] { SGD opt({{"a", w}, {"b", w}}); }), StartsWith("SGD") && Contains("'a' and 'b'"));
  // two leaves over one memory are refused too
  Tensor whole = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  Tensor front = whole.detach().requires_grad_(), back = whole.detach().requires_grad_();
  CHECK_THAT(error_of([&] { SGD opt({{"front", front}, {"back", back}}); }), Contains("views of the same memory"));
}

TEST_CASE("load_state refuses a step count that would overflow, or a negative one, naming the parameter") {
  Tensor w = leaf({1.0, 2.0});
  Adam opt({{"w", w}});
  w.set_grad(from_vector(std::vector<double>{1.0, -1.0}, {2}));
  opt.step();
  OptimizerState good = opt.state();
  for (int64_t step : {INT64_MAX, kMaxStep + 1, int64_t(-5)}) {
    OptimizerState s = good;
    s.params["w"].step = step;
    for (auto& [slot, t] : s.params["w"].slots) t = t.clone();
    CHECK_THAT(error_of([&] { opt.load_state(s); }),
               StartsWith("Optimizer::load_state") && Contains("parameter 'w'") && Contains("[1, 2^62]") &&
                   Contains(std::to_string(step)));
    CHECK(opt.state().params.at("w").step == 1);
  }
  // at the largest count, the next step is refused instead of overflowing
  OptimizerState s = good;
  s.params["w"].step = kMaxStep;
  opt.load_state(s);
  CHECK_THAT(error_of([&] { opt.step(); }), StartsWith("Adam::step") && Contains("the most counted"));
  SGD sgd({{"v", leaf({1.0})}}, {.momentum = 0.9});
  OptimizerState t = sgd.state();
  t.params["v"].step = INT64_MAX;
  t.params["v"].slots["momentum_buffer"] = from_vector(std::vector<double>{0.0}, {1});
  CHECK_THAT(error_of([&] { sgd.load_state(t); }), Contains("parameter 'v'") && Contains("[1, 2^62]"));
}

TEST_CASE("load_state refuses slots no step can produce: non-finite values, negative second moments") {
  Tensor w = leaf({1.0, 2.0});
  Adam opt({{"w", w}}, {.amsgrad = true});
  w.set_grad(from_vector(std::vector<double>{1.0, -1.0}, {2}));
  opt.step();
  const OptimizerState good = opt.state();
  const Tensor m_before = good.params.at("w").slots.at("exp_avg").clone();
  auto with = [&](const std::string& slot, double bad) {
    OptimizerState s = good;
    for (auto& [name, t] : s.params["w"].slots) t = t.clone();
    s.params["w"].slots[slot] = from_vector(std::vector<double>{0.5, bad}, {2});
    return s;
  };
  CHECK_THAT(error_of([&] { opt.load_state(with("exp_avg_sq", -1.0)); }),
             Contains("parameter 'w' slot 'exp_avg_sq'") && Contains("negative"));
  CHECK_THAT(error_of([&] { opt.load_state(with("max_exp_avg_sq", -1e-30)); }),
             Contains("slot 'max_exp_avg_sq'") && Contains("negative"));
  CHECK_THAT(error_of([&] { opt.load_state(with("exp_avg_sq", NAN)); }), Contains("'exp_avg_sq'") && Contains("not finite"));
  CHECK_THAT(error_of([&] { opt.load_state(with("exp_avg", INFINITY)); }), Contains("'exp_avg'") && Contains("not finite"));
  CHECK(equal(opt.state().params.at("w").slots.at("exp_avg"), m_before));
  opt.load_state(with("exp_avg", -3.0));  // a first moment may be negative
}
