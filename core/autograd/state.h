// The engine state that both halves of autograd touch (internal: not installed): the running
// side (run.cpp) sets it while backward functions run, the recording side (record.cpp)
// reads it. Both are per thread and constant-initialised, so reading them costs no call.
#pragma once
#include <memory>
#include <mutex>

#include "core/autograd.h"

namespace ember::autograd_detail {

// Set while backward functions run. The ops they call are internal: anomaly mode checks
// their results once, as the gradient of the node being run, named and located as that node.
extern thread_local constinit bool t_in_backward;
// The node whose backward runs (what SavedTensor::get reattaches an op's output to).
extern thread_local constinit const std::shared_ptr<Node>* t_current_node;

// Guards every tensor's .grad slot: backward passes on several threads may accumulate into
// one leaf, while another thread reads or clears its .grad.
std::mutex& grad_mutex();

}  // namespace ember::autograd_detail
