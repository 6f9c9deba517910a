// What the code fragments of README.md and docs/ are compiled with (cmake/DocSnippets.cmake
// generates one program per document): ember's public headers, and the runner that calls
// each fragment, checks what it prints or the error it throws against the ```text output
// or ```text error block that follows it in the Markdown, and says where a failure is.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd_functional.h"
#include "core/error.h"
#include "core/forward_ad.h"
#include "core/func.h"
#include "core/function.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "io/checkpoint.h"
#include "io/tensor_file.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/multihead_attention.h"
#include "nn/packing.h"
#include "nn/per_sample.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace ember::doc {

enum class Expect { none, output, error };

struct Snippet {
  const char* where;  // "README.md:94", the fragment's first line
  void (*run)();
  Expect expect;
  const char* text;  // the output or error message the Markdown shows
};

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// One line against a pattern in which "..." matches any text.
inline bool line_matches(const std::string& pattern, const std::string& line) {
  size_t star = pattern.find("...");
  if (star == std::string::npos) return pattern == line;
  if (line.compare(0, star, pattern, 0, star) != 0) return false;
  std::string rest = pattern.substr(star + 3);
  for (size_t at = star; at <= line.size(); at++)
    if (line_matches(rest, line.substr(at))) return true;
  return false;
}

// Lines against pattern lines; a pattern line of just "..." matches any number of lines.
inline bool lines_match(const std::vector<std::string>& pat, size_t p, const std::vector<std::string>& got, size_t g) {
  if (p == pat.size()) return g == got.size();
  std::string stripped = pat[p];
  stripped.erase(0, stripped.find_first_not_of(' '));
  if (stripped == "...") {
    for (size_t k = g; k <= got.size(); k++)
      if (lines_match(pat, p + 1, got, k)) return true;
    return false;
  }
  return g < got.size() && line_matches(pat[p], got[g]) && lines_match(pat, p + 1, got, g + 1);
}

inline bool text_matches(const std::string& expected, const std::string& got) {
  return lines_match(split_lines(expected), 0, split_lines(got), 0);
}

// Runs one fragment; false (with the reason on stderr) when it fails.
inline bool run_snippet(const Snippet& s) {
  std::ostringstream captured;
  std::streambuf* cout_buf = std::cout.rdbuf(captured.rdbuf());
  std::optional<std::string> error;
  std::string other;
  try {
    s.run();
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    other = e.what();
  }
  std::cout.rdbuf(cout_buf);
  std::cout << captured.str() << std::flush;
  if (!other.empty()) {
    std::cerr << s.where << ": the fragment threw a std::exception: " << other << "\n";
    return false;
  }
  if (s.expect == Expect::error) {
    if (!error) {
      std::cerr << s.where << ": the fragment was to throw ember::Error:\n" << s.text << "but it threw nothing\n";
      return false;
    }
    if (!text_matches(s.text, *error)) {
      std::cerr << s.where << ": the fragment threw\n" << *error << "\nwhere the Markdown shows\n" << s.text;
      return false;
    }
    return true;
  }
  if (error) {
    std::cerr << s.where << ": the fragment threw ember::Error: " << *error << "\n";
    return false;
  }
  if (s.expect == Expect::output && !text_matches(s.text, captured.str())) {
    std::cerr << s.where << ": the fragment printed\n" << captured.str() << "where the Markdown shows\n" << s.text;
    return false;
  }
  return true;
}

// `prog N` runs fragment N (from 1), `prog` all of them in order.
template <size_t N>
int run_snippets(const Snippet (&snippets)[N], int argc, char** argv) {
  if (argc > 1) {
    size_t i = std::strtoul(argv[1], nullptr, 10);
    if (i < 1 || i > N) {
      std::cerr << "no fragment " << argv[1] << " (1 to " << N << ")\n";
      return 2;
    }
    return run_snippet(snippets[i - 1]) ? 0 : 1;
  }
  bool ok = true;
  for (const Snippet& s : snippets) ok = run_snippet(s) && ok;
  return ok ? 0 : 1;
}

}  // namespace ember::doc
