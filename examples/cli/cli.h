// Command-line numbers for the example programs: a flag's value parsed whole, or a
// UsageError naming the flag, what it needs and what it got.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace cli {

struct UsageError {
  std::string message;
};

inline int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') throw UsageError{flag + " needs an integer, got '" + text + "'"};
  if (v < lo) throw UsageError{flag + " must be at least " + std::to_string(lo) + ", got " + text};
  return v;
}

inline double parse_real(const std::string& flag, const std::string& text, double lo = -INFINITY) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) throw UsageError{flag + " needs a number, got '" + text + "'"};
  if (v < lo) throw UsageError{flag + " must be at least " + std::to_string(lo) + ", got " + text};
  return v;
}

}  // namespace cli
