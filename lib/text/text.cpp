// Pair files and the character vocabulary of text.h.
#include "lib/text/text.h"

#include <set>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::text {

using ember::fail;
using ember::printable;

namespace {

// Decodes UTF-8 into out; returns the 0-based byte offset of the first invalid sequence
// (overlong forms, surrogates and code points past U+10FFFF included), or npos.
size_t decode(const std::string& s, std::vector<char32_t>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    char32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    const char32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    out.push_back(cp);
    i += len;
  }
  return std::string::npos;
}

}  // namespace

std::vector<char32_t> code_points(const std::string& s, const std::string& what) {
  std::vector<char32_t> out;
  const size_t bad = decode(s, out);
  if (bad != std::string::npos) fail("utf8", what, ": invalid UTF-8 at byte ", bad + 1, " of ", printable(s));
  return out;
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | c >> 6);
    s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | c >> 12);
    s += char(0x80 | (c >> 6 & 0x3F));
    s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | c >> 18);
    s += char(0x80 | (c >> 12 & 0x3F));
    s += char(0x80 | (c >> 6 & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
  return s;
}

namespace {

constexpr char32_t kByteOrderMark = 0xFEFF;

// How a character is shown in a message: quoted when visible, else U+XXXX.
std::string show(char32_t c) {
  const std::string p = printable(utf8(c));
  if (p.size() >= 8 && p.compare(0, 3, "\"U+") == 0) return p.substr(1, p.size() - 2);
  return "'" + utf8(c) + "'";
}

bool is_control(char32_t c) { return c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0); }

}  // namespace

std::vector<Pair> parse_pairs(const std::string& name, const std::string& contents) {
  const char* op = "read_pairs";
  std::vector<Pair> pairs;
  size_t start = contents.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;  // a byte-order mark names the encoding
  int64_t line_no = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    std::string line = contents.substr(start, end - start);
    start = end + 1;
    line_no++;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = name + ":" + std::to_string(line_no);
    if (line.empty()) fail(op, where, ": empty line (expected 'source<TAB>target')");
    std::vector<char32_t> chars;
    const size_t bad = decode(line, chars);
    if (bad != std::string::npos)
      fail(op, where, ": invalid UTF-8 at byte ", bad + 1, " of the line ", printable(line),
           " (expected UTF-8 text)");
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) fail(op, where, ": no tab in ", printable(line), " (expected 'source<TAB>target')");
    if (line.find('\t', tab + 1) != std::string::npos)
      fail(op, where, ": more than one tab in ", printable(line), " (expected 'source<TAB>target')");
    Pair p{line.substr(0, tab), line.substr(tab + 1), line_no};
    if (p.source.empty()) fail(op, where, ": the source is empty in ", printable(line), " (expected 'source<TAB>target')");
    if (p.target.empty()) fail(op, where, ": the target is empty in ", printable(line), " (expected 'source<TAB>target')");
    int64_t column = 0;
    for (char32_t c : chars) {
      column++;
      if (c == '\t') continue;
      if (is_control(c))
        fail(op, where, ": control character ", show(c), " at character ", column, " of ", printable(line),
             " (expected printable text)");
      if (c == kByteOrderMark)
        fail(op, where, ": byte-order mark U+FEFF at character ", column, " of ", printable(line),
             " (expected one only at the very start of the file)");
    }
    pairs.push_back(std::move(p));
  }
  if (pairs.empty()) fail(op, "'", name, "' holds no pairs (the file is empty; expected 'source<TAB>target' lines)");
  return pairs;
}

std::vector<Pair> read_pairs(const std::string& path) {
  const std::vector<uint8_t> bytes =
      ember::io::read_file(path, "read_pairs", "a file of 'source<TAB>target' lines", kMaxPairFileBytes);
  return parse_pairs(path, std::string(bytes.begin(), bytes.end()));
}

CharVocab CharVocab::build(const std::vector<std::string>& texts) {
  std::set<char32_t> chars;
  for (auto& t : texts)
    for (char32_t c : code_points(t)) chars.insert(c);
  std::vector<std::string> tokens = {"<pad>", "<s>", "</s>", "<unk>"};
  for (char32_t c : chars) tokens.push_back(utf8(c));
  return from_tokens(tokens);
}

CharVocab CharVocab::from_tokens(const std::vector<std::string>& tokens) {
  const char* op = "CharVocab";
  const char* specials[4] = {"<pad>", "<s>", "</s>", "<unk>"};
  if (tokens.size() < 4) fail(op, "expected at least the 4 special tokens, got ", tokens.size(), " tokens");
  for (int i = 0; i < 4; i++)
    if (tokens[i] != specials[i]) fail(op, "token ", i, " must be '", specials[i], "', got ", printable(tokens[i]));
  CharVocab v;
  v.tokens_ = tokens;
  for (size_t i = 4; i < tokens.size(); i++) {
    auto cps = code_points(tokens[i], "token " + std::to_string(i));
    if (cps.size() != 1) fail(op, "token ", i, " must be one character, got ", printable(tokens[i]));
    if (!v.ids_.emplace(cps[0], (int64_t)i).second) fail(op, "token ", i, " ", show(cps[0]), " appears twice");
  }
  return v;
}

std::vector<int64_t> CharVocab::encode(const std::string& s, bool allow_unknown) const {
  std::vector<int64_t> ids;
  int64_t pos = 0;
  for (char32_t c : code_points(s)) {
    pos++;
    auto it = ids_.find(c);
    if (it != ids_.end()) ids.push_back(it->second);
    else if (allow_unknown) ids.push_back(kUnknown);
    else fail("CharVocab::encode", "character ", show(c), " at position ", pos, " of ", printable(s), " is not in the vocabulary");
  }
  return ids;
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t id : ids) {
    if (id == kEnd) break;
    if (id == kPad || id == kBegin) continue;
    if (id == kUnknown || id < 0 || id >= size()) s += '?';
    else s += tokens_[(size_t)id];
  }
  return s;
}

}  // namespace ember::text
