// Resuming a run: the checks of a checkpoint against the command line, and schedules.
#include "examples/translate/resume.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/ops.h"
#include "lib/seq2seq/model_options.h"

namespace ember::translate {

namespace fs = std::filesystem;
using cli::UsageError;
using text::CharVocab;

namespace {

// x in as few digits as read back to the same double.
std::string shortest(double x) {
  char b[32];
  auto r = std::to_chars(b, b + sizeof b, x);
  return std::string(b, r.ptr);
}

// "a, b, c"
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + v[i];
  return s;
}

// The schedule's name on the command line, from its kind in checkpoints.
std::string schedule_name(const std::string& kind) {
  return kind == "InverseSqrt" ? "inverse-sqrt" : kind == "WarmupCosine" ? "cosine" : kind;
}

}  // namespace

std::optional<std::pair<std::string, io::Checkpoint>> newest_intact(const io::CheckpointManager& ckpts,
                                                                    const std::string& out) {
  auto all = ckpts.list();
  std::vector<std::string> damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      return std::make_pair(*it, io::read_checkpoint(*it));
    } catch (const io::CheckpointDamaged& e) {
      // renamed out of the numbered series (the bytes are kept, beside any set aside
      // before), so that the new run's saves are never rotated away in favour of it
      std::string aside = *it + ".damaged";
      std::error_code ec;
      for (int n = 2; fs::exists(fs::symlink_status(aside, ec)); n++) aside = cat_str(*it, ".damaged-", n);
      const bool moved = std::rename(it->c_str(), aside.c_str()) == 0;
      const std::string why = moved ? "moved it to " + aside : cat_str("could not move it (", std::strerror(errno), ")");
      std::fflush(stdout);
      std::fprintf(stderr, "translate train: warning: %s is damaged (%s); %s, trying an older checkpoint\n", it->c_str(),
                   e.what(), why.c_str());
      damaged.push_back(*it);
    } catch (const Error& e) {
      // whole bytes refused (another schema version, an edited key) or a file that cannot be
      // opened: not skipped for an older checkpoint - that would throw away the steps since
      fail("translate train", "'", *it, "' is refused and left in place (only a checkpoint whose bytes are damaged "
           "is set aside): ", e.what(), ". Move it out of '", out, "' to resume from the checkpoint before it");
    }
  }
  if (!damaged.empty())
    fail("translate train", "none of the ", damaged.size(), " checkpoints in '", out,
         "' is intact (see the warnings above); start afresh in another --out");
  // none left, but some set aside by an earlier --resume auto: the run cannot go on, and a
  // new one should not start among them
  std::error_code ec;
  std::vector<std::string> aside;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().string();
    const size_t at = name.rfind(".damaged");
    if (at != std::string::npos && ckpts.step_named(name.substr(0, at))) aside.push_back(entry.path().filename());
  }
  std::sort(aside.begin(), aside.end());
  if (!aside.empty())
    fail("translate train", "'", out, "' holds no intact checkpoint, only damaged ones set aside (", join(aside),
         "); start afresh in another --out, or remove them");
  return std::nullopt;
}

std::string dropout_stream(const io::Checkpoint& c) { return c.generators.count("dropout") ? "dropout" : "default"; }

void check_new_schedule(const TrainOptions& o) {
  if (o.schedule == "cosine") {
    if (o.decay_steps <= o.warmup)
      throw UsageError{cat_str("--decay-steps (", o.decay_steps, ") must be larger than --warmup (", o.warmup, ")"),
                       "train"};
    if (o.min_lr > o.lr)
      throw UsageError{cat_str("--min-lr (", shortest(o.min_lr), ") must not exceed --lr (", shortest(o.lr), ")"),
                       "train"};
    return;
  }
  for (const char* flag : {"--decay-steps", "--min-lr"})
    if (given(o, flag)) throw UsageError{cat_str(flag, " applies to --schedule cosine only"), "train"};
}

std::unique_ptr<optim::Schedule> new_schedule(const TrainOptions& o, int64_t d_model) {
  if (o.schedule == "cosine") {
    const double min_lr = o.min_lr >= 0 ? o.min_lr : o.lr / 20;
    return std::make_unique<optim::WarmupCosineSchedule>(o.lr, o.warmup, o.decay_steps, min_lr);
  }
  // lr = peak * min(step / warmup, sqrt(warmup / step)) = factor * min(...) / sqrt(d_model * warmup)
  return std::make_unique<optim::InverseSqrtSchedule>(d_model, o.warmup, o.lr * std::sqrt(double(d_model * o.warmup)));
}

std::unique_ptr<optim::Schedule> resumed_schedule(const io::Checkpoint& c, const nn::TransformerConfig& cfg,
                                                  const std::string& path) {
  const std::string what = "key '/schedule' should hold an inverse-sqrt or a cosine schedule with a warmup of at "
                           "least 1 step and a positive, finite peak";
  if (!c.schedule || (c.schedule->kind != "InverseSqrt" && c.schedule->kind != "WarmupCosine"))
    fail("translate train", "'", path, "': ", what, c.schedule ? cat_str(" (it holds '", c.schedule->kind, "')") : "");
  std::unique_ptr<optim::Schedule> s;
  try {
    s = optim::make_schedule(c.schedule->kind, c.schedule->settings);
  } catch (const Error& e) {
    fail("translate train", "'", path, "': ", what, ": ", e.what());
  }
  const auto& v = c.schedule->settings;
  const double warmup = v.at("warmup"), peak = s->lr_at(std::max<int64_t>(1, std::llround(warmup)));
  if (!(warmup >= 1 && warmup <= double(cli::kMaxSteps)) || !(peak > 0) || !std::isfinite(peak))
    fail("translate train", "'", path, "': ", what, " (warmup ", shortest(warmup), ", peak ", shortest(peak), ")");
  if (c.schedule->kind == "InverseSqrt" && v.at("d_model") != double(cfg.layer.d_model))
    fail("translate train", "'", path, "': key '/schedule' attribute 'd_model' is ", shortest(v.at("d_model")),
         ", the model's d_model is ", cfg.layer.d_model);
  if (c.schedule->last_step != c.progress.step)
    fail("translate train", "'", path, "': key '/schedule' attribute 'last_step' is ", c.schedule->last_step,
         ", but the run is at step ", c.progress.step, " ('/progress')");
  return s;
}

optim::AdamOptions adam_options(double lr) { return {.lr = lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9}; }

void check_resumed_optimizer(const optim::Optimizer& opt, const optim::Schedule& sched, int64_t step,
                             const std::string& path) {
  const optim::AdamOptions want = adam_options(sched.lr_at(std::max<int64_t>(1, step)));
  const std::map<std::string, double> expected = {{"lr", want.lr},       {"beta1", want.beta1},
                                                  {"beta2", want.beta2}, {"eps", want.eps},
                                                  {"weight_decay", want.weight_decay},
                                                  {"amsgrad", want.amsgrad ? 1.0 : 0.0}};
  const std::map<std::string, double> have = opt.hyper();
  for (const auto& [name, value] : expected) {
    const auto it = have.find(name);
    const double got = it == have.end() ? NAN : it->second;
    if (!(std::abs(got - value) <= 1e-12 * std::abs(value)))
      fail("translate train", "'", path, "': key '/optimizer' attribute '", name, "' is ", shortest(got),
           ", but train's Adam has ", shortest(value),
           name == "lr" ? cat_str(" there (the schedule's rate at step ", step, ")") : std::string(),
           ": the checkpoint was not written by this program, or was edited");
  }
}

void check_resume_options(const TrainOptions& o, const io::Checkpoint& c, const nn::TransformerConfig& cfg,
                          const std::string& path) {
  std::vector<std::string> applies, matches, refused;
  auto compare = [&](const std::string& flag, double want, double have, const std::string& what) {
    if (!given(o, flag)) return;
    const std::string text = flag + " " + o.given.at(flag)->as<std::string>();
    if (std::abs(want - have) <= 1e-12 * std::max(1.0, std::abs(have))) matches.push_back(text);
    else refused.push_back(cat_str(text, " (the checkpoint's ", what, " is ", shortest(have), ")"));
  };
  for (const seq2seq::ModelField& f : seq2seq::model_fields())  // the model
    if (f.flag) compare(f.flag, seq2seq::value_of(f, o.model), seq2seq::value_of(f, cfg), f.what);
  // the schedule
  if (c.schedule) {
    const auto& k = c.schedule->kind;
    const auto& v = c.schedule->settings;
    if (given(o, "--schedule") && o.schedule == schedule_name(k)) matches.push_back("--schedule " + o.schedule);
    else if (given(o, "--schedule"))
      refused.push_back(cat_str("--schedule ", o.schedule, " (the checkpoint's schedule is ", schedule_name(k), ")"));
    if (k == "InverseSqrt" && v.count("warmup") && v.count("factor") && v.count("d_model")) {
      compare("--warmup", double(o.warmup), v.at("warmup"), "warmup");
      compare("--lr", o.lr, v.at("factor") / std::sqrt(v.at("d_model") * v.at("warmup")), "peak learning rate");
      for (const char* flag : {"--decay-steps", "--min-lr"})
        if (given(o, flag))
          refused.push_back(cat_str(flag, " ", o.given.at(flag)->as<std::string>(),
                                    " (the checkpoint's schedule is inverse-sqrt, which has none)"));
    }
    if (k == "WarmupCosine" && v.count("warmup") && v.count("peak_lr") && v.count("total") && v.count("min_lr")) {
      compare("--warmup", double(o.warmup), v.at("warmup"), "warmup");
      compare("--lr", o.lr, v.at("peak_lr"), "peak learning rate");
      compare("--decay-steps", double(o.decay_steps), v.at("total"), "decay steps");
      if (o.min_lr >= 0) compare("--min-lr", o.min_lr, v.at("min_lr"), "final learning rate");
    }
  }
  if (c.generators.count(dropout_stream(c)))
    compare("--seed", double(o.seed), double(c.generators.at(dropout_stream(c))[0]), "seed");
  for (const char* flag : {"--train", "--valid", "--steps", "--target-acc", "--batch", "--clip", "--z-loss", "--precision", "--eval-every",
                           "--save-every", "--keep", "--log-every", "--threads", "--watch", "--watch-every",
                           "--watch-rows", "--watch-curvature"})
    if (given(o, flag)) applies.push_back(std::string(flag) + " " + o.given.at(flag)->as<std::string>());
  if (!refused.empty())
    fail("translate train", "on resume from '", path, "' these options cannot change what the checkpoint fixed: ",
         join(refused), ". Leave them out to continue as the run began, or start a new run in another --out");
  if (!applies.empty()) std::printf("on resume: %s apply from here on\n", join(applies).c_str());
  if (!matches.empty()) std::printf("on resume: %s match the checkpoint\n", join(matches).c_str());
}

void check_resume_place(const io::CheckpointManager& ckpts, const std::string& out, const std::string& resume,
                        int64_t step) {
  // a copy or a rename would otherwise be taken for the newest and rotate the real ones away
  if (auto named = ckpts.step_named(resume); named && *named != step)
    fail("translate train", "'", resume, "' is named for step ", *named, " but holds step ", step,
         " (key '/progress/step'): it was copied or renamed. Move it out of the run's directory, or give it the "
         "name of step ", step, ", and resume again");
  const std::vector<std::string> all = ckpts.list();
  if (all.empty()) return;
  std::error_code ec;
  size_t at = all.size();
  for (size_t i = 0; i < all.size(); i++)
    if (fs::equivalent(all[i], resume, ec)) at = i;
  auto names = [&](size_t from) {
    std::vector<std::string> v;
    for (size_t i = from; i < all.size(); i++) v.push_back(fs::path(all[i]).filename().string());
    return join(v);
  };
  if (at == all.size())
    fail("translate train", "'", out, "' holds checkpoints of another run (", names(0), "); resuming '", resume,
         "' there would rotate them away. Resume into another --out, or move them first");
  if (at + 1 < all.size())
    fail("translate train", "'", out, "' holds checkpoints past step ", step, " (", names(at + 1),
         "): resuming from step ", step, " would rotate them away. Move them elsewhere first, or resume into "
         "another --out");
}

std::vector<dist::Part> resumed_state(const optim::NamedParams& params, const optim::Optimizer& opt,
                                      const optim::Schedule& sched, const io::Progress& progress,
                                      const std::vector<int64_t>& order, const Generator& data_gen,
                                      const Generator& dropout_gen, const CharVocab& src_vocab,
                                      const CharVocab& tgt_vocab) {
  auto int64s = [](const std::vector<uint64_t>& v) {
    return from_vector(std::vector<int64_t>(v.begin(), v.end()), {(int64_t)v.size()});
  };
  auto numbers = [](const std::map<std::string, double>& m) {
    std::vector<double> v;
    for (const auto& [name, x] : m) v.push_back(x);
    return from_vector(v, {(int64_t)v.size()});
  };
  std::vector<Tensor> weights, moments;
  for (const auto& [name, p] : params) weights.push_back(p.detach());
  const optim::OptimizerState state = opt.state();
  moments.push_back(numbers(state.hyper));
  for (const auto& [name, p] : state.params) {
    moments.push_back(from_vector(std::vector<int64_t>{p.step}, {1}));
    for (const auto& [slot, t] : p.slots) moments.push_back(t);
  }
  std::string tokens;
  for (const CharVocab* v : {&src_vocab, &tgt_vocab})
    for (const std::string& t : v->tokens()) tokens += t + '\0';
  return {{"parameters", weights},
          {"optimizer state", moments},
          {"schedule", {numbers(sched.settings()), int64s({(uint64_t)sched.last_step()})}},
          {"data order",
           {from_vector(order, {(int64_t)order.size()}), int64s(data_gen.get_state()),
            int64s({(uint64_t)progress.epoch, (uint64_t)progress.position})}},
          {"dropout stream", {int64s(dropout_gen.get_state())}},
          {"vocabularies", {from_vector(std::vector<int64_t>(tokens.begin(), tokens.end()), {(int64_t)tokens.size()})}}};
}

}  // namespace ember::translate
