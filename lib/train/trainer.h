// The training loop ember's programs share (translate, tag_dates): steps up to a count
// or until an evaluation reaches its target, a progress line, periodic evaluation and
// checkpoints, a stop on the signals a training::StopSignals is answering (saving first), and
// a stop without saving on a loss that is not finite. The program says what one step, one
// evaluation and one save are:
//
//   training::Trainer t({.program = "tag_dates", .steps = 2000, .eval_every = 100, .target = 0.999});
//   t.step = [&] { ...one optimizer step...; return training::StepResult{.loss = loss}; };
//   t.evaluate = [&] { return accuracy(); };
//   int code = t.run();   // 0 done, 3 a non-finite loss, 128 + a stop signal
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

namespace ember::training {

struct Settings {
  std::string program;       // names the program in messages ("translate train")
  int64_t first_step = 0;    // the step a resumed run starts from
  // A resumed run's progress window as it was saved (window_loss() and window_steps() at the
  // save): the first logged mean after the resume covers the steps before it too, as in a
  // run that was never stopped.
  double window_loss = 0;
  int64_t window_steps = 0;
  int64_t steps = 1;         // the last step
  int64_t log_every = 0;     // a progress line every N steps (every step, rewritten, on a terminal); 0: none
  int64_t eval_every = 0;    // evaluate every N steps and after the last; 0: never
  int64_t save_every = 0;    // save every N steps; 0: only at the end and on a stop
  double target = INFINITY;  // stop once an evaluation reaches this
  bool already_reached = false;  // a resumed run whose last evaluation reached the target
  std::string last_saved;    // the checkpoint a resumed run starts from
  std::string resume_hint;   // said after a stop ("resume with --resume auto")
  std::string nonfinite_hint;  // said after a non-finite loss ("--lr 10 may be too large")
  bool plain = false;  // progress as lines even on a terminal (mpirun gives ranks one, whatever its own output is)
};

struct StepResult {
  double loss = 0;
  int64_t tokens = 0;  // for the progress line's tokens per second (0: not shown)
};

class Trainer {
 public:
  explicit Trainer(Settings settings);

  // One optimizer step (the loop counts steps). Required. A step whose loss is not finite
  // returns it before updating anything: the loop stops there.
  std::function<StepResult()> step;
  // The metric compared with the target, computed and reported by the program. Optional.
  std::function<double()> evaluate;
  // Saves a checkpoint of the state after the current step and returns its path. Optional.
  std::function<std::string(const std::string& why)> save;
  // Extra fields of the progress line, after the loss ("epoch 3  lr 1.2e-03  "). Optional.
  std::function<std::string()> progress_fields;
  // Called with each progress window's mean loss when a line is logged. Optional.
  std::function<void(int64_t step, double mean_loss)> on_log;
  // Given the stop signal this process received (0: none), the one every process of a
  // data-parallel run stops on, so that all stop after the same step. Optional.
  std::function<int(int signal)> agree_on_signal;

  // Runs the loop: 0 when the last step or the target is reached, 3 after a non-finite
  // loss (nothing saved), 128 + the signal after a stop (saved first, when any step ran).
  int run();

  int64_t current_step() const { return step_; }
  // The open progress window: the sum of its steps' losses and their count (what a save
  // keeps for Settings::window_loss and window_steps).
  double window_loss() const { return window_loss_; }
  int64_t window_steps() const { return window_steps_; }
  double train_seconds() const { return train_seconds_; }
  double wall_seconds() const { return wall_seconds_; }
  double best() const { return best_; }
  bool reached() const { return reached_; }
  const std::string& last_saved() const { return last_saved_; }
  bool on_terminal() const { return tty_; }

 private:
  void save_now(const std::string& why);
  Settings s_;
  int64_t step_ = 0, saved_step_ = -1;
  double train_seconds_ = 0, wall_seconds_ = 0, best_ = -INFINITY, window_loss_ = 0;
  int64_t window_steps_ = 0;
  bool reached_ = false, tty_ = false;
  std::string last_saved_;
};

// "1:05" or "1:02:03"; "?" for a time not known yet.
std::string clock_time(double seconds);

}  // namespace ember::training
