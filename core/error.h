// The one exception type users see, and helpers to build its messages. Every message
// starts with the op or function name, then says what was expected and what was received:
//   matmul: shapes [2,3] and [4,5] cannot be multiplied
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/shape.h"

namespace ember {

// The exception every ember function throws on a bad argument, a bad file or a misuse
// (PyTorch raises RuntimeError, ValueError, IndexError or TypeError where ember throws
// this one type); what() is the message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}  // An Error with this message.
};

// A request for memory the system refused: what was asked for, in the message
// ("out of memory: a [4096,8192] float32 tensor of 134217728 bytes").
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& what) : Error(what) {}  // An OutOfMemory with this message.
};

// Text from a user's file or command line, fit for a message: quoted, printable ASCII and
// valid UTF-8 kept, every control or invisible character (NUL, tab, a byte-order mark,
// zero-width spaces) shown as U+XXXX, bytes that are not UTF-8 as `\xNN`, and text past
// max_chars characters cut with the total length named:
//   printable("ab\tc") == "\"abU+0009c\""
std::string printable(const std::string& text, size_t max_chars = 60);

namespace detail {
inline void put(std::ostringstream&) {}
template <class A, class... R>
void put(std::ostringstream& os, const A& a, const R&... rest) {
  if constexpr (std::is_same_v<A, Shape>) os << shape_str(a);
  else os << a;
  put(os, rest...);
}
}  // namespace detail

// Concatenates its arguments (shapes printed as [a,b]) into a message.
template <class... A>
std::string cat_str(const A&... a) {
  std::ostringstream os;
  detail::put(os, a...);
  return os.str();
}

// throw Error(op + ": " + rest...)
template <class... A>
[[noreturn]] void fail(const char* op, const A&... a) {
  throw Error(cat_str(op, ": ", a...));
}

// Throws Error(op + ": " + rest...) unless ok.
template <class... A>
void check(bool ok, const char* op, const A&... a) {
  if (!ok) fail(op, a...);
}

}  // namespace ember
