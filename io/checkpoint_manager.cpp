// A run's checkpoints in one directory: named by step, the newest kept, listed and found
// again on resume.
#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace ember::io {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- manager

CheckpointManager::CheckpointManager(std::string dir, int keep_last, std::string prefix)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), keep_last_(keep_last) {
  if (keep_last < 1) fail("CheckpointManager", "keep_last must be at least 1, got ", keep_last);
  if (prefix_.empty() || prefix_.find('/') != std::string::npos)
    fail("CheckpointManager", "the prefix must be non-empty and contain no '/', got '", prefix_, "'");
}

namespace {

// Steps as checkpoint names hold them: 8 to 18 digits, which list() reads back.
constexpr int64_t kMaxNamedStep = 999'999'999'999'999'999;

void check_step(int64_t step, const char* op) {
  if (step < 0 || step > kMaxNamedStep)
    fail(op, "step ", step, " cannot name a checkpoint: steps run from 0 to ", kMaxNamedStep);
}

}  // namespace

std::string CheckpointManager::path_for(int64_t step) const {
  check_step(step, "CheckpointManager::path_for");
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%08lld.h5", (long long)step);
  return (fs::path(dir_) / (prefix_ + buf)).string();
}

std::optional<int64_t> CheckpointManager::step_named(const std::string& path) const {
  const std::string name = fs::path(path).filename().string(), head = prefix_ + "-";
  if (name.size() <= head.size() + 3 || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - 3, 3, ".h5") != 0)
    return std::nullopt;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - 3);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::string> CheckpointManager::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return {};
  for (auto& entry : fs::directory_iterator(dir_, ec))
    if (auto step = step_named(entry.path().string())) found.emplace_back(*step, entry.path().string());
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<std::string> CheckpointManager::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string CheckpointManager::save(const Checkpoint& ckpt) {
  check_step(ckpt.progress.step, "CheckpointManager::save");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("CheckpointManager::save", "cannot create directory '", dir_, "': ", ec.message());
  std::string path = path_for(ckpt.progress.step);
  save_checkpoint(path, ckpt);
  auto all = list();
  pruning_failures_.clear();
  for (size_t i = 0; i + keep_last_ < all.size(); i++) {
    if (all[i] == path) continue;  // never the file just written
    fs::remove(all[i], ec);
    if (ec) pruning_failures_.push_back(all[i] + ": " + ec.message());
  }
  return path;
}

}  // namespace ember::io
