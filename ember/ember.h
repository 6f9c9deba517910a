// The whole public API of ember in one include, as <torch/torch.h> is PyTorch's:
//   #include <ember/ember.h>
// Tensors, autograd and ops (core/), layers and attention (nn/), optimizers and schedules
// (optim/), files and checkpoints (io/), data-parallel training (dist/). Each header can
// also be included on its own, by its path ("core/ops.h").
#pragma once

#include <iostream>  // tensors, shapes and dtypes print with operator<<

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/autograd_functional.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/forward_ad.h"
#include "core/func.h"
#include "core/function.h"
#include "core/gradcheck.h"
#include "core/graph_draw.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "core/version.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "io/checkpoint.h"
#include "io/h5.h"
#include "io/tensor_file.h"
#include "nn/attention.h"
#include "nn/attention_mask.h"
#include "nn/functional.h"
#include "nn/graph_draw.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/multihead_attention.h"
#include "nn/packing.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
