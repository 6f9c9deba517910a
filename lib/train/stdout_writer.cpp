// The writer thread behind StdoutWriter.
#include "lib/train/stdout_writer.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "lib/train/training_run.h"

namespace ember::training {

namespace {
std::atomic<int> g_real_stdout{-1};  // while a StdoutWriter holds fd 1
}

struct StdoutWriter::Shared {
  int from = -1;  // the pipe's read end
  int to = -1;    // the real standard output
  std::mutex m;
  std::condition_variable cv;
  bool done = false;  // everything read from the pipe is written (or dropped) and `from` is closed
};

namespace {

// Copies the pipe to the real standard output until the pipe's write end is closed. Once
// a write fails (the reader has gone: EPIPE, and SIGPIPE for StopSignals) the rest is read
// and dropped, so that the program's writes still never wait.
void copy_out(const std::shared_ptr<StdoutWriter::Shared>& s) {
  std::vector<char> buffer(size_t(1) << 16);
  bool broken = false;
  for (;;) {
    const ssize_t n = ::read(s->from, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t at = 0; at < n && !broken;) {
      const ssize_t w = ::write(s->to, buffer.data() + at, size_t(n - at));
      if (w > 0) {
        at += w;
      } else if (w < 0 && errno == EAGAIN) {  // a real standard output someone made non-blocking
        pollfd p{s->to, POLLOUT, 0};
        ::poll(&p, 1, -1);
      } else if (!(w < 0 && errno == EINTR)) {
        broken = true;
      }
    }
  }
  ::close(s->from);
  {
    std::lock_guard<std::mutex> lock(s->m);
    s->done = true;
  }
  s->cv.notify_all();
}

}  // namespace

StdoutWriter::StdoutWriter() {
  std::fflush(stdout);
  const int real = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (real < 0) return;  // no standard output: nothing to protect
  int p[2];
  if (::pipe(p) != 0) {
    ::close(real);
    return;  // standard output stays as it is
  }
  for (int fd : p) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
#ifdef F_SETPIPE_SZ
  ::fcntl(p[1], F_SETPIPE_SZ, 1 << 20);  // or the system's default, 64 KB
#endif
  auto shared = std::make_shared<Shared>();
  shared->from = p[0];
  shared->to = real;
  try {
    std::thread(copy_out, shared).detach();
  } catch (const std::system_error&) {  // no thread to be had: standard output stays as it is
    for (int fd : {p[0], p[1], real}) ::close(fd);
    return;
  }
  ::dup2(p[1], 1);
  ::close(p[1]);
  ::fcntl(1, F_SETFL, ::fcntl(1, F_GETFL) | O_NONBLOCK);
  // a line at a time: a write of at most PIPE_BUF bytes goes in whole or not at all, so
  // what is dropped is whole lines
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  shared_ = shared;
  g_real_stdout = real;
}

StdoutWriter::~StdoutWriter() {
  if (!shared_) return;
  std::fflush(stdout);
  std::clearerr(stdout);  // a line dropped is not the program's failure
  ::dup2(shared_->to, 1);  // closes the pipe's write end: the thread reads to its end
  g_real_stdout = -1;
  std::setvbuf(stdout, nullptr, ::isatty(1) ? _IOLBF : _IOFBF, BUFSIZ);
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> give_up;
  std::unique_lock<std::mutex> lock(shared_->m);
  while (!shared_->done) {
    if (StopSignals::received() && !give_up)
      give_up = Clock::now() + std::chrono::milliseconds(int(kGraceSeconds * 1000));
    if (give_up && Clock::now() >= *give_up) return;  // the thread, still writing, ends with the process
    shared_->cv.wait_for(lock, std::chrono::milliseconds(20));
  }
  ::close(shared_->to);
}

bool stdout_is_terminal() {
  const int real = g_real_stdout;
  return ::isatty(real >= 0 ? real : 1) == 1;
}

}  // namespace ember::training
