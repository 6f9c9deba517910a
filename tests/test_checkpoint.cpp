// Checkpoints: what is saved comes back bitwise; every damaged, incomplete or mismatched
// file is refused with an error naming the file and the key, and leaves the model and
// optimizer exactly as they were; saving never leaves a broken file behind.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/autograd.h"
#include "io/h5.h"
#include "nn/layers.h"
#include "io/checkpoint.h"

using namespace ember;
using namespace ember::optim;
using namespace ember::io;
using namespace ember::testing;
namespace fs = std::filesystem;

namespace {

// A small model: an embedding, a linear layer and a float64 layer norm.
struct Model : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> proj;
  std::shared_ptr<nn::LayerNorm> norm;
  Model(uint64_t seed, int64_t dim = 6) {
    Generator g(seed);
    embed = register_module("embed", std::make_shared<nn::Embedding>(11, dim, -1, &g));
    proj = register_module("proj", std::make_shared<nn::Linear>(dim, 3, true, &g));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(3, 1e-5, true, kFloat64));
  }
  Tensor loss(const Tensor& ids) {
    Tensor h = proj->forward(embed->forward(ids));
    return sum(square(norm->forward(h.to(kFloat64))));
  }
};

struct Setup {
  Model model;
  Adam opt;
  InverseSqrtSchedule sched{8, 4, 2.0};
  Generator data_gen;
  explicit Setup(uint64_t seed) : model(seed), opt(model.named_parameters(), {.lr = 1e-2}), data_gen(seed + 100) {}
  void train(int steps) {
    for (int i = 0; i < steps; i++) {
      Tensor ids = randint(0, 11, {4, 3}, &data_gen);
      opt.zero_grad();
      model.loss(ids).backward();
      sched.step(opt);
      opt.step();
    }
  }
  Checkpoint snapshot(int64_t step) {
    return make_checkpoint(model.state_dict(), &opt, &sched, {{"data", &data_gen}}, {.step = step, .epoch = 1, .position = 7},
                           {{"d_model", int64_t(6)}, {"dropout", 0.1}, {"activation", std::string("relu")}});
  }
  ResumeTargets targets() {
    ResumeTargets t;
    t.model = model.state_dict();
    t.optimizer = &opt;
    t.schedule = &sched;
    t.generators = {{"data", &data_gen}};
    t.config = {{"d_model", int64_t(6)}, {"dropout", 0.1}, {"activation", std::string("relu")}};
    return t;
  }
};

// Everything load_checkpoint may touch, copied, to prove a refused load changed nothing.
struct Fingerprint {
  std::map<std::string, Tensor> model;
  OptimizerState opt;
  std::map<std::string, double> hyper;
  int64_t sched_step;
  std::vector<uint64_t> gen;
  explicit Fingerprint(Setup& s) {
    for (auto& [k, t] : s.model.state_dict()) model[k] = t.detach().clone();
    opt = s.opt.state();
    for (auto& [n, ps] : opt.params)
      for (auto& [slot, t] : ps.slots) t = t.clone();
    hyper = s.opt.hyper();
    sched_step = s.sched.last_step();
    gen = s.data_gen.get_state();
  }
  void require_same(Setup& s) const {
    for (auto& [k, t] : s.model.state_dict()) {
      INFO(k);
      REQUIRE(equal(t, model.at(k)));
    }
    OptimizerState now = s.opt.state();
    REQUIRE(now.params.size() == opt.params.size());
    for (auto& [n, ps] : now.params) {
      REQUIRE(ps.step == opt.params.at(n).step);
      for (auto& [slot, t] : ps.slots) REQUIRE(equal(t, opt.params.at(n).slots.at(slot)));
    }
    REQUIRE(s.opt.hyper() == hyper);
    REQUIRE(s.sched.last_step() == sched_step);
    REQUIRE(s.data_gen.get_state() == gen);
  }
};

// Rewrites the 512-byte header so that size and checksum match the file again: lets a
// test reach the checks behind the checksum with a file edited on purpose.
void reseal(const std::string& path, int schema = 1) {
  std::vector<uint8_t> b = read_bytes(path);
  REQUIRE(b.size() > 512);
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b.data() + 512, (uInt)(b.size() - 512));
  char header[512] = {0};
  std::snprintf(header, sizeof header, "ember checkpoint\nschema %d\nsize %zu\ncrc32 %08x\n", schema, b.size(), crc);
  std::memcpy(b.data(), header, 512);
  write_bytes(path, b);
}

// Writes a checkpoint by hand, through a plain HDF5 writer, then seals it.
void write_edited(const std::string& path, const Checkpoint& c, const std::function<void(h5::Writer&)>& edit,
                  int64_t schema_attr = kCheckpointSchemaVersion, const std::string& skip = "") {
  {
    h5::Writer w(path, 512);
    w.attr("/", "format", std::string("ember checkpoint"));
    w.attr_int("/", "schema_version", schema_attr);
    w.group("/model");
    for (auto& [k, t] : c.model)
      if ("/model/" + k != skip) w.write("/model/" + k, t);
    for (auto& [k, v] : std::map<std::string, int64_t>{{"step", c.progress.step}, {"epoch", c.progress.epoch},
                                                         {"position", c.progress.position}})
      if ("/progress/" + k != skip) w.write("/progress/" + k, scalar_tensor((double)v, kInt64));
    for (auto g : {"/rng", "/config", "/vocab", "/extra"}) w.group(g);
    edit(w);
  }
  reseal(path);
}

}  // namespace

TEST_CASE("a checkpoint brings back every part bitwise") {
  ScratchDir dir;
  Setup a(1);
  a.train(3);
  Checkpoint c = a.snapshot(3);
  c.vocab["src"] = {"<pad>", "<s>", "</s>", "<unk>", "a", "\xc3\xa9"};
  c.extra["losses"] = from_vector(std::vector<float>{1.5f, 0.25f, 0.125f}, {3});
  save_checkpoint(dir.file("c.h5"), c);

  Checkpoint r = read_checkpoint(dir.file("c.h5"));
  REQUIRE(r.model.size() == c.model.size());
  for (auto& [k, t] : c.model) {
    INFO(k);
    CHECK(r.model.at(k).dtype() == t.dtype());
    CHECK(equal(r.model.at(k), t));
  }
  CHECK(r.model.at("norm.weight").dtype() == kFloat64);
  CHECK(r.model.at("proj.weight").dtype() == kFloat32);
  REQUIRE(r.optimizer);
  CHECK(r.optimizer->kind == "Adam");
  CHECK(r.optimizer->hyper == a.opt.hyper());
  for (auto& [n, ps] : c.optimizer->params) {
    CHECK(r.optimizer->params.at(n).step == 3);
    for (auto& [slot, t] : ps.slots) CHECK(equal(r.optimizer->params.at(n).slots.at(slot), t));
  }
  REQUIRE(r.schedule);
  CHECK(r.schedule->kind == "InverseSqrt");
  CHECK(r.schedule->last_step == 3);
  CHECK(r.schedule->settings == a.sched.settings());
  CHECK(r.progress.step == 3);
  CHECK(r.progress.epoch == 1);
  CHECK(r.progress.position == 7);
  CHECK(r.generators.at("data") == a.data_gen.get_state());
  CHECK(r.config == c.config);
  CHECK(std::holds_alternative<int64_t>(r.config.at("d_model")));
  CHECK(std::holds_alternative<double>(r.config.at("dropout")));
  CHECK(r.vocab == c.vocab);
  CHECK(equal(r.extra.at("losses"), c.extra.at("losses")));
}

TEST_CASE("a checkpoint is an ordinary HDF5 file with dotted names under /model") {
  ScratchDir dir;
  Setup a(2);
  a.train(1);
  save_checkpoint(dir.file("c.h5"), a.snapshot(1));
  h5::Reader r(dir.file("c.h5"));  // a plain HDF5 open, header and all
  CHECK(r.is_dataset("/model/proj.weight"));
  CHECK(r.is_dataset("/optimizer/state/proj.weight/exp_avg"));
  CHECK(r.read("/optimizer/state/proj.weight/step").item<int64_t>() == 1);
  CHECK(r.attr_int("/", "schema_version") == kCheckpointSchemaVersion);
  CHECK(r.attr_string("/optimizer", "kind") == "Adam");
  CHECK(equal(r.read("/model/proj.weight"), a.model.proj->weight));
  CHECK(r.read_u64("/rng/data") == a.data_gen.get_state());
}

TEST_CASE("load_checkpoint restores model, optimizer, schedule and generators into fresh objects") {
  ScratchDir dir;
  Setup a(3);
  a.train(4);
  save_checkpoint(dir.file("c.h5"), a.snapshot(4));
  Setup b(99);  // different initial weights and data stream
  ResumeTargets t = b.targets();
  Checkpoint c = load_checkpoint(dir.file("c.h5"), t);
  CHECK(c.progress.step == 4);
  for (auto& [k, v] : a.model.state_dict()) CHECK(equal(b.model.state_dict().at(k), v));
  CHECK(b.sched.last_step() == 4);
  CHECK(b.data_gen.get_state() == a.data_gen.get_state());
  // and both continue identically
  a.train(3);
  b.train(3);
  for (auto& [k, v] : a.model.state_dict()) CHECK(equal(b.model.state_dict().at(k), v));
}

TEST_CASE("a missing file is an error naming it, and nothing changes") {
  ScratchDir dir;
  Setup s(4);
  s.train(1);
  Fingerprint before(s);
  ResumeTargets t = s.targets();
  std::string msg = error_of([&] { load_checkpoint(dir.file("nope.h5"), t); });
  CHECK_THAT(msg, Catch::Contains("load_checkpoint") || Catch::Contains("read_checkpoint"));
  CHECK_THAT(msg, Catch::Contains("nope.h5"));
  CHECK_THAT(msg, Catch::Contains("No such file"));
  before.require_same(s);
}

TEST_CASE("files that are not checkpoints are refused") {
  ScratchDir dir;
  Setup s(5);
  s.train(1);
  Fingerprint before(s);
  ResumeTargets t = s.targets();
  write_bytes(dir.file("text.h5"), {'h', 'e', 'l', 'l', 'o', '\n'});
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("text.h5"), t); }),
             Catch::Contains("text.h5") && Catch::Contains("not an ember checkpoint"));
  write_bytes(dir.file("empty.h5"), {});
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("empty.h5"), t); }), Catch::Contains("empty.h5"));
  {
    h5::Writer w(dir.file("plain.h5"));
    w.write("/x", ones({2}));
  }
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("plain.h5"), t); }),
             Catch::Contains("plain.h5") && Catch::Contains("HDF5 file but not an ember checkpoint"));
  fs::create_directories(dir.file("a_directory.h5"));
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("a_directory.h5"), t); }), Catch::Contains("a_directory.h5"));
  before.require_same(s);
}

TEST_CASE("a truncated checkpoint is refused at every offset, and nothing changes") {
  ScratchDir dir;
  Setup a(6), s(7);
  a.train(2);
  s.train(1);
  save_checkpoint(dir.file("c.h5"), a.snapshot(2));
  std::vector<uint8_t> whole = read_bytes(dir.file("c.h5"));
  Fingerprint before(s);
  ResumeTargets t = s.targets();
  for (size_t cut : {size_t(0), size_t(10), size_t(511), size_t(512), size_t(520), whole.size() / 3, whole.size() / 2,
                     whole.size() - 100, whole.size() - 1}) {
    INFO("cut at " << cut << " of " << whole.size());
    write_bytes(dir.file("cut.h5"), std::vector<uint8_t>(whole.begin(), whole.begin() + (long)cut));
    std::string msg = error_of([&] { load_checkpoint(dir.file("cut.h5"), t); });
    CHECK_THAT(msg, Catch::Contains("cut.h5"));
    if (cut >= 520) CHECK_THAT(msg, Catch::Contains("truncated"));
    before.require_same(s);
  }
}

TEST_CASE("a checkpoint with flipped bytes is refused, and nothing changes") {
  ScratchDir dir;
  Setup a(8), s(9);
  a.train(2);
  s.train(1);
  save_checkpoint(dir.file("c.h5"), a.snapshot(2));
  std::vector<uint8_t> whole = read_bytes(dir.file("c.h5"));
  Fingerprint before(s);
  ResumeTargets t = s.targets();
  // in the header, in HDF5's superblock, in metadata and in raw weights, and the last byte
  for (size_t at : {size_t(3), size_t(40), size_t(515), size_t(600), whole.size() / 2, whole.size() - 1}) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80)}) {
      INFO("flip " << int(mask) << " at " << at);
      std::vector<uint8_t> bad = whole;
      bad[at] ^= mask;
      write_bytes(dir.file("flipped.h5"), bad);
      std::string msg = error_of([&] { load_checkpoint(dir.file("flipped.h5"), t); });
      CHECK_THAT(msg, Catch::Contains("flipped.h5"));
      if (at >= 512) CHECK_THAT(msg, Catch::Contains("corrupted"));
      before.require_same(s);
    }
  }
}

TEST_CASE("missing, unexpected, reshaped and retyped model tensors are named") {
  ScratchDir dir;
  Setup s(10);
  s.train(1);
  Fingerprint before(s);
  ResumeTargets t = s.targets();
  t.optimizer = nullptr;
  t.schedule = nullptr;
  t.generators.clear();
  t.config.clear();
  Checkpoint good = s.snapshot(1);

  Checkpoint c = good;
  c.model.erase("proj.bias");
  save_checkpoint(dir.file("missing.h5"), c);
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("missing.h5"), t); }),
             Catch::Contains("missing.h5") && Catch::Contains("/model/proj.bias") && Catch::Contains("missing"));

  c = good;
  c.model["proj.extra"] = zeros({2});
  save_checkpoint(dir.file("unexpected.h5"), c);
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("unexpected.h5"), t); }),
             Catch::Contains("/model/proj.extra") && Catch::Contains("unexpected"));

  c = good;
  c.model["proj.weight"] = zeros({6, 3});
  save_checkpoint(dir.file("shape.h5"), c);
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("shape.h5"), t); }),
             Catch::Contains("/model/proj.weight") && Catch::Contains("float32 [6,3] in the file") && Catch::Contains("[3,6] in the model"));

  c = good;
  c.model["norm.weight"] = ones({3}, kFloat32);
  save_checkpoint(dir.file("dtype.h5"), c);
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("dtype.h5"), t); }),
             Catch::Contains("/model/norm.weight") && Catch::Contains("float32") && Catch::Contains("float64"));
  before.require_same(s);
}

TEST_CASE("optimizer, schedule, generator and configuration mismatches are named, and nothing changes") {
  ScratchDir dir;
  Setup s(11);
  s.train(2);
  Fingerprint before(s);
  Checkpoint good = s.snapshot(2);
  save_checkpoint(dir.file("good.h5"), good);

  SECTION("configuration") {
    ResumeTargets t = s.targets();
    t.config["d_model"] = int64_t(8);
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("good.h5"), t); }),
               Catch::Contains("good.h5") && Catch::Contains("/config") && Catch::Contains("d_model") &&
                   Catch::Contains("6") && Catch::Contains("8"));
    t.config = s.targets().config;
    t.config["layers"] = int64_t(2);
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("good.h5"), t); }), Catch::Contains("layers"));
  }
  SECTION("optimizer kind") {
    SGD sgd(s.model.named_parameters());
    ResumeTargets t = s.targets();
    t.optimizer = &sgd;
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("good.h5"), t); }),
               Catch::Contains("/optimizer") && Catch::Contains("Adam") && Catch::Contains("SGD"));
  }
  SECTION("optimizer state missing") {
    Checkpoint c = good;
    c.optimizer.reset();
    save_checkpoint(dir.file("noopt.h5"), c);
    ResumeTargets t = s.targets();
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("noopt.h5"), t); }),
               Catch::Contains("noopt.h5") && Catch::Contains("/optimizer") && Catch::Contains("missing"));
  }
  SECTION("optimizer slot of the wrong shape") {
    Checkpoint c = good;
    c.optimizer->params.at("proj.weight").slots.at("exp_avg") = zeros({2, 2});
    save_checkpoint(dir.file("slot.h5"), c);
    ResumeTargets t = s.targets();
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("slot.h5"), t); }),
               Catch::Contains("/optimizer/state/proj.weight/exp_avg") && Catch::Contains("[2,2]"));
  }
  SECTION("optimizer slot unknown to the optimizer") {
    Checkpoint c = good;
    c.optimizer->params.at("proj.weight").slots["momentum_buffer"] = zeros({3, 6});
    save_checkpoint(dir.file("slotname.h5"), c);
    ResumeTargets t = s.targets();
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("slotname.h5"), t); }),
               Catch::Contains("slotname.h5") && Catch::Contains("momentum_buffer"));
  }
  SECTION("optimizer state of an unknown parameter") {
    Checkpoint c = good;
    c.optimizer->params["ghost.weight"] = c.optimizer->params.at("proj.weight");
    save_checkpoint(dir.file("ghost.h5"), c);
    ResumeTargets t = s.targets();
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("ghost.h5"), t); }),
               Catch::Contains("/optimizer/state/ghost.weight"));
  }
  SECTION("schedule settings") {
    InverseSqrtSchedule other(8, 10, 2.0);
    ResumeTargets t = s.targets();
    t.schedule = &other;
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("good.h5"), t); }),
               Catch::Contains("/schedule") && Catch::Contains("warmup"));
  }
  SECTION("generator") {
    Generator extra(5);
    ResumeTargets t = s.targets();
    t.generators["dropout"] = &extra;
    CHECK_THAT(error_of([&] { load_checkpoint(dir.file("good.h5"), t); }), Catch::Contains("/rng/dropout"));
  }
  before.require_same(s);
}

TEST_CASE("unknown schema versions and unknown keys are refused") {
  ScratchDir dir;
  Setup s(12);
  s.train(1);
  Fingerprint before(s);
  ResumeTargets t = s.targets();
  t.optimizer = nullptr;
  t.schedule = nullptr;
  t.generators.clear();
  t.config.clear();
  Checkpoint good = s.snapshot(1);

  write_edited(dir.file("v2.h5"), good, [](h5::Writer&) {}, 2);
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("v2.h5"), t); }),
             Catch::Contains("v2.h5") && Catch::Contains("schema_version 2"));

  write_edited(dir.file("ok.h5"), good, [](h5::Writer&) {});
  CHECK_NOTHROW(load_checkpoint(dir.file("ok.h5"), t));  // the hand-written file itself is fine
  s.model.load_state_dict(before.model);

  save_checkpoint(dir.file("h2.h5"), good);
  reseal(dir.file("h2.h5"), 2);
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("h2.h5"), t); }),
             Catch::Contains("h2.h5") && Catch::Contains("schema version 2"));

  write_edited(dir.file("stray.h5"), good, [](h5::Writer& w) { w.write("/stray", zeros({1})); });
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("stray.h5"), t); }),
             Catch::Contains("'/stray'") && Catch::Contains("not part of the checkpoint schema"));

  write_edited(dir.file("noprogress.h5"), good, [](h5::Writer&) {}, kCheckpointSchemaVersion, "/progress/epoch");
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("noprogress.h5"), t); }),
             Catch::Contains("/progress/epoch") && Catch::Contains("missing"));

  write_edited(dir.file("badstep.h5"), good, [](h5::Writer& w) { w.write("/progress/oops", zeros({1})); });
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("badstep.h5"), t); }), Catch::Contains("/progress/oops"));

  write_edited(dir.file("rng.h5"), good, [](h5::Writer& w) { w.write_u64("/rng/data", {1, 2, 3}); });
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("rng.h5"), t); }), Catch::Contains("/rng/data"));
  before.require_same(s);
}

TEST_CASE("read_checkpoint tells damaged bytes (CheckpointDamaged) from whole files it refuses") {
  ScratchDir dir;
  Setup a(13);
  a.train(1);
  const Checkpoint good = a.snapshot(1);
  save_checkpoint(dir.file("c.h5"), good);
  const std::vector<uint8_t> whole = read_bytes(dir.file("c.h5"));
  auto verdict = [&](const std::string& name) -> std::string {
    try {
      read_checkpoint(dir.file(name));
      return "read";
    } catch (const CheckpointDamaged& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("read_checkpoint: '") && Catch::Contains(name));
      return "damaged";
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(name));
      return "refused";
    }
  };
  CHECK(verdict("c.h5") == "read");
  // damaged: cut short, a flipped byte, a longer file, no header, a plain HDF5 file
  write_bytes(dir.file("cut.h5"), std::vector<uint8_t>(whole.begin(), whole.begin() + (long)whole.size() / 2));
  CHECK(verdict("cut.h5") == "damaged");
  std::vector<uint8_t> bad = whole;
  bad[whole.size() / 2] ^= 0x10;
  write_bytes(dir.file("flipped.h5"), bad);
  CHECK(verdict("flipped.h5") == "damaged");
  bad = whole;
  bad.push_back(0);
  write_bytes(dir.file("longer.h5"), bad);
  CHECK(verdict("longer.h5") == "damaged");
  write_bytes(dir.file("zeros.h5"), std::vector<uint8_t>(whole.size(), 0));
  CHECK(verdict("zeros.h5") == "damaged");
  {
    h5::Writer w(dir.file("plain.h5"));
    w.write("/x", ones({2}));
  }
  CHECK(verdict("plain.h5") == "damaged");
  // the header is not checksummed: it must read exactly as written, or it is damage
  bad = whole;
  bad[500] = 'x';  // in its NUL padding
  write_bytes(dir.file("padding.h5"), bad);
  CHECK(verdict("padding.h5") == "damaged");
  bad = whole;
  REQUIRE(std::string(bad.begin() + 17, bad.begin() + 25) == "schema 1");
  bad[23] = '+';  // "schema+1"
  write_bytes(dir.file("plus.h5"), bad);
  CHECK(verdict("plus.h5") == "damaged");
  save_checkpoint(dir.file("v0.h5"), good);
  reseal(dir.file("v0.h5"), 0);  // a version no build wrote
  CHECK(verdict("v0.h5") == "damaged");
  // whole but refused: another schema version, an edited key, no file at all, a directory
  save_checkpoint(dir.file("v2.h5"), good);
  reseal(dir.file("v2.h5"), 2);
  CHECK(verdict("v2.h5") == "refused");
  write_edited(dir.file("stray.h5"), good, [](h5::Writer& w) { w.write("/stray", zeros({1})); });
  CHECK(verdict("stray.h5") == "refused");
  CHECK(verdict("missing.h5") == "refused");
  fs::create_directories(dir.file("a_directory.h5"));
  CHECK(verdict("a_directory.h5") == "refused");
}

TEST_CASE("names that cannot be HDF5 keys are refused when saving, and no file is left") {
  ScratchDir dir;
  Checkpoint c;
  c.model["a/b"] = zeros({1});
  CHECK_THAT(error_of([&] { save_checkpoint(dir.file("c.h5"), c); }), Catch::Contains("a/b"));
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("a crash in the middle of saving leaves the previous checkpoint loadable") {
  ScratchDir dir;
  Setup a(13);
  a.train(1);
  Checkpoint first = a.snapshot(1);
  a.train(1);
  Checkpoint second = a.snapshot(2);
  std::string path = dir.file("c.h5");
  save_checkpoint(path, first);
  for (int round = 0; round < 6; round++) {
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // saves over and over until killed
      for (;;) save_checkpoint(path, (round % 2) ? first : second);
    }
    usleep(2000 + 3000 * round);
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    Checkpoint c = read_checkpoint(path);  // old or new, never broken
    CHECK((c.progress.step == 1 || c.progress.step == 2));
  }
}

TEST_CASE("a full disk makes saving fail cleanly, and the previous checkpoint stays") {
  ScratchDir dir;
  Setup a(14);
  a.train(1);
  std::string path = dir.file("c.h5");
  save_checkpoint(path, a.snapshot(1));
  std::vector<uint8_t> before = read_bytes(path);
  Checkpoint big = a.snapshot(2);
  big.extra["big"] = zeros({1 << 18});  // 1 MiB, over the file-size limit below
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG, like a full disk
    struct rlimit lim = {200000, 200000};
    setrlimit(RLIMIT_FSIZE, &lim);
    int code = 0;
    try {
      save_checkpoint(path, big);
    } catch (const Error& e) {
      code = std::strstr(e.what(), "save_checkpoint") && std::strstr(e.what(), "File too large") ? 42 : 43;
    }
    std::exit(code);  // through the exit handlers, HDF5's included: they must find nothing to close
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 42);
  CHECK(read_bytes(path) == before);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += 1, (void)e;
  CHECK(files == 1);  // the temporary file was removed
}

TEST_CASE("CheckpointManager keeps the newest checkpoints") {
  ScratchDir dir;
  Setup a(15);
  CheckpointManager mgr(dir.file("run"), 2);
  CHECK_FALSE(mgr.latest());
  for (int step = 1; step <= 5; step++) {
    a.train(1);
    mgr.save(a.snapshot(step * 10));
  }
  auto all = mgr.list();
  REQUIRE(all.size() == 2);
  CHECK(all[0] == mgr.path_for(40));
  CHECK(all[1] == mgr.path_for(50));
  CHECK(*mgr.latest() == mgr.path_for(50));
  CHECK(read_checkpoint(*mgr.latest()).progress.step == 50);
  CHECK(mgr.pruning_failures().empty());
  CHECK_THAT(error_of([&] { CheckpointManager bad(dir.file("x"), 0); }), Catch::Contains("keep_last"));
}

TEST_CASE("CheckpointManager reads the step a checkpoint's name gives, in any directory, and only from its form") {
  CheckpointManager mgr("run", 2);
  CHECK(mgr.step_named(mgr.path_for(90)) == 90);
  CHECK(mgr.step_named("elsewhere/ckpt-00000010.h5") == 10);
  CHECK(mgr.step_named("ckpt-123456789012345678.h5") == 123456789012345678);
  for (const char* other : {"run/ckpt-.h5", "run/ckpt-0001x.h5", "run/ckpt-00000010.h5.damaged", "run/best.h5",
                            "run/model-00000010.h5", "run/ckpt-1234567890123456789.h5"})
    CHECK_FALSE(mgr.step_named(other));
}

TEST_CASE("CheckpointManager names an old checkpoint it cannot remove, and the save still stands") {
  ScratchDir dir;
  Setup a(15);
  CheckpointManager mgr(dir.file("run"), 1);
  mgr.save(a.snapshot(10));
  // something in the series' place that remove() refuses: a directory that is not empty
  fs::remove(mgr.path_for(10));
  fs::create_directories(fs::path(mgr.path_for(10)) / "inside");
  const std::string path = mgr.save(a.snapshot(20));
  CHECK(path == mgr.path_for(20));
  CHECK(read_checkpoint(path).progress.step == 20);
  REQUIRE(mgr.pruning_failures().size() == 1);
  CHECK_THAT(mgr.pruning_failures()[0], Catch::StartsWith(mgr.path_for(10) + ": "));
  fs::remove_all(mgr.path_for(10));
  mgr.save(a.snapshot(30));
  CHECK(mgr.pruning_failures().empty());
  CHECK(mgr.list() == std::vector<std::string>{mgr.path_for(30)});
}
