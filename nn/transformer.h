// Transformer encoder and decoder layers, their stacks, and an encoder-decoder model.
//
// Each sub-layer is wrapped as LayerNorm(x + Dropout(sublayer(x))) (post-norm, the form
// of "Attention Is All You Need" and of PyTorch's default), or, with norm_first,
// x + Dropout(sublayer(LayerNorm(x))) (pre-norm; the stacks then end with a LayerNorm).
//
//   EncoderLayer: self-attention, feed-forward
//   DecoderLayer: causal self-attention, cross-attention over the encoder output, feed-forward
//   Transformer:  embeddings scaled by sqrt(d_model) + positional encoding + dropout,
//                 encoder, decoder, output projection to target-vocabulary logits
//
// Masks are AttentionMask (true = blocked). Decoding can run one token at a time with a
// DecoderState that caches every layer's keys and values; it gives the teacher-forced
// forward pass's logits on the same prefix to rounding (about 1e-14 in float64, 4e-6 in
// float32: the sums run in another order).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/multihead_attention.h"

namespace ember::nn {

// Limits past any model that fits in memory, checked before anything is allocated: the
// width of d_model and dim_feedforward, and the layers of a stack.
///@{
constexpr int64_t kMaxWidth = int64_t(1) << 20;
constexpr int64_t kMaxLayers = int64_t(1) << 16;
///@}

// What every encoder and decoder layer is built from. Every layer, stack and the
// Transformer check it at construction (check_config), and throw Error naming the field.
struct LayerConfig {
  int64_t d_model = 128;  // the model width
  int64_t num_heads = 4;  // attention heads; must divide d_model
  int64_t dim_feedforward = 512;  // the feed-forward block's hidden size
  double dropout_p = 0.1;  // every dropout's probability (the checkpoint's key: dropout)
  Activation activation = Activation::ReLU;  // the feed-forward block's activation
  bool norm_first = false;  // x + Dropout(sublayer(LayerNorm(x))) instead of post-norm
  double layer_norm_eps = 1e-5;  // every LayerNorm's eps
  double score_scale = 1.0;  // every attention's scores times this, on top of 1/sqrt(d_model / num_heads)
  // Every attention layer-normalises its queries and keys per head (MultiHeadAttentionOptions::qk_norm,
  // with layer_norm_eps).
  bool qk_norm = false;
  // Every dropout mask of the layer is drawn from here: the sub-layers' residual dropouts,
  // attention dropout and the feed-forward dropout. The default generator when null; it
  // must outlive the layer. (The constructor's Generator initialises the weights.)
  Generator* dropout_gen = nullptr;
};

// Self-attention then feed-forward, each wrapped as described in transformer.h
// (torch.nn.TransformerEncoderLayer with batch_first=True).
class EncoderLayer : public Module {
 public:
  // The layer of cfg, weights initialised from gen (the default generator when null), in
  // dtype; Error when check_config refuses cfg.
  explicit EncoderLayer(const LayerConfig& cfg, Generator* gen = nullptr, DType dtype = kFloat32);
  // x [B, S, d_model]; src_key_padding_mask [B, S]; src_mask [S, S] or [B, S, S]. Errors
  // as MultiHeadAttention::forward for shapes that do not match.
  Tensor forward(const Tensor& x, const AttentionMask& src_key_padding_mask = {},
                 const AttentionMask& src_mask = {});
  // The same on packed rows [N, d_model] of a padded batch (see Packing): equal to the
  // padded forward at every kept position, with no work spent on padding.
  Tensor forward(const Tensor& rows, const Packing& packing);
  // With keep_weights set, each forward stores the self-attention weights per head
  // [B, H, S, S] in last_weights.
  ///@{
  bool keep_weights = false;
  Tensor last_weights;
  ///@}

  LayerConfig cfg;  // the configuration it was built from
  std::shared_ptr<MultiHeadAttention> self_attn;  // the self-attention
  std::shared_ptr<FeedForward> ffn;  // the feed-forward block
  // The sub-layers' LayerNorms and residual dropouts, in sub-layer order.
  ///@{
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
  ///@}

 private:
  Tensor sublayers(const Tensor& x, const Packing* packing,
                   const std::function<MultiHeadAttentionOutput(const Tensor&)>& attend);
};

// Keys and values cached per decoder layer while decoding token by token.
struct LayerCache {
  // The self-attention's and the cross-attention's caches.
  ///@{
  KVCache self, cross;
  ///@}
};

// What a decoder layer's forward takes besides x and memory, every part optional:
// layer.forward(y, memory, {.memory_key_padding_mask = pad, .cache = &cache})
struct DecoderLayerCall {
  AttentionMask tgt_key_padding_mask = {};  // [B, T]
  AttentionMask memory_key_padding_mask = {};  // [B, S]
  bool causal = true;  // the target attends to earlier positions only
  LayerCache* cache = nullptr;  // token-by-token decoding: x holds the newest positions
  const Packing* memory_packing = nullptr;  // memory given as packed rows [N, d_model]
  // x given as packed rows [N, d_model] of the target (see Packing), whose padding is the
  // target's key padding mask (tgt_key_padding_mask must then be none); not with a cache.
  const Packing* tgt_packing = nullptr;
};

// The same for a stack of decoder layers (always causal).
struct DecoderCall {
  AttentionMask tgt_key_padding_mask = {};  // [B, T]
  AttentionMask memory_key_padding_mask = {};  // [B, S]
  std::vector<LayerCache>* caches = nullptr;  // one per layer, resized as needed
  const Packing* memory_packing = nullptr;  // as DecoderLayerCall's
  const Packing* tgt_packing = nullptr;  // as DecoderLayerCall's
};

// Causal self-attention, cross-attention over memory, then feed-forward, each wrapped as
// described in transformer.h (torch.nn.TransformerDecoderLayer, batch first).
class DecoderLayer : public Module {
 public:
  // The layer of cfg, weights initialised from gen (the default generator when null), in
  // dtype; Error when check_config refuses cfg.
  explicit DecoderLayer(const LayerConfig& cfg, Generator* gen = nullptr, DType dtype = kFloat32);
  // x [B, T, d_model], memory [B, S, d_model]. With memory_packing, memory is packed rows
  // [N, d_model] (see Packing) whose padding is the memory's key padding mask
  // (memory_key_padding_mask must then be none). With tgt_packing, x is packed rows
  // [N, d_model] of the target and so is the output: equal to the padded forward at every
  // kept position, with its self-attention's projections fused and no masks built. Error
  // when packed target rows come with a cache or a tgt_key_padding_mask, and as
  // MultiHeadAttention::forward for shapes that do not match.
  Tensor forward(const Tensor& x, const Tensor& memory, const DecoderLayerCall& call = {});
  // With keep_weights set, each forward stores the self- and cross-attention weights per
  // head, [B, H, T, T] and [B, H, T, S].
  ///@{
  bool keep_weights = false;
  Tensor last_self_weights, last_cross_weights;
  ///@}

  LayerConfig cfg;  // the configuration it was built from
  // The self-attention and the cross-attention.
  ///@{
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  ///@}
  std::shared_ptr<FeedForward> ffn;  // the feed-forward block
  // The sub-layers' LayerNorms and residual dropouts, in sub-layer order.
  ///@{
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;
  ///@}
};

// A stack of encoder layers (torch.nn.TransformerEncoder), with a final LayerNorm when
// norm_first.
class Encoder : public Module {
 public:
  // num_layers layers of cfg; Error when check_config refuses cfg or num_layers is not in
  // [1, kMaxLayers].
  Encoder(const LayerConfig& cfg, int64_t num_layers, Generator* gen = nullptr, DType dtype = kFloat32);
  // x [B, S, d_model] through every layer with the same masks (as EncoderLayer::forward).
  Tensor forward(const Tensor& x, const AttentionMask& src_key_padding_mask = {},
                 const AttentionMask& src_mask = {});
  Tensor forward(const Tensor& rows, const Packing& packing);  // packed rows [N, d_model]
  std::shared_ptr<ModuleList> layers;  // the EncoderLayers, registered as layers.0, layers.1, ...
  std::shared_ptr<LayerNorm> norm;  // only with norm_first
  // Layer i; std::out_of_range when i >= layers->size().
  std::shared_ptr<EncoderLayer> layer(size_t i) const { return layers->at<EncoderLayer>(i); }
};

// A stack of decoder layers (torch.nn.TransformerDecoder), with a final LayerNorm when
// norm_first.
class Decoder : public Module {
 public:
  // num_layers layers of cfg; Error when check_config refuses cfg or num_layers is not in
  // [1, kMaxLayers].
  Decoder(const LayerConfig& cfg, int64_t num_layers, Generator* gen = nullptr, DType dtype = kFloat32);
  // x [B, T, d_model] through every layer, causal, with the same memory and masks (as
  // DecoderLayer::forward).
  Tensor forward(const Tensor& x, const Tensor& memory, const DecoderCall& call = {});
  std::shared_ptr<ModuleList> layers;  // the DecoderLayers, registered as layers.0, layers.1, ...
  std::shared_ptr<LayerNorm> norm;  // only with norm_first
  // Layer i; std::out_of_range when i >= layers->size().
  std::shared_ptr<DecoderLayer> layer(size_t i) const { return layers->at<DecoderLayer>(i); }
};

// Transformer({.src_vocab = 40, .tgt_vocab = 15, .layer = {.d_model = 64, .num_heads = 2}, .max_len = 48})
struct TransformerConfig {
  // The source and target vocabulary sizes; both must be set (positive).
  ///@{
  int64_t src_vocab = 0, tgt_vocab = 0;
  ///@}
  // Every layer's width, heads, feed-forward, activation, norm placement and score scale;
  // its dropout and dropout generator are also the embeddings'.
  LayerConfig layer;
  // The number of layers of each stack.
  ///@{
  int64_t num_encoder_layers = 2, num_decoder_layers = 2;
  ///@}
  int64_t max_len = 512;  // rows of the positional table
  int64_t pad_id = 0;  // the padding token of both vocabularies; -1 for none
};

// What is wrong with a configuration, or "" when layers (and a Transformer) can be built
// from it: d_model, num_heads and dim_feedforward positive, num_heads dividing d_model, dropout in
// [0, 1), score_scale positive and finite; for a Transformer also positive vocabularies
// and layer counts. (The embeddings and the positional table check pad_id and max_len.)
///@{
std::string config_error(const LayerConfig& c);
std::string config_error(const TransformerConfig& c);
///@}
// Throws Error "op: `what is wrong`" unless config_error finds nothing.
///@{
void check_config(const LayerConfig& c, const char* op);
void check_config(const TransformerConfig& c, const char* op);
///@}

// What token-by-token decoding carries from one step to the next.
struct DecoderState {
  Tensor memory;  // encoder output as packed rows [N, d_model]
  Packing memory_packing;  // the source's kept positions
  std::vector<LayerCache> caches;  // one per decoder layer
  int64_t position = 0;  // tokens decoded so far
};

// The encoder-decoder model of "Attention Is All You Need" (see transformer.h).
// Unlike torch.nn.Transformer it includes the embeddings, positional encoding and output
// projection, and takes token ids.
class Transformer : public Module {
 public:
  // Error when check_config refuses cfg, or pad_id is outside [-1, vocabulary size) or
  // max_len is not positive. Embeddings start at N(0, 1/d_model) (not nn.Embedding's
  // N(0, 1)), the pad_id row at zero.
  explicit Transformer(const TransformerConfig& cfg, Generator* gen = nullptr, DType dtype = kFloat32);

  // src [B, S], tgt [B, T] int64 token ids (pad_id pads) -> logits [B, T, tgt_vocab],
  // position t predicting token t+1 (teacher forcing: tgt starts with the begin token).
  // The encoder runs on the source's non-padding positions only (see Packing). Error
  // unless src and tgt are int64 [B, S] and [B, T] of one B, or when S or T exceeds max_len.
  Tensor forward(const Tensor& src, const Tensor& tgt);
  // -> memory [B, S, d_model], zeros at padding; Error unless src is int64 [B, S] with
  // S <= max_len.
  Tensor encode(const Tensor& src);
  // Target ids [B, T] -> logits [B, T, tgt_vocab] against memory [B, S, d_model] from
  // encode(), memory_padding its [B, S] key padding mask. Error unless tgt is int64 [B, T].
  Tensor decode(const Tensor& tgt, const Tensor& memory, const AttentionMask& memory_padding);

  // Encodes src (int64 [B, S]) and returns the state for decode_step; Error for another
  // dtype or rank, or S > max_len.
  DecoderState start_decoding(const Tensor& src);
  // Feeds the newest token of each sequence (int64 [B]) and returns the logits [B, tgt_vocab]
  // for the next one. Error unless tokens are int64 [B] of the state's B, or once more
  // than max_len tokens have been fed.
  Tensor decode_step(DecoderState& state, const Tensor& tokens);

  TransformerConfig cfg;  // the configuration it was built from
  // The source and target token embeddings.
  ///@{
  std::shared_ptr<Embedding> src_embed, tgt_embed;
  ///@}
  std::shared_ptr<PositionalEncoding> pos;  // shared by source and target
  std::shared_ptr<Dropout> dropout;  // after the embeddings
  std::shared_ptr<Encoder> encoder;  // the encoder stack
  std::shared_ptr<Decoder> decoder;  // the decoder stack
  std::shared_ptr<Linear> out_proj;  // d_model -> tgt_vocab logits

 private:
  Tensor embed(const std::shared_ptr<Embedding>& table, const Tensor& ids, int64_t start);
  Tensor encode_rows(const Tensor& src, const Packing& packing);  // -> memory rows [N, d_model]
};

}  // namespace ember::nn
