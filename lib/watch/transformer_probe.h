// The watch (watch.h) on an encoder-decoder nn::Transformer: its attention modules as
// sites, and a probe batch of padded token ids measured teacher-forced with the training
// loss. The translator's train --watch and its watch command build their probes here.
#pragma once
#include <cstdint>
#include <vector>

#include "lib/watch/watch.h"
#include "nn/transformer.h"

namespace ember::watch {

// Every attention module of the model, by role and layer: "encoder_self" per encoder
// layer, then "decoder_self" and "decoder_cross" per decoder layer.
std::vector<Site> transformer_sites(nn::Transformer& model);

// A probe of the model on one padded batch: src [B, S] (source and </s>), tgt_in [B, T]
// (<s> and target), tgt_out [B, T] (target and </s>), int64 ids padded with `pad`. The
// loss is the mean cross-entropy over the target tokens that are not padding; padding
// queries are left out of the measurements. The model must outlive the probe.
Probe transformer_probe(nn::Transformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out,
                        int64_t pad);

}  // namespace ember::watch
