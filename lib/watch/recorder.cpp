// A run's watch: measures every so many steps, keeps the log, writes its files and
// figures, and resumes with the run.
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <system_error>

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

namespace {

// Renames a watch file a new watch will replace to path.old (path.old2, ... when taken), so
// that nothing is lost; returns the new name ("" when it could not be renamed).
std::string set_aside(const std::string& path) {
  for (int i = 1; i < 1000; i++) {
    const std::string to = path + ".old" + (i > 1 ? std::to_string(i) : std::string());
    std::error_code ec;
    if (std::filesystem::exists(to, ec)) continue;
    std::filesystem::rename(path, to, ec);
    return ec ? std::string() : to;
  }
  return "";
}

}  // namespace

void Recorder::resume(int64_t step) {
  const std::string path = h5_path();
  if (!std::filesystem::exists(path)) return;
  std::string why;
  try {
    Log old = Log::read_h5(path);
    if (old.same_shape(log_) && old.info == log_.info) {
      old.truncate_after(step);
      log_.snapshots = std::move(old.snapshots);
      return;
    }
    why = path + " watched another model or probe batch";
  } catch (const ember::Error& e) {
    why = cat_str("the old one cannot be read: ", e.what());
  }
  // a regular file is kept under another name; anything else (a FIFO) is left alone, and
  // writing the new watch over it fails with a warning
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  const std::string aside = regular ? set_aside(path) : std::string();
  std::printf("%s: a new watch begins (%s)%s\n", program_.c_str(), why.c_str(),
              !regular       ? ""
              : aside.empty() ? "; the old file could not be renamed and will be replaced"
                              : ("; the old file is now " + aside).c_str());
}

void Recorder::after_step(int64_t step) {
  if (step % every_ != 0) return;
  if (!log_.snapshots.empty() && log_.snapshots.back().step >= step) return;
  const auto start = std::chrono::steady_clock::now();
  Snapshot snap = measure(probe_, step);
  const auto curvature_start = std::chrono::steady_clock::now();
  if (curvature_.every > 0 && step % curvature_.every == 0) {
    // a measurement that fails (products overflowing float32 in a run going unstable) is
    // NaN in the log and a warning, never a reason to stop training
    try {
      measure_curvature(probe_, curvature_, snap, starts_);
    } catch (const ember::Error& e) {
      for (auto& [m, qs] : snap.values)
        for (const char* q : {"curvature_top", "curvature_trace", "curvature_trace_se"})
          std::fill(qs[q].begin(), qs[q].end(), kNaN);
      snap.density = {};
      starts_.clear();
      std::fflush(stdout);
      std::fprintf(stderr, "%s: warning: the curvature of step %lld could not be measured (NaN in the watch): %s\n",
                   program_.c_str(), (long long)step, e.what());
    }
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
