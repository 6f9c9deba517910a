// DistributedDataParallel: buckets of gradients reduced while backward runs.
//
// A parameter's post-accumulate hook runs once per backward, when its gradient is final;
// it copies the gradient into its bucket. A bucket whose gradients are all in starts its
// reduction - after every bucket before it has started, so that all ranks start them in
// the same order. When the pass ends (a callback queued on the engine), buckets still
// waiting for a gradient that never came (a parameter this rank's data did not reach) are
// started with what the parameter holds, every reduction is waited for, and the gradients
// become views of the reduced buckets.
#include "dist/ddp.h"

#include <chrono>

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::dist {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, DDPOptions options) : options_(options) {
  const char* op = "DistributedDataParallel";
  if (options_.bucket_bytes <= 0) fail(op, "bucket_bytes must be positive, got ", options_.bucket_bytes);
  auto params = module.named_parameters();
  for (auto& [name, p] : params)
    if (!p.is_contiguous()) fail(op, "parameter '", name, "' (shape ", p.shape(), ") is not contiguous");
  {
    NoGradGuard ng;
    for (auto& [name, p] : params) {
      Tensor t = p.detach();
      broadcast(t, 0);
    }
    if (options_.broadcast_buffers)
      for (auto& [name, b] : module.named_buffers()) {
        if (!b.defined() || !b.is_contiguous()) continue;
        Tensor t = b.detach();
        broadcast(t, 0);
      }
  }

  // buckets in reverse parameter order, one dtype each
  std::vector<std::vector<size_t>> groups;
  int64_t group_bytes = 0;
  for (size_t i = params.size(); i-- > 0;) {
    const Tensor& p = params[i].second;
    if (!p.requires_grad()) continue;
    const int64_t bytes = p.numel() * (int64_t)dtype_size(p.dtype());
    const bool fits = !groups.empty() && slots_[groups.back().back()].param.dtype() == p.dtype() &&
                      group_bytes + bytes <= options_.bucket_bytes;
    if (!fits) groups.emplace_back(), group_bytes = 0;
    groups.back().push_back(slots_.size());
    group_bytes += bytes;
    slots_.push_back(Slot{.param = p});
  }
  buckets_.resize(groups.size());
  for (size_t b = 0; b < groups.size(); b++) {
    int64_t elements = 0;
    for (size_t s : groups[b]) {
      slots_[s].bucket = b;
      slots_[s].offset = elements;
      elements += slots_[s].param.numel();
    }
    buckets_[b].slots = groups[b];
    buckets_[b].flat = zeros({elements}, slots_[groups[b][0]].param.dtype());
  }
  for (size_t s = 0; s < slots_.size(); s++)
    hooks_.push_back(slots_[s].param.register_post_accumulate_grad_hook([this, s](const Tensor&) { on_gradient(s); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (HookHandle& h : hooks_) h.remove();
  for (Bucket& b : buckets_) b.work.reset();  // waits for any reduction under way
}

void DistributedDataParallel::begin_pass() {
  in_pass_ = true;
  next_launch_ = 0;
  for (Slot& s : slots_) s.ready = false;
  for (Bucket& b : buckets_) b.pending = (int64_t)b.slots.size();
}

void DistributedDataParallel::copy_in(Slot& s) {
  Bucket& b = buckets_[s.bucket];
  Tensor dst = b.flat.narrow(0, s.offset, s.param.numel()).view(s.param.shape());
  Tensor g = s.param.grad();
  NoGradGuard ng;
  if (!g.defined()) dst.fill_(0.0);
  else if (g.raw_data() != dst.raw_data()) dst.copy_(g.detach());  // else accumulated in place
  s.ready = true;
  b.pending--;
}

void DistributedDataParallel::on_gradient(size_t slot) {
  if (!syncing_) return;
  if (!in_pass_) {
    begin_pass();
    queue_callback([this] { finish_pass(); });
  }
  Slot& s = slots_[slot];
  if (s.ready) return;
  copy_in(s);
  if (buckets_[s.bucket].pending > 0) return;
  // MPI moves reductions on only inside its calls: the ones under way, each time another starts
  progress();
  launch_ready();
}

void DistributedDataParallel::launch_ready() {
  const auto t0 = Clock::now();
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = allreduce_async(b.flat, options_.reduce);
  }
  stats_.mpi_seconds += since(t0);
}

void DistributedDataParallel::progress() {
  const auto t0 = Clock::now();
  for (size_t i = 0; i < next_launch_; i++)
    if (buckets_[i].work && buckets_[i].work->test()) buckets_[i].work.reset();
  stats_.mpi_seconds += since(t0);
}

void DistributedDataParallel::finish_pass() {
  for (Slot& s : slots_)
    if (!s.ready) copy_in(s);  // a gradient this rank's pass did not reach: what it holds
  launch_ready();
  const auto t0 = Clock::now();
  for (Bucket& b : buckets_) {
    if (b.work) b.work->wait();
    b.work.reset();
  }
  const double waited = since(t0);
  stats_.wait_seconds += waited;
  stats_.mpi_seconds += waited;
  // the gradients become views of the reduced buckets (no copy back, as PyTorch's
  // gradient_as_bucket_view): the next reduction overwrites them
  for (Slot& s : slots_) {
    s.param.set_grad(buckets_[s.bucket].flat.narrow(0, s.offset, s.param.numel()).view(s.param.shape()));
    stats_.bytes += s.param.numel() * (int64_t)dtype_size(s.param.dtype());
  }
  stats_.reductions++;
  in_pass_ = false;
}

void DistributedDataParallel::join() {
  if (in_pass_) fail("DistributedDataParallel::join", "called during a backward pass");
  if (!syncing_) return;
  begin_pass();
  finish_pass();
}

void DistributedDataParallel::check_parameters() const {
  std::vector<Tensor> params;
  for (const Slot& s : slots_) params.push_back(s.param.detach());
  check_same_on_all_ranks(params, "parameters");
}

}  // namespace ember::dist
