// tag_dates: an encoder-only Transformer that labels every character of a date written
// by a person with its role - day, month, year, weekday or other:
//
//   sunday, november 22, 2026
//   WWWWWWOOMMMMMMMMOODDOOYYYY
//
// It trains on the sources of data/dates (the roles come from the date and its form),
// reports per-character accuracy on the test split, shows a few tagged dates, and draws
// one sentence's self-attention, every head of every layer. With --watch, every head's
// softmax saturation and the gradient through it are measured on the first --watch-rows
// test dates every --watch-every steps (see lib/watch/watch.h): watch.h5, watch.csv and
// figures in --out.
//
//   tag_dates [--train FILE] [--test FILE] [--out DIR] [--steps N] [--target-acc A]
//             [--require A] [--limit N] [--batch N] [--d-model N] [--heads N] [--layers N]
//             [--ffn N] [--dropout P] [--lr X] [--warmup N] [--eval-every N] [--seed N] [--threads N]
//             [--score-scale S] [--watch] [--watch-every N] [--watch-rows N]
//
// Exits 0, 1 on bad input or when the accuracy is below --require, 3 when the loss stops
// being finite (the learning rate is too large).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "lib/dates/calendar.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "lib/train/stdout_writer.h"
#include "lib/train/training_run.h"
#include "lib/plot/plot.h"
#include "lib/text/text.h"
#include "lib/train/trainer.h"
#include "lib/watch/watch.h"

using namespace ember;

namespace {

constexpr int64_t kClasses = 5;  // dates::kRoles
const char* const kRoleNames[kClasses] = {"day", "month", "year", "weekday", "other"};

using cli::UsageError;

// Embedding (scaled by sqrt(d_model)) + positions + dropout -> encoder -> a linear layer
// to the five roles, at every position.
struct TaggerConfig {
  int64_t vocab = 0, d_model = 64, heads = 4, layers = 2, ffn = 128;
  double dropout_p = 0.1, score_scale = 1.0;
  Generator* init_gen = nullptr;     // the weights
  Generator* dropout_gen = nullptr;  // every dropout mask
};

class Tagger : public nn::Module {
 public:
  explicit Tagger(const TaggerConfig& c) : d_model_(c.d_model) {
    Generator* gen = c.init_gen;
    embed = register_module("embed", std::make_shared<nn::Embedding>(c.vocab, c.d_model, text::CharVocab::kPad, gen));
    nn::init::normal_(embed->weight, 0.0, 1.0 / std::sqrt((double)c.d_model), gen);
    embed->weight.detach().select(0, text::CharVocab::kPad).fill_(0.0);
    pos = register_module("pos", std::make_shared<nn::PositionalEncoding>(c.d_model, 128));
    drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout_p, c.dropout_gen));
    const nn::LayerConfig layer{.d_model = c.d_model, .num_heads = c.heads, .dim_feedforward = c.ffn,
                                .dropout_p = c.dropout_p, .score_scale = c.score_scale, .dropout_gen = c.dropout_gen};
    nn::check_config(layer, "Tagger");  // the encoder's layers trust it
    encoder = register_module("encoder", std::make_shared<nn::Encoder>(layer, c.layers, gen));
    head = register_module("head", std::make_shared<nn::Linear>(c.d_model, kClasses, true, gen));
  }

  // ids [B, S] (0 pads) -> logits [B, S, 5]
  Tensor forward(const Tensor& ids) {
    Tensor x = drop->forward(pos->forward(mul(embed->forward(ids), std::sqrt((double)d_model_))));
    return head->forward(encoder->forward(x, nn::padding_mask(ids, text::CharVocab::kPad)));
  }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::PositionalEncoding> pos;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Encoder> encoder;
  std::shared_ptr<nn::Linear> head;

 private:
  int64_t d_model_;
};

struct Example {
  std::string text;
  std::vector<int64_t> ids, labels;  // labels: role class ids
};

// The role of each character, from the date and the form the source is written in.
// With a vocabulary, also the ids of each source; vocab_from says where the vocabulary
// came from, for the message about a character it lacks.
std::vector<Example> load(const std::string& path, const text::CharVocab* vocab, const std::string& vocab_from,
                          std::vector<std::string>* sources, int64_t limit) {
  std::vector<Example> out;
  for (auto& p : text::read_pairs(path)) {
    if (limit > 0 && (int64_t)out.size() >= limit) break;
    const std::string where = path + ":" + std::to_string(p.line);
    auto d = dates::parse_iso(p.target);
    if (!d) fail("tag_dates", where, ": the target ", printable(p.target), " is not an ISO date from 1900 to 2099");
    std::string roles;
    for (int f = 0; f < dates::kForms && roles.empty(); f++)
      if (dates::human(*d, f) == p.source) roles = dates::roles(*d, f);
    if (roles.empty())
      fail("tag_dates", where, ": ", printable(p.source), " is not one of the eight forms of ", p.target);
    Example e{p.source, {}, {}};
    for (char r : roles) e.labels.push_back(int64_t(std::string(dates::kRoles).find(r)));
    if (vocab) {
      try {
        e.ids = vocab->encode(e.text);
      } catch (const Error& err) {
        fail("tag_dates", where, ": ", err.what(), " of ", vocab_from);
      }
    }
    if (sources) sources->push_back(p.source);
    out.push_back(std::move(e));
  }
  if (out.empty()) fail("tag_dates", path, ": no pairs (expected 'source<TAB>ISO date' lines)");
  return out;
}

// ids [B, S] padded with 0, labels [B, S] padded with -1 (ignored).
std::pair<Tensor, Tensor> batch_of(const std::vector<const Example*>& rows) {
  size_t S = 0;
  for (auto* e : rows) S = std::max(S, e->ids.size());
  std::vector<int64_t> ids(rows.size() * S, 0), labels(rows.size() * S, -1);
  for (size_t i = 0; i < rows.size(); i++)
    for (size_t j = 0; j < rows[i]->ids.size(); j++) {
      ids[i * S + j] = rows[i]->ids[j];
      labels[i * S + j] = rows[i]->labels[j];
    }
  const Shape shape{(int64_t)rows.size(), (int64_t)S};
  return {from_vector(ids, shape), from_vector(labels, shape)};
}

// Predicted roles of each example, in eval mode.
std::vector<std::vector<int64_t>> predict(Tagger& model, const std::vector<Example>& set) {
  NoGradGuard ng;
  const bool was = model.is_training();
  model.eval();
  std::vector<std::vector<int64_t>> out;
  for (size_t first = 0; first < set.size(); first += 500) {
    std::vector<const Example*> rows;
    for (size_t i = first; i < std::min(set.size(), first + 500); i++) rows.push_back(&set[i]);
    auto [ids, labels] = batch_of(rows);
    auto best = argmax(model.forward(ids), -1).to_vector<int64_t>();
    const size_t S = (size_t)ids.size(1);
    for (size_t i = 0; i < rows.size(); i++) out.emplace_back(best.begin() + i * S, best.begin() + i * S + rows[i]->ids.size());
  }
  model.train(was);
  return out;
}

double per_char_accuracy(const std::vector<std::vector<int64_t>>& pred, const std::vector<Example>& set) {
  int64_t right = 0, total = 0;
  for (size_t i = 0; i < set.size(); i++)
    for (size_t j = 0; j < set[i].labels.size(); j++) right += pred[i][j] == set[i].labels[j], total++;
  return total ? double(right) / double(total) : 0.0;
}

std::string letters(const std::vector<int64_t>& classes) {
  std::string s;
  for (int64_t c : classes) s += dates::kRoles[c];
  return s;
}

struct Settings {
  std::string train = "data/dates/train.tsv", test = "data/dates/test.tsv", out = "runs/tag_dates";
  int64_t steps = 1500, batch = 64, limit = 0, d_model = 64, heads = 4, layers = 2, ffn = 128, warmup = 100,
          eval_every = 100, seed = 1, watch_every = 50, watch_rows = 64;
  double dropout = 0.1, lr = 2e-3, target = 0.995, require = 0.0, score_scale = 1.0;
  bool watch = false, warmup_given = false;
};

// What is wrong between options that must agree ("" when nothing is).
std::string disagreement(const Settings& o) {
  if (o.d_model % o.heads != 0)
    return cat_str("--heads ", o.heads, " must divide --d-model ", o.d_model,
                   " (each head gets d-model / heads dimensions)");
  if (o.warmup >= o.steps)
    return cat_str("--warmup ", o.warmup, o.warmup_given ? "" : " (the default)", " must be less than --steps ", o.steps);
  return "";
}

// Bytes training and evaluation need, before the model is built: parameters with their
// gradients and AdamW's two moments, and the activations a step keeps for backward
// (attention [rows, heads, S, S] and widths d_model and ffn at every layer), for the
// larger of a training batch and an evaluation batch of 500.
double estimated_bytes(const Settings& o, int64_t vocab, int64_t rows, int64_t S) {
  const double d = double(o.d_model), f = double(o.ffn), L = double(o.layers), H = double(o.heads);
  const double params = double(vocab) * d + L * (4 * d * d + 2 * d * f + 10 * d + f) + 6 * d + 128 * d;
  const double activations = double(rows) * double(S) * (L * (16 * d + 4 * f + 4 * H * double(S)) + 8 * d + 16);
  return 4.0 * (4 * params + activations);
}

// A PNG holds at most 32767 pixels a side: the self-attention maps of 420 x 470 pixels
// fit in at most this many rows.
constexpr int64_t kMaxFigureRows = (32767 - 34) / 470;

int run(const Settings& o) {
  const std::string& train_path = o.train;
  const std::string& test_path = o.test;
  const std::string& out = o.out;
  const int64_t steps = o.steps, batch = o.batch, limit = o.limit, d_model = o.d_model, heads = o.heads,
                layers = o.layers, ffn = o.ffn, warmup = o.warmup, eval_every = o.eval_every;
  const uint64_t seed = (uint64_t)o.seed;
  const double dropout = o.dropout, peak_lr = o.lr, target = o.target, require = o.require;

  // A bad data file is named first, with the options' disagreement after it if there is
  // one: the file's line is what a user needs to see.
  const std::string disagree = disagreement(o);
  std::vector<Example> train, test;
  text::CharVocab vocab;
  try {
    std::vector<std::string> sources;
    train = load(train_path, nullptr, "", &sources, limit);
    vocab = text::CharVocab::build(sources);
    for (auto& e : train) e.ids = vocab.encode(e.text);
    const std::string vocab_from =
        train_path + (limit > 0 ? " (its first " + std::to_string(train.size()) + " pairs, --limit " +
                                      std::to_string(limit) + ")"
                                : "");
    test = load(test_path, &vocab, vocab_from, nullptr, 0);
  } catch (const Error& e) {
    if (disagree.empty()) throw;
    throw Error(cat_str(e.what(), "\ntag_dates: and ", disagree));
  }
  if (!disagree.empty()) throw UsageError{disagree};
  cli::make_output_dir("--out", out);
  size_t longest = 0;
  for (const auto* set : {&train, &test})
    for (const Example& e : *set) longest = std::max(longest, e.ids.size());
  const int64_t rows = std::max<int64_t>(std::min<int64_t>(batch, (int64_t)train.size()),
                                         std::min<int64_t>(500, (int64_t)test.size()));
  cli::check_fits_in_memory("tag_dates", estimated_bytes(o, vocab.size(), rows, (int64_t)longest),
                            "training a tagger of --d-model " + std::to_string(d_model) + ", --ffn " +
                                std::to_string(ffn) + ", --layers " + std::to_string(layers) + " on batches of " +
                                std::to_string(rows));

  Generator init(seed * 1000003 + 5), dropout_gen(seed), order_gen(seed * 7919 + 11);
  Tagger model({.vocab = vocab.size(), .d_model = d_model, .heads = heads, .layers = layers, .ffn = ffn,
                .dropout_p = dropout, .score_scale = o.score_scale, .init_gen = &init, .dropout_gen = &dropout_gen});
  auto params = model.named_parameters();
  optim::AdamW opt(params, {.lr = peak_lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9, .weight_decay = 0.01});
  optim::WarmupCosineSchedule sched(peak_lr, warmup, steps, peak_lr * 0.05);
  std::printf("tagging the characters of %zu dates (%lld-parameter encoder: d_model %lld, %lld heads, %lld layers), "
              "%d threads\n",
              train.size(), (long long)model.num_parameters(), (long long)d_model, (long long)heads, (long long)layers,
              num_threads());

  std::vector<int64_t> order(train.size());
  size_t pos = order.size();
  double loss_sum = 0, acc = 0;
  int64_t loss_n = 0;
  std::optional<watch::Recorder> watcher;  // with --watch (set up below)
  training::Trainer trainer({.program = "tag_dates", .steps = steps, .eval_every = eval_every, .target = target,
                          .nonfinite_hint = cat_str("--lr ", peak_lr, " is too large for this model")});
  trainer.step = [&] {
    if (pos + (size_t)batch > order.size()) {  // a new epoch: reshuffle
      for (size_t i = 0; i < order.size(); i++) order[i] = (int64_t)i;
      for (size_t i = order.size() - 1; i > 0; i--) std::swap(order[i], order[order_gen.next_u64() % (i + 1)]);
      pos = 0;
    }
    std::vector<const Example*> rows;
    for (int64_t k = 0; k < batch && pos < order.size(); k++) rows.push_back(&train[(size_t)order[pos++]]);
    auto [ids, labels] = batch_of(rows);
    sched.step(opt);
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(model.forward(ids).reshape({-1, kClasses}), labels.reshape({-1}), -1);
    const double loss_value = loss.item();
    if (!std::isfinite(loss_value)) return training::StepResult{.loss = loss_value};  // the trainer stops here
    loss.backward();
    opt.step();
    loss_sum += loss_value, loss_n++;
    return training::StepResult{.loss = loss_value};
  };
  trainer.evaluate = [&] {
    acc = per_char_accuracy(predict(model, test), test);
    std::printf("step %5lld  loss %.4f  test per-character accuracy %.2f%%  (%.1f s of training)\n",
                (long long)trainer.current_step(), loss_sum / double(loss_n), 100 * acc, trainer.train_seconds());
    std::fflush(stdout);
    loss_sum = 0, loss_n = 0;
    if (watcher) watcher->write(/*figures=*/false);  // the numbers so far; figures at the end
    return acc;
  };
  // the watch: the first --watch-rows test dates, the training loss
  if (o.watch) {
    std::vector<const Example*> first;
    for (size_t i = 0; i < std::min(test.size(), (size_t)o.watch_rows); i++) first.push_back(&test[i]);
    auto [probe_ids, probe_labels] = batch_of(first);
    watch::Probe p;
    p.model = &model;
    for (int64_t l = 0; l < layers; l++) p.sites.push_back({"encoder_self", l, model.encoder->layer((size_t)l)->self_attn.get()});
    p.loss = [&model, probe_ids, probe_labels] {
      return nn::cross_entropy(model.forward(probe_ids).reshape({-1, kClasses}), probe_labels.reshape({-1}), -1);
    };
    p.query_padding = {{"encoder_self", eq(probe_ids, double(text::CharVocab::kPad))}};
    watcher.emplace(std::move(p), out, o.watch_every, "tag_dates",
                    std::map<std::string, std::string>{
                        {"program", "tag_dates"},
                        {"model", cat_str("encoder d_model ", d_model, ", ", heads, " heads, ", layers, " layers, ffn ", ffn)},
                        {"head_dim", cat_str(d_model / heads)},
                        {"score_scale", cat_str(o.score_scale)},
                        {"probe", cat_str("the first ", first.size(), " dates of ", test_path)}});
    watcher->after_step(0);
    const auto step = trainer.step;
    trainer.step = [&watcher, &trainer, step] {
      training::StepResult r = step();
      if (std::isfinite(r.loss)) watcher->after_step(trainer.current_step() + 1);
      return r;
    };
  }
  model.train();
  // with a watch, a stop signal ends training in order, and the watch's files are written
  std::optional<training::StopSignals> signals;
  std::optional<training::StdoutWriter> output;  // output nobody reads cannot hold up a stop
  if (watcher) signals.emplace(), output.emplace();
  if (int code = trainer.run(); code != 0) {
    if (watcher) watcher->write();
    return code;
  }
  if (watcher) {
    const int64_t rows = std::min<int64_t>(o.watch_rows, (int64_t)test.size());
    std::printf("%s\n", watcher->finish(cat_str("the first ", rows, " test dates"), trainer.train_seconds()).c_str());
  }
  std::printf("done: %lld steps, %.1f s of training (%.1f s wall), test per-character accuracy %.2f%%\n\n",
              (long long)trainer.current_step(), trainer.train_seconds(), trainer.wall_seconds(), 100 * acc);

  // a few tagged dates, one of each form
  auto pred = predict(model, test);
  std::printf("%-30s %s\n", "date", "roles (D day, M month, Y year, W weekday, O other)");
  for (size_t i = 0; i < std::min<size_t>(8, test.size()); i++) {
    std::printf("%-30s %s\n", test[i].text.c_str(), letters(pred[i]).c_str());
    if (pred[i] != test[i].labels) std::printf("%-30s %s (expected)\n", "", letters(test[i].labels).c_str());
  }

  // one sentence's self-attention (a character the training set lacks is <unk>)
  const std::string sentence = "sunday, november 22, 2026";
  std::vector<int64_t> sid = vocab.encode(sentence, /*allow_unknown=*/true);
  for (int64_t l = 0; l < layers; l++) model.encoder->layer((size_t)l)->keep_weights = true;
  model.eval();
  {
    NoGradGuard ng;
    model.forward(from_vector(sid, {1, (int64_t)sid.size()}));
  }
  std::vector<std::string> labels;
  for (char c : sentence) labels.push_back(c == ' ' ? "\xE2\x90\xA3" : std::string(1, c));
  std::vector<plot::Panel> panels;
  const int64_t columns = std::min<int64_t>(heads, 4), most = kMaxFigureRows * columns;
  for (int64_t l = 0; l < layers; l++) {
    Tensor w = model.encoder->layer((size_t)l)->last_weights;  // [1, H, S, S]
    for (int64_t h = 0; h < heads && (int64_t)panels.size() < most; h++) {
      plot::Heatmap p;
      p.title = "layer " + std::to_string(l + 1) + ", head " + std::to_string(h + 1);
      p.xlabel = "key";
      p.ylabel = "query";
      auto v = w.select(0, 0).select(0, h).contiguous().to_vector<double>();
      const size_t S = sid.size();
      for (size_t i = 0; i < S; i++) p.values.emplace_back(v.begin() + i * S, v.begin() + (i + 1) * S);
      p.row_labels = p.col_labels = labels;
      p.vmax = 1.0;
      panels.push_back(p);
    }
  }
  const std::string png = out + "/self_attention.png";
  plot::save_png(png, panels, (int)columns, 420, 470,
                 "self-attention of the tagger on \"" + sentence + "\" -> " +
                     letters(predict(model, {Example{sentence, sid, std::vector<int64_t>(sid.size(), 0)}})[0]));
  if ((int64_t)panels.size() < layers * heads)
    std::printf("\nwrote %s: the first %zu of the %lld heads' maps (a PNG holds %lld rows of %lld)\n", png.c_str(),
                panels.size(), (long long)(layers * heads), (long long)kMaxFigureRows, (long long)columns);
  else
    std::printf("\nwrote %s\n", png.c_str());
  if (acc < require) {
    std::fprintf(stderr, "tag_dates: test per-character accuracy %.2f%% is below the required %.2f%%\n", 100 * acc,
                 100 * require);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("tag_dates", [&] {
    CLI::App app{"Trains an encoder-only Transformer to tag each character of a written date with its role "
                 "(day, month, year, weekday, other), reports test accuracy and draws its self-attention.",
                 "tag_dates"};
    Settings o;
    int threads = num_threads();
    cli::text(app, "--train", o.train, "training pairs (source<TAB>ISO date)");
    cli::text(app, "--test", o.test, "test pairs (source<TAB>ISO date)");
    cli::text(app, "--out", o.out, "directory for self_attention.png");
    cli::integer(app, "--steps", o.steps, 1, cli::kMaxSteps, "training steps at most");
    cli::real(app, "--target-acc", o.target, 0.0, 1.0, "stop once the test per-character accuracy reaches this");
    cli::real(app, "--require", o.require, 0.0, 1.0, "exit 1 when the final accuracy is below this");
    cli::integer(app, "--limit", o.limit, 0, cli::kMaxCount, "use only the first N training pairs (0: all)");
    cli::integer(app, "--batch", o.batch, 1, cli::kMaxSize, "pairs per step");
    cli::integer(app, "--d-model", o.d_model, 1, cli::kMaxSize, "model width");
    cli::integer(app, "--heads", o.heads, 1, cli::kMaxSize, "attention heads (must divide --d-model)");
    cli::integer(app, "--layers", o.layers, 1, 1024, "encoder layers");
    cli::integer(app, "--ffn", o.ffn, 1, cli::kMaxSize, "feed-forward width");
    cli::real(app, "--dropout", o.dropout, 0.0, 0.99, "dropout probability");
    cli::positive_real(app, "--lr", o.lr, 10.0, "peak learning rate");
    cli::integer(app, "--warmup", o.warmup, 0, cli::kMaxSteps, "warm-up steps (fewer than --steps)");
    cli::integer(app, "--eval-every", o.eval_every, 1, cli::kMaxSteps, "steps between test evaluations");
    cli::integer(app, "--seed", o.seed, 0, std::numeric_limits<int64_t>::max(), "random seed");
    cli::integer(app, "--threads", threads, 1, cli::kMaxThreads, "threads");
    cli::real(app, "--score-scale", o.score_scale, 1e-6, 1e6,
              "multiply every attention's scores by this on top of 1/sqrt(d_k) (sqrt(d_model / heads): unscaled)");
    app.add_flag("--watch", o.watch,
                 "measure every attention head (softmax saturation, the gradient through it) on the first --watch-rows "
                 "test dates; writes watch.h5, watch.csv and figures into --out");
    cli::integer(app, "--watch-every", o.watch_every, 1, cli::kMaxSteps, "with --watch: measure every N steps");
    cli::integer(app, "--watch-rows", o.watch_rows, 1, watch::kMaxProbeRows, "with --watch: the probe batch, the first N test dates");
    cli::parse(app, argc, argv);
    o.warmup_given = app.count("--warmup") > 0;
    if (o.train.empty() || o.test.empty())
      throw UsageError{std::string(o.train.empty() ? "--train" : "--test") + " needs a file name, got \"\""};
    set_num_threads(threads);
    return run(o);
  });
}
