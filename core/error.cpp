// Message helpers: user text made printable.
#include "core/error.h"

#include <cstdio>

namespace ember {

namespace {

// The length of the UTF-8 sequence at s[i] and its code point, or 0 when the bytes there
// are not valid UTF-8 (overlong forms and surrogates included).
size_t utf8_at(const std::string& s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return (unsigned char)s[k]; };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; k++) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool invisible(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0xA0 || cp == 0xAD ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x2060 && cp <= 0x206F) ||
         cp == 0xFEFF || cp == 0x3000;
}

}  // namespace

std::string printable(const std::string& text, size_t max_chars) {
  std::string out = "\"";
  size_t chars = 0, i = 0;
  for (; i < text.size() && chars < max_chars; chars++) {
    uint32_t cp = 0;
    size_t n = utf8_at(text, i, cp);
    char buf[16];
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02X", (unsigned char)text[i]);
      out += buf;
      i++;
    } else if (invisible(cp)) {
      std::snprintf(buf, sizeof buf, "U+%04X", (unsigned)cp);
      out += buf;
      i += n;
    } else {
      if (cp == '"' || cp == '\\') out += '\\';
      out.append(text, i, n);
      i += n;
    }
  }
  out += "\"";
  if (i < text.size()) out += cat_str(" (cut; ", text.size(), " bytes in all)");
  return out;
}

}  // namespace ember
