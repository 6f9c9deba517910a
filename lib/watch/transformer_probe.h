// The watch (watch.h) on an encoder-decoder nn::Transformer: its attention modules as
// sites, and a probe batch of padded token ids measured teacher-forced with the training
// loss. The translator's train --watch and its watch command build their probes here.
#pragma once
#include <cstdint>
#include <vector>

#include "lib/watch/watch.h"
#include "nn/transformer.h"

namespace ember::watch {

// The rows of the probe batch curvature is measured on, by default: a measurement takes
// about a hundred Hessian-vector products, each about two forward-backward passes.
constexpr int64_t kCurvatureRows = 16;

// Every attention module of the model, by role and layer: "encoder_self" per encoder
// layer, then "decoder_self" and "decoder_cross" per decoder layer.
std::vector<Site> transformer_sites(nn::Transformer& model);

// A probe of the model on one padded batch: src [B, S] (source and </s>), tgt_in [B, T]
// (<s> and target), tgt_out [B, T] (target and </s>), int64 ids padded with `pad`. The
// loss is the mean cross-entropy over the target tokens that are not padding; padding
// queries are left out of the measurements. Curvature is measured on the first
// curvature_rows rows (all when fewer). The model must outlive the probe.
Probe transformer_probe(nn::Transformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out,
                        int64_t pad, int64_t curvature_rows = kCurvatureRows);

}  // namespace ember::watch
