// Run under mpirun: data-parallel training of a small Transformer with dropout, in
// float64, against one process training on the whole global batch.
//
//   ddp_train                  N ranks == one process (rank 0 trains the reference itself,
//                              on whole batches): losses and parameters to 1e-12 relative;
//                              every rank's parameters bitwise the same after every step;
//                              two runs bitwise the same; gradient accumulation under
//                              no_sync; a rank without rows in a step (join)
//   ddp_train save DIR         trains, saving a checkpoint (rank 0) half way and the final
//                              parameters at the end
//   ddp_train resume DIR       resumes from DIR's checkpoint with this number of ranks: the
//                              final parameters equal the uninterrupted run's to 1e-12
//   ddp_train raise            the last rank fails mid-step: the job ends (MPI_Abort)
//
// Each rank pads its own part of a batch to its own lengths: the masks and the result do
// not depend on it. Exits non-zero on failure, naming the rank and what differed.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "dist/ddp.h"
#include "io/checkpoint.h"
#include "nn/functional.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "expect.h"

using namespace ember;
using dist_test::expect;
using dist_test::failures;

namespace {

constexpr int64_t kVocab = 11, kPad = 0, kBos = 1, kEos = 2;

struct Sample {
  std::vector<int64_t> src, tgt;
};

// The global data: every rank makes the same samples from the same seed.
std::vector<Sample> make_data(int64_t n) {
  Generator g(2024);
  std::vector<Sample> data((size_t)n);
  for (auto& s : data) {
    const int64_t ls = 3 + (int64_t)(g.next_u64() % 7), lt = 2 + (int64_t)(g.next_u64() % 6);
    for (int64_t i = 0; i < ls; i++) s.src.push_back(3 + (int64_t)(g.next_u64() % (kVocab - 3)));
    for (int64_t i = 0; i < lt; i++) s.tgt.push_back(3 + (int64_t)(g.next_u64() % (kVocab - 3)));
  }
  return data;
}

struct Batch {
  Tensor src, tgt_in, tgt_out;
  int64_t tokens = 0;
};

// rows [first, first + count) of `samples`, padded to their own longest
Batch make_batch(const std::vector<const Sample*>& samples) {
  int64_t S = 1, T = 1;
  for (auto* s : samples) S = std::max<int64_t>(S, (int64_t)s->src.size()), T = std::max<int64_t>(T, (int64_t)s->tgt.size() + 1);
  const int64_t B = (int64_t)samples.size();
  std::vector<int64_t> src((size_t)(B * S), kPad), tin((size_t)(B * T), kPad), tout((size_t)(B * T), kPad);
  Batch b;
  for (int64_t i = 0; i < B; i++) {
    const Sample& s = *samples[(size_t)i];
    for (size_t j = 0; j < s.src.size(); j++) src[(size_t)(i * S) + j] = s.src[j];
    tin[(size_t)(i * T)] = kBos;
    for (size_t j = 0; j < s.tgt.size(); j++) tin[(size_t)(i * T) + j + 1] = s.tgt[j], tout[(size_t)(i * T) + j] = s.tgt[j];
    tout[(size_t)(i * T) + s.tgt.size()] = kEos;
    b.tokens += (int64_t)s.tgt.size() + 1;
  }
  b.src = from_vector(src, {B, S});
  b.tgt_in = from_vector(tin, {B, T});
  b.tgt_out = from_vector(tout, {B, T});
  return b;
}

int64_t tokens_of(const std::vector<const Sample*>& samples) {
  int64_t n = 0;
  for (auto* s : samples) n += (int64_t)s->tgt.size() + 1;
  return n;
}

// One training process: a model, its optimizer and its dropout stream.
struct Trainer {
  Generator init{77}, drop{5};
  std::shared_ptr<nn::Transformer> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<dist::DistributedDataParallel> ddp;

  explicit Trainer(bool parallel) {
    nn::TransformerConfig cfg;
    cfg.src_vocab = kVocab, cfg.tgt_vocab = kVocab, cfg.num_encoder_layers = 1, cfg.num_decoder_layers = 1,
    cfg.max_len = 16, cfg.pad_id = kPad;
    cfg.layer = {.d_model = 16, .num_heads = 2, .dim_feedforward = 24, .dropout_p = 0.2, .dropout_gen = &drop};
    model = std::make_shared<nn::Transformer>(cfg, &init, kFloat64);
    model->train();
    // eps 1e-6: the key projections' biases have a gradient that is zero in exact
    // arithmetic (softmax ignores a constant added to every score), so rounding noise of
    // 1e-17; Adam with a tiny eps would turn that noise into steps of the size of lr and of
    // random sign, and no two summation orders would agree on them
    opt = std::make_unique<optim::Adam>(model->named_parameters(), optim::AdamOptions{.lr = 3e-3, .eps = 1e-6});
    if (parallel) ddp = std::make_unique<dist::DistributedDataParallel>(*model, dist::DDPOptions{.bucket_bytes = 4096, .reduce = dist::ReduceOp::Sum});
  }

  // The loss share of `samples` (rows [first, ...) of a global batch with global_tokens
  // tokens): its token losses summed, over the global count. Backward included.
  double forward_backward(const std::vector<const Sample*>& samples, int64_t first, int64_t global_tokens) {
    const BatchOffset offset(first);
    if (samples.empty()) return 0;
    Batch b = make_batch(samples);
    Tensor logits = model->forward(b.src, b.tgt_in);
    Tensor mean = nn::cross_entropy(logits.reshape({-1, kVocab}), b.tgt_out.reshape({-1}), kPad);
    Tensor share = mul(mean, double(b.tokens) / double(global_tokens));
    share.backward();
    return share.item();
  }

  // One optimizer step on the global batch; micro > 1 accumulates it in that many parts
  // (all but the last under no_sync). Returns the global loss.
  double step(const std::vector<const Sample*>& batch, int micro = 1) {
    opt->zero_grad();
    const int64_t global_tokens = tokens_of(batch);
    double loss = 0;
    bool idle = false;
    const int64_t B = (int64_t)batch.size();
    for (int m = 0; m < micro; m++) {
      dist::Shard part = dist::shard(B, m, micro);  // the micro-batch, then this rank's rows of it
      dist::Shard mine = ddp ? dist::shard(part.count) : dist::Shard{0, part.count};
      std::vector<const Sample*> rows(batch.begin() + part.first + mine.first,
                                      batch.begin() + part.first + mine.first + mine.count);
      const int64_t first = part.first + mine.first;
      if (!ddp) {
        loss += forward_backward(rows, first, global_tokens);
        continue;
      }
      if (rows.empty()) idle = true;
      if (m + 1 < micro) {
        auto quiet = ddp->no_sync();
        if (!rows.empty()) loss += forward_backward(rows, first, global_tokens);
      } else if (rows.empty()) {
        ddp->join();  // no rows for this rank: it takes part in the reduction all the same
      } else {
        loss += forward_backward(rows, first, global_tokens);
      }
    }
    if (ddp) {
      // a rank that ran no forward drew no dropout masks: it takes rank 0's stream
      if (dist::any(idle)) dist::broadcast(drop, 0);
      Tensor l = from_vector(std::vector<double>{loss}, {1});
      dist::allreduce(l);
      loss = l.item();
    }
    opt->step();
    return loss;
  }
};

// The batches of the run: uneven sizes, one smaller than 3 ranks, one accumulated.
struct Plan {
  int64_t first, size;
  int micro;
};
const std::vector<Plan> kPlan = {{0, 7, 1}, {7, 7, 1}, {14, 2, 1}, {16, 8, 2}, {24, 5, 1}, {29, 7, 1}};

std::vector<const Sample*> batch_of(const std::vector<Sample>& data, const Plan& p) {
  std::vector<const Sample*> b;
  for (int64_t i = 0; i < p.size; i++) b.push_back(&data[(size_t)(p.first + i)]);
  return b;
}

std::string shape_str(const Tensor& t) { return cat_str(t.shape()); }

struct Run {
  std::vector<double> losses;
  std::vector<Tensor> params;
};

Run train(bool parallel, size_t from, size_t to, Trainer* t_in = nullptr) {
  std::optional<Trainer> own;
  if (!t_in) own.emplace(parallel);
  Trainer& t = t_in ? *t_in : *own;
  static const std::vector<Sample> data = make_data(64);
  Run r;
  for (size_t s = from; s < to; s++) {
    const Plan& p = kPlan[s];
    r.losses.push_back(t.step(batch_of(data, p), p.micro));
    if (parallel) t.ddp->check_parameters();  // fails loudly if any rank differs
  }
  for (auto& [name, p] : t.model->named_parameters()) r.params.push_back(p.detach().clone());
  return r;
}

void compare(const Run& got, const Run& want, const std::string& what, double tol) {
  expect(got.losses.size() == want.losses.size(), what + ": as many losses");
  for (size_t i = 0; i < got.losses.size() && i < want.losses.size(); i++) {
    const double rel = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
    expect(rel <= tol, what + ": loss of step " + std::to_string(i + 1) + " " + std::to_string(got.losses[i]) +
                           " vs " + std::to_string(want.losses[i]) + " (relative " + std::to_string(rel) + ")");
  }
  // relative to the largest parameter of the model
  double scale = 0;
  for (const Tensor& p : want.params) scale = std::max(scale, max(abs(p)).item());
  double worst = 0;
  for (size_t i = 0; i < got.params.size(); i++) {
    const double d = max(abs(sub(got.params[i], want.params[i]))).item() / scale;
    if (d > tol) std::fprintf(stderr, "rank %d: parameter %zu %s differs by %g\n", dist::rank(), i, shape_str(want.params[i]).c_str(), d);
    worst = std::max(worst, d);
  }
  expect(worst <= tol, what + ": parameters differ by " + std::to_string(worst) + " relative");
  if (dist::rank() == 0) std::printf("%s: parameters within %.2e relative\n", what.c_str(), worst);
}

int equivalence() {
  const int n = dist::world_size();
  Run a = train(true, 0, kPlan.size());
  Run b = train(true, 0, kPlan.size());
  bool same = a.losses == b.losses;
  for (size_t i = 0; i < a.params.size(); i++) same = same && equal(a.params[i], b.params[i]);
  expect(same, "two runs with the same seed and " + std::to_string(n) + " ranks differ");
  if (dist::rank() == 0) {
    Run ref = train(false, 0, kPlan.size());
    compare(a, ref, std::to_string(n) + " ranks vs one process", 1e-12);
    // and the comparison can fail: without the dropout offset the masks differ
    expect(ref.losses.size() == kPlan.size() && std::abs(ref.losses[0] - ref.losses.back()) > 1e-6,
           "the reference run does not train");
  }
  return 0;
}

void save_params(const std::string& path, const Trainer& t) {
  io::Checkpoint c;
  c.model = t.model->state_dict();
  io::save_checkpoint(path, c);
}

// Steps [0, half) then a checkpoint, then [half, end) and the final parameters.
constexpr size_t kHalf = 3;

int save(const std::string& dir) {
  Trainer t(true);
  train(true, 0, kHalf, &t);
  if (dist::rank() == 0) {
    io::Checkpoint c = io::make_checkpoint(t.model->state_dict(), t.opt.get(), nullptr, {{"dropout", &t.drop}}, {.step = (int64_t)kHalf},
                                           {{"world_size", (int64_t)dist::world_size()}});
    io::save_checkpoint(dir + "/half.h5", c);
  }
  train(true, kHalf, kPlan.size(), &t);
  if (dist::rank() == 0) save_params(dir + "/final.h5", t);
  return 0;
}

int resume(const std::string& dir) {
  Trainer t(true);
  io::Checkpoint saved = io::read_checkpoint(dir + "/half.h5");
  expect(saved.config.count("world_size") && io::to_string(saved.config.at("world_size")) != "",
         "the checkpoint records its world size");
  io::ResumeTargets targets;
  targets.model = t.model->state_dict();
  targets.optimizer = t.opt.get();
  targets.generators = {{"dropout", &t.drop}};
  targets.config = saved.config;
  io::load_checkpoint(dir + "/half.h5", targets);
  Run r = train(true, kHalf, kPlan.size(), &t);
  io::Checkpoint want = io::read_checkpoint(dir + "/final.h5");
  Run ref;
  for (auto& [name, p] : t.model->named_parameters()) ref.params.push_back(want.model.at(name));
  r.losses.clear();
  compare(r, ref, "saved with 2 ranks, resumed with " + std::to_string(dist::world_size()), 1e-12);
  return 0;
}

// The last rank fails in the middle of a step while the others wait for its gradients:
// the job must end at once, not hang.
int raise_on_last_rank() {
  Trainer t(true);
  static const std::vector<Sample> data = make_data(64);
  t.step(batch_of(data, kPlan[0]));
  if (dist::rank() == dist::world_size() - 1) fail("raise_on_last_rank", "a failure on purpose");
  t.step(batch_of(data, kPlan[1]));
  expect(false, "the other ranks went past a step the last rank never took");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  int code = 0;
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode.empty()) code = equivalence();
    else if (mode == "save" && argc > 2) code = save(argv[2]);
    else if (mode == "resume" && argc > 2) code = resume(argv[2]);
    else if (mode == "raise") code = raise_on_last_rank();
    else std::fprintf(stderr, "usage: ddp_train [save DIR | resume DIR]\n"), code = 2;
  } catch (const std::exception& e) {  // the others may be waiting in a collective: end them too
    std::fprintf(stderr, "rank %d: %s\n", dist::rank(), e.what());
    dist::abort_job(1);
  }
  dist::finalize();
  return code ? code : failures ? 1 : 0;
}
