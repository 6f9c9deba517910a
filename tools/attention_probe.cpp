// attention_probe: proves that our MultiHeadAttention computes what another framework's
// does, on the same weights and inputs.
//
//   attention_probe CASE.h5 OUT.h5 [--dtype float32|float64]
//
// CASE.h5 follows the multihead_attention schema of tests/data/README.md: attributes
// embed_dim, num_heads, kdim, vdim, bias; input/{query,key,value,grad_output}, optional
// input/key_padding_mask [B,S] and input/attn_mask [L,S] (1 = blocked); params/<name>.
// The probe builds MultiHeadAttention with those parameters, runs forward and backward
// (upstream gradient input/grad_output) and writes OUT.h5 with output/output,
// output/attn_weights [B,H,L,S] and output/grad/<name> for query, key, value and every
// parameter. When CASE.h5 has expected/, it prints each tensor's largest absolute error
// and exits with status 1 above 1e-9 (float64) or a relative 1e-4 (float32; a gradient
// that is zero in exact arithmetic is measured against 1e-3 of the case's largest gradient).
//
// Every attribute and dataset of the case is checked before use (an integer in range, the
// shape the schema gives, finite numbers, masks of 0 and 1); an error names the file and
// the key, what was expected and what was found. OUT.h5 is replaced whole or not at all.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/error.h"
#include "core/file_io.h"
#include "io/h5.h"
#include "nn/multihead_attention.h"

using namespace ember;
using namespace ember::nn;

namespace {

const char* const kOp = "attention_probe";

// The largest embed_dim, kdim or vdim a case may give: reference cases are small, and a
// width of 2^16 already asks for 2^34 weights.
constexpr int64_t kMaxDim = int64_t(1) << 16;

std::string number_text(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// A case file opened for reading, with checked accessors that name it and the key.
class Case {
 public:
  explicit Case(const std::string& path) : path_(path), reader_(open(path)) {}

  const std::string& path() const { return path_; }
  bool has(const std::string& key) const { return reader_.has(key); }

  // A root attribute holding text.
  std::string text(const std::string& name) const {
    if (!reader_.has_attr("/", name)) fail(kOp, "'", path_, "' has no root attribute '", name, "' (expected text)");
    if (!reader_.attr_is_string("/", name))
      fail(kOp, "'", path_, "': attribute '", name, "' must be text, got ", number_text(reader_.attr_double("/", name)));
    return reader_.attr_string("/", name);
  }

  // A root attribute holding an integer in [lo, hi].
  int64_t integer(const std::string& name, int64_t lo, int64_t hi) const {
    const std::string need = cat_str("an integer in [", lo, ", ", hi, "]");
    if (!reader_.has_attr("/", name)) fail(kOp, "'", path_, "' has no root attribute '", name, "' (expected ", need, ")");
    if (reader_.attr_is_string("/", name))
      fail(kOp, "'", path_, "': attribute '", name, "' must be ", need, ", got the text ",
           printable(reader_.attr_string("/", name)));
    if (reader_.attr_is_integer("/", name)) {
      const int64_t v = reader_.attr_int("/", name);
      if (v < lo || v > hi) fail(kOp, "'", path_, "': attribute '", name, "' must be ", need, ", got ", v);
      return v;
    }
    const double v = reader_.attr_double("/", name);
    if (!std::isfinite(v) || v != std::floor(v) || v < double(lo) || v > double(hi))
      fail(kOp, "'", path_, "': attribute '", name, "' must be ", need, ", got ", number_text(v));
    return (int64_t)v;
  }

  // A dataset of numbers, every one finite, of the given shape, as float64 when it was
  // stored as integers.
  Tensor numbers(const std::string& key, const Shape& shape, const std::string& shape_text) const {
    Tensor t = dataset(key, shape, shape_text);
    if (!is_computing_float(t.dtype())) t = t.to(kFloat64);
    auto v = t.to_vector<double>();
    for (size_t i = 0; i < v.size(); i++)
      if (!std::isfinite(v[i]))
        fail(kOp, "'", path_, "': dataset '", key, "' holds ", number_text(v[i]), " at flat index ", i,
             " (expected finite numbers)");
    return t;
  }

  // A mask: 0 (attend) or 1 (blocked) everywhere.
  Tensor mask(const std::string& key, const Shape& shape, const std::string& shape_text) const {
    Tensor t = dataset(key, shape, shape_text);
    auto v = t.to_vector<double>();
    for (size_t i = 0; i < v.size(); i++)
      if (v[i] != 0 && v[i] != 1)
        fail(kOp, "'", path_, "': dataset '", key, "' holds ", number_text(v[i]), " at flat index ", i,
             " (expected a mask of 0 and 1)");
    return t.to(kBool);
  }

  // A dataset whose shape is not known in advance (it is checked by the caller).
  Tensor any(const std::string& key) const {
    if (!reader_.is_dataset(key)) fail(kOp, "'", path_, "' has no dataset '", key, "'");
    try {
      return reader_.read(key);
    } catch (const OutOfMemory& e) {
      fail(kOp, "'", path_, "': dataset '", key, "' is too large to read (", e.what(), ")");
    }
  }

 private:
  static h5::Reader open(const std::string& path) {
    io::check_regular_file(path, kOp, "an HDF5 case file");
    return h5::Reader(path);
  }

  Tensor dataset(const std::string& key, const Shape& shape, const std::string& shape_text) const {
    Tensor t = any(key);
    if (t.shape() != shape)
      fail(kOp, "'", path_, "': dataset '", key, "' has shape ", t.shape(), "; expected ", shape_text, " = ", shape);
    return t;
  }

  std::string path_;
  h5::Reader reader_;
};

// The size of dimension d of a dataset of the given rank: B, L and S come from the inputs.
int64_t dim_of(const Case& c, const std::string& key, const Tensor& t, int64_t rank, int64_t d,
               const std::string& shape_text) {
  if (t.dim() != rank || t.size(d) < 1)
    fail(kOp, "'", c.path(), "': dataset '", key, "' has shape ", t.shape(), "; expected ", shape_text,
         " with every size at least 1");
  return t.size(d);
}

int probe(const std::string& in, const std::string& out, DType dtype) {
  std::error_code ec;
  if (std::filesystem::equivalent(in, out, ec))
    fail(kOp, "OUT.h5 '", out, "' is the case file itself; expected another path for the results");
  cli::check_output_file(kOp, out, "the results (OUT.h5)");
  const Case c(in);
  const int64_t schema = c.integer("schema", 0, int64_t(1) << 30);
  if (schema != 1)
    fail(kOp, "'", in, "': attribute 'schema' is ", schema, "; this program reads schema 1 (tests/data/README.md)");
  const std::string kind = c.text("kind");
  if (kind != "multihead_attention")
    fail(kOp, "'", in, "': attribute 'kind' must be \"multihead_attention\", got ", printable(kind));
  const int64_t E = c.integer("embed_dim", 1, kMaxDim);
  const int64_t H = c.integer("num_heads", 1, E);
  if (E % H != 0) fail(kOp, "'", in, "': embed_dim ", E, " must be a multiple of num_heads, got num_heads ", H);
  const int64_t kdim = c.integer("kdim", 1, kMaxDim);
  const int64_t vdim = c.integer("vdim", 1, kMaxDim);
  const bool bias = c.integer("bias", 0, 1) != 0;
  const double elem = dtype == kFloat64 ? 8 : 4;
  // weights, their gradients and the copies read from the file
  cli::check_fits_in_memory(kOp, 3 * elem * double(E) * double(2 * E + kdim + vdim + 4),
                            cat_str("the parameters of '", in, "' (embed_dim ", E, ", kdim ", kdim, ", vdim ", vdim, ")"));

  MultiHeadAttention mha({.embed_dim = E, .num_heads = H, .kdim = kdim, .vdim = vdim, .bias = bias, .dtype = dtype});
  StateDict state;
  for (auto& [name, p] : mha.named_parameters())
    state[name] = c.numbers("params/" + name, p.shape(), "the parameter's shape").to(dtype);
  mha.load_state_dict(state);

  Tensor q0 = c.any("input/query"), k0 = c.any("input/key");
  const int64_t B = dim_of(c, "input/query", q0, 3, 0, "[B, L, embed_dim]");
  const int64_t L = dim_of(c, "input/query", q0, 3, 1, "[B, L, embed_dim]");
  const int64_t S = dim_of(c, "input/key", k0, 3, 1, "[B, S, kdim]");
  cli::check_fits_in_memory(kOp, 6 * elem * double(B) * double(H) * double(L) * double(S),
                            cat_str("the attention weights of '", in, "' (", B, " x ", H, " x ", L, " x ", S, ")"));
  auto input = [&](const char* name, const Shape& shape, const char* text) {
    return c.numbers(std::string("input/") + name, shape, text).to(dtype).requires_grad_();
  };
  Tensor q = input("query", {B, L, E}, "[B, L, embed_dim]");
  Tensor k = input("key", {B, S, kdim}, "[B, S, kdim]");
  Tensor v = input("value", {B, S, vdim}, "[B, S, vdim]");
  Tensor grad_output = c.numbers("input/grad_output", {B, L, E}, "[B, L, embed_dim]").to(dtype);
  AttentionMask pad, attn;
  if (c.has("input/key_padding_mask"))
    pad = AttentionMask::blocked(c.mask("input/key_padding_mask", {B, S}, "[B, S]"));
  if (c.has("input/attn_mask")) attn = AttentionMask::blocked(c.mask("input/attn_mask", {L, S}, "[L, S]"));

  auto r = mha.forward(q, k, v, {.key_padding_mask = pad, .attn_mask = attn, .need_weights = AttnWeights::PerHead});
  r.output.backward(grad_output);

  std::vector<std::pair<std::string, Tensor>> results{{"output", r.output}, {"attn_weights", r.weights},
                                                      {"grad/query", q.grad()}, {"grad/key", k.grad()},
                                                      {"grad/value", v.grad()}};
  for (auto& [name, p] : mha.named_parameters()) results.emplace_back("grad/" + name, p.grad());
  {
    h5::Writer w = h5::Writer::in_memory(out);
    w.attr("/", "kind", "multihead_attention_result");
    w.attr("/", "dtype", dtype_name(dtype));
    for (auto& [name, t] : results) w.write("output/" + name, t);
    const std::vector<uint8_t> bytes = w.image();
    io::replace_file(out, bytes.data(), bytes.size(), kOp);
  }
  std::printf("attention_probe: %s -> %s (E=%lld, H=%lld, kdim=%lld, vdim=%lld, bias=%d, %s)\n", in.c_str(),
              out.c_str(), (long long)E, (long long)H, (long long)kdim, (long long)vdim, bias ? 1 : 0,
              dtype_name(dtype));
  if (!c.has("expected")) return 0;

  // float32 errors are relative to the tensor's largest value, or, for a tensor that is
  // zero in exact arithmetic (the gradient of k_proj.bias: softmax ignores a constant
  // added to every score), to the largest gradient of the case.
  std::vector<Tensor> expected;
  double grad_scale = 0;
  for (auto& [name, t] : results) {
    Tensor e = c.numbers("expected/" + name, t.shape(), "the shape of our " + name);
    if (name.rfind("grad/", 0) == 0) grad_scale = std::max(grad_scale, amax(abs(e)).item());
    expected.push_back(e);
  }
  bool ok = true;
  std::printf("%-28s %14s %14s  %s\n", "tensor", "max abs err", "max rel err", "");
  for (size_t i = 0; i < results.size(); i++) {
    const std::string& name = results[i].first;
    auto a = results[i].second.to_vector<double>(), b = expected[i].to_vector<double>();
    double abs_err = 0, scale = 0;
    for (size_t j = 0; j < a.size(); j++) {
      const double d = std::fabs(a[j] - b[j]);
      abs_err = std::isnan(d) ? INFINITY : std::max(abs_err, d);  // a NaN of ours is a mismatch
      scale = std::max(scale, std::fabs(b[j]));
    }
    bool is_grad = name.rfind("grad/", 0) == 0;
    double ref = is_grad ? std::max(scale, 1e-3 * grad_scale) : scale;
    double rel = abs_err / std::max(ref, 1e-300);
    bool pass = dtype == kFloat64 ? abs_err <= 1e-9 : rel <= 1e-4;
    ok = ok && pass;
    std::printf("%-28s %14.3e %14.3e  %s\n", name.c_str(), abs_err, rel, pass ? "ok" : "FAIL");
  }
  std::printf("%s\n", ok ? "all tensors match" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run(kOp, [&] {
    CLI::App app{"Runs MultiHeadAttention on a reference case and compares with its expected tensors.", kOp};
    std::string in, out, dtype_text = "float64";
    app.add_option("CASE.h5", in, "the case (tests/data/README.md, kind multihead_attention)")->required()->type_name("FILE");
    app.add_option("OUT.h5", out, "where to write our tensors (replaced)")->required()->type_name("FILE");
    cli::choice(app, "--dtype", dtype_text, {"float64", "float32"}, "the type to compute in");
    cli::parse(app, argc, argv);
    return probe(in, out, dtype_text == "float32" ? kFloat32 : kFloat64);
  });
}
