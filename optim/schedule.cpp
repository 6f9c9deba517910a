// Learning-rate schedules (formulas in schedule.h).
#include "optim/schedule.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "core/error.h"

namespace ember::optim {

double Schedule::step(Optimizer& opt) {
  if (last_step_ == std::numeric_limits<int64_t>::max())
    fail("Schedule::step", "the step counter is at its largest value, ", last_step_);
  double lr = lr_at(last_step_ + 1);
  opt.set_lr(lr);
  last_step_ += 1;
  return lr;
}

void Schedule::set_last_step(int64_t s) {
  if (s < 0) fail("Schedule::set_last_step", "the step must not be negative, got ", s);
  last_step_ = s;
}

namespace {

void check_step(const char* op, int64_t step) {
  if (step < 1) fail(op, "steps count from 1, got ", step);
}

}  // namespace

InverseSqrtSchedule::InverseSqrtSchedule(int64_t d_model, int64_t warmup, double factor)
    : d_model_(d_model), warmup_(warmup), factor_(factor) {
  const char* op = "InverseSqrtSchedule";
  if (d_model < 1) fail(op, "d_model must be at least 1, got ", d_model);
  if (warmup < 1) fail(op, "warmup must be at least 1 step, got ", warmup);
  if (!(factor > 0) || !std::isfinite(factor)) fail(op, "factor must be positive and finite, got ", factor);
}

double InverseSqrtSchedule::lr_at(int64_t step) const {
  check_step("InverseSqrtSchedule::lr_at", step);
  double s = (double)step;
  return factor_ * std::pow((double)d_model_, -0.5) * std::min(std::pow(s, -0.5), s * std::pow((double)warmup_, -1.5));
}

std::map<std::string, double> InverseSqrtSchedule::settings() const {
  return {{"d_model", (double)d_model_}, {"warmup", (double)warmup_}, {"factor", factor_}};
}

WarmupCosineSchedule::WarmupCosineSchedule(double peak_lr, int64_t warmup, int64_t total, double min_lr)
    : peak_(peak_lr), min_(min_lr), warmup_(warmup), total_(total) {
  const char* op = "WarmupCosineSchedule";
  if (!(peak_lr >= 0) || !std::isfinite(peak_lr)) fail(op, "peak_lr must be non-negative and finite, got ", peak_lr);
  if (!(min_lr >= 0) || min_lr > peak_lr) fail(op, "min_lr must be in [0, peak_lr = ", peak_lr, "], got ", min_lr);
  if (warmup < 0) fail(op, "warmup must not be negative, got ", warmup);
  if (total <= warmup) fail(op, "total (", total, ") must be larger than warmup (", warmup, ")");
}

double WarmupCosineSchedule::lr_at(int64_t step) const {
  check_step("WarmupCosineSchedule::lr_at", step);
  if (step <= warmup_) return peak_ * (double)step / (double)warmup_;
  if (step >= total_) return min_;
  double t = double(step - warmup_) / double(total_ - warmup_);
  return min_ + (peak_ - min_) * 0.5 * (1 + std::cos(std::numbers::pi * t));
}

std::map<std::string, double> WarmupCosineSchedule::settings() const {
  return {{"peak_lr", peak_}, {"warmup", (double)warmup_}, {"total", (double)total_}, {"min_lr", min_}};
}

ConstantSchedule::ConstantSchedule(double lr) : lr_(lr) {
  if (!(lr >= 0) || !std::isfinite(lr)) fail("ConstantSchedule", "lr must be non-negative and finite, got ", lr);
}

std::unique_ptr<Schedule> make_schedule(const std::string& kind, const std::map<std::string, double>& s) {
  const char* op = "make_schedule";
  auto need = [&](std::initializer_list<const char*> keys) {
    std::map<std::string, double> expected;
    for (auto k : keys) {
      auto it = s.find(k);
      if (it == s.end()) fail(op, kind, " needs the setting '", k, "'");
      expected[k] = it->second;
    }
    for (auto& [k, v] : s)
      if (!expected.count(k)) fail(op, kind, " has no setting '", k, "'");
  };
  auto integer = [&](const char* k) {
    double v = s.at(k);
    if (v != std::floor(v) || std::fabs(v) > 9e15) fail(op, kind, " setting '", k, "' must be an integer, got ", v);
    return (int64_t)v;
  };
  if (kind == "InverseSqrt") {
    need({"d_model", "warmup", "factor"});
    return std::make_unique<InverseSqrtSchedule>(integer("d_model"), integer("warmup"), s.at("factor"));
  }
  if (kind == "WarmupCosine") {
    need({"peak_lr", "warmup", "total", "min_lr"});
    return std::make_unique<WarmupCosineSchedule>(s.at("peak_lr"), integer("warmup"), integer("total"), s.at("min_lr"));
  }
  if (kind == "Constant") {
    need({"lr"});
    return std::make_unique<ConstantSchedule>(s.at("lr"));
  }
  fail(op, "unknown schedule kind '", kind, "' (expected InverseSqrt, WarmupCosine or Constant)");
}

}  // namespace ember::optim
