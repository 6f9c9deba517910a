// Learning-rate schedules. A schedule is a pure function of the step number (1-based:
// the step about to be taken) plus a counter; step(opt) advances the counter and sets
// the optimizer's learning rate, so a schedule composes with any optimizer. Its state
// (the counter) and its settings go into checkpoints.
//
//   InverseSqrt    lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
//                  ("Attention Is All You Need", section 5.3)
//   WarmupCosine   lr = peak * step/warmup                         for step <= warmup
//                  lr = min + (peak-min) * (1 + cos(pi * t)) / 2    t = (step-warmup)/(total-warmup)
//                  lr = min                                         after total
//   Constant       lr = value
#pragma once
#include <map>
#include <memory>
#include <string>

#include "optim/optimizer.h"

namespace ember::optim {

// The base of the schedules. Unlike torch.optim.lr_scheduler, a schedule is not bound to
// an optimizer, and is stepped before the optimizer's step (the rate it sets is the one
// that step uses), not after.
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual std::string kind() const = 0;  // "InverseSqrt", "WarmupCosine" or "Constant"
  // The learning rate of a step (1-based); Error when step < 1.
  virtual double lr_at(int64_t step) const = 0;
  // The constructor's arguments by name, for make_schedule.
  virtual std::map<std::string, double> settings() const = 0;

  // Advances to the next step and sets opt's learning rate for it; returns that rate.
  // Error when the counter is at INT64_MAX.
  double step(Optimizer& opt);
  int64_t last_step() const { return last_step_; }  // 0 before the first step
  // Sets the counter, as when resuming (the next step() uses s + 1); Error when s < 0.
  void set_last_step(int64_t s);

 private:
  int64_t last_step_ = 0;
};

// Linear warm-up, then decay with the inverse square root of the step (formula in schedule.h).
class InverseSqrtSchedule : public Schedule {
 public:
  // Error unless d_model >= 1, warmup >= 1 and factor is positive and finite.
  InverseSqrtSchedule(int64_t d_model, int64_t warmup, double factor = 1.0);
  std::string kind() const override { return "InverseSqrt"; }  // "InverseSqrt"
  double lr_at(int64_t step) const override;  // see Schedule::lr_at
  std::map<std::string, double> settings() const override;  // d_model, warmup, factor

 private:
  int64_t d_model_, warmup_;
  double factor_;
};

// Linear warm-up to peak_lr, then cosine decay to min_lr at step total (formula in schedule.h).
class WarmupCosineSchedule : public Schedule {
 public:
  // Error unless peak_lr is non-negative and finite, 0 <= min_lr <= peak_lr,
  // warmup >= 0 and total > warmup.
  WarmupCosineSchedule(double peak_lr, int64_t warmup, int64_t total, double min_lr = 0.0);
  std::string kind() const override { return "WarmupCosine"; }  // "WarmupCosine"
  double lr_at(int64_t step) const override;  // see Schedule::lr_at
  std::map<std::string, double> settings() const override;  // peak_lr, warmup, total, min_lr

 private:
  double peak_, min_;
  int64_t warmup_, total_;
};

// The same learning rate at every step.
class ConstantSchedule : public Schedule {
 public:
  explicit ConstantSchedule(double lr);  // Error unless lr is non-negative and finite
  std::string kind() const override { return "Constant"; }  // "Constant"
  double lr_at(int64_t) const override { return lr_; }  // lr, for any step (not checked)
  std::map<std::string, double> settings() const override { return {{"lr", lr_}}; }  // lr

 private:
  double lr_;
};

// Builds a schedule from what settings() and kind() reported (used when loading). Error on
// an unknown kind, a missing or extra setting, a non-integer count, or settings the
// schedule's constructor refuses.
std::unique_ptr<Schedule> make_schedule(const std::string& kind, const std::map<std::string, double>& settings);

}  // namespace ember::optim
