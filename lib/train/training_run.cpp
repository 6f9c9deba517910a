// The run directory's lock and checks, and the stop-signal flag.
#include "lib/train/training_run.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::training {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::string& dir, const char* op) : dir_(dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) fail(op, "'", dir, "' exists and is not a directory");
  fs::create_directories(dir, ec);
  if (ec) fail(op, "cannot create the directory '", dir, "': ", ec.message());

  // Writable now, with room for a little: better to learn it before training than at the
  // first save.
  // named as replace_file names its temporary files, so that a kill here leaves nothing
  // the next run would not remove
  const std::string probe = (fs::path(dir) / cat_str(".write-test.tmp-", ::getpid(), "-0")).string();
  const std::string bytes(4096, '\0');
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(op, "cannot write in '", dir, "': ", std::strerror(errno));
  const bool wrote = ::write(fd, bytes.data(), bytes.size()) == (ssize_t)bytes.size();
  const int err = errno;
  ::close(fd);
  if (!wrote) {
    ::unlink(probe.c_str());
    fail(op, "cannot write in '", dir, "': ", std::strerror(err));
  }
  ::unlink(probe.c_str());

  const std::string lock = (fs::path(dir) / ".lock").string();
  // never through a link: the lock is truncated and written, and so would be its target
  lock_fd_ = io::open_regular_file(lock, O_RDWR | O_CREAT | O_NOFOLLOW, op);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {0};
    ssize_t n = ::pread(lock_fd_, pid, sizeof pid - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err != EWOULDBLOCK) fail(op, "cannot lock '", lock, "': ", std::strerror(err));
    std::string holder = n > 0 ? std::string(pid, (size_t)n) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    fail(op, "'", dir, "' is in use by another run (process ", holder.empty() ? "unknown" : holder,
         ", which holds ", lock, "); wait for it to finish, or choose another output directory");
  }
  const std::string me = cat_str(::getpid(), "\n");
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) != (ssize_t)me.size()) {
    // the lock holds without the process id; only the message of a second run loses it
  }

  for (const std::string& stale : io::stale_temporary_files(dir))
    if (::unlink(stale.c_str()) == 0) removed_.push_back(stale);
}

RunDirectory::~RunDirectory() {
  if (lock_fd_ < 0) return;
  if (::ftruncate(lock_fd_, 0) != 0) {
    // a stale process id in an unlocked file misleads no one: the lock is what counts
  }
  ::close(lock_fd_);  // releases the lock
}

// ---------------------------------------------------------------- signals

namespace {

volatile std::sig_atomic_t g_first = 0;
const int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2, SIGXCPU};
constexpr int kCount = 7;
struct sigaction g_previous[kCount], g_previous_xfsz;

extern "C" void on_stop_signal(int sig) {
  if (g_first == 0) g_first = sig;
}

}  // namespace

StopSignals::StopSignals() {
  g_first = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < kCount; i++) {
    sigaction(kSignals[i], nullptr, &g_previous[i]);
    // a signal the process was started ignoring stays ignored: nohup's SIGHUP, a
    // background job's SIGINT
    if (g_previous[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &sa, nullptr);
  }
  // a write past the file-size limit (ulimit -f) then fails with its reason, EFBIG,
  // instead of killing the process in the middle of a save
  sa.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &sa, &g_previous_xfsz);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kCount; i++) sigaction(kSignals[i], &g_previous[i], nullptr);
  sigaction(SIGXFSZ, &g_previous_xfsz, nullptr);
  g_first = 0;  // answered: nothing is pending once nothing is listening
}

int StopSignals::received() { return g_first; }

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGXCPU: return "SIGXCPU";
    default: return "a signal";
  }
}

}  // namespace ember::training
