// Data-parallel training, as PyTorch's DistributedDataParallel (Li et al., "PyTorch
// Distributed", VLDB 2020): every rank holds a replica of the module and runs forward and
// backward on its own part of the global batch; the gradients are reduced over the ranks
// in buckets while backward is still running, so that after backward every rank holds the
// same reduced gradients and its optimizer makes the same step.
//
//   dist::DistributedDataParallel ddp(*model, {.reduce = dist::ReduceOp::Sum});
//   for (...) {
//     opt.zero_grad();
//     dist::Shard mine = dist::shard(batch_rows);        // this rank's rows of the batch
//     BatchOffset offset(mine.first);                     // dropout masks of those rows
//     Tensor loss_sum = ...;                              // over this rank's tokens
//     Tensor loss = div(loss_sum, global_tokens);         // global_tokens: allreduced
//     loss.backward();                                    // gradients reduced here
//     opt.step();
//   }
//
// The loss rule. With ReduceOp::Sum every rank's loss must be its share of the global
// loss, so that the shares' gradients add up to the gradient of the whole: for a mean over
// the tokens of the batch, divide the sum of this rank's token losses by the number of
// tokens of the whole batch (allreduce the count; never average the ranks' own means, which
// weighs a token of a short part more). With the default ReduceOp::Mean (PyTorch's), the
// gradients are averaged, which is right when every rank's loss is a mean over equally
// many items. Either way N ranks make the step one process makes on the whole batch, up to
// the rounding of the sums, and every rank holds bitwise the same parameters after it.
//
// Order: buckets are reduced in one fixed order on every rank (started only after those
// before them), summed in a fixed order, so two runs with the same seed and number of
// ranks are identical.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "nn/module.h"

namespace ember::dist {

// Settings of DistributedDataParallel.
struct DDPOptions {
  // Gradients are reduced in buckets of about this many bytes, filled in reverse order of
  // the parameters (backward reaches the last layers first). PyTorch's default is 25 MB,
  // which would hold all of the translator's 3.6 MB in one bucket, started only when
  // backward ends; 1 MB makes four, the first started early in backward.
  int64_t bucket_bytes = 1 << 20;
  ReduceOp reduce = ReduceOp::Mean;  // Mean averages the gradients (PyTorch); Sum adds them
  bool broadcast_buffers = true;  // rank 0's buffers too, at construction
};

// Reduces a module's gradients over the ranks during backward (see the top of this file).
// Unlike PyTorch's, it does not wrap forward: call the module itself.
class DistributedDataParallel {
 public:
  // Broadcasts rank 0's parameters (and buffers) to every rank and hooks the parameters
  // the module has now (parameters added later are not reduced). An Error when
  // bucket_bytes is not positive or a parameter is not contiguous.
  explicit DistributedDataParallel(nn::Module& module, DDPOptions options = {});
  ~DistributedDataParallel();  // unhooks the parameters
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // While one is alive, backward accumulates gradients locally and reduces nothing (the
  // micro-steps of gradient accumulation); the first backward after reduces the sum.
  class NoSync {
   public:
    // Stops d reducing until this NoSync is destroyed.
    explicit NoSync(DistributedDataParallel& d) : d_(&d), before_(d.syncing_) { d.syncing_ = false; }
    ~NoSync() { d_->syncing_ = before_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel* d_;
    bool before_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }  // As PyTorch's no_sync context manager.

  // For a rank with no data in this step (a last batch smaller than the world): takes
  // part in the reduction with its current gradients (zeros where there are none), as
  // a backward would. An Error when called during a backward pass.
  void join();

  // Fails, naming the ranks, unless every rank holds bitwise the same parameters.
  void check_parameters() const;

  // Counters of the reductions since construction.
  struct Stats {
    int64_t reductions = 0;  // backward passes reduced
    int64_t bytes = 0;  // gradient bytes reduced per rank
    double mpi_seconds = 0;  // inside MPI calls (starting, testing, waiting)
    double wait_seconds = 0;  // of which waiting at the end of backward
  };
  const Stats& stats() const { return stats_; }  // The counters so far.
  int64_t bucket_count() const { return (int64_t)buckets_.size(); }  // The number of buckets.

 private:
  struct Slot {
    Tensor param;
    size_t bucket = 0;
    int64_t offset = 0;  // into the bucket's buffer
    bool ready = false;
  };
  struct Bucket {
    Tensor flat;               // [elements], the bucket's gradients side by side
    std::vector<size_t> slots;
    int64_t pending = 0;       // slots not ready yet
    std::unique_ptr<Work> work;
  };
  void on_gradient(size_t slot);
  void begin_pass();
  void copy_in(Slot& s);
  void launch_ready();
  void finish_pass();
  void progress();

  DDPOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<HookHandle> hooks_;
  size_t next_launch_ = 0;
  bool syncing_ = true, in_pass_ = false;
  Stats stats_;
};

}  // namespace ember::dist
