#include "core/autocast.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ember {

namespace {
thread_local constinit bool t_autocast = false;

bool cpu_has_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}
}  // namespace

bool autocast_enabled() { return t_autocast; }

bool bf16_products_available() {
  static const bool available = [] {
    if (const char* off = std::getenv("EMBER_NO_BF16")) {
      std::string v;  // trimmed, lower case
      for (const char* c = off; *c; c++)
        if (!std::isspace((unsigned char)*c)) v += char(std::tolower((unsigned char)*c));
      if (!(v.empty() || v == "0" || v == "false" || v == "no" || v == "off")) return false;
    }
    return cpu_has_bf16();
  }();
  return available;
}

void set_autocast_enabled(bool on) {
  t_autocast = on;
  static std::once_flag said;
  if (on && !bf16_products_available())
    std::call_once(said, [] {
      std::fprintf(stderr,
                   "ember: this processor has no AVX512_BF16 instructions (or EMBER_NO_BF16 is set): "
                   "matrix products under Autocast stay float32\n");
    });
}

Autocast::Autocast(bool enabled) : prev_(t_autocast) { set_autocast_enabled(enabled); }

Autocast::~Autocast() { t_autocast = prev_; }

namespace autocast_detail {
bool set_enabled(bool on) {
  const bool prev = t_autocast;
  t_autocast = on;
  return prev;
}
}  // namespace autocast_detail

}  // namespace ember
