// Bit-exact resume: training a small Transformer with dropout for N steps in one go, and
// training k steps, saving, destroying everything, loading into fresh objects and
// training N - k more, give bitwise the same parameters, optimizer moments and losses -
// with 1 thread and with 2.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <unistd.h>

#include <cstring>
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

namespace {

constexpr int64_t kPairs = 24, kBatch = 4, kSrcLen = 7, kTgtLen = 6, kVocab = 12;

nn::TransformerConfig model_config() {
  nn::TransformerConfig c;
  c.src_vocab = kVocab;
  c.tgt_vocab = kVocab;
  c.layer.d_model = 16;
  c.layer.nhead = 2;
  c.layer.dim_feedforward = 32;
  c.layer.dropout = 0.1;
  c.num_encoder_layers = 1;
  c.num_decoder_layers = 1;
  c.max_len = 16;
  return c;
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
                                   {{"d_model", model->cfg.layer.d_model}, {"dropout", model->cfg.layer.dropout}});
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
    t.config = {{"d_model", model->cfg.layer.d_model}, {"dropout", model->cfg.layer.dropout}};
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
