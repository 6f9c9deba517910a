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

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual std::string kind() const = 0;
  virtual double lr_at(int64_t step) const = 0;         // step >= 1
  virtual std::map<std::string, double> settings() const = 0;

  // Advances to the next step and sets opt's learning rate for it; returns that rate.
  double step(Optimizer& opt);
  int64_t last_step() const { return last_step_; }  // 0 before the first step
  void set_last_step(int64_t s);

 private:
  int64_t last_step_ = 0;
};

class InverseSqrtSchedule : public Schedule {
 public:
  InverseSqrtSchedule(int64_t d_model, int64_t warmup, double factor = 1.0);
  std::string kind() const override { return "InverseSqrt"; }
  double lr_at(int64_t step) const override;
  std::map<std::string, double> settings() const override;

 private:
  int64_t d_model_, warmup_;
  double factor_;
};

class WarmupCosineSchedule : public Schedule {
 public:
  WarmupCosineSchedule(double peak_lr, int64_t warmup, int64_t total, double min_lr = 0.0);
  std::string kind() const override { return "WarmupCosine"; }
  double lr_at(int64_t step) const override;
  std::map<std::string, double> settings() const override;

 private:
  double peak_, min_;
  int64_t warmup_, total_;
};

class ConstantSchedule : public Schedule {
 public:
  explicit ConstantSchedule(double lr);
  std::string kind() const override { return "Constant"; }
  double lr_at(int64_t) const override { return lr_; }
  std::map<std::string, double> settings() const override { return {{"lr", lr_}}; }

 private:
  double lr_;
};

// Builds a schedule from what settings() and kind() reported (used when loading).
std::unique_ptr<Schedule> make_schedule(const std::string& kind, const std::map<std::string, double>& settings);

}  // namespace ember::optim
