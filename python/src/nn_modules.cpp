// The C++ modules in ember._C._nn, under PyTorch's names and argument names where PyTorch
// has the layer. ember/nn/modules.py wraps each in a Python Module, so that they are
// children of Python modules; what they hold (parameters, buffers, sub-modules) stays in
// C++ and is reached through the base class's named_parameters and state_dict.
//
// A Generator given to a module for its dropout masks is kept alive by the module.
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>

#include "bindings.h"
#include "nn/per_sample.h"
#include "nn/transformer.h"

namespace ember::python {

namespace {

using ModuleClass = py::class_<nn::Module, std::shared_ptr<nn::Module>>;

py::list pairs(const nn::NamedTensors& named) {
  py::list out;
  for (const auto& [name, t] : named) out.append(py::make_tuple(name, t));
  return out;
}

nn::Activation activation_of(const std::string& name) {
  if (name == "relu") return nn::Activation::ReLU;
  if (name == "gelu") return nn::Activation::GELU;
  throw py::value_error("activation must be \"relu\" or \"gelu\", got \"" + name + "\"");
}

nn::LayerConfig layer_config(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                             const std::string& activation, double layer_norm_eps, bool norm_first,
                             Generator* dropout_gen, bool qk_norm) {
  return {.d_model = d_model, .num_heads = nhead, .dim_feedforward = dim_feedforward, .dropout_p = dropout,
          .activation = activation_of(activation), .norm_first = norm_first, .layer_norm_eps = layer_norm_eps,
          .qk_norm = qk_norm, .dropout_gen = dropout_gen};
}

void bind_base(py::module_& m) {
  ModuleClass(m, "Module")
      .def("named_parameters", [](const nn::Module& mod) { return pairs(mod.named_parameters()); })
      .def("named_buffers", [](const nn::Module& mod) { return pairs(mod.named_buffers()); })
      .def("state_dict", [](const nn::Module& mod) { return mod.state_dict(); })
      .def("load_state_dict", &nn::Module::load_state_dict, py::arg("state_dict"), py::arg("strict") = true)
      .def("train", &nn::Module::train, py::arg("mode") = true)
      .def_property_readonly("training", &nn::Module::is_training)
      .def("to", &nn::Module::to, py::arg("dtype"))
      .def("named_children", &nn::Module::named_children);
}

void bind_layers(py::module_& m) {
  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(m, "Linear")
      .def(py::init<int64_t, int64_t, bool, Generator*, DType>(), py::arg("in_features"), py::arg("out_features"),
           py::arg("bias") = true, py::arg("generator") = py::none(), py::arg("dtype") = kFloat32)
      .def("forward", py::overload_cast<const Tensor&>(&nn::Linear::forward), py::arg("input"), NoGil())
      .def_readonly("in_features", &nn::Linear::in_features)
      .def_readonly("out_features", &nn::Linear::out_features)
      .def_property_readonly("weight", [](const nn::Linear& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::Linear& l) { return tensor_or_none(l.bias); });

  // padding_idx None: no padding row (ember's -1)
  py::class_<nn::Embedding, nn::Module, std::shared_ptr<nn::Embedding>>(m, "Embedding")
      .def(py::init([](int64_t n, int64_t dim, std::optional<int64_t> padding_idx, Generator* gen, DType dtype) {
        return std::make_shared<nn::Embedding>(n, dim, padding_idx.value_or(-1), gen, dtype);
      }), py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none(),
           py::arg("generator") = py::none(), py::arg("dtype") = kFloat32)
      .def("forward", &nn::Embedding::forward, py::arg("input"), NoGil())
      .def_readonly("num_embeddings", &nn::Embedding::num_embeddings)
      .def_readonly("embedding_dim", &nn::Embedding::embedding_dim)
      .def_property_readonly("weight", [](const nn::Embedding& e) { return e.weight; });

  py::class_<nn::Dropout, nn::Module, std::shared_ptr<nn::Dropout>>(m, "Dropout")
      .def(py::init<double, Generator*>(), py::arg("p") = 0.5, py::arg("generator") = py::none(),
           py::keep_alive<1, 3>())
      .def("forward", py::overload_cast<const Tensor&>(&nn::Dropout::forward), py::arg("input"), NoGil())
      .def_readonly("p", &nn::Dropout::p);

  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm")
      .def(py::init<int64_t, double, bool, DType>(), py::arg("normalized_shape"), py::arg("eps") = 1e-5,
           py::arg("elementwise_affine") = true, py::arg("dtype") = kFloat32)
      .def("forward", py::overload_cast<const Tensor&>(&nn::LayerNorm::forward), py::arg("input"), NoGil())
      .def_readonly("normalized_shape", &nn::LayerNorm::normalized_shape)
      .def_readonly("eps", &nn::LayerNorm::eps)
      .def_property_readonly("weight", [](const nn::LayerNorm& l) { return tensor_or_none(l.weight); })
      .def_property_readonly("bias", [](const nn::LayerNorm& l) { return tensor_or_none(l.bias); });
}

void bind_attention(py::module_& m) {
  py::class_<nn::MultiHeadAttention, nn::Module, std::shared_ptr<nn::MultiHeadAttention>>(m, "MultiheadAttention")
      .def(py::init([](int64_t embed_dim, int64_t num_heads, double dropout, bool bias, std::optional<int64_t> kdim,
                       std::optional<int64_t> vdim, Generator* gen, Generator* dropout_gen, DType dtype,
                       bool qk_norm) {
        return std::make_shared<nn::MultiHeadAttention>(nn::MultiHeadAttentionOptions{
            .embed_dim = embed_dim, .num_heads = num_heads, .kdim = kdim.value_or(0), .vdim = vdim.value_or(0),
            .bias = bias, .dropout_p = dropout, .qk_norm = qk_norm, .gen = gen, .dropout_gen = dropout_gen,
            .dtype = dtype});
      }), py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0, py::arg("bias") = true,
           py::arg("kdim") = py::none(), py::arg("vdim") = py::none(), py::arg("generator") = py::none(),
           py::arg("dropout_generator") = py::none(), py::arg("dtype") = kFloat32, py::arg("qk_norm") = false,
           py::keep_alive<1, 9>())
      // (output, weights or None), weights averaged over heads [B, L, S] or per head [B, H, L, S]
      .def("forward", [](nn::MultiHeadAttention& mha, const Tensor& q, const Tensor& k, const Tensor& v,
                         const std::optional<Tensor>& key_padding_mask, bool need_weights,
                         const std::optional<Tensor>& attn_mask, bool average_attn_weights, bool is_causal) {
        const nn::AttentionCall call{
            .key_padding_mask = blocked_mask(key_padding_mask), .attn_mask = blocked_mask(attn_mask),
            .need_weights = !need_weights ? nn::AttnWeights::None
                            : average_attn_weights ? nn::AttnWeights::Averaged : nn::AttnWeights::PerHead,
            .is_causal = is_causal};
        nn::MultiHeadAttentionOutput r;
        {
          OpCall in_op;
          r = mha.forward(q, k, v, call);
        }
        return py::make_tuple(r.output, tensor_or_none(r.weights));
      }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("key_padding_mask") = py::none(),
         py::arg("need_weights") = true, py::arg("attn_mask") = py::none(), py::arg("average_attn_weights") = true,
         py::arg("is_causal") = false)
      .def_readonly("embed_dim", &nn::MultiHeadAttention::embed_dim)
      .def_readonly("num_heads", &nn::MultiHeadAttention::num_heads)
      .def_readonly("kdim", &nn::MultiHeadAttention::kdim)
      .def_readonly("vdim", &nn::MultiHeadAttention::vdim)
      .def_readonly("head_dim", &nn::MultiHeadAttention::head_dim)
      .def_readonly("q_proj", &nn::MultiHeadAttention::q_proj)
      .def_readonly("k_proj", &nn::MultiHeadAttention::k_proj)
      .def_readonly("v_proj", &nn::MultiHeadAttention::v_proj)
      .def_readonly("out_proj", &nn::MultiHeadAttention::out_proj)
      .def_readonly("q_norm", &nn::MultiHeadAttention::q_norm)  // None without qk_norm
      .def_readonly("k_norm", &nn::MultiHeadAttention::k_norm)
      // hook(module, internals) inside every forward, with the scores and weights as
      // tensors of the graph; the module then computes attention from primitive ops
      // (the hook gets an owning handle to the module, which it may keep; the hook does not
      // keep the module alive)
      .def("register_attention_hook", [](const std::shared_ptr<nn::MultiHeadAttention>& mha, py::function fn) {
        return mha->register_attention_hook(
            [fn = hold(std::move(fn)), self = std::weak_ptr<nn::MultiHeadAttention>(mha)](
                nn::MultiHeadAttention&, const nn::AttentionInternals& internals) {
              py::gil_scoped_acquire gil;
              const auto owner = self.lock();
              (*fn)(owner ? py::cast(owner) : py::none(), py::cast(internals));
            });
      }, py::arg("hook"));

  py::class_<nn::AttentionInternals>(m, "AttentionInternals")
      .def_readonly("scores", &nn::AttentionInternals::scores)  // [B, H, L, S], the softmax's input
      .def_readonly("weights", &nn::AttentionInternals::weights)  // [B, H, L, S], before dropout
      .def_property_readonly("blocked", [](const nn::AttentionInternals& in) { return tensor_or_none(in.blocked); })
      .def("__repr__", [](const nn::AttentionInternals& in) {
        return "AttentionInternals(scores=" + shape_str(in.scores.shape()) + ", weights=" +
               shape_str(in.weights.shape()) + ", blocked=" +
               (in.blocked.defined() ? shape_str(in.blocked.shape()) : std::string("None")) + ")";
      });
}

void bind_transformer(py::module_& m) {
  py::class_<nn::EncoderLayer, nn::Module, std::shared_ptr<nn::EncoderLayer>>(m, "TransformerEncoderLayer")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_ff, double dropout, const std::string& activation,
                       double eps, bool norm_first, Generator* gen, Generator* dropout_gen, DType dtype,
                       bool qk_norm) {
        return std::make_shared<nn::EncoderLayer>(
            layer_config(d_model, nhead, dim_ff, dropout, activation, eps, norm_first, dropout_gen, qk_norm), gen,
            dtype);
      }), py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("norm_first") = false,
           py::arg("generator") = py::none(), py::arg("dropout_generator") = py::none(), py::arg("dtype") = kFloat32,
           py::arg("qk_norm") = false, py::keep_alive<1, 10>())
      .def("forward", [](nn::EncoderLayer& layer, const Tensor& src, const std::optional<Tensor>& src_mask,
                         const std::optional<Tensor>& src_key_padding_mask) {
        const nn::AttentionMask pad = blocked_mask(src_key_padding_mask), mask = blocked_mask(src_mask);
        OpCall in_op;
        return layer.forward(src, pad, mask);
      }, py::arg("src"), py::arg("src_mask") = py::none(), py::arg("src_key_padding_mask") = py::none())
      .def_readonly("self_attn", &nn::EncoderLayer::self_attn)
      .def_readonly("norm1", &nn::EncoderLayer::norm1)
      .def_readonly("norm2", &nn::EncoderLayer::norm2);

  py::class_<nn::DecoderLayer, nn::Module, std::shared_ptr<nn::DecoderLayer>>(m, "TransformerDecoderLayer")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_ff, double dropout, const std::string& activation,
                       double eps, bool norm_first, Generator* gen, Generator* dropout_gen, DType dtype,
                       bool qk_norm) {
        return std::make_shared<nn::DecoderLayer>(
            layer_config(d_model, nhead, dim_ff, dropout, activation, eps, norm_first, dropout_gen, qk_norm), gen,
            dtype);
      }), py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("layer_norm_eps") = 1e-5, py::arg("norm_first") = false,
           py::arg("generator") = py::none(), py::arg("dropout_generator") = py::none(), py::arg("dtype") = kFloat32,
           py::arg("qk_norm") = false, py::keep_alive<1, 10>())
      .def("forward", [](nn::DecoderLayer& layer, const Tensor& tgt, const Tensor& memory,
                         const std::optional<Tensor>& tgt_key_padding_mask,
                         const std::optional<Tensor>& memory_key_padding_mask, bool tgt_is_causal) {
        const nn::DecoderLayerCall call{.tgt_key_padding_mask = blocked_mask(tgt_key_padding_mask),
                                        .memory_key_padding_mask = blocked_mask(memory_key_padding_mask),
                                        .causal = tgt_is_causal};
        OpCall in_op;
        return layer.forward(tgt, memory, call);
      }, py::arg("tgt"), py::arg("memory"), py::arg("tgt_key_padding_mask") = py::none(),
         py::arg("memory_key_padding_mask") = py::none(), py::arg("tgt_is_causal") = false)
      .def_readonly("self_attn", &nn::DecoderLayer::self_attn)
      .def_readonly("multihead_attn", &nn::DecoderLayer::cross_attn)  // PyTorch's name
      .def_readonly("cross_attn", &nn::DecoderLayer::cross_attn)
      .def_readonly("norm1", &nn::DecoderLayer::norm1)
      .def_readonly("norm2", &nn::DecoderLayer::norm2)
      .def_readonly("norm3", &nn::DecoderLayer::norm3);

  // ember's whole model: embeddings, positional encoding, both stacks and the output
  // projection, on token ids (not torch.nn.Transformer's embedded inputs)
  py::class_<nn::Transformer, nn::Module, std::shared_ptr<nn::Transformer>>(m, "Transformer")
      .def(py::init([](int64_t src_vocab, int64_t tgt_vocab, int64_t d_model, int64_t nhead, int64_t num_encoder_layers,
                       int64_t num_decoder_layers, int64_t dim_ff, double dropout, const std::string& activation,
                       bool norm_first, int64_t max_len, int64_t pad_id, Generator* gen, DType dtype, bool qk_norm) {
        const nn::TransformerConfig cfg{
            .src_vocab = src_vocab, .tgt_vocab = tgt_vocab,
            .layer = layer_config(d_model, nhead, dim_ff, dropout, activation, 1e-5, norm_first, nullptr, qk_norm),
            .num_encoder_layers = num_encoder_layers, .num_decoder_layers = num_decoder_layers,
            .max_len = max_len, .pad_id = pad_id};
        return std::make_shared<nn::Transformer>(cfg, gen, dtype);
      }), py::arg("src_vocab"), py::arg("tgt_vocab"), py::arg("d_model") = 128, py::arg("nhead") = 4,
           py::arg("num_encoder_layers") = 2, py::arg("num_decoder_layers") = 2, py::arg("dim_feedforward") = 512,
           py::arg("dropout") = 0.1, py::arg("activation") = "relu", py::arg("norm_first") = false,
           py::arg("max_len") = 512, py::arg("pad_id") = 0, py::arg("generator") = py::none(),
           py::arg("dtype") = kFloat32, py::arg("qk_norm") = false)
      .def("forward", &nn::Transformer::forward, py::arg("src"), py::arg("tgt"), NoGil());
}

// per_sample_grads over the model's C++ modules, each with its prefix; losses() is called
// with the GIL held (this function keeps it).
void bind_per_sample(py::module_& m) {
  m.def("_per_sample_grads", [](const std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>& modules,
                                int64_t batch_size, py::function losses) {
    std::vector<std::pair<std::string, nn::Module*>> roots;
    for (const auto& [prefix, mod] : modules) roots.emplace_back(prefix, mod.get());
    return pairs(nn::per_sample_grads(roots, batch_size,
                                      tensor_function(std::move(losses), "per_sample_grads: the losses function", " [B]")));
  });
  m.def("_per_sample_norms", &nn::per_sample_norms, py::arg("grads"));
  m.def("_clipped_mean", [](const nn::NamedTensors& grads, double max_norm) {
    return pairs(nn::clipped_mean(grads, max_norm));
  }, py::arg("grads"), py::arg("max_norm"));
  m.def("_gradient_noise", [](const nn::NamedTensors& grads, const std::string& prefix) {
    const nn::GradientNoise r = nn::gradient_noise(grads, prefix);
    py::dict d;
    d["batch"] = r.batch, d["parameters"] = r.parameters, d["mean_norm_sq"] = r.mean_norm_sq;
    d["trace_cov"] = r.trace_cov, d["signal"] = r.signal, d["noise_scale"] = r.noise_scale, d["snr"] = r.snr;
    return d;
  }, py::arg("grads"), py::arg("prefix"));
}

}  // namespace

void bind_nn_modules(py::module_& m) {
  bind_base(m);
  bind_layers(m);
  bind_attention(m);
  bind_transformer(m);
  bind_per_sample(m);
}

}  // namespace ember::python
