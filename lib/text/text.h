// Text for the sequence-to-sequence examples: tab-separated pair files and a
// character-level vocabulary. Characters are Unicode code points read from UTF-8.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember::text {

struct Pair {
  std::string source, target;
  int64_t line = 0;  // where it was read, 1-based
};

// Reads "source<TAB>target" lines. A missing or unreadable file, a directory or anything
// else that is not a regular file (a FIFO, a device), a file over kMaxPairFileBytes, an
// empty line, a line without exactly one tab, an empty side, a control character, a
// byte-order mark past the file's start or invalid UTF-8 is an ember::Error naming the
// file and the line, with the offending text shown by ember::printable (invisible
// characters as U+XXXX, long lines cut). A byte-order mark at the start of the file is
// skipped; a final line without a newline is fine; "\r\n" endings are accepted.
std::vector<Pair> read_pairs(const std::string& path);
std::vector<Pair> parse_pairs(const std::string& name, const std::string& contents);  // name is for messages

// The largest pair file read_pairs reads: far beyond any data set these examples train on.
constexpr int64_t kMaxPairFileBytes = int64_t(1) << 30;

// The code points of UTF-8 text; invalid UTF-8 is an ember::Error naming `what`.
std::vector<char32_t> code_points(const std::string& s, const std::string& what = "text");
std::string utf8(char32_t c);

// Characters to ids: <pad> = 0, <s> = 1, </s> = 2, <unk> = 3, then the characters in
// code-point order.
class CharVocab {
 public:
  static constexpr int64_t kPad = 0, kBegin = 1, kEnd = 2, kUnknown = 3;

  CharVocab() = default;
  // Every character of the given texts.
  static CharVocab build(const std::vector<std::string>& texts);
  // From tokens() of another vocabulary (as a checkpoint stores it); checks the specials
  // and that every other token is one character, given once.
  static CharVocab from_tokens(const std::vector<std::string>& tokens);

  int64_t size() const { return (int64_t)tokens_.size(); }
  const std::vector<std::string>& tokens() const { return tokens_; }
  bool contains(char32_t c) const { return ids_.count(c) > 0; }

  // Ids of the characters of s (without <s> or </s>). A character outside the
  // vocabulary is an ember::Error naming it and its position, unless allow_unknown,
  // which maps it to <unk>.
  std::vector<int64_t> encode(const std::string& s, bool allow_unknown = false) const;
  // The text of ids, stopping at </s> and skipping <pad> and <s>; <unk> shows as '?'.
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::vector<std::string> tokens_;
  std::map<char32_t, int64_t> ids_;
};

}  // namespace ember::text
