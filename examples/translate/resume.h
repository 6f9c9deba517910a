// What a run that continues from a checkpoint may and may not change: the checkpoint
// to resume (the newest intact one of --out), the options that must agree with the
// checkpoint's configuration and schedule, where its saves may go, and a new or a
// resumed run's learning-rate schedule. Errors name the checkpoint and the options.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "dist/dist.h"
#include "examples/translate/options.h"
#include "io/checkpoint.h"
#include "lib/text/text.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace ember::translate {

// The newest checkpoint of the directory that reads back whole, and what it holds; damaged
// ones (io::CheckpointDamaged) are named, moved aside and skipped. One that is refused
// otherwise (another schema version, an edited key, a file that cannot be opened) stops the
// run with the reason, left where it is.
std::optional<std::pair<std::string, io::Checkpoint>> newest_intact(const io::CheckpointManager& ckpts,
                                                                    const std::string& out);

// The checkpoint's dropout stream: /rng/dropout, or /rng/default in checkpoints written
// when dropout drew from the default generator. Its seed is the run's --seed.
std::string dropout_stream(const io::Checkpoint& c);

// A new run's schedule options: consistent, and none that its schedule would ignore.
void check_new_schedule(const TrainOptions& o);

// A new run's schedule: linear warmup to --lr, then 1/sqrt(step) or a half cosine.
std::unique_ptr<optim::Schedule> new_schedule(const TrainOptions& o, int64_t d_model);

// A resumed run's schedule: the checkpoint's, which must be one that train writes.
std::unique_ptr<optim::Schedule> resumed_schedule(const io::Checkpoint& c, const nn::TransformerConfig& cfg,
                                                  const std::string& path);

// The optimizer train uses: Adam with betas (0.9, 0.98), eps 1e-9, no weight decay, at
// the rate lr (which the schedule sets before every step).
optim::AdamOptions adam_options(double lr);

// After a checkpoint is loaded into the optimizer: its hyper-parameters must be the ones
// train writes (adam_options at the schedule's rate of the checkpoint's step), not an
// edited rate or moment decay the run would silently go on with. Names the key.
void check_resumed_optimizer(const optim::Optimizer& opt, const optim::Schedule& sched, int64_t step,
                             const std::string& path);

// On resume the checkpoint decides the model and the schedule. Says, for each option given,
// whether it applies; refuses those that would change what the checkpoint fixed.
void check_resume_options(const TrainOptions& o, const io::Checkpoint& c, const nn::TransformerConfig& cfg,
                          const std::string& path);

// Checkpoints of another history in --out would be rotated in among this run's: the
// resumed checkpoint must be --out's own newest, or --out must hold none. A checkpoint
// whose name gives another step than the one it holds (a copy, a rename) is refused.
void check_resume_place(const io::CheckpointManager& ckpts, const std::string& out, const std::string& resume,
                        int64_t step);

// What a resumed process starts from, in the parts dist::check_same_on_all_ranks names:
// two checkpoints of one step (ckpt-00000020.h5 of two runs) pass the check of options,
// data and step, and differ here.
std::vector<dist::Part> resumed_state(const optim::NamedParams& params, const optim::Optimizer& opt,
                                      const optim::Schedule& sched, const io::Progress& progress,
                                      const std::vector<int64_t>& order, const Generator& data_gen,
                                      const Generator& dropout_gen, const text::CharVocab& src_vocab,
                                      const text::CharVocab& tgt_vocab);

}  // namespace ember::translate
