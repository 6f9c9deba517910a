// per_sample_grads (nn/per_sample.h): hooks on the layers, two backward passes telling
// whose each row is, and the per-example sums of what the batched backward gave.
#include "nn/per_sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernels/dispatch.h"
#include "nn/layers.h"

namespace ember::nn {

namespace {

constexpr const char* kOp = "per_sample_grads";
thread_local bool t_running = false;  // per_sample_grads runs on this thread

enum class Kind { Linear, LayerNorm, Embedding };

// One call of a watched layer: its input, and the gradients reaching its output in the two
// backward passes (every loss weighted 1, then loss b weighted b + 1).
struct Call {
  Tensor input;
  std::shared_ptr<std::vector<Tensor>> grads;
};

struct Layer {
  Kind kind;
  Module* module;
  std::string name;  // its dotted name in the model ("" for the model itself)
  std::vector<Call> calls;
};

void find_layers(Module& m, const std::string& name, std::vector<Layer>& out, std::set<Module*>& seen) {
  if (!seen.insert(&m).second) return;
  if (dynamic_cast<Linear*>(&m)) out.push_back({Kind::Linear, &m, name, {}});
  else if (dynamic_cast<LayerNorm*>(&m)) out.push_back({Kind::LayerNorm, &m, name, {}});
  else if (dynamic_cast<Embedding*>(&m)) out.push_back({Kind::Embedding, &m, name, {}});
  for (auto& [child_name, child] : m.named_children())
    find_layers(*child, name.empty() ? child_name : name + "." + child_name, out, seen);
}

// The layer's weight and bias (undefined where it has none).
std::pair<Tensor, Tensor> params_of(const Layer& l) {
  switch (l.kind) {
    case Kind::Linear: {
      auto* m = static_cast<Linear*>(l.module);
      return {m->weight, m->bias};
    }
    case Kind::LayerNorm: {
      auto* m = static_cast<LayerNorm*>(l.module);
      return {m->weight, m->bias};
    }
    case Kind::Embedding: return {static_cast<Embedding*>(l.module)->weight, Tensor()};
  }
  return {};
}

// The weight of example b's loss in the second backward pass: b + 1 plus a fraction in
// [0.2, 0.8) drawn from a fixed sequence, so that no average of other examples' weights
// (what a row mixing examples would show) lands on one of them but by a rare accident.
double example_weight(int64_t b) {
  uint64_t z = (uint64_t)b * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return double(b + 1) + 0.2 + 0.6 * double(z >> 11) / double(uint64_t(1) << 53);
}

// The rows of each example in g [..., C] (rows: every index but the last), from the two
// passes' gradients g1 and gc: a row of example b has gc = w_b g1 (example_weight), at
// every element. Rows without gradient belong to none; a row of rounding noise goes to
// the nearest weight. A row of significant size whose elements do not all show one
// example's weight mixes examples: an Error naming the layer.
std::vector<std::vector<int64_t>> rows_by_example(const Tensor& g1, const Tensor& gc, int64_t B,
                                                  const std::string& layer) {
  const Tensor a = g1.to(kFloat64).contiguous(), c = gc.to(kFloat64).contiguous();
  const int64_t C = a.dim() == 0 ? 1 : a.size(-1), R = C == 0 ? 0 : a.numel() / C;
  const double* pa = a.data<double>();
  const double* pc = c.data<double>();
  const bool f32 = g1.dtype() == kFloat32;
  double largest = 0;
  for (int64_t i = 0; i < a.numel(); i++) {
    if (!std::isfinite(pa[i]) || !std::isfinite(pc[i]))
      fail(kOp, "the gradient reaching ", layer, "'s output holds NaN or Inf (are the losses or the data finite?)");
    largest = std::max(largest, std::fabs(pa[i]));
  }
  // below this a row is rounding noise: its ratio means nothing, and it adds nothing
  const double noise = largest * (f32 ? 1e-5 : 1e-11);
  const double tol = f32 ? 1e-3 : 1e-6;  // relative, on the elements that matter in a row
  std::vector<double> w((size_t)B);
  for (int64_t b = 0; b < B; b++) w[(size_t)b] = example_weight(b);
  std::vector<std::vector<int64_t>> rows((size_t)B);
  for (int64_t r = 0; r < R; r++) {
    const double* ar = pa + r * C;
    const double* cr = pc + r * C;
    double top = 0;
    int64_t at = -1;
    for (int64_t j = 0; j < C; j++)
      if (std::fabs(ar[j]) > top) top = std::fabs(ar[j]), at = j;
    if (at < 0) continue;
    const double ratio = cr[at] / ar[at];
    // the nearest weight: w_b lies in [b + 1.2, b + 1.8)
    int64_t k = std::clamp<int64_t>((int64_t)std::floor(ratio - 1.0), 0, B - 1);
    for (int64_t n : {k - 1, k + 1})
      if (n >= 0 && n < B && std::fabs(ratio - w[(size_t)n]) < std::fabs(ratio - w[(size_t)k])) k = n;
    if (top > noise) {
      bool pure = std::fabs(ratio - w[(size_t)k]) <= tol * w[(size_t)k];
      for (int64_t j = 0; pure && j < C; j++)
        if (std::fabs(ar[j]) >= 1e-2 * top)
          pure = std::fabs(cr[j] - w[(size_t)k] * ar[j]) <= tol * w[(size_t)k] * std::fabs(ar[j]);
      if (!pure)
        fail(kOp, "the gradient reaching row ", r, " of ", layer, "'s output mixes examples (the weighted pass "
             "gave ", ratio, " times the plain one, which is no single example's weight): something in the model "
             "couples the examples of the batch");
    }
    rows[(size_t)k].push_back(r);
  }
  return rows;
}

// The rows `rows` of m [R, C]: a view when they are consecutive, else a gathered copy.
Tensor take(const Tensor& m, const std::vector<int64_t>& rows) {
  if (rows.back() - rows.front() + 1 == (int64_t)rows.size()) return m.narrow(0, rows.front(), (int64_t)rows.size());
  return index_select(m, 0, from_vector(rows, {(int64_t)rows.size()}));
}

// Adds each example's share of one call of the layer to the per-example gradients pw, pb
// of its weight and bias ([B, ...]; undefined for one that has none or needs none).
void add_call(const Layer& l, const Call& call, const std::vector<std::vector<int64_t>>& rows, const Tensor& pw,
              const Tensor& pb) {
  const Tensor& g = (*call.grads)[0];
  const int64_t C = g.size(-1);
  const Tensor G = g.reshape({-1, C});
  if (l.kind == Kind::Embedding) {
    if (!pw.defined()) return;
    const auto* emb = static_cast<const Embedding*>(l.module);
    const Tensor ids = call.input.contiguous().reshape({-1});
    const Tensor Gc = G.contiguous();
    const int64_t* id = ids.data<int64_t>();
    dispatch_float(pw.dtype(), kOp, [&](auto tag) {
      using T = decltype(tag);
      T* out = pw.data<T>();  // [B, V, C], contiguous
      const T* gp = Gc.data<T>();
      const int64_t V = pw.size(1);
      for (size_t b = 0; b < rows.size(); b++)
        for (int64_t r : rows[b]) {
          if (id[r] == emb->padding_idx) continue;  // no gradient reaches the padding row
          T* dst = out + ((int64_t)b * V + id[r]) * C;
          for (int64_t j = 0; j < C; j++) dst[j] += gp[r * C + j];
        }
    });
    return;
  }
  Tensor X = call.input.reshape({-1, call.input.size(-1)});
  if (l.kind == Kind::LayerNorm) {  // what the weight multiplies: the normalised input
    const auto* ln = static_cast<const LayerNorm*>(l.module);
    const Tensor centred = sub(X, mean(X, {-1}, true));
    X = mul(centred, rsqrt(add(mean(square(centred), {-1}, true), ln->eps)));
  }
  for (size_t b = 0; b < rows.size(); b++) {
    if (rows[b].empty()) continue;
    const Tensor Gb = take(G, rows[b]);
    if (pw.defined()) {
      const Tensor Xb = take(X, rows[b]);
      Tensor slot = pw.select(0, (int64_t)b);
      slot.copy_(add(slot, l.kind == Kind::Linear ? matmul(Gb.mT(), Xb) : sum(mul(Gb, Xb), {0})));
    }
    if (pb.defined()) {
      Tensor bslot = pb.select(0, (int64_t)b);
      bslot.copy_(add(bslot, sum(Gb, {0})));
    }
  }
}

// Removes the hooks when per_sample_grads returns or throws.
struct Handles {
  std::vector<HookHandle> list;
  ~Handles() {
    for (auto& h : list) h.remove();
  }
};

}  // namespace

NamedTensors per_sample_grads(Module& model, int64_t batch_size, const std::function<Tensor()>& losses) {
  return per_sample_grads(std::vector<std::pair<std::string, Module*>>{{"", &model}}, batch_size, losses);
}

NamedTensors per_sample_grads(const std::vector<std::pair<std::string, Module*>>& modules, int64_t batch_size,
                              const std::function<Tensor()>& losses) {
  if (batch_size < 1) fail(kOp, "batch_size must be at least 1, got ", batch_size);
  if (!losses) fail(kOp, "got an empty losses function");
  const int64_t B = batch_size;
  std::vector<Layer> layers;
  std::set<Module*> seen;
  for (auto& [prefix, m] : modules) {
    if (!m) fail(kOp, "got a null module");
    find_layers(*m, prefix, layers, seen);
  }

  // every parameter that requires grad must be a watched layer's
  std::unordered_map<const TensorImpl*, size_t> index;  // parameter -> its place in named
  NamedTensors named;
  for (auto& [prefix, m] : modules)
    for (auto& [name, p] : m->named_parameters())
      if (p.requires_grad() && !index.count(p.impl()))
        index[p.impl()] = named.size(), named.emplace_back(prefix.empty() ? name : prefix + "." + name, p);
  std::set<const TensorImpl*> covered;
  for (const Layer& l : layers) {
    auto [w, b] = params_of(l);
    for (const Tensor& t : {w, b})
      if (t.defined()) covered.insert(t.impl());
  }
  for (auto& [name, p] : named)
    if (!covered.count(p.impl()))
      fail(kOp, "parameter '", name, "' of shape ", p.shape(), " belongs to a module that is not a Linear, ",
           "LayerNorm or Embedding, whose per-example gradients are not known");

  // the forwards of this call only: not another thread's running the same model meanwhile
  if (t_running) fail(kOp, "called again from inside its losses function; compute one batch's at a time");
  struct Running {
    Running() { t_running = true; }
    ~Running() { t_running = false; }
  } running;
  const std::thread::id me = std::this_thread::get_id();
  Handles handles;
  for (Layer& l : layers)
    handles.list.push_back(l.module->register_forward_hook(
        [&l, me](Module&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
          if (std::this_thread::get_id() != me) return;
          if (in.empty() || out.empty() || !out[0].defined() || !out[0].requires_grad()) return;
          Call call{in[0].detach(), std::make_shared<std::vector<Tensor>>()};
          out[0].register_hook([grads = call.grads](const Tensor& g) {
            grads->push_back(g.detach());
            return Tensor();
          });
          l.calls.push_back(std::move(call));
        }));

  GradModeGuard on(true);
  const Tensor L = losses();
  if (!L.defined()) fail(kOp, "the losses function returned an undefined tensor");
  const bool bf16 = autocast_enabled() || (L.grad_fn() && L.grad_fn()->autocast);
  if (L.shape() != Shape{B} || !is_computing_float(L.dtype()))
    fail(kOp, "expected the losses function to return the ", B, " examples' losses as a float tensor [", B,
         "], got ", dtype_name(L.dtype()), " of shape ", L.shape());
  std::vector<Tensor> params;
  for (auto& [name, p] : named) params.push_back(p);
  std::vector<Tensor> batch_grads(params.size()), weighted_grads(params.size());
  std::vector<double> wv((size_t)B);
  for (int64_t b = 0; b < B; b++) wv[(size_t)b] = example_weight(b);
  const Tensor weights = from_vector(wv, {B}, L.dtype());
  if (L.requires_grad() && !params.empty()) {
    batch_grads = grad({L}, params, {ones({B}, L.dtype())}, {.retain_graph = true, .allow_unused = true});
    weighted_grads = grad({L}, params, {weights}, {.allow_unused = true});
  }

  NoGradGuard no_grad;
  std::vector<Tensor> result(params.size());
  for (size_t i = 0; i < params.size(); i++) {
    Shape s{B};
    s.insert(s.end(), params[i].shape().begin(), params[i].shape().end());
    result[i] = zeros(s, params[i].dtype());
  }
  for (const Layer& l : layers) {
    auto [w, b] = params_of(l);
    const auto wi = index.find(w.defined() ? w.impl() : nullptr);
    const auto bi = index.find(b.defined() ? b.impl() : nullptr);
    if (wi == index.end() && bi == index.end()) continue;  // nothing here requires grad
    const std::string what = l.name.empty() ? "the model" : "'" + l.name + "'";
    for (const Call& call : l.calls) {
      if (call.grads->size() != 2) continue;  // the losses did not depend on this call
      const auto rows = rows_by_example((*call.grads)[0], (*call.grads)[1], B, what);
      const Tensor pw = wi != index.end() ? result[wi->second] : Tensor();
      const Tensor pb = bi != index.end() ? result[bi->second] : Tensor();
      add_call(l, call, rows, pw, pb);
    }
  }

  // The examples' gradients add up to the batch's, and weighted by example_weight(b) to the
  // second pass's, or some use of a parameter was missed (a use outside its layers' forwards
  // whose examples' parts cancel in the plain sum does not cancel in the weighted one).
  for (size_t i = 0; i < params.size(); i++) {
    Shape per_row(params[i].dim() + 1, 1);
    per_row[0] = B;
    const Tensor w = weights.to(params[i].dtype()).reshape(per_row);
    for (const bool weighted : {false, true}) {
      const Tensor rows = weighted ? mul(result[i], w) : result[i];
      const Tensor& batch = weighted ? weighted_grads[i] : batch_grads[i];
      const Tensor expected = batch.defined() ? batch : zeros(params[i].shape(), params[i].dtype());
      // (measured against the terms summed: rows that cancel each other leave their rounding)
      const double scale = std::max({1.0, max(abs(expected)).item(), max(sum(abs(rows), {0})).item()});
      const double off = max(abs(sub(sum(rows, {0}), expected))).item();
      // (under Autocast the batch's products ran in bfloat16, the examples' short sums in float32)
      const double tol = params[i].dtype() == kFloat32 ? (bf16 ? 5e-2 : 1e-3) : 1e-9;
      if (!(off <= tol * scale))
        fail(kOp, "the per-example gradients of '", named[i].first, "' add up to a tensor ", off, " away from its ",
             weighted ? "weighted " : "", "batch gradient: the parameter is read outside its layer's forward");
    }
  }
  NamedTensors out;
  for (size_t i = 0; i < params.size(); i++) out.emplace_back(named[i].first, result[i]);
  return out;
}

namespace {
// B, checked: every tensor of grads [B, ...] with the same B.
int64_t batch_of(const NamedTensors& grads, const char* op) {
  if (grads.empty()) fail(op, "got no per-example gradients");
  int64_t B = -1;
  for (auto& [name, g] : grads) {
    check_defined(g, op, name.c_str());
    if (g.dim() == 0 || (B >= 0 && g.size(0) != B))
      fail(op, "expected per-example gradients [B, ...] sharing B", B >= 0 ? cat_str(" = ", B) : "", ", got '", name,
           "' of shape ", g.shape());
    B = g.size(0);
  }
  if (B == 0) fail(op, "expected per-example gradients of at least one example, got a batch of 0");
  return B;
}
}  // namespace

Tensor per_sample_norms(const NamedTensors& grads) {
  const int64_t B = batch_of(grads, "per_sample_norms");
  NoGradGuard no_grad;
  Tensor sq = zeros({B}, kFloat64);
  for (auto& [name, g] : grads) sq = add(sq, sum(square(g.detach().to(kFloat64).reshape({B, -1})), {1}));
  return sqrt(sq);
}

NamedTensors clipped_mean(const NamedTensors& grads, double max_norm) {
  if (!(max_norm > 0 && std::isfinite(max_norm)))
    fail("clipped_mean", "max_norm must be positive and finite, got ", max_norm);
  const Tensor norms = per_sample_norms(grads);
  NoGradGuard no_grad;
  // min(1, max_norm / |g_b|), 1 for a zero gradient
  const Tensor factor = minimum(div(full_like(norms, max_norm), maximum(norms, full_like(norms, 1e-300))),
                                ones_like(norms));
  NamedTensors out;
  for (auto& [name, g] : grads) {
    Shape s(g.dim(), 1);
    s[0] = g.size(0);
    out.emplace_back(name, mean(mul(g.detach(), factor.to(g.dtype()).reshape(s)), {0}));
  }
  return out;
}

GradientNoise gradient_noise(const NamedTensors& grads, const std::string& prefix) {
  const char* op = "gradient_noise";
  const int64_t B = batch_of(grads, op);
  if (B < 2) fail(op, "needs at least 2 examples to estimate the noise, got a batch of ", B);
  NoGradGuard no_grad;
  GradientNoise r;
  r.batch = B;
  double spread = 0;
  for (auto& [name, g] : grads) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const Tensor x = g.detach().to(kFloat64).reshape({B, -1});
    const Tensor m = mean(x, {0});
    r.parameters += x.size(1);
    r.mean_norm_sq += sum(square(m)).item();
    spread += sum(square(sub(x, m))).item();
  }
  if (r.parameters == 0) fail(op, "no parameter's name starts with '", prefix, "'");
  r.trace_cov = spread / double(B - 1);
  r.signal = r.mean_norm_sq - r.trace_cov / double(B);
  // NaN in, NaN out; a signal that is not positive: an infinite noise scale; no noise: an
  // infinite ratio, or NaN when there is no signal either (0 / 0)
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(r.signal) || std::isnan(r.trace_cov)) {
    r.noise_scale = r.snr = nan;
  } else {
    r.noise_scale = r.signal > 0 ? r.trace_cov / r.signal : inf;
    r.snr = r.trace_cov > 0 ? r.signal / (r.trace_cov / double(B)) : (r.signal > 0 ? inf : nan);
  }
  return r;
}

}  // namespace ember::nn
