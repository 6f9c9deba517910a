// The shared training loop: timing, progress, evaluation, checkpoints and stops.
#include "lib/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "lib/train/stdout_writer.h"
#include "lib/train/training_run.h"

namespace ember::training {

using Clock = std::chrono::steady_clock;
using training::StopSignals;

std::string clock_time(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = long(seconds + 0.5);
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(b, sizeof b, "%ld:%02ld", s / 60, s % 60);
  return b;
}

Trainer::Trainer(Settings settings) : s_(std::move(settings)) {
  step_ = s_.first_step;
  saved_step_ = s_.last_saved.empty() ? -1 : s_.first_step;
  last_saved_ = s_.last_saved;
  reached_ = s_.already_reached;
  tty_ = stdout_is_terminal() && !s_.plain;
}

void Trainer::save_now(const std::string& why) {
  if (!save || saved_step_ == step_) return;
  std::string path;
  try {
    path = save(why);
  } catch (const ember::Error& e) {
    ember::fail(s_.program.c_str(), "cannot save step ", step_, ": ", e.what(), ". The last good checkpoint is ",
                last_saved_.empty() ? std::string("(none yet)") : last_saved_);
  }
  std::printf("%ssaved %s (%s)\n", tty_ ? "\n" : "", path.c_str(), why.c_str());
  last_saved_ = path;
  saved_step_ = step_;
}

int Trainer::run() {
  if (!step) ember::fail("training::Trainer", "no step function");
  const auto start = Clock::now();
  auto window_start = start;
  window_loss_ = s_.window_loss, window_steps_ = s_.window_steps;
  int64_t window_tokens = 0;
  auto finish = [&] { wall_seconds_ = std::chrono::duration<double>(Clock::now() - start).count(); };

  while (step_ < s_.steps && !reached_) {
    int sig = StopSignals::received();
    if (agree_on_signal) sig = agree_on_signal(sig);
    if (sig) {
      finish();
      if (step_ == s_.first_step) {
        std::printf("stopped by %s before the first step; nothing new to save\n", StopSignals::name(sig));
        return StopSignals::exit_code(sig);
      }
      save_now(std::string("stopped by ") + StopSignals::name(sig));
      std::printf("stopped by %s at step %lld%s%s\n", StopSignals::name(sig), (long long)step_,
                  s_.resume_hint.empty() ? "" : "; ", s_.resume_hint.c_str());
      return StopSignals::exit_code(sig);
    }
    const auto t0 = Clock::now();
    const StepResult r = step();
    if (!std::isfinite(r.loss)) {
      finish();
      std::fflush(stdout);
      std::fprintf(stderr, "%s%s: the loss is %s at step %lld; stopping%s.%s%s", tty_ ? "\n" : "",
                   s_.program.c_str(), std::isnan(r.loss) ? "NaN" : "infinite", (long long)step_ + 1,
                   save ? " without saving" : "", s_.nonfinite_hint.empty() ? "" : " ", s_.nonfinite_hint.c_str());
      if (save) std::fprintf(stderr, " The last good checkpoint is %s.", last_saved_.empty() ? "(none yet)" : last_saved_.c_str());
      std::fprintf(stderr, "\n");
      return 3;
    }
    step_++;
    train_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    window_loss_ += r.loss, window_steps_++, window_tokens += r.tokens;

    if (s_.log_every > 0 && (tty_ || step_ % s_.log_every == 0 || step_ == s_.steps)) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double window = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double per_step = elapsed / double(step_ - s_.first_step);
      std::string rate;
      if (window_tokens > 0) {
        char b[48];
        std::snprintf(b, sizeof b, "%.0f tok/s  ", double(window_tokens) / std::max(window, 1e-9));
        rate = b;
      }
      std::printf("%sstep %lld/%lld  loss %.4f  %s%selapsed %s  remaining %s%s", tty_ ? "\r" : "", (long long)step_,
                  (long long)s_.steps, window_loss_ / double(window_steps_),
                  progress_fields ? progress_fields().c_str() : "", rate.c_str(), clock_time(elapsed).c_str(),
                  clock_time(per_step * double(s_.steps - step_)).c_str(), tty_ ? "   " : "\n");
      std::fflush(stdout);
      if (!tty_ || step_ % s_.log_every == 0) {
        if (on_log) on_log(step_, window_loss_ / double(window_steps_));
        window_loss_ = 0, window_steps_ = 0, window_tokens = 0, window_start = Clock::now();
      }
    }
    if (evaluate && s_.eval_every > 0 && (step_ % s_.eval_every == 0 || step_ == s_.steps)) {
      // an evaluation can take as long as many steps: a stop pending now is answered first
      // (agreed among ranks, which all reach this step)
      int pending = StopSignals::received();
      if (agree_on_signal) pending = agree_on_signal(pending);
      if (pending && step_ < s_.steps) continue;  // the loop's top saves this step and stops
      if (pending) break;                          // the last step: saved below
      const double metric = evaluate();
      // a stop that came during the evaluation (it may have cut it short): saved and
      // answered at the loop's top, the evaluation's figure unused
      pending = StopSignals::received();
      if (agree_on_signal) pending = agree_on_signal(pending);
      if (pending && step_ < s_.steps) continue;
      if (pending) break;
      best_ = std::max(best_, metric);
      reached_ = metric >= s_.target;
      window_start = Clock::now();
    }
    if (s_.save_every > 0 && step_ % s_.save_every == 0 && !reached_) save_now("every --save-every steps");
  }
  save_now(reached_ ? "target reached" : "last step");
  finish();
  return 0;
}

}  // namespace ember::training
