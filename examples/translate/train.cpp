// translate train: the training loop of the date translator, alone or data-parallel
// under mpirun, with checkpoints, curves and (with --watch) measurements of attention.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "dist/ddp.h"
#include "examples/translate/model.h"
#include "examples/translate/options.h"
#include "examples/translate/resume.h"
#include "io/checkpoint.h"
#include "lib/cli/cli.h"
#include "lib/plot/plot.h"
#include "lib/seq2seq/model_options.h"
#include "lib/seq2seq/seq2seq.h"
#include "lib/train/stdout_writer.h"
#include "lib/train/trainer.h"
#include "lib/train/training_run.h"
#include "lib/watch/watch.h"
#include "nn/functional.h"
#include "optim/schedule.h"

namespace ember::translate {

namespace fs = std::filesystem;

// The most processes a checkpoint may say saved it (far beyond any MPI job this runs in).
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;
using cli::UsageError;
using seq2seq::Example;
using text::CharVocab;

namespace {

struct History {
  std::vector<double> step, loss, eval_step, eval_acc;
};

// The training curves; a figure that cannot be written is a warning (once), never a
// reason to stop training or to lose a checkpoint. Returns whether it was written.
bool write_curves(const std::string& path, const History& h) {
  static bool warned = false;
  plot::Lines loss{"training loss (cross-entropy per target token)", "step", "loss", {{"train", h.step, h.loss}}};
  loss.log_y = true;
  plot::Lines acc{"validation exact match", "step", "accuracy", {{"valid", h.eval_step, h.eval_acc}}};
  acc.ymin = 0, acc.ymax = 1;
  try {
    plot::save_png(path, {loss, acc}, 2, 560, 380);
    return true;
  } catch (const Error& e) {
    if (!warned) {
      std::fflush(stdout);
      std::fprintf(stderr, "translate train: warning: training goes on without the curves: %s\n", e.what());
    }
    warned = true;
    return false;
  }
}

// The sum over the ranks of a few numbers (one collective).
std::vector<double> sum_over_ranks(std::vector<double> v) {
  Tensor t = from_vector(v, {(int64_t)v.size()}).to(kFloat64);
  dist::allreduce(t);
  return t.to_vector<double>();
}

// The batch's loss (the ranks' shares summed in rank order: the same bits everywhere) and
// the first stop signal any rank received (0: none), in one collective.
std::pair<double, int> exchange(double loss_share, int signal) {
  Tensor all = dist::allgather(from_vector(std::vector<double>{loss_share, double(signal)}, {2}).to(kFloat64));
  const std::vector<double> v = all.to_vector<double>();
  double loss = 0;
  int first = 0;
  for (size_t r = 0; r + 1 < v.size(); r += 2) {
    loss += v[r];
    if (!first && v[r + 1] != 0) first = (int)v[r + 1];
  }
  return {loss, first};
}

// What a watch file says about the run it comes from.
std::map<std::string, std::string> watch_info(const std::string& program, const nn::TransformerConfig& cfg,
                                              int64_t rows, const std::string& data) {
  std::map<std::string, std::string> info = {{"program", program},
                                             {"model", seq2seq::describe(cfg)},
                                             {"head_dim", cat_str(cfg.layer.d_model / cfg.layer.num_heads)},
                                             {"score_scale", cat_str(cfg.layer.score_scale)},
                                             {"probe", cat_str("the first ", rows, " pairs of ", data)}};
  if (cfg.layer.qk_norm) info["qk_norm"] = "1";  // absent without: older runs' watches continue
  return info;
}

// The checkpoint's /extra/<name>, if it has one: an int64 of shape [1] in [lo, hi] (what it
// means: `meaning`), or refused, naming the file and the key.
std::optional<int64_t> extra_integer(const io::Checkpoint& c, const std::string& file, const std::string& name,
                                     int64_t lo, int64_t hi, const std::string& meaning) {
  const auto it = c.extra.find(name);
  if (it == c.extra.end()) return std::nullopt;
  const Tensor& t = it->second;
  const bool one = t.dtype() == kInt64 && t.dim() == 1 && t.numel() == 1;
  const int64_t v = one ? t.to_vector<int64_t>()[0] : 0;
  if (!one || v < lo || v > hi)
    fail("translate train", "'", file, "': key '/extra/", name, "' should hold ", meaning, ", an int64 in [", lo, ", ",
         hi, "] of shape [1]; got ", dtype_name(t.dtype()), " ", t.shape(), one ? cat_str(" holding ", v) : std::string());
  return v;
}

}  // namespace

int train(const TrainOptions& o) {
  // Data-parallel under mpirun: every rank runs this function on its own rows of each
  // batch; rank 0 alone writes (progress, curves, checkpoints), and the others' stdout is
  // silenced.
  const int rank = dist::rank(), world = dist::world_size();
  const bool leader = rank == 0;
  if (!leader) std::freopen("/dev/null", "w", stdout);
  if (o.watch_curvature > 0 && !o.watch) throw UsageError{"--watch-curvature needs --watch", "train"};
  if (o.watch_curvature % o.watch_every != 0)
    throw UsageError{cat_str("--watch-curvature ", o.watch_curvature, " must be a multiple of --watch-every ",
                             o.watch_every),
                     "train"};
  if (given(o, "--threads")) set_num_threads(o.threads);
  else if (world > 1 && !std::getenv("OMP_NUM_THREADS")) set_num_threads(dist::threads_per_process());
  // the data files first: a bad line is named before options that disagree
  auto train_pairs = text::read_pairs(o.train);
  auto valid_pairs = text::read_pairs(o.valid);
  if (!given(o, "--resume")) check_new_schedule(o);  // a resumed run's schedule is its checkpoint's
  std::optional<training::RunDirectory> run_dir;  // created, writable, locked, swept: by rank 0
  if (leader) run_dir.emplace(o.out, "translate train");
  dist::barrier();
  training::StopSignals signals;  // from here on a stop signal is answered by the loop
  // progress that a reader who stops reading (mpirun shutting the job down, a full pipe)
  // cannot hold up: a stop is saved whatever becomes of standard output
  std::optional<training::StdoutWriter> output;
  if (leader) output.emplace();
  if (leader && !run_dir->removed().empty())
    std::printf("removed %zu temporary file(s) left by interrupted saves in %s\n", run_dir->removed().size(),
                o.out.c_str());
  io::CheckpointManager ckpts(o.out, (int)o.keep, "ckpt");

  // The checkpoint to resume from, if any: its configuration and vocabularies win.
  std::optional<std::string> resume;
  std::optional<io::Checkpoint> previous;
  if (given(o, "--resume")) {
    if (o.resume == "auto") {
      // rank 0 first: it moves damaged checkpoints aside, which the others then do not see
      std::optional<std::pair<std::string, io::Checkpoint>> found;
      if (leader) found = newest_intact(ckpts, o.out);
      dist::barrier();
      if (!leader) found = newest_intact(ckpts, o.out);
      if (found) resume = std::move(found->first), previous = std::move(found->second);
      else std::printf("no checkpoint in %s: starting afresh\n", o.out.c_str());
    } else {
      resume = o.resume;
      previous = io::read_checkpoint(*resume);
    }
  }
  if (!resume && ckpts.latest())
    fail("translate train", "'", o.out, "' already holds checkpoints (", *ckpts.latest(),
         "); continue with --resume auto, or choose another --out");
  if (!resume && given(o, "--resume")) check_new_schedule(o);  // --resume auto found nothing: a new run
  if (resume) check_resume_place(ckpts, o.out, *resume, previous->progress.step);

  nn::TransformerConfig cfg;
  CharVocab src_vocab, tgt_vocab;
  if (previous) {
    cfg = seq2seq::from_config(previous->config, *resume);
    src_vocab = vocab_of(*previous, "source", *resume);
    tgt_vocab = vocab_of(*previous, "target", *resume);
    check_pad_id(cfg, src_vocab, tgt_vocab, *resume);
    check_resume_options(o, *previous, cfg, *resume);
  } else {
    if (o.model.layer.d_model % o.model.layer.num_heads != 0)
      throw UsageError{cat_str("--heads ", o.model.layer.num_heads, " must divide --d-model ", o.model.layer.d_model),
                       "train"};
    std::vector<std::string> sources, targets;
    for (auto& p : train_pairs) sources.push_back(p.source), targets.push_back(p.target);
    src_vocab = CharVocab::build(sources);
    tgt_vocab = CharVocab::build(targets);
    cfg = o.model;
    cfg.src_vocab = src_vocab.size();
    cfg.tgt_vocab = tgt_vocab.size();
  }
  const int64_t rows_here = (o.batch + world - 1) / world;  // this process's part of a batch
  cli::check_fits_in_memory("translate train", seq2seq::training_bytes(cfg, rows_here),
                            cat_str("training a ", std::llround(seq2seq::parameter_count(cfg)),
                                    "-parameter model at --batch ", o.batch,
                                    world > 1 ? cat_str(" (", rows_here, " rows in this process)") : std::string(),
                                    " and --max-len ", cfg.max_len));
  std::vector<Example> train_set = seq2seq::encode_pairs(train_pairs, o.train, src_vocab, tgt_vocab);
  std::vector<Example> valid_set = seq2seq::encode_pairs(valid_pairs, o.valid, src_vocab, tgt_vocab);
  check_lengths(train_pairs, train_set, o.train, cfg.max_len);
  check_lengths(valid_pairs, valid_set, o.valid, cfg.max_len);
  int64_t longest_target = 0;
  for (auto& e : valid_set) longest_target = std::max<int64_t>(longest_target, (int64_t)e.target.size());
  // Every process must train the same job: the same options, data and checkpoint (an --out
  // that only some machines see, or another data file on one of them, would otherwise
  // train something else, or hang at the end). Checked before anything is trained.
  if (world > 1) {
    std::string job = cat_str(o.steps, ' ', o.batch, ' ', o.seed, ' ', o.lr, ' ', o.warmup, ' ', o.schedule, ' ',
                              o.decay_steps, ' ', o.min_lr, ' ', o.clip, ' ', o.z_loss, ' ', o.precision, ' ', o.target_acc, ' ', o.eval_every, ' ',
                              o.save_every, ' ', o.check_every, ' ', previous ? previous->progress.step : -1, '\n');
    for (const auto& [key, value] : seq2seq::to_config(cfg)) job += key + '=' + io::to_string(value) + '\n';
    for (const auto* set : {&train_pairs, &valid_pairs})
      for (const auto& p : *set) job += p.source + '\t' + p.target + '\n';
    Tensor bytes = from_vector(std::vector<int64_t>(job.begin(), job.end()), {(int64_t)job.size()});
    dist::check_same_on_all_ranks(
        {bytes}, cat_str("options, data files or checkpoint (here: ",
                         previous ? cat_str("step ", previous->progress.step, " of ", *resume) : std::string("none"),
                         ")"));
  }

  // three streams: initialisation, dropout masks, data order (dropout's is checkpointed
  // with the data order's, so that a resumed run draws the masks it would have drawn)
  Generator init_gen((uint64_t)o.seed * 1000003 + 17), dropout_gen((uint64_t)o.seed),
      data_gen((uint64_t)o.seed * 7919 + 3);
  cfg.layer.dropout_gen = &dropout_gen;
  auto model = std::make_shared<nn::Transformer>(cfg, &init_gen);
  seq2seq::xavier_init(*model, &init_gen);
  auto params = model->named_parameters();
  // on resume the schedule is the checkpoint's (check_resume_options refused a new one)
  std::unique_ptr<optim::Schedule> sched = previous ? resumed_schedule(*previous, cfg, *resume) : new_schedule(o, cfg.layer.d_model);
  optim::Adam opt(params, adam_options(sched->lr_at(1)));

  io::Progress progress;
  std::vector<int64_t> order;
  History hist;
  double window_loss = 0;  // a resumed run's open progress window (training::Settings)
  int64_t window_steps = 0;
  bool bf16 = o.precision == "bf16";  // the forward and loss under Autocast
  if (previous) {
    io::ResumeTargets t;
    t.model = model->state_dict();
    t.optimizer = &opt;
    t.schedule = sched.get();
    t.generators = {{dropout_stream(*previous), &dropout_gen}, {"data", &data_gen}};
    t.config = previous->config;
    io::Checkpoint c = io::load_checkpoint(*resume, t);
    progress = c.progress;
    check_resumed_optimizer(opt, *sched, progress.step, *resume);
    if (!c.extra.count("order") || c.extra.at("order").dtype() != kInt64 || c.extra.at("order").dim() != 1)
      fail("translate train", "'", *resume, "': key '/extra/order' should hold the data order, int64 [pairs]");
    order = c.extra.at("order").to_vector<int64_t>();
    seq2seq::check_order(order, progress.position, train_set.size(), *resume, o.train);
    // the curves so far, as make_checkpoint below writes them: float64 [n, 2] of (step,
    // value) pairs, steps in [0, the checkpoint's step] and not decreasing, values finite
    // (accuracies in [0, 1])
    auto series = [&](const char* name, std::vector<double>& x, std::vector<double>& y, bool fraction) {
      if (!c.extra.count(name)) return;
      const Tensor& t = c.extra.at(name);
      const std::string key = cat_str("/extra/", name);
      if (t.dtype() != kFloat64 || t.dim() != 2 || t.size(1) != 2)
        fail("translate train", "'", *resume, "': key '", key, "' should hold (step, ", fraction ? "accuracy" : "loss",
             ") pairs, float64 [n, 2]; got ", dtype_name(t.dtype()), " ", t.shape());
      const std::vector<double> v = t.to_vector<double>();
      for (size_t i = 0; i + 1 < v.size(); i += 2) {
        const double step = v[i], value = v[i + 1];
        const bool step_ok = step >= (x.empty() ? 0.0 : x.back()) && step <= (double)progress.step &&
                             step == std::floor(step);
        const bool value_ok = fraction ? (value >= 0 && value <= 1) : std::isfinite(value);
        if (!step_ok || !value_ok)
          fail("translate train", "'", *resume, "': key '", key, "' row ", (int64_t)(i / 2), " is (", step, ", ", value,
               "): expected a whole step in [", x.empty() ? 0.0 : x.back(), ", ", progress.step, "] and ",
               fraction ? "an accuracy in [0, 1]" : "a finite loss");
        x.push_back(step), y.push_back(value);
      }
    };
    series("loss_history", hist.step, hist.loss, false);
    series("valid_history", hist.eval_step, hist.eval_acc, true);
    // the progress window open at the save (absent: none): the sum of its losses and its
    // steps, which the next logged mean covers too
    if (c.extra.count("loss_window")) {
      const Tensor& t = c.extra.at("loss_window");
      const std::vector<double> v = t.dtype() == kFloat64 && t.dim() == 1 && t.numel() == 2 ? t.to_vector<double>()
                                                                                              : std::vector<double>();
      const int64_t since_log = hist.step.empty() ? progress.step : progress.step - int64_t(hist.step.back());
      if (v.empty() || !std::isfinite(v[0]) || v[1] != std::floor(v[1]) || v[1] < 0 || v[1] > double(since_log) ||
          (v[1] == 0 && v[0] != 0))
        fail("translate train", "'", *resume, "': key '/extra/loss_window' should hold the open progress window's ",
             "(loss sum, steps), float64 [2], its steps a whole number in [0, ", since_log,
             "] (those since the last logged step); got ", dtype_name(t.dtype()), " ", t.shape(),
             v.empty() ? std::string() : cat_str(" holding (", v[0], ", ", v[1], ")"));
      window_loss = v[0], window_steps = int64_t(v[1]);
    }
    std::string ranks;
    if (auto n = extra_integer(c, *resume, "world_size", 1, kMaxWorldSize, "the number of processes that saved it"))
      ranks = cat_str(", saved by ", *n, " process(es)");
    // the precision the run trained at (absent: float32), kept unless --precision is given
    if (auto v = extra_integer(c, *resume, "bf16_products", 0, 1, "1 if it trained under --precision bf16, else 0"))
      if (!given(o, "--precision")) bf16 = *v == 1;
    std::printf("resumed from %s at step %lld (epoch %lld, pair %lld of the epoch%s)\n", resume->c_str(),
                (long long)progress.step, (long long)progress.epoch, (long long)progress.position, ranks.c_str());
  }
  // A checkpoint named alike on every machine may hold another run's state on one of them:
  // refused, on every rank, before DDP hands out rank 0's parameters and before any step.
  if (world > 1 && previous)
    dist::check_same_on_all_ranks(resumed_state(params, opt, *sched, progress, order, data_gen, dropout_gen, src_vocab,
                                                tgt_vocab),
                                  cat_str("after loading step ", progress.step, " of ", *resume,
                                          ": every process must resume the same checkpoint"));
  // every rank starts from rank 0's parameters; gradients are summed over the ranks, each
  // rank's loss being its share of the batch's mean (see the step)
  std::optional<dist::DistributedDataParallel> ddp;
  if (world > 1) ddp.emplace(*model, dist::DDPOptions{.reduce = dist::ReduceOp::Sum});

  // the watch: rank 0 measures its probe batch (no collective: the others do not wait for it)
  std::optional<watch::Recorder> watcher;
  if (o.watch && leader) {
    const int64_t rows = std::min<int64_t>(o.watch_rows, (int64_t)valid_set.size());
    watcher.emplace(probe_of(*model, valid_set, rows), o.out, o.watch_every, "translate train",
                    watch_info("translate train", cfg, rows, o.valid),
                    watch::CurvatureOptions{.every = o.watch_curvature, .seed = uint64_t(o.seed)});
    if (previous) watcher->resume(progress.step);
  }

  auto new_epoch_order = [&] {
    order.resize(train_set.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = (int64_t)i;
    for (size_t i = order.size() - 1; i > 0; i--) std::swap(order[i], order[data_gen.next_u64() % (i + 1)]);
  };
  if (order.empty()) new_epoch_order();

  // What one save holds: the model, the optimizer, the schedule, both generators, the
  // place in the data, the vocabularies and the curves so far.
  auto make_checkpoint = [&] {
    io::Checkpoint c = io::make_checkpoint(model->state_dict(), &opt, sched.get(),
                                           {{"dropout", &dropout_gen}, {"data", &data_gen}}, progress,
                                           seq2seq::to_config(cfg));
    c.vocab["source"] = src_vocab.tokens();
    c.vocab["target"] = tgt_vocab.tokens();
    c.extra["order"] = from_vector(order, {(int64_t)order.size()});
    c.extra["world_size"] = from_vector(std::vector<int64_t>{world}, {1});
    c.extra["bf16_products"] = from_vector(std::vector<int64_t>{bf16 ? 1 : 0}, {1});
    auto pairs = [](const std::vector<double>& x, const std::vector<double>& y) {
      std::vector<double> v;
      for (size_t i = 0; i < x.size(); i++) v.push_back(x[i]), v.push_back(y[i]);
      return from_vector(v, {(int64_t)x.size(), 2});
    };
    c.extra["loss_history"] = pairs(hist.step, hist.loss);
    c.extra["valid_history"] = pairs(hist.eval_step, hist.eval_acc);
    return c;
  };

  std::vector<std::vector<int64_t>> valid_sources, valid_targets;
  for (auto& e : valid_set) valid_sources.push_back(e.source), valid_targets.push_back(e.target);

  std::printf("training a %lld-parameter Transformer (%s) on %zu pairs, %s%d thread(s)%s%s\n",
              (long long)model->num_parameters(), seq2seq::describe(cfg).c_str(), train_set.size(),
              world > 1 ? cat_str(world, " processes x ").c_str() : "", num_threads(), world > 1 ? " each" : "",
              bf16 ? (bf16_products_available() ? ", bfloat16 products" : ", float32 products (no AVX512_BF16, or EMBER_NO_BF16 set)") : "");
  const std::string curves = (fs::path(o.out) / "curves.png").string();
  const double best_before = hist.eval_acc.empty() ? 0 : hist.eval_acc.back();
  const bool reached_before = !hist.eval_acc.empty() && best_before >= o.target_acc;
  if (progress.step >= o.steps || reached_before) {
    std::printf("nothing to train: the checkpoint is at step %lld and %s\n", (long long)progress.step,
                reached_before ? "has already reached --target-acc" : cat_str("--steps is ", o.steps).c_str());
    std::printf("checkpoint: %s\n", resume->c_str());
    return 0;
  }

  training::Trainer trainer({.program = "translate train",
                          .first_step = progress.step,
                          .window_loss = window_loss,
                          .window_steps = window_steps,
                          .steps = o.steps,
                          .log_every = o.log_every,
                          .eval_every = o.eval_every,
                          .save_every = o.save_every,
                          .target = o.target_acc,
                          .last_saved = resume ? *resume : std::string(),
                          .resume_hint = "resume with --resume auto",
                          .plain = dist::launched_by_mpirun()});
  // steps after step 100, those of them in which the allocator took memory from the system, and how much
  int64_t steady_steps = 0, steady_grew = 0, steady_growth = 0;
  double lr = 0;
  int agreed_signal = 0;  // data-parallel: the stop signal of the last step's exchange
  model->train();

  trainer.step = [&] {
    if (progress.position >= (int64_t)order.size()) {
      progress.epoch++;
      progress.position = 0;
      new_epoch_order();
    }
    std::vector<const Example*> batch;  // the global batch, the same on every rank
    for (int64_t k = 0; k < o.batch && progress.position < (int64_t)order.size(); k++)
      batch.push_back(&train_set[(size_t)order[(size_t)progress.position++]]);
    int64_t batch_tokens = 0;
    for (auto* e : batch) batch_tokens += (int64_t)e->target.size() + 1;  // target + </s>
    // this rank's rows; their dropout masks are the ones one process would draw for them
    const dist::Shard mine = dist::shard((int64_t)batch.size(), rank, world);
    const std::vector<const Example*> rows(batch.begin() + mine.first, batch.begin() + mine.first + mine.count);
    const BatchOffset batch_offset(mine.first);

    const int64_t held_before = Storage::system_bytes();
    lr = sched->step(opt);
    opt.zero_grad();
    // The loss is the mean over the batch's target tokens (with --z-loss, plus its
    // coefficient times the mean of log(Z)^2 over them). A rank's share of it is the
    // mean over its own tokens weighted by their part of the batch's, so that the shares'
    // gradients, summed over the ranks, are the gradient of the mean.
    Tensor loss;
    double loss_value = 0;
    if (!rows.empty()) {
      Autocast autocast(bf16);  // (the backward runs at the precision the forward ran at)
      seq2seq::Batch b = seq2seq::make_batch(rows);
      Tensor logits = model->forward(b.src, b.tgt_in);
      const Tensor flat = logits.reshape({-1, cfg.tgt_vocab}), targets = b.tgt_out.reshape({-1});
      loss = nn::cross_entropy(flat, targets, CharVocab::kPad);
      const double share = double(b.target_tokens) / double(batch_tokens);
      if (world > 1) loss = mul(loss, share);
      loss_value = loss.item();  // the cross-entropy alone, with or without the z-loss
      if (o.z_loss > 0) {
        Tensor z = mul(seq2seq::z_loss(flat, targets, CharVocab::kPad), o.z_loss);
        loss = add(loss, world > 1 ? mul(z, share) : z);
      }
    }
    if (world == 1 && !std::isfinite(loss_value)) return training::StepResult{.loss = loss_value};  // the trainer stops here
    if (loss.defined()) loss.backward();
    else ddp->join();  // no rows for this rank: it takes part in the reduction all the same
    if (world > 1) {
      // a rank without rows drew no dropout masks: all go on from rank 0's stream
      if ((int64_t)batch.size() < world) dist::broadcast(dropout_gen, 0);
      // one exchange after the reduction (the ranks are in step there): the batch's loss,
      // and the stop signal all ranks answer before the next step
      std::tie(loss_value, agreed_signal) = exchange(loss_value, training::StopSignals::received());
      if (!std::isfinite(loss_value)) return training::StepResult{.loss = loss_value};  // before any update
    }
    if (o.clip > 0) optim::clip_grad_norm(params, o.clip);
    opt.step();
    progress.step++;
    if (ddp && o.check_every > 0 && progress.step % o.check_every == 0) ddp->check_parameters();
    if (watcher) watcher->after_step(progress.step);
    if (progress.step > 100) {
      const int64_t grown = Storage::system_bytes() - held_before;
      steady_steps++, steady_grew += grown > 0, steady_growth += grown;
    }
    return training::StepResult{.loss = loss_value, .tokens = batch_tokens};
  };
  trainer.progress_fields = [&] {
    char b[64];
    std::snprintf(b, sizeof b, "epoch %lld  lr %.2e  ", (long long)progress.epoch, lr);
    return std::string(b);
  };
  trainer.on_log = [&](int64_t step, double mean_loss) {
    hist.step.push_back(double(step));
    hist.loss.push_back(mean_loss);
  };
  if (world > 1) trainer.agree_on_signal = [&](int) { return agreed_signal; };
  // Each rank decodes its part of the validation pairs; the counts are summed.
  const dist::Shard valid_part = dist::shard((int64_t)valid_set.size(), rank, world);
  const std::vector<std::vector<int64_t>> my_sources(valid_sources.begin() + valid_part.first,
                                                     valid_sources.begin() + valid_part.first + valid_part.count),
      my_targets(valid_targets.begin() + valid_part.first, valid_targets.begin() + valid_part.first + valid_part.count);
  // A stop signal cuts an evaluation short (between batches): the trainer then saves and
  // stops without its figure, which no process reports.
  trainer.evaluate = [&] {
    std::vector<std::vector<int64_t>> outputs;
    bool cut = false;
    if (!my_sources.empty())
      outputs = seq2seq::greedy_decode(*model, my_sources, longest_target + 2, 256,
                                       [&] { return cut = training::StopSignals::received() != 0; });
    outputs.resize(std::min(outputs.size(), my_targets.size()));
    std::vector<double> counts =
        seq2seq::counts(seq2seq::accuracy(outputs, {my_targets.begin(), my_targets.begin() + (ptrdiff_t)outputs.size()}));
    counts.push_back(cut ? 1.0 : 0.0);
    if (world > 1) counts = sum_over_ranks(counts);
    if (counts.back() > 0) return std::numeric_limits<double>::quiet_NaN();
    counts.pop_back();
    const seq2seq::Accuracy acc = seq2seq::combine(counts);
    hist.eval_step.push_back(double(progress.step));
    hist.eval_acc.push_back(acc.exact);
    std::printf("%sstep %lld: validation exact match %.2f%%, per character %.2f%% (%.0f s of training)\n",
                trainer.on_terminal() ? "\n" : "", (long long)progress.step, 100 * acc.exact, 100 * acc.per_char,
                trainer.train_seconds());
    if (leader) write_curves(curves, hist);
    return acc.exact;
  };
  // A save that fails (a full disk) ends the run: going on would only pile up more work
  // that cannot be kept. The previous checkpoint is untouched.
  trainer.save = [&](const std::string&) {
    if (!leader) return ckpts.path_for(progress.step);  // rank 0 writes it
    io::Checkpoint c = make_checkpoint();
    c.extra["loss_window"] = from_vector(std::vector<double>{trainer.window_loss(), double(trainer.window_steps())}, {2});
    std::string path = ckpts.save(c);
    if (watcher) watcher->write(/*figures=*/false);  // the numbers; figures at the end
    for (const std::string& failure : ckpts.pruning_failures()) {
      std::fflush(stdout);
      std::fprintf(stderr, "translate train: warning: cannot remove the old checkpoint %s (--keep %lld)\n",
                   failure.c_str(), (long long)o.keep);
    }
    return path;
  };

  if (watcher) watcher->after_step(progress.step);  // where training starts
  // the watch's files are written at every save; a run that stops on a loss that is not
  // finite saves nothing, and its last measurements are the ones worth seeing
  if (int code = trainer.run(); code != 0) {
    if (watcher) watcher->write();
    return code;
  }
  const bool drew = leader && write_curves(curves, hist);
  std::printf("done: %lld steps, %.1f s of training (%.1f s wall), best validation exact match %.2f%%\n",
              (long long)progress.step, trainer.train_seconds(), trainer.wall_seconds(),
              100 * std::max(best_before, trainer.best()));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("memory: peak %.0f MB resident; the allocator holds %.0f MB", double(ru.ru_maxrss) / 1024.0,
              double(Storage::system_bytes()) / 1048576.0);
  // a run that ended by step 100 measured nothing: "0 of 0 steps" would say nothing true
  if (steady_steps > 0)
    std::printf("; %lld of %lld training steps after step 100 took no memory from the system (the other %lld: "
                "%.0f KB in all)",
                (long long)(steady_steps - steady_grew), (long long)steady_steps, (long long)steady_grew,
                double(steady_growth) / 1024.0);
  std::printf("\n");
  if (ddp) {
    const auto& st = ddp->stats();
    std::printf("communication: %.1f s in MPI calls (%.1f%% of training), %.1f s of it waiting after backward; "
                "%.2f MB of gradients reduced per step\n",
                st.mpi_seconds, 100 * st.mpi_seconds / std::max(trainer.train_seconds(), 1e-9), st.wait_seconds,
                st.reductions ? double(st.bytes) / double(st.reductions) / 1048576.0 : 0.0);
  }
  std::printf("checkpoint: %s\ncurves: %s\n", trainer.last_saved().c_str(),
              drew ? curves.c_str() : "(not written: see the warning)");
  if (watcher) {
    const int64_t rows = std::min<int64_t>(o.watch_rows, (int64_t)valid_set.size());
    std::printf("%s\n", watcher->finish(cat_str("the first ", rows, " validation pairs"), trainer.train_seconds()).c_str());
  }
  return 0;
}

}  // namespace ember::translate
