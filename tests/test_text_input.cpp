// Hostile input to the pair-file reader (a byte-order mark, NUL and invisible characters,
// a huge line, a directory, a FIFO, a device, an oversized file) and to attention_probe's
// case files (sizes that are not integers, NaN, negative or huge; wrong shapes): every
// error names the file and the line or key, shows what it found printably and cut, and
// nothing hangs, aborts or allocates without bound.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "io/h5.h"
#include "lib/text/text.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A fresh scratch directory for one test case, removed at its end.
struct Scratch {
  std::string dir;
  explicit Scratch(const std::string& name) {
    dir = (fs::temp_directory_path() / ("ember-text-input-" + name + "-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name, const std::string& contents) const {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
};

}  // namespace

TEST_CASE("a byte-order mark at the start of a pair file is skipped, not read as a character") {
  auto pairs = text::parse_pairs("bom.tsv", "\xEF\xBB\xBF" "abc\t1\nd\t2\n");
  REQUIRE(pairs.size() == 2);
  CHECK(pairs[0].source == "abc");
  CHECK(pairs[0].line == 1);
  auto vocab = text::CharVocab::build({pairs[0].source, pairs[1].source});
  CHECK_FALSE(vocab.contains(0xFEFF));
  CHECK(vocab.size() == 4 + 4);

  Scratch s("bom");
  auto read = text::read_pairs(s.file("bom.tsv", "\xEF\xBB\xBF" "x\ty\n"));
  REQUIRE(read.size() == 1);
  CHECK(read[0].source == "x");
  // a file holding only the mark holds no pairs
  CHECK_THAT(error_of([] { text::parse_pairs("only.tsv", "\xEF\xBB\xBF"); }), Contains("only.tsv") && Contains("no pairs"));
}

TEST_CASE("a byte-order mark past the start of a pair file is refused, shown as U+FEFF") {
  CHECK_THAT(error_of([] { text::parse_pairs("b.tsv", "a\t1\nb\xEF\xBB\xBF\t2\n"); }),
             Contains("b.tsv:2") && Contains("U+FEFF") && Contains("start of the file"));
}

TEST_CASE("a directory given as a pair file is reported as a directory") {
  Scratch s("dir");
  const std::string msg = error_of([&] { text::read_pairs(s.dir); });
  CHECK_THAT(msg, Contains(s.dir) && Contains("is a directory") && Contains("expected a file"));
  CHECK_THAT(msg, !Contains("empty"));
}

TEST_CASE("a NUL byte in a pair file is shown as U+0000 and does not cut the message") {
  const std::string contents("ok\t1\nab\0cd\t2\n", 13);
  const std::string msg = error_of([&] { text::parse_pairs("nul.tsv", contents); });
  CHECK_THAT(msg, Contains("nul.tsv:2") && Contains("U+0000") && Contains("control character"));
  CHECK_THAT(msg, Contains("abU+0000cd"));  // the text after the NUL is there too
  CHECK(msg.find('\0') == std::string::npos);
  // a NUL in a line without a tab
  const std::string no_tab = error_of([] { text::parse_pairs("nul.tsv", std::string("x\0y\n", 4)); });
  CHECK_THAT(no_tab, Contains("nul.tsv:1") && Contains("no tab") && Contains("xU+0000y"));
  CHECK(no_tab.find('\0') == std::string::npos);
}

TEST_CASE("invisible characters in pair-file messages are shown as U+XXXX") {
  // a zero-width space and a C1 control character
  CHECK_THAT(error_of([] { text::parse_pairs("z.tsv", "a\xE2\x80\x8B" "b c\n"); }),
             Contains("z.tsv:1") && Contains("no tab") && Contains("aU+200Bb c"));
  CHECK_THAT(error_of([] { text::parse_pairs("c1.tsv", "a\xC2\x85\t1\n"); }),
             Contains("c1.tsv:1") && Contains("control character U+0085"));
  CHECK_THAT(error_of([] { text::parse_pairs("t.tsv", "a\x1B[31m\t1\n"); }), Contains("U+001B"));
  auto vocab = text::CharVocab::build({"abc"});
  CHECK_THAT(error_of([&] { vocab.encode("a\xE2\x80\x8B"); }),
             Contains("U+200B") && Contains("position 2") && Contains("not in the vocabulary"));
  CHECK_THAT(error_of([&] { vocab.encode(std::string("a\0b", 3)); }), Contains("U+0000") && Contains("aU+0000b"));
}

TEST_CASE("a very long line is cut in the message") {
  const std::string line(100000, 'x');
  const std::string msg = error_of([&] { text::parse_pairs("long.tsv", "a\t1\n" + line + "\n"); });
  CHECK_THAT(msg, Contains("long.tsv:2") && Contains("no tab") && Contains("cut; 100000 bytes"));
  CHECK(msg.size() < 400);
  auto vocab = text::CharVocab::build({"x"});
  const std::string encode_msg = error_of([&] { vocab.encode(line + "y"); });
  CHECK_THAT(encode_msg, Contains("'y'") && Contains("position 100001") && Contains("cut"));
  CHECK(encode_msg.size() < 400);
  const std::string utf_msg = error_of([&] { text::parse_pairs("u.tsv", line + "\xFF\t1\n"); });
  CHECK_THAT(utf_msg, Contains("u.tsv:1") && Contains("invalid UTF-8 at byte 100001"));
  CHECK(utf_msg.size() < 400);
}

TEST_CASE("a FIFO or a device given as a pair file is refused at once") {
  Scratch s("fifo");
  const std::string fifo = s.dir + "/pipe.tsv";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // nothing writes to the FIFO: reading it would wait for ever
  CHECK_THAT(error_of([&] { text::read_pairs(fifo); }), Contains(fifo) && Contains("FIFO") && Contains("expected a file"));
  CHECK_THAT(error_of([] { text::read_pairs("/dev/zero"); }),
             Contains("/dev/zero") && Contains("character device") && Contains("expected a file"));
  CHECK_THAT(error_of([] { text::read_pairs("/dev/null"); }), Contains("character device"));
}

TEST_CASE("a pair file over 1 GiB is refused before it is read") {
  Scratch s("huge");
  const std::string path = s.dir + "/huge.tsv";
  {
    std::ofstream(path, std::ios::binary) << "a\t1\n";
  }
  fs::resize_file(path, uintmax_t(text::kMaxPairFileBytes) + 1);  // sparse: no disk used
  CHECK_THAT(error_of([&] { text::read_pairs(path); }),
             Contains(path) && Contains("1073741825 bytes") && Contains("more than the 1073741824"));
}

TEST_CASE("an unreachable pair file names the file and the system's reason") {
  Scratch s("unreachable");
  const std::string file = s.file("plain", "a\t1\n");
  CHECK_THAT(error_of([&] { text::read_pairs(file + "/d.tsv"); }),
             Contains("cannot open '" + file + "/d.tsv'") && Contains("Not a directory"));
}

// attention_probe on crafted case files

namespace {

// The attention_probe program of this build, or "" when examples are not built.
std::string probe_program() {
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path p = self.parent_path().parent_path() / "examples" / "attention_probe";
  return fs::exists(p, ec) ? p.string() : "";
}

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

Run run_probe(const std::string& program, const std::string& in, const std::string& out) {
  Run r;
  const std::string cmd = "'" + program + "' '" + in + "' '" + out + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// A small valid case (E 4, 2 heads, B 1, L 2, S 3), changed by edit before it is written.
struct CaseSpec {
  std::function<void(h5::Writer&)> attrs = [](h5::Writer& w) {
    w.attr_int("/", "embed_dim", 4);
    w.attr_int("/", "num_heads", 2);
    w.attr_int("/", "kdim", 4);
    w.attr_int("/", "vdim", 4);
    w.attr_int("/", "bias", 1);
  };
  Shape query{1, 2, 4};
  double query_value = 0.5;
  Tensor attn_mask;
};

std::string write_case(const std::string& path, const CaseSpec& spec) {
  h5::Writer w(path);
  w.attr("/", "kind", "multihead_attention");
  w.attr_int("/", "schema", 1);
  spec.attrs(w);
  w.write("input/query", full(spec.query, spec.query_value, kFloat64));
  w.write("input/key", full({1, 3, 4}, 0.25, kFloat64));
  w.write("input/value", full({1, 3, 4}, -0.5, kFloat64));
  w.write("input/grad_output", ones({1, 2, 4}, kFloat64));
  for (const char* p : {"q", "k", "v", "out"}) {
    w.write(std::string("params/") + p + "_proj.weight", full({4, 4}, 0.1, kFloat64));
    w.write(std::string("params/") + p + "_proj.bias", zeros({4}, kFloat64));
  }
  if (spec.attn_mask.defined()) w.write("input/attn_mask", spec.attn_mask);
  w.close();
  return path;
}

CaseSpec with_embed_dim(std::function<void(h5::Writer&)> set) {
  CaseSpec s;
  s.attrs = [set](h5::Writer& w) {
    set(w);
    w.attr_int("/", "num_heads", 2);
    w.attr_int("/", "kdim", 4);
    w.attr_int("/", "vdim", 4);
    w.attr_int("/", "bias", 1);
  };
  return s;
}

}  // namespace

TEST_CASE("attention_probe refuses a size attribute that is not an integer in range, naming the file and attribute") {
  const std::string program = probe_program();
  if (program.empty()) {
    WARN("attention_probe is not built here; skipped");
    return;
  }
  Scratch s("probe-attrs");
  const std::string out = s.dir + "/out.h5";
  // the valid case runs
  Run ok = run_probe(program, write_case(s.dir + "/ok.h5", CaseSpec{}), out);
  CHECK(ok.status == 0);
  INFO(ok.output);
  CHECK(fs::exists(out));

  struct Bad {
    const char* name;
    std::function<void(h5::Writer&)> set;
    const char* got;
  };
  const std::vector<Bad> bad = {
      {"fraction", [](h5::Writer& w) { w.attr("/", "embed_dim", 2.5); }, "got 2.5"},
      {"nan", [](h5::Writer& w) { w.attr("/", "embed_dim", std::nan("")); }, "got nan"},
      {"inf", [](h5::Writer& w) { w.attr("/", "embed_dim", INFINITY); }, "got inf"},
      {"negative", [](h5::Writer& w) { w.attr_int("/", "embed_dim", -4); }, "got -4"},
      {"huge", [](h5::Writer& w) { w.attr("/", "embed_dim", 1e12); }, "got 1000000000000"},
      {"huge_int", [](h5::Writer& w) { w.attr_int("/", "embed_dim", int64_t(1) << 62); }, "got 4611686018427387904"},
      {"text", [](h5::Writer& w) { w.attr("/", "embed_dim", std::string("four\x01")); }, "got the text \"fourU+0001\""},
  };
  for (const Bad& b : bad) {
    INFO(b.name);
    const std::string in = write_case(s.dir + "/" + b.name + ".h5", with_embed_dim(b.set));
    Run r = run_probe(program, in, out);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("attention_probe: '" + in + "'") && Contains("attribute 'embed_dim'") &&
                             Contains("an integer in [1, 65536]") && Contains(b.got));
  }
  // in range, but more than this machine holds: refused before anything is allocated
  const std::string big = write_case(s.dir + "/big.h5", with_embed_dim([](h5::Writer& w) { w.attr_int("/", "embed_dim", 65536); }));
  Run r = run_probe(program, big, out);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("'" + big + "'") && Contains("embed_dim 65536") && Contains("would need about"));
  // num_heads must divide embed_dim; bias is 0 or 1; a missing attribute is named
  CaseSpec heads;
  heads.attrs = [](h5::Writer& w) {
    w.attr_int("/", "embed_dim", 4);
    w.attr_int("/", "num_heads", 3);
    w.attr_int("/", "kdim", 4);
    w.attr_int("/", "vdim", 4);
    w.attr_int("/", "bias", 1);
  };
  r = run_probe(program, write_case(s.dir + "/heads.h5", heads), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("heads.h5") && Contains("multiple of num_heads") && Contains("num_heads 3"));
  CaseSpec bias = heads;
  bias.attrs = [](h5::Writer& w) {
    w.attr_int("/", "embed_dim", 4);
    w.attr_int("/", "num_heads", 2);
    w.attr_int("/", "kdim", 4);
    w.attr_int("/", "vdim", 4);
    w.attr("/", "bias", 0.5);
  };
  r = run_probe(program, write_case(s.dir + "/bias.h5", bias), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("bias.h5") && Contains("attribute 'bias'") && Contains("[0, 1]") && Contains("got 0.5"));
  CaseSpec missing;
  missing.attrs = [](h5::Writer& w) { w.attr_int("/", "embed_dim", 4); };
  r = run_probe(program, write_case(s.dir + "/missing.h5", missing), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("missing.h5") && Contains("no root attribute 'num_heads'"));
}

TEST_CASE("attention_probe refuses datasets of the wrong shape, non-finite numbers and bad masks") {
  const std::string program = probe_program();
  if (program.empty()) {
    WARN("attention_probe is not built here; skipped");
    return;
  }
  Scratch s("probe-data");
  const std::string out = s.dir + "/out.h5";
  CaseSpec shape;
  shape.query = {1, 2, 5};
  Run r = run_probe(program, write_case(s.dir + "/shape.h5", shape), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("shape.h5") && Contains("'input/query'") && Contains("[1,2,5]") &&
                           Contains("[B, L, embed_dim]"));
  CaseSpec nan;
  nan.query_value = std::nan("");
  r = run_probe(program, write_case(s.dir + "/nan.h5", nan), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("nan.h5") && Contains("'input/query'") && Contains("holds nan") &&
                           Contains("expected finite numbers"));
  CaseSpec mask;
  mask.attn_mask = full({2, 3}, 2.0, kFloat64);
  r = run_probe(program, write_case(s.dir + "/mask.h5", mask), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("mask.h5") && Contains("'input/attn_mask'") && Contains("holds 2") &&
                           Contains("a mask of 0 and 1"));
  CaseSpec mask_shape;
  mask_shape.attn_mask = zeros({3, 2}, kFloat64);
  r = run_probe(program, write_case(s.dir + "/mask_shape.h5", mask_shape), out);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("mask_shape.h5") && Contains("[3,2]") && Contains("[L, S] = [2,3]"));
  // a failed run leaves an existing OUT.h5 as it was
  { std::ofstream(out) << "before"; }
  r = run_probe(program, write_case(s.dir + "/nan2.h5", nan), out);
  CHECK(r.status == 1);
  std::ifstream f(out);
  std::string kept((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(kept == "before");
}
