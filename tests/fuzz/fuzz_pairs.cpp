// libFuzzer target for the data-file reader of the sequence examples: any bytes give
// either pairs or an ember::Error - never a crash, a hang or a sanitizer report - and
// every pair read has the properties the reader promises, and survives a round trip
// through a character vocabulary built from it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "lib/text/text.h"

namespace text = ember::text;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string contents(reinterpret_cast<const char*>(data), size);
  std::vector<text::Pair> pairs;
  try {
    pairs = text::parse_pairs("fuzz.tsv", contents);
  } catch (const ember::Error&) {
    return 0;
  }
  check(!pairs.empty());
  std::vector<std::string> texts;
  for (auto& p : pairs) {
    check(!p.source.empty() && !p.target.empty());
    check(p.source.find('\t') == std::string::npos && p.target.find('\t') == std::string::npos);
    check(p.source.find('\n') == std::string::npos && p.target.find('\n') == std::string::npos);
    texts.push_back(p.source);
    texts.push_back(p.target);
  }
  text::CharVocab v = text::CharVocab::build(texts);
  text::CharVocab again = text::CharVocab::from_tokens(v.tokens());
  check(again.tokens() == v.tokens());
  for (auto& t : texts) {
    std::vector<int64_t> ids = v.encode(t);
    for (int64_t id : ids) check(id >= 4 && id < v.size());
    check(v.decode(ids) == t);
  }
  return 0;
}
