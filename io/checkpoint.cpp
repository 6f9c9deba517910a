// Checkpoint files: layout in docs/checkpoint-format.md. Writing goes through a
// temporary file, a checksum header and an atomic rename; reading checks the header and
// checksum first, then parses the HDF5 image from memory, then checks every key.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/ops.h"
#include "io/checkpoint_detail.h"
#include "io/h5.h"

namespace ember::io {

namespace fs = std::filesystem;

namespace detail {

// Whether every element of a float tensor is finite (true for other dtypes).
bool all_finite(const Tensor& t) {
  if (t.dtype() == kBFloat16) return all_finite(t.to(kFloat32));  // exact
  if (t.dtype() != kFloat32 && t.dtype() != kFloat64) return true;
  const Tensor c = t.contiguous();
  auto scan = [n = c.numel()](const auto* x) {
    for (int64_t i = 0; i < n; i++)
      if (!std::isfinite(x[i])) return false;
    return true;
  };
  return c.dtype() == kFloat32 ? scan(c.data<float>()) : scan(c.data<double>());
}

// "<op>: model tensor 'encoder.w' is undefined: <why>".
void check_tensor(const Tensor& t, const std::string& what, const std::string& name,
                  const char* op) {
  if (!t.defined()) fail_undefined(t, op, cat_str(what, " '", name, "'").c_str());
}

}  // namespace detail

using detail::all_finite;
using detail::check_tensor;

namespace {

constexpr size_t kHeaderBytes = 512;  // HDF5 user block
constexpr int64_t kMaxCount = optim::kMaxStep;  // the largest step, epoch or position a file may hold
constexpr const char* kMagic = "ember checkpoint";
const char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

uint32_t crc_of(const uint8_t* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt piece = (uInt)std::min<size_t>(n, 1u << 30);
    crc = crc32(crc, data, piece);
    data += piece;
    n -= piece;
  }
  return (uint32_t)crc;
}

std::string header_text(uint64_t size, uint32_t crc, int64_t schema = kCheckpointSchemaVersion) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s\nschema %lld\nsize %llu\ncrc32 %08x\n", kMagic, (long long)schema,
                (unsigned long long)size, crc);
  return buf;
}

// Names become HDF5 link names: non-empty, no '/', not "." or "..".
void check_key(const std::string& what, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    fail("save_checkpoint", what, " names must be non-empty and contain no '/', got '", name, "'");
}

// An int64 scalar holding v exactly (through a double, steps beyond 2^53 would change).
Tensor int_scalar(int64_t v) { return from_vector(std::vector<int64_t>{v}, {}); }


void write_contents(h5::Writer& w, const Checkpoint& c) {
  w.attr("/", "format", std::string(kMagic));
  w.attr_int("/", "schema_version", kCheckpointSchemaVersion);

  w.group("/model");
  for (auto& [name, t] : c.model) {
    check_key("parameter", name);
    check_tensor(t, "model tensor", name);
    w.write("/model/" + name, t);
  }
  if (c.optimizer) {
    w.group("/optimizer/state");
    w.attr("/optimizer", "kind", c.optimizer->kind);
    for (auto& [k, v] : c.optimizer->hyper) {
      if (k == "kind") fail("save_checkpoint", "'kind' is reserved and cannot name a hyper-parameter");
      w.attr("/optimizer", k, v);
    }
    for (auto& [name, ps] : c.optimizer->params) {
      check_key("parameter", name);
      std::string g = "/optimizer/state/" + name;
      if (ps.step < 1 || ps.step > optim::kMaxStep)
        fail("save_checkpoint", "parameter '", name, "': the optimizer's step must be in [1, 2^62], got ", ps.step);
      w.write(g + "/step", int_scalar(ps.step));
      for (auto& [slot, t] : ps.slots) {
        check_key("slot", slot);
        if (slot == "step") fail("save_checkpoint", "'step' is reserved and cannot name an optimizer slot");
        check_tensor(t, "optimizer slot", name + "/" + slot);
        w.write(g + "/" + slot, t);
      }
    }
  }
  if (c.schedule) {
    if (c.schedule->last_step < 0 || c.schedule->last_step > kMaxCount)
      fail("save_checkpoint", "the schedule's last_step must be in [0, 2^62], got ", c.schedule->last_step);
    w.group("/schedule");
    w.attr("/schedule", "kind", c.schedule->kind);
    w.attr_int("/schedule", "last_step", c.schedule->last_step);
    for (auto& [k, v] : c.schedule->settings) {
      if (k == "kind" || k == "last_step") fail("save_checkpoint", "'", k, "' is reserved and cannot name a setting");
      w.attr("/schedule", k, v);
    }
  }
  // what read_checkpoint refuses is refused here, so no saved file fails to load
  for (int64_t v : {c.progress.step, c.progress.epoch, c.progress.position})
    if (v < 0 || v > kMaxCount)
      fail("save_checkpoint", "progress must be in [0, 2^62], got step ", c.progress.step, ", epoch ",
           c.progress.epoch, ", position ", c.progress.position);
  w.write("/progress/step", int_scalar(c.progress.step));
  w.write("/progress/epoch", int_scalar(c.progress.epoch));
  w.write("/progress/position", int_scalar(c.progress.position));
  w.group("/rng");
  for (auto& [name, state] : c.generators) {
    check_key("generator", name);
    if (state.size() != 2)
      fail("save_checkpoint", "generator '", name, "' has a state of ", state.size(),
           " values, expected 2 (seed, counter)");
    w.write_u64("/rng/" + name, state);
  }
  w.group("/config");
  for (auto& [k, v] : c.config) {
    if (auto* i = std::get_if<int64_t>(&v)) w.attr_int("/config", k, *i);
    else if (auto* d = std::get_if<double>(&v)) w.attr("/config", k, *d);
    else w.attr("/config", k, std::get<std::string>(v));
  }
  w.group("/vocab");
  for (auto& [name, tokens] : c.vocab) {
    check_key("vocabulary", name);
    w.write_strings("/vocab/" + name, tokens);
  }
  w.group("/extra");
  for (auto& [name, t] : c.extra) {
    check_key("extra tensor", name);
    check_tensor(t, "extra tensor", name);
    w.write("/extra/" + name, t);
  }
}

// ---------------------------------------------------------------- reading

struct Parser {
  const h5::Reader& r;
  const std::string& file;

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail("read_checkpoint", "'", file, "': key '", key, "': ", what);
  }

  void require_group(const std::string& key) const {
    if (!r.is_group(key)) bad(key, r.has(key) ? "should be a group" : "is missing");
  }

  void require_dataset(const std::string& key) const {
    if (!r.is_dataset(key)) bad(key, r.has(key) ? "should be a dataset" : "is missing");
  }

  // A dataset of one of the types ember writes (float32, float64, int64, uint8 for bool):
  // the reader would widen any other integer to int64 and pass it off as one.
  Tensor tensor(const std::string& key) const {
    require_dataset(key);
    std::string type;
    try {
      type = r.stored_type(key);
    } catch (const Error& e) {
      bad(key, e.what());
    }
    if (type != "float32" && type != "float64" && type != "int64" && type != "uint8")
      bad(key, cat_str("is stored as ", type, ", expected float32, float64, int64 or uint8 (bool)"));
    try {
      return r.read(key);
    } catch (const Error& e) {
      bad(key, e.what());
    }
  }

  int64_t scalar_int(const std::string& key) const {
    Tensor t = tensor(key);
    if (t.dim() != 0 || t.dtype() != kInt64)
      bad(key, cat_str("should be a scalar int64, got ", dtype_name(t.dtype()), " of shape ", shape_str(t.shape())));
    return t.data<int64_t>()[0];  // not item(), which goes through a double
  }

  std::vector<std::string> groups_under(const std::string& key) const {
    std::vector<std::string> names = r.children(key);
    for (auto& n : names) require_group(key + "/" + n);
    return names;
  }
};

Checkpoint parse(const h5::Reader& r, const std::string& file) {
  Parser p{r, file};
  if (!r.has_attr("/", "schema_version") || !r.has_attr("/", "format") || r.attr_is_string("/", "schema_version") ||
      !r.attr_is_string("/", "format") || r.attr_string("/", "format") != kMagic)
    p.bad("/", "is not an ember checkpoint (attributes 'format' and 'schema_version' missing or wrong)");
  int64_t version = r.attr_int("/", "schema_version");
  if (version != kCheckpointSchemaVersion)
    p.bad("/", cat_str("schema_version ", version, " is not known to this build (it reads version ",
                       kCheckpointSchemaVersion, ")"));

  static const std::set<std::string> known = {"model", "optimizer", "schedule", "progress",
                                              "rng",   "config",    "vocab",    "extra"};
  for (auto& name : r.children("/"))
    if (!known.count(name)) p.bad("/" + name, "is not part of the checkpoint schema");

  Checkpoint c;
  p.require_group("/model");
  for (auto& name : r.children("/model")) c.model[name] = p.tensor("/model/" + name);

  if (r.has("/optimizer")) {
    p.require_group("/optimizer");
    optim::OptimizerState os;
    for (auto& a : r.attr_names("/optimizer")) {
      if (a == "kind") {
        if (!r.attr_is_string("/optimizer", a)) p.bad("/optimizer", "attribute 'kind' should be a string");
        os.kind = r.attr_string("/optimizer", a);
      } else {
        if (r.attr_is_string("/optimizer", a)) p.bad("/optimizer", "attribute '" + a + "' should be a number");
        os.hyper[a] = r.attr_double("/optimizer", a);
      }
    }
    if (os.kind.empty()) p.bad("/optimizer", "attribute 'kind' is missing");
    p.require_group("/optimizer/state");
    for (auto& name : p.groups_under("/optimizer/state")) {
      std::string g = "/optimizer/state/" + name;
      optim::ParamState ps;
      ps.step = p.scalar_int(g + "/step");
      if (ps.step < 1 || ps.step > optim::kMaxStep)
        p.bad(g + "/step", cat_str("should be in [1, 2^62] (updates taken), got ", ps.step));
      for (auto& slot : r.children(g))
        if (slot != "step") ps.slots[slot] = p.tensor(g + "/" + slot);
      os.params[name] = std::move(ps);
    }
    c.optimizer = std::move(os);
  }

  if (r.has("/schedule")) {
    p.require_group("/schedule");
    ScheduleState ss;
    bool has_kind = false, has_last = false;
    for (auto& a : r.attr_names("/schedule")) {
      bool is_str = r.attr_is_string("/schedule", a);
      if (a == "kind") {
        if (!is_str) p.bad("/schedule", "attribute 'kind' should be a string");
        ss.kind = r.attr_string("/schedule", a);
        has_kind = true;
      } else if (is_str) {
        p.bad("/schedule", "attribute '" + a + "' should be a number");
      } else if (a == "last_step") {
        ss.last_step = r.attr_int("/schedule", a);
        has_last = true;
      } else {
        ss.settings[a] = r.attr_double("/schedule", a);
      }
    }
    if (!has_kind || !has_last) p.bad("/schedule", "attributes 'kind' and 'last_step' are required");
    if (ss.last_step < 0 || ss.last_step > kMaxCount)
      p.bad("/schedule", cat_str("attribute 'last_step' should be in [0, 2^62], got ", ss.last_step));
    if (!r.children("/schedule").empty()) p.bad("/schedule/" + r.children("/schedule")[0], "is not part of the schema");
    c.schedule = std::move(ss);
  }

  p.require_group("/progress");
  for (auto& name : r.children("/progress"))
    if (name != "step" && name != "epoch" && name != "position") p.bad("/progress/" + name, "is not part of the schema");
  // counters that training goes on incrementing: at most 2^62, so they cannot overflow
  for (auto [name, field] : {std::pair{"step", &Progress::step}, std::pair{"epoch", &Progress::epoch},
                             std::pair{"position", &Progress::position}}) {
    const std::string key = std::string("/progress/") + name;
    c.progress.*field = p.scalar_int(key);
    if (c.progress.*field < 0 || c.progress.*field > kMaxCount)
      p.bad(key, cat_str("should be in [0, 2^62], got ", c.progress.*field));
  }

  p.require_group("/rng");
  for (auto& name : r.children("/rng")) {
    std::string key = "/rng/" + name;
    p.require_dataset(key);
    try {
      c.generators[name] = r.read_u64(key);
    } catch (const Error& e) {
      p.bad(key, e.what());
    }
    if (c.generators[name].size() != 2) p.bad(key, "should hold 2 values (seed, counter)");
  }

  p.require_group("/config");
  for (auto& a : r.attr_names("/config")) {
    if (r.attr_is_string("/config", a)) c.config[a] = r.attr_string("/config", a);
    else if (r.attr_is_integer("/config", a)) c.config[a] = r.attr_int("/config", a);
    else c.config[a] = r.attr_double("/config", a);
  }

  p.require_group("/vocab");
  for (auto& name : r.children("/vocab")) {
    std::string key = "/vocab/" + name;
    p.require_dataset(key);
    try {
      c.vocab[name] = r.read_strings(key);
    } catch (const Error& e) {
      p.bad(key, e.what());
    }
  }

  p.require_group("/extra");
  for (auto& name : r.children("/extra")) c.extra[name] = p.tensor("/extra/" + name);
  return c;
}

}  // namespace

std::string to_string(const ConfigValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    std::ostringstream s;
    s.precision(17);
    s << *d;
    return s.str();
  }
  return "'" + std::get<std::string>(v) + "'";
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  // The whole file is built in memory, sealed with its header, then written in one
  // checked pass: HDF5 itself never writes to the disk.
  std::vector<uint8_t> bytes;
  {
    h5::Writer w = h5::Writer::in_memory(path, kHeaderBytes);
    write_contents(w, ckpt);
    bytes = w.image();
  }
  if (bytes.size() < kHeaderBytes) fail("save_checkpoint", "the HDF5 image of '", path, "' is shorter than its header");
  const std::string header = header_text(bytes.size(), crc_of(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes));
  std::memset(bytes.data(), 0, kHeaderBytes);
  std::memcpy(bytes.data(), header.data(), header.size());
  io::replace_file(path, bytes.data(), bytes.size(), "save_checkpoint");
}

namespace {

// read_checkpoint's refusal of a file whose bytes are damaged (checkpoint.h)
template <class... A>
[[noreturn]] void damaged(const A&... a) {
  throw CheckpointDamaged(cat_str("read_checkpoint: ", a...));
}

// Checks the 512-byte header against the file's size before anything else is read:
// head holds the file's first n bytes (at most kHeaderBytes), file_size is the size of the
// whole file. Returns the CRC-32 the header states.
uint32_t check_header(const std::string& name, const uint8_t* head, size_t n, uint64_t file_size) {
  const char* op = "read_checkpoint";
  bool hdf5_at_0 = n >= 8 && std::memcmp(head, kHdf5Signature, 8) == 0;
  if (n < std::strlen(kMagic) || std::memcmp(head, kMagic, std::strlen(kMagic)) != 0) {
    if (hdf5_at_0) damaged("'", name, "' is an HDF5 file but not an ember checkpoint (it has no ember header)");
    damaged("'", name, "' is not an ember checkpoint: it does not start with an ember header (the file has ",
            file_size, " bytes)");
  }
  if (n < kHeaderBytes || file_size < kHeaderBytes + 8)
    damaged("'", name, "' is truncated: ", file_size, " bytes, shorter than the header and HDF5 signature");
  // the header: "ember checkpoint\nschema N\nsize N\ncrc32 HEX\n" then NUL padding
  std::string header(reinterpret_cast<const char*>(head), kHeaderBytes);
  header.resize(std::strlen(header.c_str()));
  long long schema = -1;
  unsigned long long size = 0;
  unsigned crc = 0;
  char magic[32] = {0};
  int n_read = 0;
  // exactly as header_text writes it, NUL to the end: a header is not checksummed, so a
  // changed character must not read as another value (a schema version below 1 no build
  // wrote is damage too; one above this build's is a newer file)
  if (std::sscanf(header.c_str(), "%16c\nschema %lld\nsize %llu\ncrc32 %8x\n%n", magic, &schema, &size, &crc,
                  &n_read) != 4 ||
      n_read != (int)header.size() || header != header_text(size, crc, schema) ||
      std::any_of(head + header.size(), head + kHeaderBytes, [](uint8_t b) { return b != 0; }) || schema < 1)
    damaged("'", name, "' has a damaged ember header (key: header)");
  if (schema != kCheckpointSchemaVersion)
    fail(op, "'", name, "': header: schema version ", schema, " is not known to this build (it reads version ",
         kCheckpointSchemaVersion, ")");
  if (size != file_size)
    damaged("'", name, "' is ", size > file_size ? "truncated" : "longer than written", ": its header says ", size,
            " bytes, the file has ", file_size);
  return crc;
}

// Reads up to n bytes at offset; returns how many were read (fewer only at the end of the file).
size_t read_at(int fd, uint8_t* out, size_t n, uint64_t offset, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out + got, n - got, (off_t)(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("read_checkpoint", "cannot read '", path, "': ", std::strerror(errno));
    if (r == 0) break;
    got += (size_t)r;
  }
  return got;
}

}  // namespace

Checkpoint read_checkpoint_bytes(const std::string& name, const std::vector<uint8_t>& bytes) {
  const uint32_t crc = check_header(name, bytes.data(), std::min(bytes.size(), kHeaderBytes), bytes.size());
  uint32_t actual = crc_of(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  if (actual != crc)
    damaged("'", name, "' is corrupted: its checksum does not match (crc32 ", cat_str(std::hex, crc),
            " in the header, ", cat_str(std::hex, actual), " computed)");
  if (std::memcmp(bytes.data() + kHeaderBytes, kHdf5Signature, 8) != 0)
    damaged("'", name, "' has no HDF5 signature after its header");
  std::optional<h5::Reader> r;
  try {
    r.emplace(h5::Reader::from_image(name, bytes.data(), bytes.size()));
  } catch (const Error&) {
    damaged("'", name, "' passed its checksum but HDF5 cannot open it");
  }
  return parse(*r, name);
}

// The header first: a file that is no checkpoint, or whose size differs from the one its
// header states, is refused before the rest of it is read (or memory is taken for it).
Checkpoint read_checkpoint(const std::string& path) {
  const char* op = "read_checkpoint";
  const int fd = io::open_regular_file(path, O_RDONLY, op, "a checkpoint file");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(op, "cannot inspect '", path, "': ", std::strerror(errno));
  uint8_t head[kHeaderBytes];
  check_header(path, head, read_at(fd, head, kHeaderBytes, 0, path), (uint64_t)st.st_size);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize((size_t)st.st_size);
  } catch (const std::bad_alloc&) {
    fail(op, "'", path, "' holds ", (uint64_t)st.st_size, " bytes, more than there is memory to read it into");
  }
  size_t got = read_at(fd, bytes.data(), bytes.size(), 0, path);
  if (got != bytes.size())
    damaged("'", path, "' is truncated: it shrank from ", bytes.size(), " to ", got, " bytes while being read");
  return read_checkpoint_bytes(path, bytes);
}

Checkpoint make_checkpoint(const std::map<std::string, Tensor>& model, const optim::Optimizer* optimizer,
                           const optim::Schedule* schedule, const std::map<std::string, Generator*>& generators,
                           Progress progress, Config config) {
  const char* op = "make_checkpoint";
  Checkpoint c;
  for (auto& [k, t] : model) {
    check_tensor(t, "model tensor", k, op);
    c.model[k] = t.detach().clone();
  }
  if (optimizer) {
    optim::OptimizerState s = optimizer->state();
    for (auto& [name, ps] : s.params)
      for (auto& [slot, t] : ps.slots) {
        check_tensor(t, "optimizer slot", name + "/" + slot, op);
        t = t.clone();
      }
    c.optimizer = std::move(s);
  }
  if (schedule) c.schedule = ScheduleState{schedule->kind(), schedule->settings(), schedule->last_step()};
  for (auto& [name, g] : generators) {
    if (!g) fail(op, "generator '", name, "' is null");
    c.generators[name] = g->get_state();
  }
  c.progress = progress;
  c.config = std::move(config);
  return c;
}

}  // namespace ember::io
