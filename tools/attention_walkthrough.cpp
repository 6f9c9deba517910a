// attention_walkthrough: the worked example of multi-head self-attention, step by step
// with its shapes: two sentences of token ids [[5,2,1,0,0],[1,3,1,4,0]] (0 pads), a
// vocabulary of 10, d_model 512, 8 heads of 64.
//
//   ids [2,5] -> embedding + positions [2,5,512] -> Q, K, V [2,5,512]
//   -> split into heads [2,8,5,64] -> scores Q K^T / sqrt(64) [2,8,5,5]
//   -> padding mask, softmax [2,8,5,5] -> weights x V [2,8,5,64]
//   -> merge the heads [2,5,512] -> output projection [2,5,512]
//   -> residual + LayerNorm [2,5,512]
//
// Every step is an ember op, and the result is checked against nn::MultiHeadAttention
// with the same weights. Each head's attention map is drawn for both sentences: the
// padded keys get exactly zero weight (white columns).
//
// Then the gradient flowing back, seen through retain_grad: for a random upstream
// gradient on the output, the gradient reaching every head's weights P and scores S. It
// is softmax's backward of P's (ember::softmax_backward, checked bitwise), exactly zero at
// padded keys, and each of its rows sums to zero (adding a constant to a row of scores
// changes nothing). The magnitudes of the score gradients are drawn for sentence 1.
//
//   attention_walkthrough [--out DIR] [--seed N]
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/multihead_attention.h"
#include "lib/plot/plot.h"

using namespace ember;

namespace {

void step(int n, const std::string& what, const Tensor& t) {
  std::printf("%2d. %-52s %s\n", n, what.c_str(), shape_str(t.shape()).c_str());
}

// The tokens of sentence b as axis labels ("pad" for id 0).
std::vector<std::string> token_labels(const Tensor& ids, int64_t b) {
  std::vector<std::string> labels;
  for (int64_t id : ids.select(0, b).to_vector<int64_t>()) labels.push_back(id == 0 ? "pad" : std::to_string(id));
  return labels;
}

// One heatmap per head of maps [heads, L, L], query rows against key columns.
std::vector<plot::Panel> head_panels(const Tensor& maps, const std::vector<std::string>& labels, double vmax,
                                     bool annotate) {
  std::vector<plot::Panel> panels;
  for (int64_t h = 0; h < maps.size(0); h++) {
    plot::Heatmap p;
    p.title = "head " + std::to_string(h + 1);
    p.xlabel = "key (len_k)";
    p.ylabel = "query (len_q)";
    const int64_t L = maps.size(1);
    auto mv = maps.select(0, h).contiguous().to_vector<double>();
    for (int64_t i = 0; i < L; i++) p.values.emplace_back(mv.begin() + i * L, mv.begin() + (i + 1) * L);
    p.row_labels = p.col_labels = labels;
    p.vmax = vmax;
    p.annotate = annotate;
    panels.push_back(p);
  }
  return panels;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("attention_walkthrough", [&] {
    CLI::App app{"Multi-head self-attention step by step, with its shapes, checked against nn::MultiHeadAttention.",
                 "attention_walkthrough"};
    std::string out = "runs/walkthrough";
    int64_t seed = 1;
    cli::text(app, "--out", out, "directory for the attention maps (PNG)");
    cli::integer(app, "--seed", seed, 0, std::numeric_limits<int64_t>::max(), "random seed of the weights");
    cli::parse(app, argc, argv);
    cli::make_output_dir("--out", out);
    const int64_t vocab = 10, d_model = 512, heads = 8, d_k = d_model / heads, B = 2, L = 5;
    Generator gen((uint64_t)seed);
    nn::Embedding embed(vocab, d_model, /*padding_idx=*/0, &gen);
    nn::PositionalEncoding pos(d_model, 64);
    nn::MultiHeadAttention mha({.embed_dim = d_model, .num_heads = heads, .bias = false, .gen = &gen});
    nn::LayerNorm norm(d_model);

    std::printf("multi-head self-attention, step by step (d_model %lld, %lld heads of d_k = %lld)\n\n",
                (long long)d_model, (long long)heads, (long long)d_k);
    Tensor ids = from_vector(std::vector<int64_t>{5, 2, 1, 0, 0, 1, 3, 1, 4, 0}, {B, L});
    step(1, "token ids (0 = pad)", ids);
    Tensor x = pos.forward(embed.forward(ids));
    step(2, "embedding + positional encoding: X", x);
    Tensor blocked = eq(ids, 0.0);  // [2,5], true at pads
    step(3, "padding mask (true = pad key)", blocked);
    Tensor q = mha.q_proj->forward(x), k = mha.k_proj->forward(x), v = mha.v_proj->forward(x);
    step(4, "Q = X Wq, K = X Wk, V = X Wv (each)", q);
    auto split = [&](const Tensor& t) { return t.reshape({B, L, heads, d_k}).transpose(1, 2); };
    Tensor qh = split(q), kh = split(k), vh = split(v);
    step(5, "split into heads: view [2,5,8,64], transpose(1,2)", qh);
    Tensor scores = div(matmul(qh, kh.mT()), std::sqrt((double)d_k));
    step(6, "scores = Q K^T / sqrt(d_k)", scores);
    Tensor masked = masked_fill(scores, blocked.reshape({B, 1, 1, L}), -INFINITY);
    Tensor weights = softmax(masked, -1);
    step(7, "masked_fill(pad keys, -inf), softmax over keys", weights);
    Tensor context = matmul(weights, vh);
    step(8, "weights x V", context);
    Tensor merged = context.transpose(1, 2).reshape({B, L, d_model});
    step(9, "merge the heads: transpose(1,2), view", merged);
    Tensor attn_out = mha.out_proj->forward(merged);
    step(10, "output projection: merged Wo", attn_out);
    Tensor y = norm.forward(add(x, attn_out));
    step(11, "residual + LayerNorm: LayerNorm(X + attention)", y);

    // The same with the module in one call.
    auto r = mha.forward(x, x, x, {.key_padding_mask = nn::AttentionMask::blocked(blocked), .need_weights = nn::AttnWeights::PerHead});
    const double d_out = max(abs(sub(r.output, attn_out))).item(), d_w = max(abs(sub(r.weights, weights))).item();
    std::printf("\nnn::MultiHeadAttention with the same weights: largest difference %.2e in the output, %.2e in the "
                "weights\n",
                d_out, d_w);
    auto wv = weights.to_vector<double>();
    double pad_weight = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < L; i++)
          for (int64_t j = 0; j < L; j++)
            if (ids.to_vector<int64_t>()[b * L + j] == 0)
              pad_weight = std::max(pad_weight, wv[((b * heads + h) * L + i) * L + j]);
    std::printf("largest weight on a pad key: %g\n\n", pad_weight);

    for (int64_t b = 0; b < B; b++) {
      const std::vector<std::string> labels = token_labels(ids, b);
      const std::vector<plot::Panel> panels = head_panels(weights.select(0, b), labels, 1.0, /*annotate=*/true);
      const std::string file = out + "/heads_sentence" + std::to_string(b + 1) + ".png";
      plot::save_png(file, panels, 4, 300, 300,
                     "sentence " + std::to_string(b + 1) + " [" + labels[0] + " " + labels[1] + " " + labels[2] + " " +
                         labels[3] + " " + labels[4] + "]: attention weights of the 8 heads (untrained)");
      std::printf("wrote %s\n", file.c_str());
    }

    // 12. The gradient flowing back to the weights and the scores of every head.
    std::printf("\nthe gradient reaching each head, for a random upstream gradient on the output (retain_grad):\n");
    scores.retain_grad();
    weights.retain_grad();
    Generator ug((uint64_t)seed + 1);
    y.backward(randn(y.shape(), kFloat32, &ug));
    const Tensor dP = weights.grad(), dS = scores.grad();
    step(12, "dL/dweights", dP);
    step(13, "dL/dscores = softmax_backward(dL/dweights, weights)", dS);
    // (exact equality: at pad keys one side has -0 where the other has 0)
    const bool same = max(abs(sub(dS, softmax_backward(dP, weights.detach(), -1)))).item() == 0.0;
    const double row_sum = max(abs(sum(dS, {-1}))).item();
    double pad_grad = 0, largest = 0;
    auto dsv = dS.to_vector<double>();
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < L; i++)
          for (int64_t j = 0; j < L; j++) {
            const double g = std::fabs(dsv[((b * heads + h) * L + i) * L + j]);
            largest = std::max(largest, g);
            if (ids.to_vector<int64_t>()[b * L + j] == 0) pad_grad = std::max(pad_grad, g);
          }
    std::printf("\n  %-6s %14s %14s %14s %14s\n", "head", "|dL/dP| s1", "|dL/dS| s1", "|dL/dP| s2", "|dL/dS| s2");
    for (int64_t h = 0; h < heads; h++) {
      std::printf("  %-6lld", (long long)(h + 1));
      for (int64_t b = 0; b < B; b++)
        std::printf(" %14.4e %14.4e", std::sqrt(sum(square(dP.select(0, b).select(0, h))).item()),
                    std::sqrt(sum(square(dS.select(0, b).select(0, h))).item()));
      std::printf("\n");
    }
    std::printf("\ndL/dscores equals softmax_backward(dL/dweights, weights) exactly: %s\n", same ? "yes" : "NO");
    std::printf("largest |row sum| of dL/dscores: %.2e (of entries up to %.2e)\n", row_sum, largest);
    std::printf("largest |dL/dscores| at a pad key: %g\n", pad_grad);
    {
      const std::string file = out + "/score_gradients_sentence1.png";
      plot::save_png(file, head_panels(abs(dS.select(0, 0)), token_labels(ids, 0), largest, /*annotate=*/false), 4, 300,
                     300, "sentence 1: |dL/dscores| of the 8 heads, for a random upstream gradient");
      std::printf("wrote %s\n", file.c_str());
    }
    if (d_out > 1e-5 || d_w > 1e-6 || pad_weight != 0) {
      std::fprintf(stderr, "attention_walkthrough: the steps and the module disagree, or a pad key got weight\n");
      return 1;
    }
    if (!same || pad_grad != 0 || row_sum > 1e-5 * std::max(largest, 1e-30)) {
      std::fprintf(stderr, "attention_walkthrough: the score gradients are not softmax's backward of the weights'\n");
      return 1;
    }
    return 0;
  });
}
