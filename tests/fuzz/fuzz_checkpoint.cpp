// libFuzzer target for the checkpoint loader. Two kinds of input:
//
// - Raw bytes (any input not starting with a byte below 0x20; a checkpoint starts with
//   "ember"): read_checkpoint_bytes must turn them into a checkpoint or an ember::Error,
//   never a crash, a hang or a sanitizer report. Almost every mutation is caught by the
//   header's size and checksum.
//
// - A recipe (first byte below 0x20): the rest of the input edits a valid checkpoint at
//   the HDF5 level - removes keys, adds stray ones, changes dtypes, shapes, attribute
//   types and values, names - and the result, written by libhdf5 and sealed with a
//   correct checksum, goes through read_checkpoint and load_checkpoint into live
//   targets. This reaches every schema check behind the checksum. Beyond "no crash",
//   it checks the promise of load_checkpoint: when it throws, the model, optimizer,
//   schedule and generator are bit for bit what they were.
//
// Byte-level corruption behind a valid checksum is not fuzzed: it only exercises
// libhdf5's own parser, which (1.10.8, Debian 12) can hang on crafted files - a
// checksum-valid file is one we wrote or one crafted on purpose; see
// docs/checkpoint-format.md.
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/h5.h"
#include "core/ops.h"
#include "io/checkpoint.h"
#include "optim/schedule.h"

using namespace ember;
using namespace ember::optim;
using namespace ember::io;

namespace {

void reseal(std::vector<uint8_t>& b) {
  if (b.size() <= 512) return;
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b.data() + 512, (uInt)(b.size() - 512));
  char header[512] = {0};
  std::snprintf(header, sizeof header, "ember checkpoint\nschema 1\nsize %zu\ncrc32 %08x\n", b.size(), crc);
  std::memcpy(b.data(), header, 512);
}

// Reads the recipe; past its end every read gives 0.
struct Recipe {
  const uint8_t* p;
  size_t n, i = 0;
  bool more() const { return i < n; }
  uint8_t u8() { return i < n ? p[i++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v = v << 8 | u8();
    return v;
  }
  std::string text(size_t max) {
    size_t len = u8() % (max + 1);
    std::string s;
    for (size_t k = 0; k < len; k++) s.push_back((char)u8());
    return s;
  }
};

// One HDF5 object or attribute of the file to write. Attributes are "<object>@<name>".
struct Node {
  enum Kind { Group, Data, Strings, U64, AttrDouble, AttrInt, AttrString } kind;
  std::string path;
  DType dtype = kFloat32;  // Data
  Shape shape;             // Data, Strings, U64
  double d = 0;
  int64_t i = 0;
  std::string s;
};

// The objects of a valid checkpoint of the targets below (the layout of
// docs/checkpoint-format.md).
std::vector<Node> base_nodes() {
  std::vector<Node> v;
  auto attr_s = [&](std::string o, std::string n, std::string s) { v.push_back({Node::AttrString, o + "@" + n, {}, {}, 0, 0, s}); };
  auto attr_i = [&](std::string o, std::string n, int64_t i) { v.push_back({Node::AttrInt, o + "@" + n, {}, {}, 0, i, ""}); };
  auto attr_d = [&](std::string o, std::string n, double d) { v.push_back({Node::AttrDouble, o + "@" + n, {}, {}, d, 0, ""}); };
  auto data = [&](std::string p, DType t, Shape s) { v.push_back({Node::Data, p, t, s, 0, 0, ""}); };
  auto scalar = [&](std::string p, int64_t i) { v.push_back({Node::Data, p, kInt64, {}, 0, i, ""}); };
  attr_s("/", "format", "ember checkpoint");
  attr_i("/", "schema_version", 1);
  data("/model/layer.weight", kFloat32, {3, 4});
  data("/model/layer.bias", kFloat64, {3});
  attr_s("/optimizer", "kind", "Adam");
  for (auto [k, x] : std::vector<std::pair<const char*, double>>{
           {"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0}, {"amsgrad", 0}})
    attr_d("/optimizer", k, x);
  for (auto [name, t, s] : std::vector<std::tuple<const char*, DType, Shape>>{{"layer.weight", kFloat32, {3, 4}},
                                                                                 {"layer.bias", kFloat64, {3}}}) {
    std::string g = std::string("/optimizer/state/") + name;
    scalar(g + "/step", 1);
    data(g + "/exp_avg", t, s);
    data(g + "/exp_avg_sq", t, s);
  }
  attr_s("/schedule", "kind", "InverseSqrt");
  attr_i("/schedule", "last_step", 1);
  attr_d("/schedule", "d_model", 4);
  attr_d("/schedule", "warmup", 2);
  attr_d("/schedule", "factor", 1);
  scalar("/progress/step", 1);
  scalar("/progress/epoch", 0);
  scalar("/progress/position", 3);
  v.push_back({Node::U64, "/rng/data", kInt64, {2}, 0, 7, ""});
  v.push_back({Node::Group, "/config"});
  attr_i("/config", "d_model", 4);
  attr_d("/config", "dropout", 0.1);
  attr_s("/config", "act", "relu");
  v.push_back({Node::Strings, "/vocab/src", kInt64, {5}, 0, 0, ""});
  data("/extra/losses", kFloat32, {2});
  return v;
}

const char* const kParents[] = {"/", "/model", "/optimizer", "/optimizer/state", "/optimizer/state/layer.bias",
                                "/schedule", "/progress", "/rng", "/config", "/vocab", "/extra"};
const char* const kNames[] = {"step", "kind", "exp_avg", "max_exp_avg_sq", "layer.weight", "lr", "x", "momentum_buffer",
                              "position", "schema_version", "format", "src", "last_step", "d_model", "amsgrad", "."};

std::string pick_name(Recipe& r) {
  uint8_t c = r.u8();
  if (c & 0x80) return r.text(12);
  return kNames[c % std::size(kNames)];
}

void apply_edits(std::vector<Node>& nodes, Recipe& r) {
  for (int edits = 0; r.more() && edits < 24; edits++) {
    const uint8_t op = r.u8() % 8;
    if (op == 3) {  // a stray object or attribute
      std::string parent = kParents[r.u8() % std::size(kParents)];
      std::string name = pick_name(r);
      Node n{Node::Kind(r.u8() % 7), ""};
      n.path = n.kind >= Node::AttrDouble ? parent + "@" + name : (parent == "/" ? "" : parent) + "/" + name;
      n.shape = {int64_t(r.u8() % 4)};
      nodes.push_back(n);
      continue;
    }
    if (nodes.empty()) return;
    Node& n = nodes[r.u8() % nodes.size()];
    switch (op) {
      case 0: nodes.erase(nodes.begin() + (&n - nodes.data())); break;
      case 1:  // any dtype, bfloat16 too
        n.dtype = DType(r.u8() % 5);
        if (n.kind != Node::Data) n.kind = Node::Kind(r.u8() % 7);
        break;
      case 2: {
        Shape s(r.u8() % 4);
        for (auto& d : s) d = r.u8() % 6;
        n.shape = s;
        break;
      }
      case 4: n.i = (int64_t)r.u64(); break;
      case 5: {
        const double special[] = {NAN, INFINITY, -INFINITY, -1, 0, 1e300, 2.5, 1e-3, 0.999, 1};
        n.d = special[r.u8() % std::size(special)];
        break;
      }
      case 6: n.s = r.text(16); break;
      case 7: {  // rename within its parent
        const size_t at = n.path.find('@');
        const size_t slash = n.path.rfind('/', at == std::string::npos ? std::string::npos : at);
        if (at != std::string::npos) n.path = n.path.substr(0, at + 1) + pick_name(r);
        else n.path = n.path.substr(0, slash + 1) + pick_name(r);
        break;
      }
    }
  }
}

// Writes the nodes; false when libhdf5 refuses the combination (say, a dataset where a
// group must be), which makes the input uninteresting.
bool write_file(const std::string& path, const std::vector<Node>& nodes) {
  try {
    h5::Writer w(path, 512);
    for (const Node& n : nodes) {
      const size_t at = n.path.find('@');
      if (at != std::string::npos) {
        const std::string obj = n.path.substr(0, at), name = n.path.substr(at + 1);
        if (obj != "/") w.group(obj);
        if (n.kind == Node::AttrInt) w.attr_int(obj, name, n.i);
        else if (n.kind == Node::AttrString) w.attr(obj, name, n.s);
        else w.attr(obj, name, n.d);
        continue;
      }
      switch (n.kind) {
        case Node::Group: w.group(n.path); break;
        case Node::Strings: {
          std::vector<std::string> tokens;
          for (int64_t k = 0; k < (n.shape.empty() ? 1 : n.shape[0]); k++) tokens.push_back(k == 2 ? n.s : "t" + std::to_string(k));
          w.write_strings(n.path, tokens);
          break;
        }
        case Node::U64: {
          std::vector<uint64_t> v;
          for (int64_t k = 0; k < (n.shape.empty() ? 1 : n.shape[0]); k++) v.push_back((uint64_t)n.i + (uint64_t)k);
          w.write_u64(n.path, v);
          break;
        }
        default: {
          Tensor t = n.shape.empty() ? full({}, (double)n.i, n.dtype) : full(n.shape, 0.25, n.dtype);
          w.write(n.path, t);
        }
      }
    }
    w.close();
  } catch (const Error&) {
    return false;
  }
  return true;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// The targets load_checkpoint restores into, and a snapshot to compare them with.
struct Targets {
  Generator init{1}, data{2};
  Tensor w = randn({3, 4}, kFloat32, &init).requires_grad_();
  Tensor b = randn({3}, kFloat64, &init).requires_grad_();
  Adam opt{{{"layer.weight", w}, {"layer.bias", b}}};
  InverseSqrtSchedule sched{4, 2};

  std::vector<Tensor> snapshot() const {
    std::vector<Tensor> s = {w.detach().clone(), b.detach().clone()};
    for (auto& [name, ps] : opt.state().params)
      for (auto& [slot, t] : ps.slots) s.push_back(t.clone());
    std::vector<double> scalars = {double(sched.last_step()), double(data.get_state()[0]), double(data.get_state()[1])};
    for (auto& [k, v] : opt.hyper()) scalars.push_back(v);
    s.push_back(from_vector(scalars, {(int64_t)scalars.size()}));
    return s;
  }
};

bool same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); k++)
    if (!equal(a[k], b[k])) return false;
  return true;
}

void run_recipe(const uint8_t* data, size_t size) {
  Recipe r{data, size};
  const uint8_t flags = r.u8();
  std::vector<Node> nodes = base_nodes();
  apply_edits(nodes, r);
  static const struct TempFile {
    std::string path = "/tmp/ember-fuzz-" + std::to_string(getpid()) + ".h5";
    ~TempFile() { std::remove(path.c_str()); }
  } temp;
  const std::string& path = temp.path;
  if (!write_file(path, nodes)) return;
  std::vector<uint8_t> bytes = read_bytes(path);
  reseal(bytes);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write((const char*)bytes.data(), (std::streamsize)bytes.size());
  }
  try {
    read_checkpoint_bytes("fuzz-recipe", bytes);
  } catch (const Error&) {
  }

  Targets t;
  if (flags & 2) {  // targets that have taken a step, so the optimizer has state to lose
    t.w.set_grad(ones({3, 4}));
    t.b.set_grad(ones({3}, kFloat64));
    t.sched.step(t.opt);
    t.opt.step();
  }
  ResumeTargets rt;
  rt.model = {{"layer.weight", t.w}, {"layer.bias", t.b}};
  if (flags & 4) rt.optimizer = &t.opt;
  if (flags & 8) rt.schedule = &t.sched;
  if (flags & 16) rt.generators = {{"data", &t.data}};
  rt.config = {{"d_model", int64_t(4)}, {"dropout", 0.1}, {"act", std::string("relu")}};
  const std::vector<Tensor> before = t.snapshot();
  static const bool verbose = std::getenv("EMBER_FUZZ_VERBOSE") != nullptr;  // for running single inputs
  try {
    load_checkpoint(path, rt);
    if (verbose) std::fprintf(stderr, "loaded\n");
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    if (!same(before, t.snapshot())) {
      std::fprintf(stderr, "load_checkpoint failed but changed its targets\n");
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] < 0x20) {
    run_recipe(data, size);
    return 0;
  }
  try {
    read_checkpoint_bytes("fuzz-input", std::vector<uint8_t>(data, data + size));
  } catch (const Error&) {
  }
  return 0;
}
