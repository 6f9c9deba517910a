// Bit-exact resume: training a small Transformer with dropout for N steps in one go, and
// training k steps, saving, destroying everything, loading into fresh objects and
// training N - k more, give bitwise the same parameters, optimizer moments and losses -
// with 1 thread and with 2.
#include <catch2/catch.hpp>

#include "test_util.h"
#include "tiny_model.h"

#include <unistd.h>

#include <hdf5.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <type_traits>
#include <filesystem>
#include <memory>

#include "core/parallel.h"
#include "nn/functional.h"
#include "nn/transformer.h"
#include "io/checkpoint.h"

using namespace ember;
using namespace ember::optim;
using namespace ember::io;
namespace fs = std::filesystem;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

constexpr int64_t kPairs = 24, kBatch = 4, kSrcLen = 7, kTgtLen = 6, kVocab = 12;

nn::TransformerConfig model_config() {
  return testing::tiny_transformer({.src_vocab = kVocab, .tgt_vocab = kVocab});
}

// A fixed toy corpus: random token sequences of varied length, padded with 0; the target
// starts with the begin token 1.
struct Corpus {
  Tensor src, tgt;  // [kPairs, kSrcLen], [kPairs, kTgtLen + 1]
  Corpus() {
    Generator g(2024);
    std::vector<int64_t> s(kPairs * kSrcLen, 0), t(kPairs * (kTgtLen + 1), 0);
    for (int64_t i = 0; i < kPairs; i++) {
      int64_t n = 3 + (int64_t)(g.next_u64() % (kSrcLen - 2));
      for (int64_t j = 0; j < n; j++) s[i * kSrcLen + j] = 2 + (int64_t)(g.next_u64() % (kVocab - 2));
      t[i * (kTgtLen + 1)] = 1;
      for (int64_t j = 0; j < std::min(n, kTgtLen); j++) t[i * (kTgtLen + 1) + 1 + j] = s[i * kSrcLen + n - 1 - j];
    }
    src = from_vector(s, {kPairs, kSrcLen});
    tgt = from_vector(t, {kPairs, kTgtLen + 1});
  }
};

// Everything a training run holds. Built from seeds alone, so that a fresh Trainer is
// what a restarted process would build before loading its checkpoint.
struct Trainer {
  const Corpus& data;
  Generator model_gen{7}, data_gen{8}, dropout_gen{9};
  std::shared_ptr<nn::Transformer> model;
  std::unique_ptr<Adam> opt;
  InverseSqrtSchedule sched{16, 4, 1.0};
  Progress progress;
  Tensor order;  // this epoch's order of the corpus, int64 [kPairs]
  std::vector<float> losses;

  explicit Trainer(const Corpus& d) : data(d) {
    nn::TransformerConfig cfg = model_config();
    cfg.layer.dropout_gen = &dropout_gen;  // every dropout mask comes from here
    model = std::make_shared<nn::Transformer>(cfg, &model_gen);
    opt = std::make_unique<Adam>(model->named_parameters(), AdamOptions{.lr = 1e-3, .weight_decay = 1e-4});
  }

  void new_epoch_order() {
    std::vector<int64_t> idx(kPairs);
    for (int64_t i = 0; i < kPairs; i++) idx[i] = i;
    for (int64_t i = kPairs - 1; i > 0; i--) std::swap(idx[i], idx[data_gen.next_u64() % (i + 1)]);
    order = from_vector(idx, {kPairs});
  }

  void step() {
    if (progress.position == 0) new_epoch_order();
    Tensor ids = order.narrow(0, progress.position, kBatch);
    Tensor src = index_select(data.src, 0, ids), tgt = index_select(data.tgt, 0, ids);
    Tensor tgt_in = tgt.narrow(1, 0, kTgtLen), tgt_out = tgt.narrow(1, 1, kTgtLen);
    model->train();
    opt->zero_grad();
    Tensor logits = model->forward(src, tgt_in);
    Tensor loss = nn::cross_entropy(logits.reshape({-1, kVocab}), tgt_out.reshape({-1}), 0);
    loss.backward();
    clip_grad_norm(model->named_parameters(), 1.0);
    sched.step(*opt);
    opt->step();
    losses.push_back(loss.item<float>());
    progress.step += 1;
    progress.position += kBatch;
    if (progress.position >= kPairs) progress.position = 0, progress.epoch += 1;
  }

  std::map<std::string, Generator*> generators() {
    return {{"dropout", &dropout_gen}, {"model", &model_gen}, {"data", &data_gen}};
  }

  void save(const std::string& path) {
    Checkpoint c = make_checkpoint(model->state_dict(), opt.get(), &sched, generators(), progress,
                                   {{"d_model", model->cfg.layer.d_model}, {"dropout", model->cfg.layer.dropout_p}});
    c.extra["data_order"] = order;
    c.extra["losses"] = from_vector(losses, {(int64_t)losses.size()});
    save_checkpoint(path, c);
  }

  void load(const std::string& path) {
    ResumeTargets t;
    t.model = model->state_dict();
    t.optimizer = opt.get();
    t.schedule = &sched;
    t.generators = generators();
    t.config = {{"d_model", model->cfg.layer.d_model}, {"dropout", model->cfg.layer.dropout_p}};
    Checkpoint c = load_checkpoint(path, t);
    progress = c.progress;
    order = c.extra.at("data_order");
    losses = c.extra.at("losses").to_vector<float>();
  }
};

void require_identical(Trainer& a, Trainer& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); i++) {
    INFO("loss of step " << i + 1);
    REQUIRE(std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)) == 0);
  }
  for (auto& [name, p] : a.model->named_parameters()) {
    INFO(name);
    REQUIRE(equal(p, b.model->state_dict().at(name)));
  }
  OptimizerState sa = a.opt->state(), sb = b.opt->state();
  REQUIRE(sa.params.size() == sb.params.size());
  for (auto& [name, ps] : sa.params) {
    INFO(name);
    REQUIRE(ps.step == sb.params.at(name).step);
    for (auto& [slot, t] : ps.slots) REQUIRE(equal(t, sb.params.at(name).slots.at(slot)));
  }
  REQUIRE(a.progress.step == b.progress.step);
  REQUIRE(a.data_gen.get_state() == b.data_gen.get_state());
  REQUIRE(a.model_gen.get_state() == b.model_gen.get_state());
}

// The default generator's state: a model whose configuration names its dropout
// generator never draws from it.
std::vector<uint64_t> default_state() { return default_generator().get_state(); }

void check_resume(int threads, int total, int k) {
  NumThreadsGuard guard(threads);
  Corpus corpus;
  const std::vector<uint64_t> default_before = default_state();
  Trainer whole(corpus);
  for (int i = 0; i < total; i++) whole.step();
  REQUIRE(default_state() == default_before);
  REQUIRE(whole.dropout_gen.get_state()[1] > 0);  // it drew the masks

  fs::path dir = fs::temp_directory_path() / ("ember_resume_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "c.h5").string();
  {
    Trainer first(corpus);
    for (int i = 0; i < k; i++) first.step();
    first.save(path);
  }  // everything destroyed
  Trainer second(corpus);
  second.load(path);
  for (int i = k; i < total; i++) second.step();
  fs::remove_all(dir);
  require_identical(whole, second);
  REQUIRE(second.dropout_gen.get_state() == whole.dropout_gen.get_state());
  REQUIRE(default_state() == default_before);
}

}  // namespace

TEST_CASE("resuming from a checkpoint mid-epoch is bit-exact with 1 thread") { check_resume(1, 14, 5); }

TEST_CASE("resuming from a checkpoint mid-epoch is bit-exact with 2 threads") { check_resume(2, 14, 5); }

TEST_CASE("resuming from a checkpoint at an epoch boundary is bit-exact") { check_resume(2, 12, 6); }

TEST_CASE("dropout makes the resumed run depend on the restored generator") {
  // Without restoring the generator dropout draws from, the continuation differs: the
  // tests above would catch a checkpoint that forgot it.
  Corpus corpus;
  Trainer whole(corpus);
  for (int i = 0; i < 6; i++) whole.step();
  Trainer other(corpus);
  for (int i = 0; i < 3; i++) other.step();
  other.dropout_gen.manual_seed(12345);
  for (int i = 3; i < 6; i++) other.step();
  CHECK(std::memcmp(&whole.losses[5], &other.losses[5], sizeof(float)) != 0);
}

// ---------------------------------------------------------------- what a resume refuses

namespace {

// A small checkpoint to tamper with: model {a [4] parameter, b [1] buffer}, Adam after one
// step, progress step 1.
struct SmallRun {
  Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {4}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{5}, {1});
  std::unique_ptr<Adam> opt;
  SmallRun() {
    opt = std::make_unique<Adam>(NamedParams{{"a", a}});
    a.set_grad(from_vector(std::vector<double>{1, -1, 2, -2}, {4}));
    opt->step();
  }
  Checkpoint checkpoint() const { return make_checkpoint({{"a", a}, {"b", b}}, opt.get(), nullptr, {}, {1, 0, 4}); }
};

// A scratch directory, removed at the end.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("ember_resume_bad_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const char* name) const { return (dir / name).string(); }
};

// Replaces a dataset of the saved checkpoint at path by one of the given HDF5 type and
// values, then writes the header again (size and CRC-32), as a tool editing the file would.
template <class T>
void replace_dataset(const std::string& path, const std::string& key, hid_t type, const std::vector<hsize_t>& dims,
                     const std::vector<T>& values) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  REQUIRE(H5Ldelete(f, key.c_str(), H5P_DEFAULT) >= 0);
  hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple((int)dims.size(), dims.data(), nullptr);
  hid_t d = H5Dcreate2(f, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(d >= 0);
  hid_t mem = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  REQUIRE(H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data() + 512), bytes.size() - 512);
  char header[512] = {0};
  std::snprintf(header, sizeof header, "ember checkpoint\nschema 1\nsize %zu\ncrc32 %08lx\n", bytes.size(), crc);
  std::memcpy(bytes.data(), header, sizeof header);
  std::ofstream(path, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
}

// load_checkpoint of path into run refuses with a message holding each of parts, and
// changes neither the model nor the optimizer.
void check_refused(const std::string& path, const std::vector<std::string>& parts) {
  SmallRun run;
  run.a.set_grad(from_vector(std::vector<double>{3, 3, 3, 3}, {4}));
  run.opt->step();  // a state of its own, which the refusal must keep
  const Tensor a0 = run.a.detach().clone(), b0 = run.b.clone();
  const OptimizerState s0 = run.opt->state();
  const Tensor m0 = s0.params.at("a").slots.at("exp_avg").clone();
  ResumeTargets t;
  t.model = {{"a", run.a}, {"b", run.b}};
  t.optimizer = run.opt.get();
  const std::string msg = error_of([&] { load_checkpoint(path, t); });
  CHECK_THAT(msg, StartsWith("load_checkpoint") || StartsWith("read_checkpoint"));
  CHECK_THAT(msg, Contains(path));
  for (auto& p : parts) CHECK_THAT(msg, Contains(p));
  CHECK(equal(run.a, a0));
  CHECK(equal(run.b, b0));
  CHECK(run.opt->state().params.at("a").step == 2);
  CHECK(equal(run.opt->state().params.at("a").slots.at("exp_avg"), m0));
}

}  // namespace

TEST_CASE("a checkpoint's optimizer step past 2^62 or negative is refused at load, naming the key") {
  Scratch s;
  const std::string good = s.file("good.h5");
  save_checkpoint(good, SmallRun().checkpoint());
  for (int64_t step : {INT64_MAX, (int64_t(1) << 62) + 1, int64_t(0), int64_t(-1)}) {
    const std::string path = s.file("step.h5");
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    replace_dataset<int64_t>(path, "/optimizer/state/a/step", H5T_STD_I64LE, {}, {step});
    check_refused(path, {"/optimizer/state/a/step", "[1, 2^62]", std::to_string(step)});
  }
}

TEST_CASE("a checkpoint's progress past 2^62 is refused at load, naming the key, and cannot be saved") {
  Scratch s;
  const std::string good = s.file("good.h5");
  save_checkpoint(good, SmallRun().checkpoint());
  for (const char* key : {"/progress/epoch", "/progress/step", "/progress/position"}) {
    const std::string path = s.file("progress.h5");
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    replace_dataset<int64_t>(path, key, H5T_STD_I64LE, {}, {INT64_MAX});
    check_refused(path, {key, "[0, 2^62]", std::to_string(INT64_MAX)});
  }
  Checkpoint c = SmallRun().checkpoint();
  c.progress.epoch = INT64_MAX;
  CHECK_THAT(error_of([&] { save_checkpoint(s.file("never.h5"), c); }),
             StartsWith("save_checkpoint") && Contains("[0, 2^62]"));
}

TEST_CASE("a checkpoint's integers stored in another type than int64 are refused, naming the key and the type") {
  Scratch s;
  const std::string good = s.file("good.h5");
  save_checkpoint(good, SmallRun().checkpoint());
  const std::string path = s.file("typed.h5");
  for (auto [type, name] : {std::pair{H5T_STD_I32LE, "int32"}, std::pair{H5T_STD_U64LE, "uint64"},
                            std::pair{H5T_STD_I8LE, "int8"}}) {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    replace_dataset<int64_t>(path, "/progress/epoch", type, {}, {1});
    check_refused(path, {"/progress/epoch", cat_str("stored as ", name)});
  }
}

TEST_CASE("non-finite weights and impossible Adam moments in a checkpoint are refused, naming the key") {
  Scratch s;
  const std::string good = s.file("good.h5");
  save_checkpoint(good, SmallRun().checkpoint());
  const std::string path = s.file("values.h5");
  struct Case {
    const char* key;
    double value;
    const char* says;
  };
  for (const Case& c : {Case{"/model/a", NAN, "not finite"}, Case{"/model/a", -INFINITY, "not finite"},
                        Case{"/optimizer/state/a/exp_avg_sq", -1.0, "negative"},
                        Case{"/optimizer/state/a/exp_avg_sq", NAN, "not finite"},
                        Case{"/optimizer/state/a/exp_avg", INFINITY, "not finite"}}) {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    replace_dataset<double>(path, c.key, H5T_IEEE_F64LE, {4}, {0.5, c.value, 0.5, 0.5});
    const std::string key = c.key;
    check_refused(path, {key.substr(key.rfind('/') + 1), c.says});
  }
  // a buffer (it requires no grad) may hold infinity, as a mask does
  fs::copy_file(good, path, fs::copy_options::overwrite_existing);
  replace_dataset<double>(path, "/model/b", H5T_IEEE_F64LE, {1}, {-INFINITY});
  SmallRun run;
  ResumeTargets t;
  t.model = {{"a", run.a}, {"b", run.b}};
  load_checkpoint(path, t);
  CHECK(run.b.item() == -INFINITY);
}

TEST_CASE("load_checkpoint into a target that cannot take its values changes nothing and names the key") {
  Scratch s;
  const std::string path = s.file("c.h5");
  Checkpoint c;
  c.model["a"] = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  c.model["b"] = from_vector(std::vector<double>{5, 6, 7, 8}, {4});
  save_checkpoint(path, c);
  Tensor a = zeros({4}, kFloat64), b_base = zeros({1}, kFloat64);
  ResumeTargets t;
  t.model = {{"a", a}, {"b", b_base.expand({4})}};
  CHECK_THAT(error_of([&] { load_checkpoint(path, t); }),
             StartsWith("load_checkpoint") && Contains(path) && Contains("/model/b") && Contains("one memory location"));
  CHECK(a.to_vector<double>() == std::vector<double>{0, 0, 0, 0});
  CHECK(b_base.item() == 0);
}

TEST_CASE("load_checkpoint refuses targets that overlap in memory, or tied targets the file gives different values") {
  Scratch s;
  const std::string path = s.file("c.h5");
  Checkpoint c;
  c.model["a"] = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  c.model["b"] = from_vector(std::vector<double>{5, 6}, {2});
  c.model["c"] = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  save_checkpoint(path, c);
  Tensor whole = zeros({4}, kFloat64);
  ResumeTargets t;
  t.model = {{"a", whole}, {"b", whole.narrow(0, 1, 2)}, {"c", zeros({4}, kFloat64)}};
  CHECK_THAT(error_of([&] { load_checkpoint(path, t); }),
             StartsWith("load_checkpoint") && Contains("keys '/model/a' and '/model/b'") && Contains("overlap"));
  CHECK(whole.to_vector<double>() == std::vector<double>{0, 0, 0, 0});

  // one tensor under two names (tied weights) takes equal values, and is refused different ones
  Checkpoint d;
  d.model["a"] = c.model["a"];
  d.model["c"] = c.model["c"];
  save_checkpoint(path, d);
  ResumeTargets tied;
  tied.model = {{"a", whole}, {"c", whole}};
  load_checkpoint(path, tied);
  CHECK(whole.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
  d.model["c"] = from_vector(std::vector<double>{9, 9, 9, 9}, {4});
  save_checkpoint(path, d);
  CHECK_THAT(error_of([&] { load_checkpoint(path, tied); }),
             Contains("keys '/model/a' and '/model/c'") && Contains("different values"));
  CHECK(whole.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
}
