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
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/h5.h"
#include "nn/multihead_attention.h"

using namespace ember;
using namespace ember::nn;

static int usage() {
  std::fprintf(stderr, "usage: attention_probe CASE.h5 OUT.h5 [--dtype float32|float64]\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) return usage();
  DType dtype = kFloat64;
  if (argc == 5) {
    if (std::strcmp(argv[3], "--dtype") != 0) return usage();
    std::string d = argv[4];
    if (d == "float32") dtype = kFloat32;
    else if (d != "float64") {
      std::fprintf(stderr, "attention_probe: --dtype must be float32 or float64, got '%s'\n", d.c_str());
      return 2;
    }
  }
  const std::string in = argv[1], out = argv[2];
  try {
    std::string kind = h5::attr_string(in, "/", "kind");
    if (kind != "multihead_attention")
      fail("attention_probe", "'", in, "' is a '", kind, "' case; expected kind multihead_attention");
    const auto E = (int64_t)h5::attr_double(in, "/", "embed_dim");
    const auto H = (int64_t)h5::attr_double(in, "/", "num_heads");
    const auto kdim = (int64_t)h5::attr_double(in, "/", "kdim");
    const auto vdim = (int64_t)h5::attr_double(in, "/", "vdim");
    const bool bias = h5::attr_double(in, "/", "bias") != 0;
    MultiHeadAttention mha(E, H, kdim, vdim, bias, 0.0, nullptr, dtype);
    StateDict state;
    for (auto& [name, p] : mha.named_parameters()) state[name] = h5::read(in, "params/" + name).to(dtype);
    mha.load_state_dict(state);

    auto input = [&](const char* name) { return h5::read(in, std::string("input/") + name).to(dtype).requires_grad_(); };
    Tensor q = input("query"), k = input("key"), v = input("value");
    AttentionMask pad, attn;
    if (h5::exists(in, "input/key_padding_mask"))
      pad = AttentionMask::blocked(h5::read(in, "input/key_padding_mask").to(kBool));
    if (h5::exists(in, "input/attn_mask")) attn = AttentionMask::blocked(h5::read(in, "input/attn_mask").to(kBool));

    auto r = mha.forward(q, k, v, pad, attn, AttnWeights::PerHead);
    r.output.backward(h5::read(in, "input/grad_output").to(dtype));

    std::vector<std::pair<std::string, Tensor>> results{{"output", r.output}, {"attn_weights", r.weights},
                                                        {"grad/query", q.grad()}, {"grad/key", k.grad()},
                                                        {"grad/value", v.grad()}};
    for (auto& [name, p] : mha.named_parameters()) results.emplace_back("grad/" + name, p.grad());
    {
      h5::Writer w(out);
      w.attr("/", "kind", "multihead_attention_result");
      w.attr("/", "dtype", dtype_name(dtype));
      for (auto& [name, t] : results) w.write("output/" + name, t);
    }
    std::printf("attention_probe: %s -> %s (E=%lld, H=%lld, kdim=%lld, vdim=%lld, bias=%d, %s)\n", in.c_str(),
                out.c_str(), (long long)E, (long long)H, (long long)kdim, (long long)vdim, bias ? 1 : 0,
                dtype_name(dtype));
    if (!h5::exists(in, "expected")) return 0;

    // float32 errors are relative to the tensor's largest value, or, for a tensor that is
    // zero in exact arithmetic (the gradient of k_proj.bias: softmax ignores a constant
    // added to every score), to the largest gradient of the case.
    std::vector<Tensor> expected;
    double grad_scale = 0;
    for (auto& [name, t] : results) {
      Tensor e = h5::read(in, "expected/" + name);
      if (e.shape() != t.shape())
        fail("attention_probe", "expected/", name, " has shape ", e.shape(), " but ours is ", t.shape());
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
        abs_err = std::max(abs_err, std::fabs(a[j] - b[j]));
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
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
