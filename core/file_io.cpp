// Checked opens and whole-file reads and writes through POSIX calls, each one's result
// checked, errno carried into the message.
#include "core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ember::io {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void os_fail(const char* op, const std::string& what, const std::string& file, int err) {
  fail(op, what, " '", file, "': ", std::strerror(err));
}

// Writes everything, retrying short writes and interruptions; returns 0 or an errno.
int write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size > (size_t(1) << 30) ? (size_t(1) << 30) : size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= (size_t)n;
  }
  return 0;
}

std::string dir_of(const std::string& path) {
  fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// Creates path and writes the bytes, flushed; on failure removes it and throws, naming
// the file as shown (the target, when path is its temporary file).
void write_new(const std::string& path, const std::string& shown, const void* data, size_t size, const char* op,
               int flags) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
  if (fd < 0 && path != shown)  // the directory refuses the temporary file, not the file itself
    fail(op, "cannot write '", shown, "': cannot create a file in '", dir_of(path), "': ", std::strerror(errno));
  if (fd < 0) os_fail(op, "cannot create", shown, errno);
  int err = write_all(fd, data, size);
  const char* what = "cannot write";
  if (!err && ::fsync(fd) != 0) err = errno, what = "cannot flush";
  if (::close(fd) != 0 && !err) err = errno, what = "cannot close";
  if (err) {
    ::unlink(path.c_str());
    os_fail(op, what, shown, err);
  }
}

constexpr const char* kTmpTag = ".tmp-";

[[noreturn]] void not_regular(const std::string& path, mode_t mode, const char* op, const std::string& expected) {
  fail(op, "'", path, "' is ", file_kind(mode), ", not a regular file", expected.empty() ? "" : "; expected ",
       expected);
}

// The temporary beside a file is ".<name>.tmp-<pid>-<n>". A name too long to take that
// tail within a directory entry's 255 bytes gives its first 200 bytes and a hash of the
// whole instead, still one per file, so that stale ones are found again.
std::string temporary_stem(const std::string& name) {
  constexpr size_t kLongest = 255 - 1 - 5 - 10 - 1 - 20;  // '.', ".tmp-", a pid, '-', a count
  std::string stem(".");  // (appended piece by piece: GCC 12 warns falsely on "." + string)
  if (name.size() <= kLongest) return stem += name;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  stem.append(name, 0, 200);
  return stem += std::string("~") + hex;
}

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "of an unknown kind";
}

void check_regular_file(const std::string& path, const char* op, const std::string& expected) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    // a name that lists but cannot be opened: say where its link leads
    struct stat link {};
    std::error_code ec;
    if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      const std::string target = fs::read_symlink(path, ec).string();
      fail(op, "cannot open '", path, "': ", std::strerror(err), " (it is a symbolic link to ", printable(target, 200),
           ")");
    }
    os_fail(op, "cannot open", path, err);
  }
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode, op, expected);
}

// A device (/dev/null), a FIFO or a directory must never be replaced by a file, nor a
// FIFO written into (it could block forever).
void check_regular_or_missing(const std::string& path, const char* op) {
  if (const size_t n = fs::path(path).filename().string().size(); n > 255)
    fail(op, "'", path, "': the file name is ", n, " bytes, more than the 255 a directory entry holds");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(op, "'", path, "' exists and is ", file_kind(st.st_mode), ", not a regular file; choose another name");
}

int open_regular_file(const std::string& path, int flags, const char* op, const std::string& expected) {
  // judged as itself: stat would pass a link to a regular file, which the open would then
  // refuse with a bare ELOOP
  struct stat link {};
  if ((flags & O_NOFOLLOW) && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    fail(op, "'", path, "' is a symbolic link, not a regular file; it is not followed, so that the file it points to "
         "is left alone");
  if (flags & O_CREAT) check_regular_or_missing(path, op);
  else check_regular_file(path, op, expected);
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0) os_fail(op, (flags & O_CREAT) ? "cannot create" : "cannot open", path, errno);
  struct stat st {};
  const int err = ::fstat(fd, &st) != 0 ? errno : 0;
  if (err || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (err) os_fail(op, "cannot inspect", path, err);
    not_regular(path, st.st_mode, op, expected);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::vector<uint8_t> read_file(const std::string& path, const char* op, const std::string& expected,
                               int64_t max_bytes) {
  const int fd = open_regular_file(path, O_RDONLY, op, expected);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  auto too_large = [&](int64_t bytes, const char* how) {
    fail(op, "'", path, "' holds ", how, bytes, " bytes, more than the ", max_bytes, " bytes ", op, " reads");
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) os_fail(op, "cannot inspect", path, errno);
  if (st.st_size > max_bytes) too_large((int64_t)st.st_size, "");
  std::vector<uint8_t> bytes((size_t)st.st_size);
  size_t got = 0;
  uint8_t more[1 << 12];  // past the size fstat gave: the file grew
  for (;;) {
    const bool inside = got < bytes.size();
    const ssize_t n = ::read(fd, inside ? bytes.data() + got : more, inside ? bytes.size() - got : sizeof more);
    if (n < 0) {
      if (errno == EINTR) continue;
      os_fail(op, "cannot read", path, errno);
    }
    if (n == 0) break;
    if (!inside) bytes.insert(bytes.end(), more, more + n);
    got += (size_t)n;
    if ((int64_t)got > max_bytes) too_large((int64_t)got, "at least ");
  }
  bytes.resize(got);
  return bytes;
}

void write_file(const std::string& path, const void* data, size_t size, const char* op) {
  check_regular_or_missing(path, op);
  write_new(path, path, data, size, op, O_TRUNC);
}

void replace_file(const std::string& path, const void* data, size_t size, const char* op) {
  static std::atomic<uint64_t> counter{0};
  const fs::path target(path);
  if (target.filename().empty()) fail(op, "'", path, "' names a directory, not a file");
  check_regular_or_missing(path, op);
  const std::string dir = dir_of(path);
  // what an earlier writer of this file left when it was killed mid-write
  const std::string stem = temporary_stem(target.filename().string());
  const std::string mine = stem + kTmpTag;
  for (const std::string& stale : stale_temporary_files(dir))
    if (fs::path(stale).filename().string().rfind(mine, 0) == 0) ::unlink(stale.c_str());
  const std::string tmp = temporary_path(path, counter++);
  write_new(tmp, path, data, size, op, O_EXCL);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    os_fail(op, "cannot rename a temporary file over", path, err);
  }
  // The rename is done; flushing the directory makes it survive a power cut. Where the
  // file system cannot flush a directory, there is nothing more to do.
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string temporary_path(const std::string& path, uint64_t count, int64_t pid) {
  const std::string name = fs::path(path).filename().string();
  return (fs::path(dir_of(path)) / cat_str(temporary_stem(name), kTmpTag, pid < 0 ? (int64_t)::getpid() : pid, "-",
                                           count)).string();
}

std::vector<std::string> stale_temporary_files(const std::string& dir) {
  std::vector<std::string> stale;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // .<name>.tmp-<pid>-<n>
    size_t tag = name.rfind(kTmpTag);
    if (name.empty() || name[0] != '.' || tag == std::string::npos) continue;
    const std::string rest = name.substr(tag + std::strlen(kTmpTag));
    size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || dash > 9) continue;
    const std::string pid_text = rest.substr(0, dash), count = rest.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(pid_text) || !digits(count)) continue;
    const pid_t pid = (pid_t)std::stol(pid_text);
    // dead: no such process (a live process of another user answers EPERM)
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(entry.path().string());
  }
  return stale;
}

}  // namespace ember::io
