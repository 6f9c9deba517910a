// Encoder/decoder layers, stacks and the encoder-decoder model.
#include "nn/transformer.h"

#include <cmath>

#include "nn/init.h"

namespace ember::nn {

std::string config_error(const LayerConfig& c) {
  if (c.d_model <= 0 || c.num_heads <= 0 || c.dim_feedforward <= 0)
    return cat_str("d_model, num_heads and dim_feedforward must be positive, got ", c.d_model, ", ", c.num_heads, ", ",
                   c.dim_feedforward);
  if (c.d_model > kMaxWidth || c.dim_feedforward > kMaxWidth)
    return cat_str("d_model and dim_feedforward must be at most 2^20, got ", c.d_model, " and ", c.dim_feedforward);
  if (c.d_model % c.num_heads != 0) return cat_str("d_model ", c.d_model, " is not divisible by num_heads ", c.num_heads);
  if (!(c.dropout_p >= 0.0 && c.dropout_p < 1.0)) return cat_str("dropout must be in [0, 1), got ", c.dropout_p);
  if (!(c.score_scale > 0.0 && std::isfinite(c.score_scale)))
    return cat_str("score_scale must be positive and finite, got ", c.score_scale);
  return "";
}

std::string config_error(const TransformerConfig& c) {
  if (c.src_vocab <= 0 || c.tgt_vocab <= 0)
    return cat_str("src_vocab and tgt_vocab must be positive, got ", c.src_vocab, " and ", c.tgt_vocab);
  if (std::string e = config_error(c.layer); !e.empty()) return e;
  if (c.num_encoder_layers <= 0 || c.num_decoder_layers <= 0 || c.num_encoder_layers > kMaxLayers ||
      c.num_decoder_layers > kMaxLayers)
    return cat_str("num_encoder_layers and num_decoder_layers must be in [1, 65536], got ", c.num_encoder_layers, " and ",
                   c.num_decoder_layers);
  return "";
}

void check_config(const LayerConfig& c, const char* op) {
  if (std::string e = config_error(c); !e.empty()) fail(op, e);
}

void check_config(const TransformerConfig& c, const char* op) {
  if (std::string e = config_error(c); !e.empty()) fail(op, e);
}

namespace {

MultiHeadAttentionOptions attention_options(const LayerConfig& c, Generator* gen, DType dtype) {
  return {.embed_dim = c.d_model, .num_heads = c.num_heads, .dropout_p = c.dropout_p, .score_scale = c.score_scale,
          .qk_norm = c.qk_norm, .qk_norm_eps = c.layer_norm_eps, .gen = gen, .dropout_gen = c.dropout_gen, .dtype = dtype};
}

FeedForwardOptions feed_forward_options(const LayerConfig& c, Generator* gen, DType dtype) {
  return {.d_model = c.d_model, .d_ff = c.dim_feedforward, .dropout_p = c.dropout_p, .activation = c.activation,
          .gen = gen, .dropout_gen = c.dropout_gen, .dtype = dtype};
}

// A sub-layer's dropout and feed-forward on padded x, or on packed rows (which keep the
// dropout masks of their places in the padded batch).
Tensor drop(Dropout& d, const Tensor& h, const Packing* packing) {
  return packing ? d.forward(h, *packing) : d.forward(h);
}
Tensor feed_forward(FeedForward& f, const Tensor& h, const Packing* packing) {
  return packing ? f.forward(h, *packing) : f.forward(h);
}

}  // namespace

// ------------------------------------------------------------------ EncoderLayer
EncoderLayer::EncoderLayer(const LayerConfig& c, Generator* gen, DType dtype) : cfg(c) {
  check_config(c, "EncoderLayer");
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(attention_options(c, gen, dtype)));
  ffn = register_module("ffn", std::make_shared<FeedForward>(feed_forward_options(c, gen, dtype)));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(c.dropout_p, c.dropout_gen));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(c.dropout_p, c.dropout_gen));
}

Tensor EncoderLayer::sublayers(const Tensor& x, const Packing* packing,
                               const std::function<MultiHeadAttentionOutput(const Tensor&)>& attend) {
  auto self = [&](const Tensor& h) {
    auto r = attend(h);
    if (keep_weights) last_weights = r.weights;
    return r.output;
  };
  if (cfg.norm_first) {
    Tensor y = add(x, drop(*dropout1, self(norm1->forward(x)), packing));
    return add(y, drop(*dropout2, feed_forward(*ffn, norm2->forward(y), packing), packing));
  }
  Tensor y = norm1->forward(add(x, drop(*dropout1, self(x), packing)));
  return norm2->forward(add(y, drop(*dropout2, feed_forward(*ffn, y, packing), packing)));
}

Tensor EncoderLayer::forward(const Tensor& x, const AttentionMask& pad, const AttentionMask& mask) {
  check_defined(x, "EncoderLayer::forward", "the input");
  AttnWeights w = keep_weights ? AttnWeights::PerHead : AttnWeights::None;
  return hooked({x}, sublayers(x, nullptr, [&](const Tensor& h) {
                  return self_attn->forward(h, h, h, {.key_padding_mask = pad, .attn_mask = mask, .need_weights = w});
                }));
}

Tensor EncoderLayer::forward(const Tensor& rows, const Packing& packing) {
  check_defined(rows, "EncoderLayer::forward", "the input");
  AttnWeights w = keep_weights ? AttnWeights::PerHead : AttnWeights::None;
  return hooked({rows}, sublayers(rows, &packing, [&](const Tensor& h) {
                  return self_attn->forward(h, h, h, {.need_weights = w, .query_packing = &packing, .kv_packing = &packing});
                }));
}

// ------------------------------------------------------------------ DecoderLayer
DecoderLayer::DecoderLayer(const LayerConfig& c, Generator* gen, DType dtype) : cfg(c) {
  check_config(c, "DecoderLayer");
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(attention_options(c, gen, dtype)));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(attention_options(c, gen, dtype)));
  ffn = register_module("ffn", std::make_shared<FeedForward>(feed_forward_options(c, gen, dtype)));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(c.dropout_p, c.dropout_gen));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(c.dropout_p, c.dropout_gen));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(c.dropout_p, c.dropout_gen));
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& memory, const DecoderLayerCall& call) {
  check_defined(x, "DecoderLayer::forward", "x");
  check_defined(memory, "DecoderLayer::forward", "memory");
  const AttentionMask &tgt_pad = call.tgt_key_padding_mask, &mem_pad = call.memory_key_padding_mask;
  LayerCache* cache = call.cache;
  const Packing* packing = call.tgt_packing;
  if (packing) {
    const char* op = "DecoderLayer::forward";
    if (cache) fail(op, "packed target rows cannot be decoded with a cache; expected x [B, T, d_model]");
    if (tgt_pad.defined()) fail(op, "packed target rows carry their padding; expected no tgt_key_padding_mask");
    if (x.dim() != 2 || x.size(0) != packing->count || x.size(1) != cfg.d_model)
      fail(op, "expected packed target rows [N, ", cfg.d_model, "] with N = ", packing->count, ", got shape ",
           x.shape());
  }
  AttnWeights w = keep_weights ? AttnWeights::PerHead : AttnWeights::None;
  auto self = [&](const Tensor& h) {
    auto r = self_attn->forward(h, h, h,
                                {.key_padding_mask = tgt_pad,
                                 .need_weights = w,
                                 .cache = cache ? &cache->self : nullptr,
                                 .query_packing = packing,
                                 .kv_packing = packing,
                                 .is_causal = call.causal});
    if (keep_weights) last_self_weights = r.weights;
    return r.output;
  };
  auto cross = [&](const Tensor& h) {
    auto r = cross_attn->forward(h, memory, memory,
                                 {.key_padding_mask = mem_pad,
                                  .need_weights = w,
                                  .cache = cache ? &cache->cross : nullptr,
                                  .fixed_memory = true,
                                  .query_packing = packing,
                                  .kv_packing = call.memory_packing});
    if (keep_weights) last_cross_weights = r.weights;
    return r.output;
  };
  if (cfg.norm_first) {
    Tensor y = add(x, drop(*dropout1, self(norm1->forward(x)), packing));
    y = add(y, drop(*dropout2, cross(norm2->forward(y)), packing));
    return hooked({x, memory}, add(y, drop(*dropout3, feed_forward(*ffn, norm3->forward(y), packing), packing)));
  }
  Tensor y = norm1->forward(add(x, drop(*dropout1, self(x), packing)));
  y = norm2->forward(add(y, drop(*dropout2, cross(y), packing)));
  return hooked({x, memory}, norm3->forward(add(y, drop(*dropout3, feed_forward(*ffn, y, packing), packing))));
}

// ------------------------------------------------------------------ stacks
Encoder::Encoder(const LayerConfig& c, int64_t n, Generator* gen, DType dtype) {
  check_config(c, "Encoder");
  if (n <= 0 || n > kMaxLayers) fail("Encoder", "num_layers must be in [1, 65536], got ", n);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n; i++) layers->push_back(std::make_shared<EncoderLayer>(c, gen, dtype));
  if (c.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
}

Tensor Encoder::forward(const Tensor& x, const AttentionMask& pad, const AttentionMask& mask) {
  check_defined(x, "Encoder::forward", "the input");
  Tensor h = x;
  for (size_t i = 0; i < layers->size(); i++) h = layer(i)->forward(h, pad, mask);
  return hooked({x}, norm ? norm->forward(h) : h);
}

Tensor Encoder::forward(const Tensor& rows, const Packing& packing) {
  check_defined(rows, "Encoder::forward", "the input");
  Tensor h = rows;
  for (size_t i = 0; i < layers->size(); i++) h = layer(i)->forward(h, packing);
  return hooked({rows}, norm ? norm->forward(h) : h);
}

Decoder::Decoder(const LayerConfig& c, int64_t n, Generator* gen, DType dtype) {
  check_config(c, "Decoder");
  if (n <= 0 || n > kMaxLayers) fail("Decoder", "num_layers must be in [1, 65536], got ", n);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n; i++) layers->push_back(std::make_shared<DecoderLayer>(c, gen, dtype));
  if (c.norm_first) norm = register_module("norm", std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps, true, dtype));
}

Tensor Decoder::forward(const Tensor& x, const Tensor& memory, const DecoderCall& call) {
  check_defined(x, "Decoder::forward", "x");
  check_defined(memory, "Decoder::forward", "memory");
  std::vector<LayerCache>* caches = call.caches;
  if (caches && caches->size() != layers->size()) caches->resize(layers->size());
  Tensor h = x;
  for (size_t i = 0; i < layers->size(); i++)
    h = layer(i)->forward(h, memory,
                          {.tgt_key_padding_mask = call.tgt_key_padding_mask,
                           .memory_key_padding_mask = call.memory_key_padding_mask,
                           .cache = caches ? &(*caches)[i] : nullptr,
                           .memory_packing = call.memory_packing,
                           .tgt_packing = call.tgt_packing});
  return hooked({x, memory}, norm ? norm->forward(h) : h);
}

// ------------------------------------------------------------------ Transformer
Transformer::Transformer(const TransformerConfig& c, Generator* gen, DType dtype) : cfg(c) {
  check_config(c, "Transformer");  // the layers below trust it
  const LayerConfig& lc = c.layer;
  src_embed = register_module("src_embed", std::make_shared<Embedding>(c.src_vocab, lc.d_model, c.pad_id, gen, dtype));
  tgt_embed = register_module("tgt_embed", std::make_shared<Embedding>(c.tgt_vocab, lc.d_model, c.pad_id, gen, dtype));
  // N(0, 1/d_model), so that after the sqrt(d_model) scale embeddings have unit variance
  // and do not drown the positional signal.
  for (auto& e : {src_embed, tgt_embed}) {
    init::normal_(e->weight, 0.0, 1.0 / std::sqrt((double)lc.d_model), gen);
    if (c.pad_id >= 0) e->weight.detach().select(0, c.pad_id).fill_(0.0);
  }
  pos = register_module("pos", std::make_shared<PositionalEncoding>(lc.d_model, c.max_len, dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(lc.dropout_p, lc.dropout_gen));
  encoder = register_module("encoder", std::make_shared<Encoder>(lc, c.num_encoder_layers, gen, dtype));
  decoder = register_module("decoder", std::make_shared<Decoder>(lc, c.num_decoder_layers, gen, dtype));
  out_proj = register_module("out_proj", std::make_shared<Linear>(lc.d_model, c.tgt_vocab, true, gen, dtype));
}

Tensor Transformer::embed(const std::shared_ptr<Embedding>& table, const Tensor& ids, int64_t start) {
  Tensor x = mul(table->forward(ids), std::sqrt((double)cfg.layer.d_model));
  return dropout->forward(pos->forward(x, start));
}

Tensor Transformer::encode_rows(const Tensor& src, const Packing& packing) {
  if (src.size(1) > cfg.max_len)
    fail("Transformer::encode", "source length ", src.size(1), " exceeds max_len ", cfg.max_len);
  // embeddings of the kept tokens only, each with the positional encoding of its place
  Tensor x = mul(src_embed->forward(packing.pack(src)), std::sqrt((double)cfg.layer.d_model));
  x = dropout->forward(add(x, index_select(pos->pe, 0, packing.positions)), packing);
  return encoder->forward(x, packing);
}

Tensor Transformer::encode(const Tensor& src) {
  check_defined(src, "Transformer::encode", "src");
  if (src.dim() != 2 || src.dtype() != kInt64)
    fail("Transformer::encode", "expected int64 source ids [B, S], got ", dtype_name(src.dtype()), " ", src.shape());
  Packing packing = Packing::of(src, cfg.pad_id);
  return packing.unpack(encode_rows(src, packing));
}

Tensor Transformer::decode(const Tensor& tgt, const Tensor& memory, const AttentionMask& memory_padding) {
  check_defined(tgt, "Transformer::decode", "tgt");
  check_defined(memory, "Transformer::decode", "memory");
  if (tgt.dim() != 2 || tgt.dtype() != kInt64)
    fail("Transformer::decode", "expected int64 target ids [B, T], got ", dtype_name(tgt.dtype()), " ", tgt.shape());
  Tensor h = decoder->forward(embed(tgt_embed, tgt, 0), memory,
                              {.tgt_key_padding_mask = padding_mask(tgt, cfg.pad_id),
                               .memory_key_padding_mask = memory_padding});
  return out_proj->forward(h);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt) {
  check_defined(src, "Transformer::forward", "src");
  check_defined(tgt, "Transformer::forward", "tgt");
  if (src.dim() != 2 || tgt.dim() != 2 || src.size(0) != tgt.size(0))
    fail("Transformer::forward", "expected src [B, S] and tgt [B, T] with the same B, got ", src.shape(), " and ",
         tgt.shape());
  if (src.dtype() != kInt64) fail("Transformer::forward", "expected int64 source ids [B, S], got ", dtype_name(src.dtype()));
  if (tgt.dtype() != kInt64) fail("Transformer::forward", "expected int64 target ids [B, T], got ", dtype_name(tgt.dtype()));
  Packing packing = Packing::of(src, cfg.pad_id);
  Tensor memory = encode_rows(src, packing);
  Tensor x = embed(tgt_embed, tgt, 0);
  // A target without padding runs through the decoder as rows (fused projections, no
  // masks); with padding, the padded path gives the padded positions PyTorch's logits too.
  const Packing target = Packing::of(tgt, cfg.pad_id);
  if (target.count > 0 && target.count == target.batch * target.length) {
    Tensor h = decoder->forward(target.pack(x), memory, {.memory_packing = &packing, .tgt_packing = &target});
    return hooked({src, tgt}, target.unpack(out_proj->forward(h)));
  }
  Tensor h = decoder->forward(x, memory, {.tgt_key_padding_mask = target.padding, .memory_packing = &packing});
  return hooked({src, tgt}, out_proj->forward(h));
}

DecoderState Transformer::start_decoding(const Tensor& src) {
  check_defined(src, "Transformer::start_decoding", "src");
  DecoderState s;
  if (src.dim() != 2 || src.dtype() != kInt64)
    fail("Transformer::start_decoding", "expected int64 source ids [B, S], got ", dtype_name(src.dtype()), " ",
         src.shape());
  s.memory_packing = Packing::of(src, cfg.pad_id);
  s.memory = encode_rows(src, s.memory_packing);
  s.caches.resize(decoder->layers->size());
  return s;
}

Tensor Transformer::decode_step(DecoderState& s, const Tensor& tokens) {
  check_defined(tokens, "Transformer::decode_step", "tokens");
  const int64_t B = s.memory_packing.batch;
  if (tokens.dim() != 1 || tokens.dtype() != kInt64 || tokens.size(0) != B)
    fail("Transformer::decode_step", "expected int64 tokens [B] with B = ", B, ", got ",
         dtype_name(tokens.dtype()), " ", tokens.shape());
  Tensor x = embed(tgt_embed, tokens.unsqueeze(1), s.position);
  // padding is never fed while decoding, so no target padding mask is needed
  Tensor h = decoder->forward(x, s.memory, {.caches = &s.caches, .memory_packing = &s.memory_packing});
  s.position++;
  return out_proj->forward(h).select(1, 0);
}

}  // namespace ember::nn
