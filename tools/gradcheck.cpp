// gradcheck: checks the gradient of an op or a layer, by name, at shapes given as flags.
// In float64, every input and parameter is compared with central finite differences of
// sum(f(x) * u) for a random non-uniform upstream gradient u; then the same analytic
// gradients computed in float32 are compared with the float64 ones - the drift a user
// sees when training in float32. Exits 0 when the check passes, 1 when it fails (or the
// shapes would need more memory than the machine has), 2 on a bad command line, impossible
// shapes, or shapes whose finite differences would take more than ten minutes. With
// --second-order, second derivatives are checked too (gradgradcheck): finite differences
// of the analytic first derivatives against double backward. With --forward, forward mode
// is checked too (check_forward_ad): a jvp per element against the same finite
// differences, a "(forward)" row after each input's; an op on the way without a forward
// rule ends the check with exit 1 and a message naming it. With --graph FILE, the backward
// graph of the checked expression (float64) is drawn to FILE (.dot, or .svg/.png/.pdf
// through Graphviz): inputs and parameters by name, the layer's modules as clusters, and
// the norm of the gradient each op passed on for an all-ones upstream gradient.
//
//   gradcheck --list
//   gradcheck NAME [--batch B] [--L L] [--S S] [--embed E] [--heads H] [--kdim K] [--vdim V]
//                  [--ffn F] [--vocab N] [--in N] [--out N] [--dim D] [--smoothing P]
//                  [--mask none|padding|causal|full-row] [--noncontiguous]
//                  [--eps X] [--atol X] [--rtol X] [--seed N] [--second-order] [--forward]
//                  [--graph FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/graph_draw.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/graph_draw.h"
#include "nn/multihead_attention.h"
#include "nn/transformer.h"

using namespace ember;

namespace {

using cli::UsageError;

struct Flags {
  int64_t batch = 2, L = 5, S = 0, embed = 16, heads = 4, kdim = 0, vdim = 0, ffn = 32, vocab = 11, in = 0, out = 0;
  int64_t dim = -1;
  double smoothing = 0.0;
  std::string mask = "none";
  bool noncontiguous = false;
  GradcheckOptions options;
};

// What one check runs: the inputs (leaves that require grad, and others), their names,
// and the function of them. Modules the function uses are kept alive here.
struct Case {
  std::vector<Tensor> inputs;
  std::vector<std::string> names;
  GradcheckFn f;
  std::vector<std::shared_ptr<nn::Module>> modules;
  std::string shapes;  // the shapes, for the heading
};

// Builds the same case in float64 or float32 (float32 from the float64 values).
using Builder = std::function<Case(const Flags&, DType)>;

struct Entry {
  std::string name, what;
  Builder build;
  bool self_test = false;  // deliberately wrong: shows what a failing check looks like
};

// Values in float64 from gen, converted to dtype. With noncontiguous, a leaf of two or
// more dims is a transposed view and a 1-D leaf a strided slice of a larger tensor.
Tensor leaf(const Shape& shape, DType dtype, Generator& gen, bool noncontiguous, double scale = 1.0) {
  Tensor t;
  if (noncontiguous && shape.size() >= 2) {
    Shape swapped = shape;
    std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    t = mul(randn(swapped, kFloat64, &gen), scale).to(dtype).transpose(-1, -2);
  } else if (noncontiguous && shape.size() == 1) {
    t = mul(randn({shape[0] * 2}, kFloat64, &gen), scale).to(dtype).slice(0, {.step = 2});
  } else {
    t = mul(randn(shape, kFloat64, &gen), scale).to(dtype);
  }
  return t.requires_grad_();
}

// A module's parameters become inputs of the check (the module uses the same tensors).
// The case checks module m: its parameters join the inputs, after the data inputs.
void add_module(Case& c, const std::shared_ptr<nn::Module>& m) {
  for (auto& [name, p] : m->named_parameters()) {
    c.inputs.push_back(p);
    c.names.push_back(name);
  }
  c.modules.push_back(m);
}

// An encoder or decoder layer of the flags' sizes, without dropout, in dtype t.
template <class Layer>
std::shared_ptr<Layer> transformer_layer(const Flags& f, DType t, Generator& g, const char* name) {
  nn::LayerConfig cfg{.d_model = f.embed, .num_heads = f.heads, .dim_feedforward = f.ffn, .dropout_p = 0.0};
  nn::check_config(cfg, name);  // the layer trusts it
  auto layer = std::make_shared<Layer>(cfg, &g, kFloat64);
  layer->to(t);
  return layer;
}

int64_t S_of(const Flags& f) { return f.S > 0 ? f.S : f.L; }

// The attention mask the flags ask for: padding [B, S] (sequence b loses its last b
// keys), causal [L, S], or full-row [L, S] (query 0 may attend to nothing).
struct Masks {
  nn::AttentionMask padding, attn;
  std::string text;
};

Masks masks_of(const Flags& f) {
  const int64_t B = f.batch, L = f.L, S = S_of(f);
  Masks m;
  m.text = "mask " + f.mask;
  if (f.mask == "padding") {
    std::vector<double> pad(B * S, 0.0);
    for (int64_t b = 0; b < B; b++)
      for (int64_t s = std::max<int64_t>(1, S - b); s < S; s++) pad[b * S + s] = 1;
    m.padding = nn::AttentionMask::blocked(from_vector(pad, {B, S}, kFloat64).to(kBool));
  } else if (f.mask == "causal") {
    m.attn = nn::causal_mask(L, S);
  } else if (f.mask == "full-row") {
    std::vector<double> block(L * S, 0.0);
    for (int64_t s = 0; s < S; s++) block[s] = 1;
    m.attn = nn::AttentionMask::blocked(from_vector(block, {L, S}, kFloat64).to(kBool));
  }
  return m;
}

std::string shape_list(const Case& c) {
  std::string s;
  for (size_t i = 0; i < c.inputs.size(); i++)
    s += (s.empty() ? "" : ", ") + c.names[i] + " " + shape_str(c.inputs[i].shape());
  return s;
}

std::vector<Entry> entries() {
  std::vector<Entry> e;
  e.push_back({"softmax", "softmax over --dim of x [batch, L, S]", [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, S_of(f)}, t, g, f.noncontiguous, 2.0)};
                 c.names = {"x"};
                 const int64_t dim = f.dim;
                 c.f = [dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); };
                 return c;
               }});
  e.push_back({"log_softmax", "log_softmax over --dim of x [batch, L, S]", [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, S_of(f)}, t, g, f.noncontiguous, 2.0)};
                 c.names = {"x"};
                 const int64_t dim = f.dim;
                 c.f = [dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); };
                 return c;
               }});
  e.push_back({"masked_fill", "x [batch, L, S] with the --mask positions (a random half for none) set to -3",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, S_of(f)}, t, g, f.noncontiguous)};
                 c.names = {"x"};
                 Masks m = masks_of(f);
                 Tensor mask = m.padding.defined()  ? m.padding.blocked().reshape({f.batch, 1, S_of(f)})
                               : m.attn.defined()   ? m.attn.blocked()
                                                    : lt(uniform({f.batch, f.L, S_of(f)}, 0, 1, kFloat64, &g), 0.5);
                 c.f = [mask](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, -3.0); };
                 return c;
               }});
  e.push_back({"layer_norm", "layer_norm of x [batch, L, embed] with weight and bias [embed]", [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous), leaf({f.embed}, t, g, f.noncontiguous),
                             leaf({f.embed}, t, g, f.noncontiguous)};
                 c.names = {"x", "weight", "bias"};
                 c.f = [](const std::vector<Tensor>& in) { return nn::layer_norm(in[0], in[1], in[2]); };
                 return c;
               }});
  e.push_back({"linear", "nn::Linear(--in, --out) on x [batch, L, in] (in, out default to --embed)",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 const int64_t in = f.in > 0 ? f.in : f.embed, out = f.out > 0 ? f.out : f.embed;
                 auto lin = std::make_shared<nn::Linear>(in, out, true, &g, kFloat64);
                 lin->to(t);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, in}, t, g, f.noncontiguous)};
                 c.names = {"x"};
                 add_module(c, lin);
                 c.f = [lin](const std::vector<Tensor>& v) { return lin->forward(v[0]); };
                 return c;
               }});
  // (No padding index: the padding row's gradient is zero by definition, not by
  // differentiation, so finite differences would rightly disagree there.)
  e.push_back({"embedding", "nn::Embedding(--vocab, --embed) of ids [batch, L]; repeated ids add their gradients",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 auto emb = std::make_shared<nn::Embedding>(f.vocab, f.embed, -1, &g, kFloat64);
                 emb->to(t);
                 Tensor ids = randint(0, f.vocab, {f.batch, f.L}, &g);
                 Case c;
                 add_module(c, emb);
                 c.f = [emb, ids](const std::vector<Tensor>&) { return emb->forward(ids); };
                 c.shapes = "ids " + shape_str(ids.shape());
                 return c;
               }});
  e.push_back({"cross_entropy",
               "cross_entropy of logits [batch*L, vocab] against targets (some 0 = ignored), --smoothing",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 Case c;
                 c.inputs = {leaf({f.batch * f.L, f.vocab}, t, g, f.noncontiguous, 2.0)};
                 c.names = {"logits"};
                 Tensor target = randint(0, f.vocab, {f.batch * f.L}, &g);
                 const double s = f.smoothing;
                 c.f = [target, s](const std::vector<Tensor>& in) {
                   return nn::cross_entropy(in[0], target, /*ignore_index=*/0, s).reshape({1});
                 };
                 return c;
               }});
  e.push_back({"scaled_dot_product_attention",
               "the fused attention op: q [batch, heads, L, embed/heads], k [.., S, ..], v [.., S, vdim/heads], --mask",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 const int64_t vdim = f.vdim > 0 ? f.vdim : f.embed;
                 if (f.embed % f.heads)
                   throw UsageError{"--embed needs a multiple of --heads " + std::to_string(f.heads) + ", got " +
                                    std::to_string(f.embed)};
                 if (vdim % f.heads)
                   throw UsageError{"--vdim needs a multiple of --heads " + std::to_string(f.heads) + ", got " +
                                    std::to_string(vdim)};
                 const int64_t D = f.embed / f.heads, Dv = vdim / f.heads;
                 Case c;
                 c.inputs = {leaf({f.batch, f.heads, f.L, D}, t, g, f.noncontiguous),
                             leaf({f.batch, f.heads, S_of(f), D}, t, g, f.noncontiguous),
                             leaf({f.batch, f.heads, S_of(f), Dv}, t, g, f.noncontiguous)};
                 c.names = {"q", "k", "v"};
                 Masks m = masks_of(f);
                 nn::AttentionMask mask = m.padding.reshape({f.batch, 1, 1, S_of(f)}) | m.attn;
                 c.f = [mask](const std::vector<Tensor>& in) {
                   return nn::scaled_dot_product_attention(in[0], in[1], in[2], mask).output;
                 };
                 return c;
               }});
  e.push_back({"multihead_attention",
               "nn::MultiHeadAttention(--embed, --heads, --kdim, --vdim): query [batch, L, embed], key [batch, S, kdim], "
               "value [batch, S, vdim], --mask",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 const int64_t kdim = f.kdim > 0 ? f.kdim : f.embed, vdim = f.vdim > 0 ? f.vdim : f.embed;
                 auto mha = std::make_shared<nn::MultiHeadAttention>(nn::MultiHeadAttentionOptions{
                     .embed_dim = f.embed, .num_heads = f.heads, .kdim = kdim, .vdim = vdim, .gen = &g, .dtype = kFloat64});
                 mha->to(t);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous),
                             leaf({f.batch, S_of(f), kdim}, t, g, f.noncontiguous),
                             leaf({f.batch, S_of(f), vdim}, t, g, f.noncontiguous)};
                 c.names = {"query", "key", "value"};
                 add_module(c, mha);
                 Masks m = masks_of(f);
                 c.f = [mha, m](const std::vector<Tensor>& in) {
                   return mha->forward(in[0], in[1], in[2], {.key_padding_mask = m.padding, .attn_mask = m.attn}).output;
                 };
                 return c;
               }});
  e.push_back({"encoder_layer",
               "nn::EncoderLayer(d_model --embed, --heads, ffn --ffn, no dropout) on x [batch, L, embed]; --mask padding "
               "or causal (self-attention)",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 auto layer = transformer_layer<nn::EncoderLayer>(f, t, g, "EncoderLayer");
                 Flags self = f;
                 self.S = f.L;
                 Masks m = masks_of(self);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous)};
                 c.names = {"x"};
                 add_module(c, layer);
                 c.f = [layer, m](const std::vector<Tensor>& in) { return layer->forward(in[0], m.padding, m.attn); };
                 return c;
               }});
  e.push_back({"decoder_layer",
               "nn::DecoderLayer(d_model --embed, --heads, ffn --ffn, no dropout): causal self-attention on x [batch, L, "
               "embed], cross-attention over memory [batch, S, embed]; --mask padding blocks memory keys",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 auto layer = transformer_layer<nn::DecoderLayer>(f, t, g, "DecoderLayer");
                 Masks m = masks_of(f);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous),
                             leaf({f.batch, S_of(f), f.embed}, t, g, f.noncontiguous)};
                 c.names = {"x", "memory"};
                 add_module(c, layer);
                 c.f = [layer, m](const std::vector<Tensor>& in) {
                   return layer->forward(in[0], in[1], {.memory_key_padding_mask = m.padding});
                 };
                 return c;
               }});
  e.push_back({"broken_square",
               "x * x with a deliberately wrong backward (g * x instead of 2 g x): what a failing check looks like",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L}, t, g, f.noncontiguous)};
                 c.names = {"x"};
                 c.f = [](const std::vector<Tensor>& in) {
                   const Tensor& x = in[0];
                   Tensor out;
                   {
                     NoGradGuard ng;
                     out = mul(x, x);
                   }
                   Tensor saved = x.detach();
                   // its forward rule is right (2 x v): with --forward only the reverse rows fail
                   auto jvp = [&](const std::vector<Tensor>& t) { return mul(t[0], mul(x, 2.0)); };
                   return record("broken_square", Loc::current(), out, {x},
                                 [saved](const Tensor& g) { return std::vector<Tensor>{mul(g, saved)}; }, {}, jvp);
                 };
                 return c;
               },
               true});
  return e;
}

// The float32 analytic gradients of the same case against the float64 ones.
void print_drift(const Case& c64, const Flags& flags, const Entry& entry) {
  Case c32 = entry.build(flags, kFloat32);
  Generator gen(flags.options.seed + 1);
  Tensor out64 = c64.f(c64.inputs);
  Tensor u = uniform(out64.shape(), -1.0, 1.0, kFloat64, &gen);
  for (auto& x : c64.inputs) Tensor(x).zero_grad();
  for (auto& x : c32.inputs) Tensor(x).zero_grad();
  out64.backward(u);
  c32.f(c32.inputs).backward(u.to(kFloat32));
  std::printf("\nfloat32 drift: the same analytic gradients computed in float32, against float64\n");
  std::printf("  %-34s %-16s %13s %13s\n", "input", "shape", "max_abs_diff", "max_rel_diff");
  for (size_t i = 0; i < c64.inputs.size(); i++) {
    if (!c64.inputs[i].requires_grad()) continue;
    Tensor g64 = c64.inputs[i].grad(), g32 = c32.inputs[i].grad();
    auto a = g64.defined() ? g64.to_vector<double>() : std::vector<double>(c64.inputs[i].numel(), 0.0);
    auto b = g32.defined() ? g32.to_vector<double>() : std::vector<double>(c32.inputs[i].numel(), 0.0);
    double abs_diff = 0, rel_diff = 0, scale = 0;
    for (size_t k = 0; k < a.size(); k++) scale = std::max(scale, std::fabs(a[k]));
    for (size_t k = 0; k < a.size(); k++) {
      double d = std::fabs(a[k] - b[k]);
      abs_diff = std::max(abs_diff, d);
      // relative to elements that are not (numerically) zero
      if (std::fabs(a[k]) > std::max(1e-3 * scale, 1e-8)) rel_diff = std::max(rel_diff, d / std::fabs(a[k]));
    }
    std::printf("  %-34s %-16s %13.3e %13.3e\n", c64.names[i].c_str(), shape_str(c64.inputs[i].shape()).c_str(),
                abs_diff, rel_diff);
  }
  for (auto& x : c64.inputs) Tensor(x).zero_grad();
}

void list(const std::vector<Entry>& all) {
  std::printf("what gradcheck can check:\n");
  for (auto& e : all)
    if (!e.self_test) std::printf("  %-30s %s\n", e.name.c_str(), e.what.c_str());
  std::printf("self-test (expected to FAIL):\n");
  for (auto& e : all)
    if (e.self_test) std::printf("  %-30s %s\n", e.name.c_str(), e.what.c_str());
}

// Bytes a case may need, before building it: its inputs, parameters and activations
// (x [batch, L, S], attention scores [batch, heads, L, S], widths up to the largest of
// the sizes), in float64 and again in float32, with room for a layer's intermediates.
double estimated_bytes(const Flags& f, const std::string& name) {
  const bool attention = name.find("attention") != std::string::npos || name.find("_layer") != std::string::npos;
  const double B = double(f.batch), L = double(f.L), S = double(S_of(f)), H = double(f.heads), V = double(f.vocab);
  const double W = double(std::max({f.embed, f.kdim, f.vdim, f.ffn, f.in, f.out}));
  const double elements = B * (L + S) * W + (attention ? H : 1.0) * B * L * S + 6 * W * W + V * W + B * L * V;
  return (8.0 + 4.0) * 16 * elements;
}

// Finite differences evaluate the function twice per checked element: refuses checks
// that would run longer than kMaxSeconds, from the time of one evaluation.
constexpr double kMaxSeconds = 600;

std::string duration_text(double seconds) {
  char b[64];
  if (seconds < 1e-3) std::snprintf(b, sizeof b, "%.0f us", seconds * 1e6);
  else if (seconds < 1) std::snprintf(b, sizeof b, "%.0f ms", seconds * 1e3);
  else if (seconds < 2 * 3600) std::snprintf(b, sizeof b, "%.0f s", seconds);
  else if (seconds < 2 * 86400) std::snprintf(b, sizeof b, "%.0f hours", seconds / 3600);
  else std::snprintf(b, sizeof b, "%.0f days", seconds / 86400);
  return b;
}

// A second-order check also perturbs the upstream gradient, and each of its evaluations
// is a forward and a backward (about three forwards); a forward-mode check adds a jvp per
// element (about two forwards).
void check_time(const Case& c, const std::string& name, bool second_order, bool forward) {
  int64_t elements = 0, elements_out = 0;
  for (const Tensor& x : c.inputs)
    if (x.requires_grad()) elements += x.numel();
  NoGradGuard ng;
  auto seconds_of_one = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor out = c.f(c.inputs);
    out.to_vector<double>();
    if (second_order) elements_out = out.numel();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * (second_order ? 3.0 : 1.0);
  };
  double each = seconds_of_one();
  elements += elements_out;
  const int evaluations = forward ? 4 : 2;  // per element
  if (evaluations * double(elements) * each <= kMaxSeconds)
    each = std::min(each, seconds_of_one());  // the first warms up
  const double total = evaluations * double(elements) * each;
  if (total > kMaxSeconds)
    throw UsageError{"checking " + name + " at these shapes perturbs " + std::to_string(elements) +
                     " elements, with " + std::to_string(evaluations) + " evaluations of " + duration_text(each) +
                     " each: about " +
                     duration_text(total) + ", more than the " + duration_text(kMaxSeconds) +
                     " allowed; finite differences are for small shapes (lower --batch, --L, --S or the widths)"};
}

// Draws the graph of c.f at c's inputs to path, with the norms of an all-ones upstream
// gradient (which accumulates into the inputs' .grad: the checks are done by then).
void draw_checked_graph(const Case& c, const std::string& path) {
  GraphDrawOptions options;
  for (size_t i = 0; i < c.inputs.size(); i++) options.params.emplace_back(c.names[i], c.inputs[i]);
  Tensor out;
  if (c.modules.size() == 1) {
    nn::GraphScopes scopes(*c.modules[0]);
    out = c.f(c.inputs);
  } else {
    out = c.f(c.inputs);
  }
  {
    GradNormRecorder norms;
    out.backward(ones_like(out), /*retain_graph=*/true);
  }
  draw_graph(out, path, options);
  std::printf("graph: %s\n", path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("gradcheck", [&] {
    const std::vector<Entry> all = entries();
    CLI::App app{"Checks the gradient of an op or a layer by finite differences in float64, and its float32 drift. "
                 "Exits 0 when the check passes, 1 when it fails, 2 on a bad command line or impossible shapes.",
                 "gradcheck"};
    std::string name;
    bool list_them = false;
    Flags f;
    int64_t seed = (int64_t)f.options.seed;
    constexpr int64_t kMaxDim = 4096;  // finite differences are for small shapes
    app.add_option("NAME", name, "what to check (--list shows the names)");
    app.add_flag("--list", list_them, "list what can be checked");
    cli::integer(app, "--batch", f.batch, 1, kMaxDim, "batch size");
    cli::integer(app, "--L", f.L, 1, kMaxDim, "query length");
    cli::integer(app, "--S", f.S, 1, kMaxDim, "key length (default: --L)")->default_str("");
    cli::integer(app, "--embed", f.embed, 1, kMaxDim, "model width");
    cli::integer(app, "--heads", f.heads, 1, kMaxDim, "attention heads");
    cli::integer(app, "--kdim", f.kdim, 1, kMaxDim, "key width (default: --embed)")->default_str("");
    cli::integer(app, "--vdim", f.vdim, 1, kMaxDim, "value width (default: --embed)")->default_str("");
    cli::integer(app, "--ffn", f.ffn, 1, kMaxDim, "feed-forward width");
    cli::integer(app, "--vocab", f.vocab, 2, 65536, "vocabulary size (cross_entropy ignores class 0)");
    cli::integer(app, "--in", f.in, 1, kMaxDim, "linear's input width (default: --embed)")->default_str("");
    cli::integer(app, "--out", f.out, 1, kMaxDim, "linear's output width (default: --embed)")->default_str("");
    cli::integer(app, "--dim", f.dim, -3, 2, "softmax's dimension of x [batch, L, S]");
    cli::real(app, "--smoothing", f.smoothing, 0.0, 1.0, "cross_entropy's label smoothing");
    cli::choice(app, "--mask", f.mask, {"none", "padding", "causal", "full-row"}, "the attention mask");
    app.add_flag("--noncontiguous", f.noncontiguous, "inputs as transposed or strided views");
    cli::real(app, "--eps", f.options.eps, 1e-12, 1.0, "finite-difference step");
    cli::real(app, "--atol", f.options.atol, 0.0, 1.0, "absolute tolerance");
    cli::real(app, "--rtol", f.options.rtol, 0.0, 1.0, "relative tolerance");
    cli::integer(app, "--seed", seed, 0, std::numeric_limits<int64_t>::max(), "random seed");
    bool second_order = false;
    app.add_flag("--second-order", second_order,
                 "check second derivatives too (double backward against finite differences of the gradient)");
    app.add_flag("--forward", f.options.check_forward_ad,
                 "check forward mode too (a jvp per element against the same finite differences)");
    std::string graph;
    cli::text(app, "--graph", graph,
              "draw the backward graph of the checked expression to FILE (.dot or .gv; .svg, .png or .pdf through "
              "Graphviz's dot)");
    cli::parse(app, argc, argv);
    if (!graph.empty()) {
      const size_t dot = graph.rfind('.');
      const std::string ext = dot == std::string::npos ? "" : graph.substr(dot);
      if (ext != ".dot" && ext != ".gv" && ext != ".svg" && ext != ".png" && ext != ".pdf")
        throw UsageError{"--graph needs a file ending .dot, .gv, .svg, .png or .pdf, got " + printable(graph)};
      cli::check_output_file("gradcheck", graph, "the graph");
    }
    f.options.seed = (uint64_t)seed;
    if (list_them) {
      list(all);
      return 0;
    }
    if (name.empty()) throw UsageError{"a name to check is needed (--list shows them)"};
    auto it = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.name == name; });
    if (it == all.end())
      throw UsageError{"nothing named " + printable(name) + " to check (--list shows what there is)"};
    cli::check_fits_in_memory("gradcheck", estimated_bytes(f, name), "checking " + name + " at these shapes");
    Case c;
    try {
      c = it->build(f, kFloat64);
      check_time(c, name, second_order, f.options.check_forward_ad);
    } catch (const OutOfMemory&) {
      throw;
    } catch (const Error& e) {  // shapes the op or the layer refuses
      throw UsageError{e.what()};
    }
    std::printf("gradcheck %s: %s%s\n", name.c_str(), c.shapes.empty() ? "" : (c.shapes + ", ").c_str(),
                shape_list(c).c_str());
    if (f.mask != "none") std::printf("  mask %s\n", f.mask.c_str());
    if (f.noncontiguous) std::printf("  inputs are non-contiguous views\n");
    GradcheckReport report = gradcheck(c.f, c.inputs, f.options, c.names);
    std::printf("%s", report.to_string().c_str());
    print_drift(c, f, *it);
    bool passed = report.passed;
    if (second_order) {
      // with --forward, forward over reverse too
      GradcheckReport second = gradgradcheck(c.f, c.inputs, f.options, c.names);
      std::printf("\n%s", second.to_string().c_str());
      passed = passed && second.passed;
    }
    if (!graph.empty()) draw_checked_graph(c, graph);
    std::printf("\n%s\n", passed ? "PASSED" : "FAILED");
    return passed ? 0 : 1;
  });
}
