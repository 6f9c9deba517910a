// Sites and a probe batch for watching an encoder-decoder Transformer.
#include "lib/watch/transformer_probe.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops.h"
#include "nn/functional.h"

namespace ember::watch {

std::vector<Site> transformer_sites(nn::Transformer& m) {
  std::vector<Site> sites;
  for (size_t i = 0; i < m.encoder->layers->size(); i++)
    sites.push_back({"encoder_self", (int64_t)i, m.encoder->layer(i)->self_attn.get()});
  for (size_t i = 0; i < m.decoder->layers->size(); i++)
    sites.push_back({"decoder_self", (int64_t)i, m.decoder->layer(i)->self_attn.get()});
  for (size_t i = 0; i < m.decoder->layers->size(); i++)
    sites.push_back({"decoder_cross", (int64_t)i, m.decoder->layer(i)->cross_attn.get()});
  return sites;
}

Probe transformer_probe(nn::Transformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out,
                        int64_t pad, int64_t curvature_rows) {
  if (curvature_rows < 1) fail("watch::transformer_probe", "expected curvature_rows >= 1, got ", curvature_rows);
  Probe p;
  p.model = &model;
  p.sites = transformer_sites(model);
  const int64_t vocab = model.cfg.tgt_vocab;
  p.loss = [&model, src, tgt_in, tgt_out, vocab, pad] {
    Tensor logits = model.forward(src, tgt_in);
    return nn::cross_entropy(logits.reshape({-1, vocab}), tgt_out.reshape({-1}), pad);
  };
  const int64_t r = std::min(curvature_rows, src.size(0));
  const Tensor src_r = src.narrow(0, 0, r), in_r = tgt_in.narrow(0, 0, r), out_r = tgt_out.narrow(0, 0, r);
  p.curvature_loss = [&model, src_r, in_r, out_r, vocab, pad] {
    Tensor logits = model.forward(src_r, in_r);
    return nn::cross_entropy(logits.reshape({-1, vocab}), out_r.reshape({-1}), pad);
  };
  const Tensor target_padding = eq(tgt_in, double(pad));
  p.query_padding = {{"encoder_self", eq(src, double(pad))},
                     {"decoder_self", target_padding},
                     {"decoder_cross", target_padding}};
  return p;
}

}  // namespace ember::watch
