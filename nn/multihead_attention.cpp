// MultiHeadAttention: projections, head split, the fused attention op, head merge.
#include "nn/multihead_attention.h"

#include <cmath>

#include "core/forward_ad.h"
#include "nn/attention_inputs.h"
#include "nn/init.h"

namespace ember::nn {

namespace {
// elements of a padded query or key up to which its projections are fused under autograd
constexpr int64_t kFusedPaddedMax = 65536;
// rows up to which projections are not fused (they stream their weights: core/kernels/gemm_skinny.cpp's
// skinny products)
constexpr int64_t kFewRows = 16;
}  // namespace

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionOptions& o)
    : embed_dim(o.embed_dim),
      num_heads(o.num_heads),
      kdim(o.kdim > 0 ? o.kdim : o.embed_dim),
      vdim(o.vdim > 0 ? o.vdim : o.embed_dim),
      dropout_p(o.dropout_p),
      score_scale(o.score_scale),
      dropout_gen(o.dropout_gen) {
  const char* op = "MultiHeadAttention";
  const int64_t E = o.embed_dim, H = o.num_heads, kd = o.kdim, vd = o.vdim;
  const double p = o.dropout_p;
  const bool bias = o.bias;
  Generator* gen = o.gen;
  const DType dtype = o.dtype;
  if (E <= 0 || H <= 0) fail(op, "embed_dim and num_heads must be positive, got ", E, " and ", H);
  if (E % H != 0) fail(op, "embed_dim ", E, " is not divisible by num_heads ", H);
  if (kd < 0 || vd < 0) fail(op, "kdim and vdim must be positive (or 0 for embed_dim), got ", kd, " and ", vd);
  if (!(p >= 0.0 && p < 1.0)) fail(op, "dropout must be in [0, 1), got ", p);
  if (!(o.score_scale > 0.0 && std::isfinite(o.score_scale)))
    fail(op, "score_scale must be positive and finite, got ", o.score_scale);
  if (o.qk_norm && !(o.qk_norm_eps >= 0.0 && std::isfinite(o.qk_norm_eps)))
    fail(op, "qk_norm_eps must be non-negative and finite, got ", o.qk_norm_eps);
  head_dim = E / H;
  q_proj = register_module("q_proj", std::make_shared<Linear>(E, E, bias, gen, dtype));
  k_proj = register_module("k_proj", std::make_shared<Linear>(kdim, E, bias, gen, dtype));
  v_proj = register_module("v_proj", std::make_shared<Linear>(vdim, E, bias, gen, dtype));
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, bias, gen, dtype));
  if (o.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<LayerNorm>(head_dim, o.qk_norm_eps, true, dtype));
    k_norm = register_module("k_norm", std::make_shared<LayerNorm>(head_dim, o.qk_norm_eps, true, dtype));
  }
  // PyTorch: Xavier-uniform input projections, zero input and output biases; the output
  // projection keeps Linear's default weight.
  for (auto& proj : {q_proj, k_proj, v_proj}) init::xavier_uniform_(proj->weight, 1.0, gen);
  if (bias)
    for (auto& proj : {q_proj, k_proj, v_proj, out_proj}) init::zeros_(proj->bias);
}

double MultiHeadAttention::scale() const { return score_scale * detail::default_scale(0.0, head_dim); }

HookHandle MultiHeadAttention::register_attention_hook(AttentionHook fn) {
  if (!fn) fail("MultiHeadAttention::register_attention_hook", "got an empty function");
  return attention_hooks_.add(std::move(fn));
}

MultiHeadAttentionOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                     const AttentionCall& call) {
  check_defined(query, "MultiHeadAttention::forward", "query");
  check_defined(key, "MultiHeadAttention::forward", "key");
  check_defined(value, "MultiHeadAttention::forward", "value");
  const AttentionMask& key_padding_mask = call.key_padding_mask;
  const AttentionMask& attn_mask = call.attn_mask;
  const AttnWeights need_weights = call.need_weights;
  KVCache* cache = call.cache;
  const bool fixed_memory = call.fixed_memory;
  const Packing* query_packing = call.query_packing;
  const Packing* kv_packing = call.kv_packing;
  const char* op = "MultiHeadAttention::forward";
  const bool reuse = cache && cache->fixed && cache->k.defined();
  int64_t B, L;
  if (query_packing) {
    if (query.dim() != 2 || query.size(0) != query_packing->count || query.size(1) != embed_dim)
      fail(op, "expected packed query rows [N, ", embed_dim, "] with N = ", query_packing->count, ", got shape ",
           query.shape());
    B = query_packing->batch, L = query_packing->length;
  } else {
    if (query.dim() != 3 || query.size(2) != embed_dim)
      fail(op, "expected query [B, L, ", embed_dim, "], got shape ", query.shape());
    B = query.size(0), L = query.size(1);
  }
  const int64_t H = num_heads, d = head_dim;
  if (!reuse && kv_packing) {
    if (key_padding_mask.defined())
      fail(op, "packed key and value carry their padding; expected no key_padding_mask");
    if (kv_packing->batch != B)
      fail(op, "batch sizes differ: query batch ", B, ", packed key and value batch ", kv_packing->batch);
    if (key.dim() != 2 || key.size(0) != kv_packing->count || key.size(1) != kdim)
      fail(op, "expected packed key rows [M, ", kdim, "] with M = ", kv_packing->count, ", got shape ", key.shape());
    if (value.dim() != 2 || value.size(0) != kv_packing->count || value.size(1) != vdim)
      fail(op, "expected packed value rows [M, ", vdim, "] with M = ", kv_packing->count, ", got shape ",
           value.shape());
  } else if (!reuse) {
    if (key.dim() != 3 || key.size(2) != kdim) fail(op, "expected key [B, S, ", kdim, "], got shape ", key.shape());
    if (value.dim() != 3 || value.size(2) != vdim)
      fail(op, "expected value [B, S, ", vdim, "], got shape ", value.shape());
    if (key.size(0) != B || value.size(0) != B)
      fail(op, "batch sizes differ: query ", query.shape(), ", key ", key.shape(), ", value ", value.shape());
    if (key.size(1) != value.size(1))
      fail(op, "key and value must have the same length S, got key ", key.shape(), " and value ", value.shape());
  }

  // The projections that read one input run as one product (PyTorch's in_proj), unless a
  // hook on one of them wants to see it run.
  const int64_t E = embed_dim;
  const bool plain = !q_proj->has_forward_hooks() && !k_proj->has_forward_hooks() && !v_proj->has_forward_hooks();
  const bool one_input = plain && query.impl() == key.impl() && key.impl() == value.impl() &&
                         query_packing == kv_packing && kdim == E && vdim == E;
  const bool shared_kv = plain && key.impl() == value.impl() && kdim == vdim;
  // On a few rows a projection streams its weight (memory, not arithmetic): fused, the
  // weights' concatenation would cost as much again.
  auto many_rows = [](const Tensor& x) { return x.numel() > kFewRows * x.size(-1); };
  auto fused = [&](std::initializer_list<Linear*> projs, const Tensor& x) {
    std::vector<Tensor> w, b;
    for (Linear* p : projs) w.push_back(p->weight), b.push_back(p->bias);
    return linear(x, cat(w, 0), b[0].defined() ? cat(b, 0) : Tensor());
  };

  // Packed keys and values, nothing to return or show but the output: attention runs on
  // the rows as they are (no padding, head split or merge copies).
  const AttentionImpl impl = attention_impl();
  if (kv_packing && !cache && !attn_mask.defined() && (!call.is_causal || L == kv_packing->length) &&
      (impl == AttentionImpl::Auto || impl == AttentionImpl::Tiled) && need_weights == AttnWeights::None &&
      !has_forward_hooks() && !has_attention_hooks()) {
    const Tensor q_rows = query_packing ? query : query.reshape({B * L, E});
    AttentionRows qa, ka, va;
    if (one_input && many_rows(q_rows)) {
      Tensor qkv = fused({q_proj.get(), k_proj.get(), v_proj.get()}, q_rows);
      qa = {qkv, 0}, ka = {qkv, E}, va = {qkv, 2 * E};
    } else if (shared_kv && many_rows(key)) {
      Tensor kv = fused({k_proj.get(), v_proj.get()}, key);
      qa = {q_proj->forward(q_rows), 0}, ka = {kv, 0}, va = {kv, E};
    } else {
      qa = {q_proj->forward(q_rows), 0}, ka = {k_proj->forward(key), 0}, va = {v_proj->forward(value), 0};
    }
    if (q_norm) {  // each head's features of the rows, normalised: new rows [N, E]
      auto norm_rows = [&](const AttentionRows& a, LayerNorm& n) {
        const Tensor x = a.rows.narrow(1, a.col, E);
        return AttentionRows{n.forward(x.reshape({x.size(0), H, d})).reshape({x.size(0), E}), 0};
      };
      qa = norm_rows(qa, *q_norm), ka = norm_rows(ka, *k_norm);
    }
    Tensor rows = attention_rows(qa, ka, va, H, d, query_packing, L, *kv_packing, dropout_p, is_training(), dropout_gen,
                                 scale(), call.is_causal);
    MultiHeadAttentionOutput out;
    out.output = out_proj->forward(rows);
    if (!query_packing) out.output = out.output.view({B, L, E});
    if (detail::t_graph_scopes) [[unlikely]] detail::label_ops(*this, {query, key, value}, {out.output});
    return out;
  }

  // [B, T, E] -> [B, H, T, d] (a view: the head split costs no copy); packed rows are
  // first put back in their padded places.
  auto heads = [&](const Tensor& x, const Packing* p) {
    Tensor padded = p ? p->unpack(x) : x;
    return padded.reshape({B, padded.size(1), H, d}).transpose(1, 2);
  };
  Tensor q, k, v;
  if (reuse) {
    q = heads(q_proj->forward(query), query_packing);
    k = cache->k;  // normalised before it was cached
    v = cache->v;
  } else {
    // On padded inputs the fused product's q, k and v are column views: their gradients
    // come back one by one, each a zero-filled copy of the whole, so with autograd it
    // pays only while the inputs are small (call overhead, not memory traffic, dominates).
    const bool small = query.numel() <= kFusedPaddedMax && key.numel() <= kFusedPaddedMax;
    const bool fuse = (small || !grad_enabled() ||
                       !(query.requires_grad() || key.requires_grad() || q_proj->weight.requires_grad())) &&
                      many_rows(key);
    if (one_input && fuse) {
      Tensor qkv = fused({q_proj.get(), k_proj.get(), v_proj.get()}, query);
      q = heads(qkv.narrow(-1, 0, E), query_packing);
      k = heads(qkv.narrow(-1, E, E), kv_packing);
      v = heads(qkv.narrow(-1, 2 * E, E), kv_packing);
    } else if (shared_kv && fuse) {
      Tensor kv = fused({k_proj.get(), v_proj.get()}, key);
      q = heads(q_proj->forward(query), query_packing);
      k = heads(kv.narrow(-1, 0, E), kv_packing);
      v = heads(kv.narrow(-1, E, E), kv_packing);
    } else {
      q = heads(q_proj->forward(query), query_packing);
      k = heads(k_proj->forward(key), kv_packing);
      v = heads(v_proj->forward(value), kv_packing);
    }
    if (k_norm) k = k_norm->forward(k);  // over the last dim, d: each head's features
    if (cache) {
      if (fixed_memory) {
        cache->fixed = true;
      } else if (cache->k.defined()) {
        k = cat({cache->k, k}, 2);
        v = cat({cache->v, v}, 2);
      }
      cache->k = k;
      cache->v = v;
    }
  }
  if (q_norm) q = q_norm->forward(q);
  const int64_t S = k.size(2);

  AttentionMask mask;
  if (kv_packing) {
    if (kv_packing->length != S)
      fail(op, "packed key and value describe length ", kv_packing->length, ", the cached keys have ", S);
    mask = kv_packing->padding.reshape({B, 1, 1, S});
  }
  if (key_padding_mask.defined()) {
    const Tensor& m = key_padding_mask.blocked();
    if (m.shape() != Shape{B, S})
      fail(op, "expected key_padding_mask [B, S] = [", B, ",", S, "], got shape ", m.shape());
    mask = key_padding_mask.reshape({B, 1, 1, S});
  }
  if (attn_mask.defined()) {
    const Tensor& m = attn_mask.blocked();
    if (m.shape() == Shape{L, S}) mask = mask | attn_mask;
    else if (m.shape() == Shape{B, L, S}) mask = mask | attn_mask.reshape({B, 1, L, S});
    else fail(op, "expected attn_mask [L, S] = [", L, ",", S, "] or [B, L, S] = [", B, ",", L, ",", S, "], got shape ", m.shape());
  }
  if (call.is_causal) {
    if (L > S) fail(op, "is_causal needs at least as many keys as queries (the queries are the last L of S positions), got L = ", L, " and S = ", S);
    mask = mask | causal_mask(L, S);
  }

  // Without weights to return, longer sequences take the tiled op: its memory grows as
  // L + S rather than L * S, at much the same speed (below 128 x 128 pairs the weights
  // are small, and the fused op a little faster).
  // An attention hook sees the scores and weights in the graph: attention is then composed
  // of primitive ops, with the fused op's dropout draws.
  // Weights asked for in grad mode are returned in the graph, as PyTorch's are (a loss on
  // them - attention supervision, an entropy penalty - reaches the parameters): attention
  // is then composed too. The fused op's weights carry no graph of their own.
  AttentionResult r;
  const bool hooks = has_forward_hooks();  // hooks see the weights
  // Weights asked for in training with dropout are the dropped ones, as PyTorch's are;
  // the fused op keeps its dropout to itself, so they are composed too.
  const bool weights_in_graph = need_weights != AttnWeights::None && grad_enabled() &&
                                (q.requires_grad() || k.requires_grad() || v.requires_grad());
  const bool dropped_weights = need_weights != AttnWeights::None && is_training() && dropout_p > 0.0;
  // Weights asked for in forward mode carry their tangent, as composed ones do (the fused
  // op's are detached).
  const bool weights_tangent = need_weights != AttnWeights::None && forward_detail::active() &&
                               (forward_detail::tangent_of(q).defined() || forward_detail::tangent_of(k).defined() ||
                                forward_detail::tangent_of(v).defined());
  if (impl == AttentionImpl::Composed || has_attention_hooks() || weights_in_graph || dropped_weights ||
      weights_tangent) {
    detail::check_inputs(op, q, k, v, mask);
    Tensor keep;
    if (is_training() && dropout_p > 0.0) {
      const Shape shape{B, H, L, S};
      keep = detail::dropout_keep(shape, q.dtype(),
                                  DropoutDraws::take(dropout_gen ? *dropout_gen : default_generator(), dropout_p, shape));
    }
    detail::Composed c = detail::composed_attention(q, k, v, mask, scale(), keep);
    if (has_attention_hooks())
      attention_hooks_.run(*this, AttentionInternals{c.scores, c.weights, mask.defined() ? mask.blocked() : Tensor()});
    r = {c.output, weights_in_graph || weights_tangent ? c.dropped : c.dropped.detach()};
  } else if (need_weights == AttnWeights::None && !hooks &&
             (impl == AttentionImpl::Tiled || (impl == AttentionImpl::Auto && L * S >= kTiledMinPairs))) {
    r.output = scaled_dot_product_attention_tiled(q, k, v, mask, dropout_p, is_training(), dropout_gen, scale());
  } else {
    r = scaled_dot_product_attention(q, k, v, mask, dropout_p, is_training(), dropout_gen, scale());
  }
  Tensor merged = r.output.transpose(1, 2).reshape({B, L, embed_dim});
  if (query_packing) merged = query_packing->pack(merged);
  MultiHeadAttentionOutput out;
  out.output = out_proj->forward(merged);
  if (need_weights == AttnWeights::PerHead) out.weights = r.weights;
  else if (need_weights == AttnWeights::Averaged) out.weights = mean(r.weights, {1});
  if (detail::t_graph_scopes) [[unlikely]] detail::label_ops(*this, {query, key, value}, {out.output, r.weights});
  if (hooks) run_forward_hooks({query, key, value}, {out.output, r.weights});
  return out;
}

}  // namespace ember::nn
