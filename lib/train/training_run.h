// What a training run needs from the operating system to never lose work:
// - RunDirectory: the run's output directory, created, checked writable at the start
//   (not at the first save, hundreds of steps later), and locked for the run's lifetime
//   so that a second run on it refuses, naming the first one's process. It also removes
//   the temporary files that saves killed midway left behind.
// - StopSignals: SIGINT, SIGTERM (what cluster schedulers send), SIGHUP, SIGPIPE (the
//   reader of the output has gone), SIGUSR1 and SIGUSR2 (a scheduler's warning before
//   its time limit, as Slurm's --signal sends) and SIGXCPU (the soft CPU-time limit)
//   only set a flag; the loop checks it between steps,
//   saves and exits with 128 + the signal number. A signal the process was started
//   ignoring (nohup's SIGHUP) stays ignored.
//   SIGXFSZ is ignored meanwhile, so that a write past `ulimit -f` fails with its reason.
#pragma once
#include <string>
#include <vector>

namespace ember::training {

class RunDirectory {
 public:
  // Creates dir (and its parents) when missing, checks that a file can be written in
  // it, takes <dir>/.lock (flock, released on exit and by the kernel when the process
  // dies), then removes stale temporary files. Throws ember::Error naming op, the
  // directory and the reason, or the process id of the run that holds the lock.
  RunDirectory(const std::string& dir, const char* op);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return dir_; }
  // The stale temporary files removed on opening.
  const std::vector<std::string>& removed() const { return removed_; }

 private:
  std::string dir_;
  int lock_fd_ = -1;
  std::vector<std::string> removed_;
};

class StopSignals {
 public:
  StopSignals();   // installs the handlers (SA_RESTART: system calls are not interrupted)
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received since installing, or 0 (0 again once uninstalled). Later ones are counted, not acted on:
  // a second Ctrl-C while the run saves does not cut the save short.
  static int received();
  static const char* name(int signal);  // "SIGTERM"
  static int exit_code(int signal) { return 128 + signal; }
};

}  // namespace ember::training
