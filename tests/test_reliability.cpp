// What keeps work from being lost and programs from crashing: sizes checked for overflow,
// out-of-memory errors that name the tensor, files written with every system call
// checked, files that are not regular (FIFOs, devices, directories) refused before they
// are opened, the run directory's lock, stale temporary files, stop signals, and user
// text made printable in messages.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "io/checkpoint.h"
#include "io/h5.h"
#include "io/tensor_file.h"
#include "lib/train/training_run.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs body in a child process that ignores SIGXFSZ and may write at most limit bytes
// to a file; returns the child's exit code (-signal when a signal ended it). The child
// leaves through exit(), so every exit handler runs.
int in_child_with_file_limit(rlim_t limit, const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {limit, limit};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// The process id of a child that has already ended (what a writer that died leaves in
// its temporary files' names).
pid_t ended_process() {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST_CASE("tensor sizes that overflow are refused with the op and the shape, without allocating") {
  const int64_t big = int64_t(1) << 40;
  CHECK_THAT(error_of([&] { empty({big, big}); }), Catch::Contains("empty") && Catch::Contains("[1099511627776,1099511627776]"));
  CHECK_THAT(error_of([&] { zeros({big, big, 4}); }), Catch::Contains("zeros") && Catch::Contains("more than 2^56 elements"));
  CHECK_THAT(error_of([&] { randn({big, big}); }), Catch::Contains("normal"));
  CHECK_THAT(error_of([&] { scalar_tensor(1.0).expand({big, big}); }), Catch::Contains("expand"));
  CHECK_THAT(error_of([&] { add(zeros({1, 1}).expand({big, 1}), zeros({1, 1}).expand({1, big})); }),
             Catch::Contains("add") && Catch::Contains("2^56"));
  CHECK_THAT(error_of([&] { empty({-3, 2}); }), Catch::Contains("non-negative") && Catch::Contains("[-3,2]"));
  // a product that wraps around to a small positive number is caught too
  CHECK_THAT(error_of([&] { empty({int64_t(1) << 32, int64_t(1) << 32, 4}); }), Catch::Contains("2^56"));
  CHECK(zeros({big, 0}).numel() == 0);  // an empty tensor of a huge side is fine
}

TEST_CASE("a tensor the system cannot hold is an OutOfMemory error naming its shape and bytes") {
  // 2^52 float32 elements: 16 PiB, beyond any machine; malloc refuses at once
  const int64_t n = int64_t(1) << 52;
  try {
    empty({n}, kFloat32);
    FAIL("no error");
  } catch (const OutOfMemory& e) {
    CHECK_THAT(e.what(), Catch::Contains("out of memory: a [4503599627370496] float32 tensor of 18014398509481984 bytes"));
  }
}

TEST_CASE("printable shows invisible characters as U+XXXX, bytes that are not UTF-8 in hex, and cuts long text") {
  CHECK(printable("abc") == "\"abc\"");
  CHECK(printable(std::string("a\0b", 3)) == "\"aU+0000b\"");
  CHECK(printable("\xEF\xBB\xBFx") == "\"U+FEFFx\"");          // a byte-order mark
  CHECK(printable("a\tb\r") == "\"aU+0009bU+000D\"");
  CHECK(printable("caf\xC3\xA9") == "\"caf\xC3\xA9\"");         // UTF-8 stays
  CHECK(printable("\xFF" "a") == "\"\\xFFa\"");                  // not UTF-8
  CHECK(printable("\xE2\x80\x8B") == "\"U+200B\"");            // a zero-width space
  CHECK(printable("say \"hi\"") == "\"say \\\"hi\\\"\"");
  const std::string line(100000, 'x');
  const std::string shown = printable(line, 60);
  CHECK(shown.size() < 120);
  CHECK_THAT(shown, Catch::Contains("100000 bytes in all"));
}

TEST_CASE("write_file and replace_file name the file and the system's reason") {
  ScratchDir dir;
  CHECK_THAT(error_of([&] { io::write_file(dir.file("no/such/dir/f"), "x", 1, "op"); }),
             Catch::Contains("op: cannot create") && Catch::Contains("No such file or directory"));
  CHECK_THAT(error_of([&] { io::replace_file(dir.file("missing/f"), "x", 1, "op"); }),
             Catch::Contains("No such file or directory"));
  io::replace_file(dir.file("f"), "hello", 5, "op");
  CHECK(slurp(dir.file("f")) == "hello");
  io::replace_file(dir.file("f"), "bye", 3, "op");
  CHECK(slurp(dir.file("f")) == "bye");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += 1, (void)e;
  CHECK(files == 1);  // no temporary file left
}

TEST_CASE("replace_file past the file-size limit fails with EFBIG, keeps the old file and leaves no temporary") {
  ScratchDir dir;
  const std::string path = dir.file("f");
  io::replace_file(path, "old", 3, "op");
  const std::string big(100000, 'n');
  const int code = in_child_with_file_limit(50000, [&] {
    try {
      io::replace_file(path, big.data(), big.size(), "op");
    } catch (const Error& e) {
      return std::strstr(e.what(), "File too large") ? 42 : 43;
    }
    return 0;
  });
  CHECK(code == 42);
  CHECK(slurp(path) == "old");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += 1, (void)e;
  CHECK(files == 1);
}

TEST_CASE("an h5::Writer whose file cannot be written fails with the reason, and the program exits cleanly") {
  ScratchDir dir;
  CHECK_THAT(error_of([&] { h5::Writer w(dir.file("no/such/dir/x.h5")); }),
             Catch::Contains("h5::Writer") && Catch::Contains("No such file or directory"));
  // a failing close, then exit() through HDF5's own exit handler: no crash
  const std::string path = dir.file("big.h5");
  const int code = in_child_with_file_limit(20000, [&] {
    int result = 43;
    try {
      h5::Writer w(path);
      w.write("/x", zeros({100000}));
      w.close();
    } catch (const Error& e) {
      result = std::strstr(e.what(), "File too large") ? 42 : 44;
    }
    return result;
  });
  CHECK(code == 42);
  CHECK(!fs::exists(path));  // no partial file
  // an existing file stays whole until close() replaces it, and an exception that ends the
  // Writer's life leaves it as it was
  const std::string kept = dir.file("kept.h5");
  {
    h5::Writer w(kept);
    w.write("/x", ones({2}));
  }
  {
    h5::Writer w(kept);
    w.write("/x", zeros({3}));
    CHECK(h5::read(kept, "/x").shape() == Shape{2});
  }
  CHECK(h5::read(kept, "/x").shape() == Shape{3});
  CHECK_THROWS_AS(([&] {
                    h5::Writer w(kept);
                    w.write("/y", ones({1}));
                    w.write("/z", Tensor());  // undefined: throws
                  }()),
                  Error);
  CHECK(h5::read(kept, "/x").shape() == Shape{3});
  CHECK_FALSE(h5::exists(kept, "/y"));
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}) == 1);
  CHECK_THAT(error_of([&] { h5::Writer w(dir.path.string()); }), Catch::Contains("not a regular file"));
}

TEST_CASE("stale temporary files are those of processes that have ended") {
  ScratchDir dir;
  const pid_t gone = ended_process();
  const std::string dead = dir.file(".ckpt-00000010.h5.tmp-" + std::to_string(gone) + "-0");
  const std::string mine = dir.file(".ckpt-00000020.h5.tmp-" + std::to_string(::getpid()) + "-3");
  const std::string other = dir.file("notes.tmp-12");
  for (auto* p : {&dead, &mine, &other}) std::ofstream(*p) << "x";
  auto stale = io::stale_temporary_files(dir.path.string());
  REQUIRE(stale.size() == 1);
  CHECK(stale[0] == dead);
}

TEST_CASE("a file whose name fills a directory entry is replaced as any other, its temporary named within the limit") {
  ScratchDir dir;
  for (size_t length : {size_t(218), size_t(219), size_t(255)}) {
    const std::string path = dir.file(std::string(length - 4, 'w') + ".npy");
    for (double value : {1.0, 2.0}) {  // written, then replaced
      io::save(path, full({3}, value, kFloat64));
      CHECK(io::load(path).to_vector<double>() == std::vector<double>{value, value, value});
    }
    CHECK(fs::path(io::temporary_path(path, 1)).filename().string().size() <= 255);
    // a killed writer's temporary of this file is swept by the next save
    const std::string left = io::temporary_path(path, 0, ended_process());
    std::ofstream(left) << "partial";
    REQUIRE(fs::exists(left));
    io::save(path, zeros({1}));
    CHECK(!fs::exists(left));
  }
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}) == 3);
  const std::string too_long = dir.file(std::string(253, 'w') + ".npy");
  CHECK_THAT(error_of([&] { io::save(too_long, zeros({1})); }),
             Catch::Equals("io::save: '" + too_long + "': the file name is 257 bytes, more than the 255 a directory entry holds"));
}

TEST_CASE("RunDirectory creates, checks, locks and sweeps its directory") {
  ScratchDir dir;
  const std::string run = dir.file("a/b/run");
  const pid_t gone = ended_process();
  fs::create_directories(run);
  const std::string stale = run + "/.ckpt-00000001.h5.tmp-" + std::to_string(gone) + "-0";
  std::ofstream(stale) << "partial";
  {
    training::RunDirectory first(run, "trainer");
    CHECK(fs::is_directory(run));
    REQUIRE(first.removed().size() == 1);
    CHECK(!fs::exists(stale));
    // a second holder (another open file description, as another process would have) is refused
    const std::string msg = error_of([&] { training::RunDirectory second(run, "trainer"); });
    CHECK_THAT(msg, Catch::Contains("trainer: '" + run + "' is in use by another run (process " +
                                    std::to_string(::getpid())));
  }
  training::RunDirectory again(run, "trainer");  // released with the first
  std::ofstream(dir.file("plain")) << "x";
  CHECK_THAT(error_of([&] { training::RunDirectory bad(dir.file("plain"), "trainer"); }),
             Catch::Contains("exists and is not a directory"));
  CHECK_THAT(error_of([&] { training::RunDirectory bad(dir.file("plain/sub"), "trainer"); }),
             Catch::Contains("cannot create the directory"));
}

TEST_CASE("StopSignals turns INT, TERM, HUP, USR1, USR2 and XCPU into a flag, keeps the first, and restores the old handlers") {
  struct sigaction before;
  sigaction(SIGTERM, nullptr, &before);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU}) {
    struct sigaction cur;
    sigaction(sig, nullptr, &cur);
    if (cur.sa_handler == SIG_IGN) signal(sig, SIG_DFL);  // a run started in the background ignores SIGINT
    training::StopSignals signals;
    CHECK(training::StopSignals::received() == 0);
    raise(sig);
    CHECK(training::StopSignals::received() == sig);
    raise(SIGINT);  // a second signal does not replace the first (nor end the process)
    CHECK(training::StopSignals::received() == sig);
    CHECK(training::StopSignals::exit_code(sig) == 128 + sig);
  }
  struct sigaction now;
  sigaction(SIGTERM, nullptr, &now);
  CHECK(now.sa_handler == before.sa_handler);
  CHECK(std::string(training::StopSignals::name(SIGTERM)) == "SIGTERM");
  CHECK(std::string(training::StopSignals::name(SIGUSR1)) == "SIGUSR1");
}

TEST_CASE("StopSignals leaves a signal the process was started ignoring ignored (nohup), and answers SIGPIPE") {
  struct sigaction before;
  sigaction(SIGHUP, nullptr, &before);
  signal(SIGHUP, SIG_IGN);
  {
    training::StopSignals signals;
    raise(SIGHUP);
    CHECK(training::StopSignals::received() == 0);
    raise(SIGPIPE);
    CHECK(training::StopSignals::received() == SIGPIPE);
    CHECK(training::StopSignals::exit_code(SIGPIPE) == 141);
  }
  struct sigaction now;
  sigaction(SIGHUP, nullptr, &now);
  CHECK(now.sa_handler == SIG_IGN);
  sigaction(SIGHUP, &before, nullptr);
}

TEST_CASE("replace_file and write_file refuse a target that is a device, a FIFO or a directory, and replace nothing") {
  ScratchDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THAT(error_of([&] { io::replace_file(fifo, "x", 1, "op"); }),
             Catch::Contains("op: '" + fifo + "' exists and is a FIFO, not a regular file; choose another name"));
  CHECK_THAT(error_of([&] { io::write_file(fifo, "x", 1, "op"); }), Catch::Contains("a FIFO"));
  struct stat st;
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK_THAT(error_of([&] { io::replace_file("/dev/null", "x", 1, "op"); }), Catch::Contains("a character device"));
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK_THAT(error_of([&] { io::replace_file(dir.path.string(), "x", 1, "op"); }), Catch::Contains("directory"));
}

TEST_CASE("replace_file removes the temporary files of its target left by writers that have ended") {
  ScratchDir dir;
  const pid_t gone = ended_process();
  const std::string left = dir.file(".out.png.tmp-" + std::to_string(gone) + "-0");
  const std::string other = dir.file(".other.png.tmp-" + std::to_string(gone) + "-0");
  std::ofstream(left) << "partial";
  std::ofstream(other) << "partial";
  io::replace_file(dir.file("out.png"), "png", 3, "op");
  CHECK(!fs::exists(left));
  CHECK(fs::exists(other));  // another file's: its own next write removes it
}

TEST_CASE("check_regular_file names what a path is when it is not a regular file, and the reason when it is missing") {
  ScratchDir dir;
  const std::string fifo = dir.file("fifo.h5"), plain = dir.file("plain.h5"), link = dir.file("link.h5");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::ofstream(plain) << "x";
  REQUIRE(::symlink(fifo.c_str(), link.c_str()) == 0);
  CHECK(error_of([&] { io::check_regular_file(fifo, "op", "a watch file"); }) ==
        "op: '" + fifo + "' is a FIFO, not a regular file; expected a watch file");
  CHECK(error_of([&] { io::check_regular_file(link, "op"); }) == "op: '" + link + "' is a FIFO, not a regular file");
  CHECK(error_of([&] { io::check_regular_file(dir.path.string(), "op"); }) ==
        "op: '" + dir.path.string() + "' is a directory, not a regular file");
  CHECK(error_of([&] { io::check_regular_file("/dev/zero", "op"); }) ==
        "op: '/dev/zero' is a character device, not a regular file");
  CHECK(error_of([&] { io::check_regular_file("/dev/null", "op"); }) ==
        "op: '/dev/null' is a character device, not a regular file");
  CHECK(error_of([&] { io::check_regular_file(dir.file("none"), "op"); }) ==
        "op: cannot open '" + dir.file("none") + "': No such file or directory");
  // a dangling link lists like a file: the message says where it leads
  const std::string dangling = dir.file("dangling.h5");
  REQUIRE(::symlink("/nonexistent/x.h5", dangling.c_str()) == 0);
  CHECK(error_of([&] { io::check_regular_file(dangling, "op"); }) ==
        "op: cannot open '" + dangling + "': No such file or directory (it is a symbolic link to \"/nonexistent/x.h5\")");
  CHECK_NOTHROW(io::check_regular_file(plain, "op"));
  // a writer's target may not exist yet
  CHECK_NOTHROW(io::check_regular_or_missing(dir.file("none"), "op"));
  CHECK_NOTHROW(io::check_regular_or_missing(plain, "op"));
  CHECK(error_of([&] { io::check_regular_or_missing(fifo, "op"); }) ==
        "op: '" + fifo + "' exists and is a FIFO, not a regular file; choose another name");
}

TEST_CASE("open_regular_file and read_file refuse a FIFO without waiting for a writer, and read a regular file whole") {
  ScratchDir dir;
  const std::string fifo = dir.file("fifo"), plain = dir.file("plain");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::ofstream(plain) << "0123456789";
  CHECK_THAT(error_of_within(5, [&] { io::read_file(fifo, "op"); }), Catch::Contains("is a FIFO, not a regular file"));
  CHECK_THAT(error_of_within(5, [&] { ::close(io::open_regular_file(fifo, O_WRONLY | O_CREAT, "op")); }),
             Catch::Contains("exists and is a FIFO"));
  CHECK_THAT(error_of([] { io::read_file("/dev/zero", "op"); }), Catch::Contains("a character device"));
  const std::vector<uint8_t> bytes = io::read_file(plain, "op");
  CHECK(std::string(bytes.begin(), bytes.end()) == "0123456789");
  CHECK(error_of([&] { io::read_file(plain, "op", "", 4); }) ==
        "op: '" + plain + "' holds 10 bytes, more than the 4 bytes op reads");
  const int fd = io::open_regular_file(dir.file("new"), O_RDWR | O_CREAT, "op");
  CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  ::close(fd);
  CHECK(fs::is_regular_file(dir.file("new")));
}

TEST_CASE("HDF5 files, checkpoints and the run's lock refuse a FIFO instead of waiting on it") {
  ScratchDir dir;
  const std::string fifo = dir.file("x.h5");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK(error_of_within(5, [&] { h5::Reader r(fifo); }) ==
        "h5::Reader: '" + fifo + "' is a FIFO, not a regular file; expected an HDF5 file");
  CHECK_THAT(error_of_within(5, [&] { h5::Writer w(fifo); }),
             Catch::Contains("h5::Writer: '" + fifo + "' exists and is a FIFO"));
  CHECK(error_of_within(5, [&] { io::read_checkpoint(fifo); }) ==
        "read_checkpoint: '" + fifo + "' is a FIFO, not a regular file; expected a checkpoint file");
  CHECK_THAT(error_of([] { io::read_checkpoint("/dev/zero"); }), Catch::Contains("is a character device"));
  CHECK_THAT(error_of([&] { io::read_checkpoint(dir.path.string()); }), Catch::Contains("is a directory"));
  REQUIRE(::mkfifo(dir.file(".lock").c_str(), 0644) == 0);
  CHECK_THAT(error_of_within(5, [&] { training::RunDirectory run(dir.path.string(), "train"); }),
             Catch::Contains("train: '" + dir.file(".lock") + "' exists and is a FIFO, not a regular file"));
}
