// The shared training loop (lib/train): when it evaluates, logs and saves, where it stops
// (the last step, the target, a loss that is not finite, a stop signal) and what it
// returns. The "model" here is a counter; the loop is what is under test.
#include <catch2/catch.hpp>

#include <csignal>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "lib/train/training_run.h"
#include "lib/train/trainer.h"

using ember::training::StepResult;
using ember::training::Trainer;

namespace {

// Records what the loop asked of the program.
struct Program {
  std::vector<int64_t> evaluated, logged, saved;
  std::vector<std::string> reasons;
  int64_t steps_taken = 0;

  void attach(Trainer& t, std::vector<double> losses = {}, std::vector<double> metrics = {}) {
    t.step = [this, losses] {
      const double loss = steps_taken < (int64_t)losses.size() ? losses[(size_t)steps_taken] : 1.0;
      if (std::isfinite(loss)) steps_taken++;
      return StepResult{.loss = loss, .tokens = 10};
    };
    t.evaluate = [this, &t, metrics] {
      evaluated.push_back(t.current_step());
      return evaluated.size() <= metrics.size() ? metrics[evaluated.size() - 1] : 0.0;
    };
    t.on_log = [this](int64_t step, double) { logged.push_back(step); };
    t.save = [this, &t](const std::string& why) {
      saved.push_back(t.current_step());
      reasons.push_back(why);
      return "ckpt-" + std::to_string(t.current_step());
    };
  }
};

}  // namespace

TEST_CASE("the trainer steps, evaluates, logs and saves on its cadence, and saves the last step once") {
  Trainer t({.program = "test", .steps = 11, .log_every = 4, .eval_every = 3, .save_every = 5});
  Program p;
  p.attach(t);
  REQUIRE(t.run() == 0);
  CHECK(p.steps_taken == 11);
  CHECK(t.current_step() == 11);
  CHECK(p.evaluated == std::vector<int64_t>{3, 6, 9, 11});  // and after the last step
  CHECK(p.saved == std::vector<int64_t>{5, 10, 11});
  CHECK(p.reasons.back() == "last step");
  CHECK(t.last_saved() == "ckpt-11");
  if (!t.on_terminal()) CHECK(p.logged == std::vector<int64_t>{4, 8, 11});

  Trainer u({.program = "test", .steps = 10, .save_every = 5});
  Program q;
  q.attach(u);
  REQUIRE(u.run() == 0);
  CHECK(q.saved == std::vector<int64_t>{5, 10});  // step 10 is saved once, not twice
}

TEST_CASE("the trainer stops at the first evaluation that reaches the target and saves there") {
  Trainer t({.program = "test", .steps = 100, .eval_every = 2, .save_every = 4, .target = 0.9});
  Program p;
  p.attach(t, {}, {0.1, 0.5, 0.95, 0.2});
  REQUIRE(t.run() == 0);
  CHECK(t.current_step() == 6);
  CHECK(t.reached());
  CHECK(t.best() == 0.95);
  CHECK(p.saved == std::vector<int64_t>{4, 6});
  CHECK(p.reasons.back() == "target reached");
}

TEST_CASE("a resumed trainer counts from its first step and does not save an unchanged state again") {
  Trainer t({.program = "test", .first_step = 7, .steps = 9, .last_saved = "ckpt-7"});
  Program p;
  p.attach(t);
  REQUIRE(t.run() == 0);
  CHECK(p.steps_taken == 2);
  CHECK(p.saved == std::vector<int64_t>{9});

  Trainer done({.program = "test", .first_step = 9, .steps = 9, .last_saved = "ckpt-9"});
  Program q;
  q.attach(done);
  REQUIRE(done.run() == 0);
  CHECK(q.steps_taken == 0);
  CHECK(q.saved.empty());
  CHECK(done.last_saved() == "ckpt-9");
}

TEST_CASE("a loss that is not finite stops the trainer with 3 and saves nothing") {
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    Trainer t({.program = "test", .steps = 10, .eval_every = 100, .save_every = 2});
    Program p;
    p.attach(t, {1, 1, 1, bad});
    REQUIRE(t.run() == 3);
    CHECK(t.current_step() == 3);
    CHECK(p.saved == std::vector<int64_t>{2});  // the periodic save before it, and nothing after
  }
}

TEST_CASE("a stop signal ends the trainer after the step in flight, saved, with 128 + the signal") {
  ember::training::StopSignals signals;
  Trainer t({.program = "test", .steps = 100, .save_every = 50});
  Program p;
  p.attach(t);
  auto step = t.step;
  t.step = [&] {
    StepResult r = step();
    if (p.steps_taken == 4) std::raise(SIGTERM);
    return r;
  };
  REQUIRE(t.run() == 128 + SIGTERM);
  CHECK(p.steps_taken == 4);
  CHECK(p.saved == std::vector<int64_t>{4});
  CHECK(p.reasons.back() == "stopped by SIGTERM");
}

TEST_CASE("a stop signal pending when an evaluation is due skips the evaluation and saves the step") {
  ember::training::StopSignals signals;
  Trainer t({.program = "test", .steps = 100, .eval_every = 5, .save_every = 5});
  Program p;
  p.attach(t);
  auto step = t.step;
  t.step = [&] {
    StepResult r = step();
    if (p.steps_taken == 10) std::raise(SIGTERM);
    return r;
  };
  REQUIRE(t.run() == 128 + SIGTERM);
  CHECK(p.steps_taken == 10);
  CHECK(p.evaluated == std::vector<int64_t>{5});  // not at step 10
  CHECK(p.saved == std::vector<int64_t>{5, 10});
  CHECK(p.reasons.back() == "stopped by SIGTERM");
}

TEST_CASE("a stop signal that comes during an evaluation is answered after it, the evaluation's figure unused") {
  ember::training::StopSignals signals;
  Trainer t({.program = "test", .steps = 100, .eval_every = 5, .save_every = 50, .target = 0.5});
  Program p;
  p.attach(t);
  t.evaluate = [&] {
    p.evaluated.push_back(t.current_step());
    if (t.current_step() == 10) std::raise(SIGTERM);  // an evaluation cut short reports what it has
    return t.current_step() == 10 ? 1.0 : 0.0;
  };
  REQUIRE(t.run() == 128 + SIGTERM);
  CHECK(p.evaluated == std::vector<int64_t>{5, 10});
  CHECK(p.steps_taken == 10);
  CHECK_FALSE(t.reached());  // the cut evaluation's 1.0 was not taken as reaching the target
  CHECK(p.saved == std::vector<int64_t>{10});
  CHECK(p.reasons.back() == "stopped by SIGTERM");
}

TEST_CASE("a save that fails ends the trainer with an error naming the step and the last good checkpoint") {
  Trainer t({.program = "test", .steps = 10, .save_every = 3});
  Program p;
  p.attach(t);
  t.save = [&](const std::string&) -> std::string {
    if (t.current_step() == 3) return "ckpt-3";
    throw ember::Error("No space left on device");
  };
  try {
    t.run();
    FAIL("no error");
  } catch (const ember::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("test: cannot save step 6") != std::string::npos);
    CHECK(m.find("No space left on device") != std::string::npos);
    CHECK(m.find("ckpt-3") != std::string::npos);
  }
}

TEST_CASE("a trainer without a step function is refused") {
  Trainer t({.program = "test", .steps = 1});
  CHECK_THROWS_AS(t.run(), ember::Error);
}

TEST_CASE("clock_time writes minutes:seconds, hours when there are some, and ? for a time not known") {
  CHECK(ember::training::clock_time(0) == "0:00");
  CHECK(ember::training::clock_time(65.4) == "1:05");
  CHECK(ember::training::clock_time(3723) == "1:02:03");
  CHECK(ember::training::clock_time(NAN) == "?");
  CHECK(ember::training::clock_time(-1) == "?");
  CHECK(ember::training::clock_time(INFINITY) == "?");
}
