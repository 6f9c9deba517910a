// translate: a character-level encoder-decoder Transformer that learns to turn dates
// written by people ("sunday, november 22, 2026", "22/11/2026", ...) into ISO dates.
//
//   translate train     [options]                        train (or --resume) on data/dates
//   mpirun -np N translate train [options]               the same, data-parallel over N processes
//   translate eval      --checkpoint C --data FILE       exact-match and per-character accuracy
//   translate decode    --checkpoint C [TEXT ...]        one translation a line (stdin without TEXT)
//   translate attention --checkpoint C --out DIR TEXT    PNG heatmaps of the attention weights
//   translate watch     --checkpoint C                   per head: softmax saturation, gradients
//
// train --watch measures every attention head on a fixed probe batch every --watch-every
// steps (see lib/watch/watch.h) and writes watch.h5, watch.csv and figures into --out.
//
// `translate --help` and `translate COMMAND --help` list every option.
//
// This file reads the command line and runs the command it names; the commands are in
// train.cpp (train) and inspect.cpp (eval, decode, attention, watch).
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/dist.h"
#include "examples/translate/options.h"
#include "lib/seq2seq/model_options.h"
#include "lib/watch/watch.h"

namespace ember::translate {

namespace {

using cli::UsageError;

void add_train_options(CLI::App* app, TrainOptions& o) {
  using namespace cli;
  auto& g = o.given;
  g["--train"] = cli::text(*app, "--train", o.train, "training pairs, source<TAB>target a line");
  g["--valid"] = cli::text(*app, "--valid", o.valid, "validation pairs");
  g["--out"] = cli::text(*app, "--out", o.out, "directory for checkpoints, curves.png and the lock");
  g["--resume"] = cli::text(*app, "--resume", o.resume, "continue from checkpoint C, or 'auto': the newest intact one in --out");
  g["--steps"] = integer(*app, "--steps", o.steps, 1, kMaxSteps, "at most this many optimizer steps");
  g["--target-acc"] = real(*app, "--target-acc", o.target_acc, 0, 2, "stop once validation exact match reaches this (2: never)");
  g["--batch"] = integer(*app, "--batch", o.batch, 1, kMaxSize, "pairs per batch");
  for (const seq2seq::ModelField& f : seq2seq::model_fields()) {  // the model's shape
    if (!f.flag) continue;
    if (f.kind == seq2seq::FieldKind::Boolean) {
      g[f.flag] = app->add_flag(f.flag, f.boolean(o.model), f.help);
      continue;
    }
    g[f.flag] = f.kind == seq2seq::FieldKind::Integer
                    ? integer(*app, f.flag, f.integer(o.model), int64_t(f.lo), int64_t(f.hi), f.help)
                    : real(*app, f.flag, f.real(o.model), f.lo, f.hi, f.help);
  }
  g["--lr"] = positive_real(*app, "--lr", o.lr, 1e300, "Adam's peak learning rate, reached after --warmup steps");
  g["--warmup"] = integer(*app, "--warmup", o.warmup, 1, kMaxSteps, "warmup steps");
  g["--schedule"] = app->add_option_function<std::string>(
                          "--schedule",
                          [&o](const std::string& v) {
                            if (v != "inverse-sqrt" && v != "cosine")
                              throw UsageError{"--schedule must be inverse-sqrt or cosine, got '" + v + "'"};
                            o.schedule = v;
                          },
                          "after the warmup the learning rate decays as 1/sqrt(step) (inverse-sqrt), or along a "
                          "half cosine to --min-lr at step --decay-steps and stays there (cosine)")
                        ->type_name("inverse-sqrt|cosine")
                        ->default_str(o.schedule);
  g["--decay-steps"] = integer(*app, "--decay-steps", o.decay_steps, 2, kMaxSteps,
                               "with --schedule cosine: the step at which the rate reaches --min-lr");
  g["--min-lr"] = real(*app, "--min-lr", o.min_lr, 0, 1e300, "with --schedule cosine: the final rate")
                      ->default_str("--lr / 20");
  g["--clip"] = real(*app, "--clip", o.clip, 0, 1e12, "clip the gradient norm to this (0: no clipping)");
  g["--z-loss"] = real(*app, "--z-loss", o.z_loss, 0, 1e6,
                       "add this times the mean over predicted positions of log(Z)^2 (Z the softmax's normaliser "
                       "of the output logits) to the training objective; the reported loss stays the cross-entropy "
                       "(0: none)");
  g["--precision"] = choice(*app, "--precision", o.precision, {"fp32", "bf16"},
                            "bf16: matrix products (Linear, attention), forward and backward, take bfloat16 inputs "
                            "and sum in float32, on processors with AVX512_BF16 (elsewhere they stay float32, said "
                            "once); the parameters, the optimizer and every other op stay float32. On --resume: the "
                            "checkpoint's unless given");
  g["--eval-every"] = integer(*app, "--eval-every", o.eval_every, 1, kMaxSteps, "validation exact match every N steps");
  g["--save-every"] = integer(*app, "--save-every", o.save_every, 1, kMaxSteps,
                              "checkpoint every N steps (also at the end and on a stop signal: INT, TERM, HUP, USR1, USR2, XCPU)");
  g["--keep"] = integer(*app, "--keep", o.keep, 1, 1000000, "keep the newest N checkpoints");
  g["--log-every"] = integer(*app, "--log-every", o.log_every, 1, kMaxSteps,
                             "a progress line every N steps when not on a terminal");
  g["--seed"] = integer(*app, "--seed", o.seed, 0, int64_t(1) << 53, "initialisation, dropout and data order");
  g["--threads"] = integer(*app, "--threads", o.threads, 1, cli::kMaxThreads, "threads (per process under mpirun)")
                     ->default_str("OMP_NUM_THREADS, else every core (under mpirun: shared among the processes)");
  g["--watch"] = app->add_flag("--watch", o.watch,
                               "measure every attention head (softmax saturation, the gradient through it) on a "
                               "probe batch of the validation pairs; writes watch.h5, watch.csv and figures into --out");
  g["--watch-every"] = integer(*app, "--watch-every", o.watch_every, 1, kMaxSteps, "with --watch: measure every N steps");
  g["--watch-rows"] = integer(*app, "--watch-rows", o.watch_rows, 1, watch::kMaxProbeRows,
                              "with --watch: the probe batch, the first N validation pairs (at most 1024)");
  // given alone, every kDefaultCurvatureEvery steps (CLI11 takes the default string as its value)
  g["--watch-curvature"] =
      integer(*app, "--watch-curvature", o.watch_curvature, 0, kMaxSteps,
              "with --watch: every N steps (a multiple of --watch-every; not given: never; alone: 500) also the curvature of the loss on "
              "the probe's first 16 pairs: per head the largest eigenvalue and the trace of its block of the Hessian, "
              "and the model's spectral density (a measurement costs about 45 training steps: every 500, 9%)")
          ->expected(0, 1)
          ->default_str(std::to_string(kDefaultCurvatureEvery));
  g["--check-every"] = integer(*app, "--check-every", o.check_every, 0, kMaxSteps,
                               "under mpirun: every N steps, check that all processes hold bitwise the same "
                               "parameters (0: never)");
}

}  // namespace

bool given(const TrainOptions& o, const std::string& flag) { return o.given.at(flag)->count() > 0; }

}  // namespace ember::translate

using namespace ember;
using namespace ember::translate;
using cli::UsageError;

int main(int argc, char** argv) {
  // Under mpirun every process runs this program as one rank of the job. A rank that fails
  // ends the whole job (no other rank is left waiting for it in a collective); one that
  // returns - done, a stop signal, a loss that is not finite: the same on every rank -
  // leaves MPI in order.
  const bool ranks = dist::launched_by_mpirun();
  if (ranks) dist::init(&argc, &argv);
  bool failed = false;
  const int code = cli::run("translate", [&] {
    CLI::App app{"A character-level encoder-decoder Transformer that turns dates as people write them into ISO dates.",
                 "translate"};
    app.require_subcommand(1);
    app.fallthrough(false);

    TrainOptions train_options;
    CLI::App* train_cmd = app.add_subcommand("train", "train a model on pair files (or continue one with --resume)");
    add_train_options(train_cmd, train_options);

    EvalOptions eval_options;
    CLI::App* eval_cmd = app.add_subcommand("eval", "exact-match and per-character accuracy of a checkpoint on a pair file");
    cli::text(*eval_cmd, "--checkpoint", eval_options.checkpoint, "the checkpoint")->required();
    cli::text(*eval_cmd, "--data", eval_options.data, "pairs, source<TAB>target a line")->required();
    cli::integer(*eval_cmd, "--show", eval_options.show, 0, cli::kMaxCount, "show this many mistakes");

    DecodeOptions decode_options;
    CLI::App* decode_cmd = app.add_subcommand("decode", "translate each TEXT (without TEXT: each line of stdin), one line each");
    cli::text(*decode_cmd, "--checkpoint", decode_options.checkpoint, "the checkpoint")->required();
    decode_cmd->add_option("TEXT", decode_options.texts, "dates to translate");

    AttentionOptions attention_options;
    CLI::App* attention_cmd = app.add_subcommand(
        "attention", "draw each decoder layer's cross-attention and each encoder layer's self-attention for one TEXT");
    cli::text(*attention_cmd, "--checkpoint", attention_options.checkpoint, "the checkpoint")->required();
    cli::text(*attention_cmd, "--out", attention_options.out, "directory for the pictures")->required();
    cli::integer(*attention_cmd, "--pad", attention_options.pad, 0, seq2seq::kMaxLength,
                 "masked pad positions after the source, to show they get no weight");
    attention_cmd->add_option("TEXT", attention_options.text, "the date to translate")->required();

    WatchOptions watch_options;
    CLI::App* watch_cmd = app.add_subcommand(
        "watch", "per attention head of a checkpoint: how peaked its softmax is and how much gradient passes through it");
    cli::text(*watch_cmd, "--checkpoint", watch_options.checkpoint, "the checkpoint")->required();
    cli::text(*watch_cmd, "--data", watch_options.data, "pairs, source<TAB>target a line: the probe batch is the first --rows");
    cli::integer(*watch_cmd, "--rows", watch_options.rows, 1, 100000, "pairs in the probe batch");

    // `translate help` as `translate --help`
    std::vector<char*> args(argv, argv + argc);
    static char help[] = "--help";
    if (argc == 2 && std::string(argv[1]) == "help") args[1] = help;
    cli::parse(app, (int)args.size(), args.data());

    // errors name the command ("translate eval: ...") unless they already do, and the
    // rank in a job of several
    auto as = [&](const std::string& command, const std::function<int()>& run) {
      const std::string who = "translate " + command;
      const std::string rank = dist::world_size() > 1 ? cat_str(" (rank ", dist::rank(), " of ", dist::world_size(), ")") : "";
      auto named = [&](const std::string& what) {
        if (what.rfind(who, 0) == 0) return who + rank + what.substr(who.size());
        return who + rank + ": " + what;
      };
      try {
        return run();
      } catch (const OutOfMemory& e) {
        failed = true;
        throw OutOfMemory(named(e.what()));
      } catch (const Error& e) {
        failed = true;
        throw Error(named(e.what()));
      } catch (const UsageError& e) {
        failed = true;
        throw UsageError{rank.empty() ? e.message : cat_str("rank ", dist::rank(), ": ", e.message), e.command};
      } catch (...) {
        failed = true;
        throw;
      }
    };
    if (train_cmd->parsed()) return as("train", [&] { return train(train_options); });
    if (dist::rank() != 0) return 0;  // under mpirun, the other commands are rank 0's alone
    if (eval_cmd->parsed()) return as("eval", [&] { return eval(eval_options); });
    if (decode_cmd->parsed()) return as("decode", [&] { return decode(decode_options); });
    if (watch_cmd->parsed()) return as("watch", [&] { return watch_checkpoint(watch_options); });
    return as("attention", [&] { return attention(attention_options); });
  });
  if (ranks) {
    if (failed) dist::abort_job(code);
    dist::finalize();
  }
  return code;
}
