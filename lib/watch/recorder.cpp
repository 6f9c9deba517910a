// A run's watch: measures every so many steps, keeps the log, writes its files and
// figures, and resumes with the run.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "lib/watch/detail.h"
#include "lib/watch/watch.h"

namespace ember::watch {

// ------------------------------------------------------------------ a run's watch

Recorder::Recorder(Probe probe, std::string dir, int64_t every, std::string program,
                   std::map<std::string, std::string> info, CurvatureOptions curvature)
    : probe_(std::move(probe)), dir_(std::move(dir)), program_(std::move(program)), every_(every),
      curvature_(curvature) {
  if (every_ < 1) fail("watch::Recorder", "expected a positive interval, got ", every_);
  if (curvature_.every < 0 || (curvature_.every > 0 && curvature_.every % every_ != 0))
    fail("watch::Recorder", "expected a curvature interval that is a multiple of the watch's (", every_,
         ") or 0, got ", curvature_.every);
  for (const Site& s : probe_.sites) check_module_name(s.module, "watch::Recorder", "the probe ");
  log_ = Log::for_sites(probe_.sites);
  log_.info = std::move(info);
}

void Recorder::resume(int64_t step) {
  const std::string path = h5_path();
  if (!std::filesystem::exists(path)) return;
  try {
    Log old = Log::read_h5(path);
    if (!old.same_shape(log_) || old.info != log_.info) {
      std::printf("%s: %s watched another model or probe batch: a new watch begins\n", program_.c_str(), path.c_str());
      return;
    }
    old.truncate_after(step);
    log_.snapshots = std::move(old.snapshots);
  } catch (const ember::Error& e) {
    std::printf("%s: a new watch begins, the old one cannot be read: %s\n", program_.c_str(), e.what());
  }
}

void Recorder::after_step(int64_t step) {
  if (step % every_ != 0) return;
  if (!log_.snapshots.empty() && log_.snapshots.back().step >= step) return;
  const auto start = std::chrono::steady_clock::now();
  Snapshot snap = measure(probe_, step);
  const auto curvature_start = std::chrono::steady_clock::now();
  if (curvature_.every > 0 && step % curvature_.every == 0) {
    measure_curvature(probe_, curvature_, snap, starts_);
    curvature_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - curvature_start).count();
  }
  log_.add(std::move(snap));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  probes_++;
}

bool Recorder::write(bool figures) {
  const auto start = std::chrono::steady_clock::now();
  // each file on its own: one that cannot be written does not keep the others from being
  bool all = true;
  auto attempt = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const ember::Error& e) {
      if (!warned_) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: warning: training goes on without some of the watch's files: %s\n",
                     program_.c_str(), e.what());
      }
      warned_ = true;
      all = false;
    }
  };
  attempt([&] { log_.write_h5(h5_path()); });
  attempt([&] { log_.write_csv(dir_ + "/watch.csv"); });
  if (figures) attempt([&] { log_.draw(dir_); });
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return all;
}

std::string Recorder::finish(const std::string& probe, double training_seconds) {
  const bool wrote = write();
  char b[256];
  char curvature[96] = "";
  if (curvature_.every > 0)
    std::snprintf(curvature, sizeof curvature, ", curvature every %lld steps %.1f s of it", (long long)curvature_.every,
                  curvature_seconds_);
  std::snprintf(b, sizeof b, "watch: %lld measurements of %s, %.1f s with the files (%.1f%% of training%s); ",
                (long long)probes_, probe.c_str(), seconds_, 100 * seconds_ / std::max(training_seconds, 1e-9),
                curvature);
  return b + (wrote ? cat_str(h5_path(), ", watch.csv and watch_*.png in ", dir_)
                    : std::string("(some files not written: see the warning)"));
}

}  // namespace ember::watch
