// Writing whole files with every system call checked: a failure throws ember::Error
// naming the file and the operating system's reason ("No space left on device"), and
// leaves no partial file behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::io {

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

}  // namespace ember::io
