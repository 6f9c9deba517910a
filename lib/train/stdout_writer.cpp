// The writer threads behind StdoutWriter: one for standard output, one for standard error.
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
  int to = -1;    // the real standard output or error
  int fd = -1;    // 1 or 2, which the pipe's write end stands in for
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

// Points fd (1 or 2) at the non-blocking write end of a pipe that a thread empties into
// what fd was; nothing when fd is closed or no pipe or thread can be had.
std::shared_ptr<StdoutWriter::Shared> divert(int fd, std::FILE* stream) {
  std::fflush(stream);
  const int real = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (real < 0) return nullptr;  // no such stream: nothing to protect
  int p[2];
  if (::pipe(p) != 0) {
    ::close(real);
    return nullptr;  // the stream stays as it is
  }
  for (int end : p) ::fcntl(end, F_SETFD, FD_CLOEXEC);
#ifdef F_SETPIPE_SZ
  ::fcntl(p[1], F_SETPIPE_SZ, 1 << 20);  // or the system's default, 64 KB
#endif
  auto shared = std::make_shared<StdoutWriter::Shared>();
  shared->from = p[0];
  shared->to = real;
  shared->fd = fd;
  try {
    std::thread(copy_out, shared).detach();
  } catch (const std::system_error&) {  // no thread to be had: the stream stays as it is
    for (int end : {p[0], p[1], real}) ::close(end);
    return nullptr;
  }
  ::dup2(p[1], fd);
  ::close(p[1]);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return shared;
}

// Points the stream's fd at the real stream again, which closes the pipe's write end: the
// thread reads to its end.
void release(const StdoutWriter::Shared& shared, std::FILE* stream) {
  std::fflush(stream);
  std::clearerr(stream);  // a line dropped is not the program's failure
  ::dup2(shared.to, shared.fd);
}

// Waits until each thread has written what is pending: however long that takes, unless a
// stop signal is received, which leaves them kGraceSeconds in all; what is still pending
// then is dropped (the threads, still writing, end with the process).
void wait_written(const std::vector<std::shared_ptr<StdoutWriter::Shared>>& streams) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> give_up;
  for (const auto& shared : streams) {
    std::unique_lock<std::mutex> lock(shared->m);
    while (!shared->done) {
      if (StopSignals::received() && !give_up)
        give_up = Clock::now() + std::chrono::milliseconds(int(StdoutWriter::kGraceSeconds * 1000));
      if (give_up && Clock::now() >= *give_up) return;
      shared->cv.wait_for(lock, std::chrono::milliseconds(20));
    }
    ::close(shared->to);
  }
}

}  // namespace

StdoutWriter::StdoutWriter() {
  shared_ = divert(1, stdout);
  // a line at a time: a write of at most PIPE_BUF bytes goes in whole or not at all, so
  // what is dropped is whole lines (standard error is unbuffered: a message is one write)
  if (shared_) {
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    g_real_stdout = shared_->to;
  }
  error_ = divert(2, stderr);
}

StdoutWriter::~StdoutWriter() {
  std::vector<std::shared_ptr<Shared>> pending;
  if (shared_) {
    release(*shared_, stdout);
    g_real_stdout = -1;
    std::setvbuf(stdout, nullptr, ::isatty(1) ? _IOLBF : _IOFBF, BUFSIZ);
    pending.push_back(shared_);
  }
  if (error_) {
    release(*error_, stderr);
    pending.push_back(error_);
  }
  wait_written(pending);
}

bool stdout_is_terminal() {
  const int real = g_real_stdout;
  return ::isatty(real >= 0 ? real : 1) == 1;
}

}  // namespace ember::training
