// The sequence-to-sequence pieces of the translator: batches, accuracy, the model's
// configuration in a checkpoint, and a tiny Transformer that learns to reverse strings
// with greedy decoding.
#include <catch2/catch.hpp>

#include "test_util.h"

#include "core/ops.h"
#include "core/parallel.h"
#include "nn/functional.h"
#include "optim/schedule.h"
#include "lib/seq2seq/model_options.h"
#include "lib/seq2seq/seq2seq.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using seq2seq::Example;
using text::CharVocab;

TEST_CASE("a batch pads sources with </s> and targets with <s> and </s>") {
  Example a{{5, 6, 7}, {8, 9}}, b{{5}, {8, 8, 8}};
  seq2seq::Batch batch = seq2seq::make_batch({&a, &b});
  CHECK(batch.src.to_vector<int64_t>() == std::vector<int64_t>{5, 6, 7, 2, 5, 2, 0, 0});
  CHECK(batch.src.shape() == Shape{2, 4});
  CHECK(batch.tgt_in.to_vector<int64_t>() == std::vector<int64_t>{1, 8, 9, 0, 1, 8, 8, 8});
  CHECK(batch.tgt_out.to_vector<int64_t>() == std::vector<int64_t>{8, 9, 2, 0, 8, 8, 8, 2});
  CHECK(batch.target_tokens == 7);
  CHECK_THAT(error_of([] { seq2seq::make_batch({}); }), Contains("make_batch") && Contains("no examples"));
}

TEST_CASE("accuracy counts exact matches and matching characters") {
  auto acc = seq2seq::accuracy({{1, 2, 3}, {1, 2}, {4, 5, 6, 7}}, {{1, 2, 3}, {1, 2, 9}, {4, 0, 6}});
  CHECK(acc.count == 3);
  CHECK(acc.exact == Approx(1.0 / 3));
  CHECK(acc.per_char == Approx((3 + 2 + 2) / double(3 + 3 + 4)));
  CHECK_THAT(error_of([] { seq2seq::accuracy({{1}}, {}); }), Contains("1 outputs for 0 targets"));
}

TEST_CASE("the model's configuration goes through a checkpoint's config and is checked on the way back") {
  nn::TransformerConfig c;
  c.src_vocab = 40, c.tgt_vocab = 15, c.num_encoder_layers = 3, c.max_len = 48;
  c.layer.d_model = 64, c.layer.num_heads = 2, c.layer.dropout_p = 0.2, c.layer.activation = nn::Activation::GELU;
  auto back = seq2seq::from_config(seq2seq::to_config(c), "f.h5");
  CHECK(seq2seq::to_config(back) == seq2seq::to_config(c));
  auto cfg = seq2seq::to_config(c);
  cfg.erase("nhead");
  CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }), Contains("'f.h5'") && Contains("lacks 'nhead'"));
  cfg = seq2seq::to_config(c);
  cfg["d_model"] = 64.5;
  CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }), Contains("'d_model' must be an integer"));
  cfg = seq2seq::to_config(c);
  cfg["activation"] = std::string("tanh");
  CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }), Contains("activation"));
  cfg = seq2seq::to_config(c);
  cfg["colour"] = int64_t(3);
  CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }), Contains("unknown attribute 'colour'"));
  // score_scale: the range the command line takes, so that a file cannot make every score overflow
  for (double bad : {1e308, 1e7, 1e-7, 0.0, -1.0}) {
    cfg = seq2seq::to_config(c);
    cfg["score_scale"] = bad;
    CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }),
               Contains("attribute 'score_scale' must be a real in [1e-06, 1e+06]"));
  }
  cfg = seq2seq::to_config(c);
  cfg["score_scale"] = 1e6;
  CHECK(seq2seq::from_config(cfg, "f.h5").layer.score_scale == 1e6);
  // dropout: the range --dropout takes
  for (double bad : {0.995, 1.0, -0.1}) {
    cfg = seq2seq::to_config(c);
    cfg["dropout"] = bad;
    CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }),
               Contains("attribute 'dropout' must be a real in [0, 0.99]"));
  }
  // written before scores could be scaled: no score_scale, which is then 1
  cfg = seq2seq::to_config(c);
  cfg.erase("score_scale");
  CHECK(seq2seq::from_config(cfg, "f.h5").layer.score_scale == 1.0);
  // qk_norm: 0 or 1, and absent (written before queries and keys could be normalised): off
  cfg = seq2seq::to_config(c);
  cfg["qk_norm"] = int64_t(1);
  CHECK(seq2seq::from_config(cfg, "f.h5").layer.qk_norm);
  cfg["qk_norm"] = int64_t(2);
  CHECK_THAT(error_of([&] { seq2seq::from_config(cfg, "f.h5"); }), Contains("attribute 'qk_norm' must be in [0, 1]"));
  cfg.erase("qk_norm");
  CHECK_FALSE(seq2seq::from_config(cfg, "f.h5").layer.qk_norm);
}

TEST_CASE("the model's table names every key of a checkpoint's config once, and gives the command line's defaults") {
  nn::TransformerConfig c = seq2seq::default_model_config();
  c.src_vocab = 40, c.tgt_vocab = 15;
  const io::Config config = seq2seq::to_config(c);
  CHECK(config.size() == seq2seq::model_fields().size());
  for (const seq2seq::ModelField& f : seq2seq::model_fields()) {
    CHECK(config.count(f.key) == 1);
    if (f.flag) CHECK(seq2seq::value_of(f, c) == f.initial);
  }
  CHECK(c.layer.d_model == 128);
  CHECK(c.max_len == 64);
  CHECK(seq2seq::describe(c) == "d_model 128, 4 heads, 2+2 layers, ffn 512");
}

TEST_CASE("a tiny Transformer learns to reverse strings, and greedy decoding gets all of them right") {
  NumThreadsGuard threads(2);
  manual_seed(3);
  Generator gen(4), data(5);
  // strings of 2 to 6 letters from a..f; ids 4..9
  auto sample = [&](Generator& g) {
    Example e;
    const int n = 2 + int(g.next_u64() % 5);
    for (int i = 0; i < n; i++) e.source.push_back(4 + int64_t(g.next_u64() % 6));
    e.target.assign(e.source.rbegin(), e.source.rend());
    return e;
  };
  std::vector<Example> train, held_out;
  for (int i = 0; i < 2000; i++) train.push_back(sample(data));
  for (int i = 0; i < 200; i++) held_out.push_back(sample(data));

  nn::TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = 10;
  cfg.layer = {.d_model = 32, .num_heads = 2, .dim_feedforward = 64, .dropout_p = 0.0};
  cfg.num_encoder_layers = 1, cfg.num_decoder_layers = 1, cfg.max_len = 16;
  nn::Transformer model(cfg, &gen);
  seq2seq::xavier_init(model, &gen);
  auto params = model.named_parameters();
  optim::Adam opt(params, {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  optim::WarmupCosineSchedule sched(3e-3, 50, 700, 1e-4);
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 700; step++) {
    std::vector<const Example*> rows;
    for (int k = 0; k < 32; k++) rows.push_back(&train[(size_t)(step * 32 + k) % train.size()]);
    seq2seq::Batch b = seq2seq::make_batch(rows);
    sched.step(opt);
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(model.forward(b.src, b.tgt_in).reshape({-1, 10}), b.tgt_out.reshape({-1}), 0);
    loss.backward();
    opt.step();
    (step == 0 ? first_loss : last_loss) = loss.item();
  }
  INFO("loss " << first_loss << " -> " << last_loss);
  std::vector<std::vector<int64_t>> sources, targets;
  for (auto& e : held_out) sources.push_back(e.source), targets.push_back(e.target);
  auto outputs = seq2seq::greedy_decode(model, sources, 10, 64);
  auto acc = seq2seq::accuracy(outputs, targets);
  CHECK(acc.exact == 1.0);
  CHECK(model.is_training());  // decoding restored the mode
}

TEST_CASE("a checkpoint's data order must be a permutation of the training set, its position within an epoch") {
  CHECK_NOTHROW(seq2seq::check_order({2, 0, 1}, 3, 3, "c.h5", "t.tsv"));
  CHECK_THAT(error_of([] { seq2seq::check_order({2, 0, 1}, 0, 4, "c.h5", "t.tsv"); }),
             Catch::Contains("'c.h5' was trained on 3 pairs; --train t.tsv has 4"));
  CHECK_THAT(error_of([] { seq2seq::check_order({2, 0, 7}, 0, 3, "c.h5", "t.tsv"); }),
             Catch::Contains("not a permutation") && Catch::Contains("7"));
  CHECK_THAT(error_of([] { seq2seq::check_order({2, -1, 0}, 0, 3, "c.h5", "t.tsv"); }), Catch::Contains("-1"));
  CHECK_THAT(error_of([] { seq2seq::check_order({1, 1, 0}, 0, 3, "c.h5", "t.tsv"); }), Catch::Contains("repeated"));
  CHECK_THAT(error_of([] { seq2seq::check_order({0, 1, 2}, 4, 3, "c.h5", "t.tsv"); }),
             Catch::Contains("'/progress/position' is 4"));
}

TEST_CASE("parameter_count counts a Transformer's parameters exactly") {
  for (int64_t enc : {1, 2, 3}) {
    nn::TransformerConfig cfg;
    cfg.src_vocab = 11, cfg.tgt_vocab = 7;
    cfg.layer.norm_first = enc == 2;
    cfg.layer.qk_norm = enc == 3;
    cfg.layer.d_model = 16, cfg.layer.num_heads = 2, cfg.layer.dim_feedforward = 24;
    cfg.num_encoder_layers = enc, cfg.num_decoder_layers = 2, cfg.max_len = 12;
    nn::Transformer model(cfg);
    CHECK(seq2seq::parameter_count(cfg) == double(model.num_parameters()));
  }
}
