// Files named by users, opened with every system call checked. Reading: what is not a
// regular file is refused before anything opens it. Writing whole files: a failure
// throws ember::Error naming the file and the operating system's reason ("No space left
// on device"), and leaves no partial file behind.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::io {

// What a file of this mode is, for messages: "a regular file", "a directory", "a FIFO",
// "a character device", "a block device", "a socket".
const char* file_kind(mode_t mode);

// The one check every reader of a path a user gives makes before opening it: opening a
// FIFO waits for a writer (in HDF5's H5Fopen, where no signal ends the wait), a device
// such as /dev/zero never ends, and a directory is no file at all. Throws Error
//   "op: 'x.h5' is a FIFO, not a regular file; expected <expected>"
// or "op: cannot open 'x.h5': No such file or directory". expected may be empty.
void check_regular_file(const std::string& path, const char* op, const std::string& expected = "");

// The same check for a writer: a path that does not exist passes, one that exists must be
// a regular file ("op: 'x' exists and is a directory, not a regular file; choose another
// name").
void check_regular_or_missing(const std::string& path, const char* op);

// Opens path with flags (O_RDONLY, O_RDWR | O_CREAT, ...) as a regular file: checked as
// above (check_regular_or_missing when flags hold O_CREAT), opened without waiting
// (O_NONBLOCK, cleared once open) and checked again on the descriptor, so that a file
// swapped for a FIFO in between is refused too. With O_NOFOLLOW a symbolic link is refused
// ("op: 'x' is a symbolic link, not a regular file; ..."), whatever it points to. Returns
// the descriptor, to be closed.
int open_regular_file(const std::string& path, int flags, const char* op, const std::string& expected = "");

// The whole of a regular file (open_regular_file), at most max_bytes of it: a larger one
// is refused naming its size.
std::vector<uint8_t> read_file(const std::string& path, const char* op, const std::string& expected = "",
                               int64_t max_bytes = INT64_MAX);

// Writes bytes to path (created or truncated), flushed to the disk. On failure the
// partial file is removed. op names the caller in messages. A path that exists and is not
// a regular file (a device, a FIFO, a directory) is refused, here and in replace_file.
void write_file(const std::string& path, const void* data, size_t size, const char* op);

// Replaces path by a file holding bytes so that a crash, a kill or a full disk at any
// moment leaves either the old file or the new one, whole: the bytes go to a temporary
// file in the same directory (".<name>.tmp-<pid>-<n>"), flushed, then renamed over path,
// and the directory is flushed. On failure the temporary file is removed; temporary files
// of this target left by writers that have ended (killed mid-write) are removed first.
void replace_file(const std::string& path, const void* data, size_t size, const char* op);

// The temporary files replace_file leaves when its process is killed mid-write, in dir:
// those named for a process that no longer runs. Returns the paths.
std::vector<std::string> stale_temporary_files(const std::string& dir);

// The count-th temporary file replace_file names for path in process pid (this one when
// -1): ".<name>.tmp-<pid>-<count>" beside it, a long name shortened to fit 255 bytes.
std::string temporary_path(const std::string& path, uint64_t count, int64_t pid = -1);

}  // namespace ember::io
