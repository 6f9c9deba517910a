// gradcheck: checks the gradient of an op or a layer, by name, at shapes given as flags.
// In float64, every input and parameter is compared with central finite differences of
// sum(f(x) * u) for a random non-uniform upstream gradient u; then the same analytic
// gradients computed in float32 are compared with the float64 ones - the drift a user
// sees when training in float32. Exits 0 when the check passes, 1 when it fails, 2 on a
// bad command line or impossible shapes.
//
//   gradcheck --list
//   gradcheck NAME [--batch B] [--L L] [--S S] [--embed E] [--heads H] [--kdim K] [--vdim V]
//                  [--ffn F] [--vocab N] [--in N] [--out N] [--dim D] [--smoothing P]
//                  [--mask none|padding|causal|full-row] [--noncontiguous]
//                  [--eps X] [--atol X] [--rtol X] [--seed N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/functional.h"
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
    t = mul(randn({shape[0] * 2}, kFloat64, &gen), scale).to(dtype).slice(0, 0, shape[0] * 2, 2);
  } else {
    t = mul(randn(shape, kFloat64, &gen), scale).to(dtype);
  }
  return t.requires_grad_();
}

// A module's parameters become inputs of the check (the module uses the same tensors).
void add_parameters(Case& c, const nn::Module& m, const std::string& prefix) {
  for (auto& [name, p] : m.named_parameters()) {
    c.inputs.push_back(p);
    c.names.push_back(prefix + name);
  }
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
  } else if (f.mask != "none") {
    throw UsageError{"--mask must be none, padding, causal or full-row, got '" + f.mask + "'"};
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
                 add_parameters(c, *lin, "");
                 c.modules = {lin};
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
                 add_parameters(c, *emb, "");
                 c.modules = {emb};
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
                 if (f.embed % f.heads) throw UsageError{"--embed must be a multiple of --heads"};
                 const int64_t D = f.embed / f.heads, Dv = (f.vdim > 0 ? f.vdim : f.embed) / f.heads;
                 Case c;
                 c.inputs = {leaf({f.batch, f.heads, f.L, D}, t, g, f.noncontiguous),
                             leaf({f.batch, f.heads, S_of(f), D}, t, g, f.noncontiguous),
                             leaf({f.batch, f.heads, S_of(f), std::max<int64_t>(Dv, 1)}, t, g, f.noncontiguous)};
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
                 auto mha = std::make_shared<nn::MultiHeadAttention>(f.embed, f.heads, kdim, vdim, true, 0.0, &g, kFloat64);
                 mha->to(t);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous),
                             leaf({f.batch, S_of(f), kdim}, t, g, f.noncontiguous),
                             leaf({f.batch, S_of(f), vdim}, t, g, f.noncontiguous)};
                 c.names = {"query", "key", "value"};
                 add_parameters(c, *mha, "");
                 c.modules = {mha};
                 Masks m = masks_of(f);
                 c.f = [mha, m](const std::vector<Tensor>& in) {
                   return mha->forward(in[0], in[1], in[2], m.padding, m.attn).output;
                 };
                 return c;
               }});
  e.push_back({"encoder_layer",
               "nn::EncoderLayer(d_model --embed, --heads, ffn --ffn, no dropout) on x [batch, L, embed]; --mask padding "
               "or causal (self-attention)",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 nn::LayerConfig cfg{f.embed, f.heads, f.ffn, 0.0};
                 auto layer = std::make_shared<nn::EncoderLayer>(cfg, &g, kFloat64);
                 layer->to(t);
                 Flags self = f;
                 self.S = f.L;
                 Masks m = masks_of(self);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous)};
                 c.names = {"x"};
                 add_parameters(c, *layer, "");
                 c.modules = {layer};
                 c.f = [layer, m](const std::vector<Tensor>& in) { return layer->forward(in[0], m.padding, m.attn); };
                 return c;
               }});
  e.push_back({"decoder_layer",
               "nn::DecoderLayer(d_model --embed, --heads, ffn --ffn, no dropout): causal self-attention on x [batch, L, "
               "embed], cross-attention over memory [batch, S, embed]; --mask padding blocks memory keys",
               [](const Flags& f, DType t) {
                 Generator g(f.options.seed);
                 nn::LayerConfig cfg{f.embed, f.heads, f.ffn, 0.0};
                 auto layer = std::make_shared<nn::DecoderLayer>(cfg, &g, kFloat64);
                 layer->to(t);
                 Masks m = masks_of(f);
                 Case c;
                 c.inputs = {leaf({f.batch, f.L, f.embed}, t, g, f.noncontiguous),
                             leaf({f.batch, S_of(f), f.embed}, t, g, f.noncontiguous)};
                 c.names = {"x", "memory"};
                 add_parameters(c, *layer, "");
                 c.modules = {layer};
                 c.f = [layer, m](const std::vector<Tensor>& in) {
                   return layer->forward(in[0], in[1], {}, m.padding, /*causal=*/true);
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
                   return record("broken_square", Loc::current(), out, {x},
                                 [saved](const Tensor& g) { return std::vector<Tensor>{mul(g, saved)}; });
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

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Entry> all = entries();
  try {
    if (argc < 2) throw UsageError{"a name to check is needed (--list shows them)"};
    const std::string name = argv[1];
    if (name == "--list") {
      list(all);
      return 0;
    }
    auto it = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.name == name; });
    if (it == all.end()) throw UsageError{"nothing named '" + name + "' to check (--list shows what there is)"};
    Flags f;
    std::map<std::string, int64_t*> ints = {{"--batch", &f.batch}, {"--L", &f.L},         {"--S", &f.S},
                                            {"--embed", &f.embed}, {"--heads", &f.heads}, {"--kdim", &f.kdim},
                                            {"--vdim", &f.vdim},   {"--ffn", &f.ffn},     {"--vocab", &f.vocab},
                                            {"--in", &f.in},       {"--out", &f.out}};
    for (int i = 2; i < argc; i++) {
      const std::string a = argv[i];
      if (a == "--noncontiguous") {
        f.noncontiguous = true;
        continue;
      }
      if (i + 1 >= argc) throw UsageError{"missing value after " + a};
      const std::string v = argv[++i];
      if (ints.count(a)) *ints[a] = cli::parse_int(a, v, 1);
      else if (a == "--dim") f.dim = cli::parse_int(a, v, -8);
      else if (a == "--mask") f.mask = v;
      else if (a == "--smoothing") f.smoothing = cli::parse_real(a, v);
      else if (a == "--eps") f.options.eps = cli::parse_real(a, v);
      else if (a == "--atol") f.options.atol = cli::parse_real(a, v);
      else if (a == "--rtol") f.options.rtol = cli::parse_real(a, v);
      else if (a == "--seed") f.options.seed = (uint64_t)cli::parse_int(a, v, 0);
      else throw UsageError{"unknown option " + a};
    }
    if (f.mask != "none" && f.mask != "padding" && f.mask != "causal" && f.mask != "full-row")
      throw UsageError{"--mask must be none, padding, causal or full-row, got '" + f.mask + "'"};
    Case c = it->build(f, kFloat64);
    std::printf("gradcheck %s: %s%s\n", name.c_str(), c.shapes.empty() ? "" : (c.shapes + ", ").c_str(),
                shape_list(c).c_str());
    if (f.mask != "none") std::printf("  mask %s\n", f.mask.c_str());
    if (f.noncontiguous) std::printf("  inputs are non-contiguous views\n");
    GradcheckReport report = gradcheck(c.f, c.inputs, f.options, c.names);
    std::printf("%s", report.to_string().c_str());
    print_drift(c, f, *it);
    std::printf("\n%s\n", report.passed ? "PASSED" : "FAILED");
    return report.passed ? 0 : 1;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gradcheck: %s\n", e.message.c_str());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "gradcheck: %s\n", e.what());
    return 2;
  }
}
