// Standard output that never holds up a training run. A reader that stops reading - a
// pipe nobody empties, the terminal mpirun gives a rank and stops reading once it shuts
// the job down, Ctrl-S - blocks a write to standard output, and with it the step, the
// save and the stop that should follow a signal. While a StdoutWriter lives, fd 1 is the
// non-blocking end of a pipe that a thread of its own empties into the real standard
// output: the program's writes never wait, and what does not fit in the pipe meanwhile
// (1 MB, or the system's 64 KB) is dropped, a whole line at a time. Standard error (fd 2)
// goes the same way, through a pipe and a thread of its own: a warning printed while
// nobody reads it cannot hold a run up either.
//
//   training::StopSignals signals;
//   training::StdoutWriter output;  // after the signals: its end gives up on a stopped run's reader
#pragma once
#include <memory>

namespace ember::training {

class StdoutWriter {
 public:
  // Flushes stdout and makes it line-buffered, then points fd 1 at the pipe, and fd 2 at
  // another. A stream stays as it is when it is closed or no pipe can be made.
  StdoutWriter();
  // Points fd 1 and 2 at the real streams again once the threads have written what is
  // pending: however long that takes, unless a stop signal is received (StopSignals),
  // which leaves it kGraceSeconds; what is still pending then is dropped.
  ~StdoutWriter();
  StdoutWriter(const StdoutWriter&) = delete;
  StdoutWriter& operator=(const StdoutWriter&) = delete;

  static constexpr double kGraceSeconds = 1.0;
  struct Shared;  // the thread's and the object's (the thread may outlive the object)

 private:
  std::shared_ptr<Shared> shared_;  // standard output
  std::shared_ptr<Shared> error_;   // standard error
};

// Whether standard output is a terminal: the real one while a StdoutWriter holds fd 1.
bool stdout_is_terminal();

}  // namespace ember::training
