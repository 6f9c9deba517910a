// The commands that read a trained checkpoint: eval (accuracy on a pair file), decode
// (translations), attention (heatmaps of the attention weights) and watch (per head,
// how peaked its softmax is and how much gradient passes through it).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "examples/translate/model.h"
#include "examples/translate/options.h"
#include "lib/plot/plot.h"
#include "lib/seq2seq/seq2seq.h"
#include "lib/watch/watch.h"

namespace ember::translate {

namespace fs = std::filesystem;
using seq2seq::Example;
using text::CharVocab;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::vector<double>> matrix(const Tensor& t) {  // [R, C]
  std::vector<std::vector<double>> m((size_t)t.size(0));
  auto v = t.contiguous().to_vector<double>();
  for (int64_t r = 0; r < t.size(0); r++) m[(size_t)r].assign(v.begin() + r * t.size(1), v.begin() + (r + 1) * t.size(1));
  return m;
}

}  // namespace

int eval(const EvalOptions& o) {
  const std::string &path = o.checkpoint, &data = o.data;
  const int64_t show = o.show;
  Loaded l = load_model(path);
  auto pairs = text::read_pairs(data);
  // an expected output the model cannot write counts as wrong, not as an error
  auto set = seq2seq::encode_pairs(pairs, data, l.src_vocab, l.tgt_vocab, /*unknown_targets=*/true);
  std::vector<std::vector<int64_t>> sources, targets;
  for (size_t i = 0; i < set.size(); i++) {
    if ((int64_t)set[i].source.size() + 1 > l.model->cfg.max_len)
      fail("translate eval", data, ":", pairs[i].line, ": the source has ", set[i].source.size(),
           " characters; this model reads at most ", l.model->cfg.max_len - 1);
    sources.push_back(set[i].source), targets.push_back(set[i].target);
  }
  int64_t longest = 0;
  for (auto& t : targets) longest = std::max<int64_t>(longest, (int64_t)t.size());
  const auto t0 = Clock::now();
  auto outputs = seq2seq::greedy_decode(*l.model, sources, std::min(longest + 8, l.model->cfg.max_len - 1));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  seq2seq::Accuracy acc = seq2seq::accuracy(outputs, targets);
  std::printf("%s: %lld pairs, exact match %.2f%%, per character %.2f%% (decoded in %.2f s)\n", data.c_str(),
              (long long)acc.count, 100 * acc.exact, 100 * acc.per_char, seconds);
  int64_t shown = 0, wrong = 0;
  for (size_t i = 0; i < outputs.size(); i++) {
    if (outputs[i] == targets[i]) continue;
    wrong++;
    if (shown++ == 0 && show > 0) std::printf("%-34s %-12s %s\n", "source", "expected", "got");
    if (shown <= show)
      std::printf("%-34s %-12s %s\n", pairs[i].source.c_str(), pairs[i].target.c_str(),
                  l.tgt_vocab.decode(outputs[i]).c_str());
  }
  if (wrong > show && show > 0) std::printf("... and %lld more errors\n", (long long)(wrong - show));
  return 0;
}

namespace {

// Standard input a line at a time (without its newline, or a '\r' before it), read with
// read(2) so that what has arrived can be told from what has not: a producer waiting for
// each answer gets it, instead of waiting for an end of input that never comes.
class StdinLines {
 public:
  // The next line, or nothing at the end of input. A line longer than kMaxLine bytes
  // (endless input such as /dev/zero) is refused, not stored.
  std::optional<std::string> next() {
    auto check_length = [&](size_t bytes) {
      if (bytes > kMaxLine)
        fail("translate decode", "line ", lines_ + 1, " of standard input is longer than ", kMaxLine,
             " bytes: ", printable(buf_.substr(pos_, kMaxLine + 1)));
    };
    size_t end;
    while ((end = buf_.find('\n', pos_)) == std::string::npos) {
      check_length(buf_.size() - pos_);
      if (!fill()) break;
    }
    if (end == std::string::npos && pos_ == buf_.size()) return std::nullopt;
    const size_t stop = end == std::string::npos ? buf_.size() : end;  // a last line may lack its newline
    check_length(stop - pos_);
    std::string line = buf_.substr(pos_, stop - pos_);
    pos_ = end == std::string::npos ? buf_.size() : end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lines_++ == 0 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a byte-order mark
    return line;
  }

  // Whether a next line (or the end) is there without waiting: a whole line buffered, or
  // bytes readable now. A file is always ready; a pipe is not once its writer pauses.
  bool ready() const {
    if (eof_ || buf_.find('\n', pos_) != std::string::npos) return true;
    pollfd p{.fd = 0, .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  static constexpr size_t kMaxLine = size_t(1) << 20;
  std::string buf_;
  size_t pos_ = 0, lines_ = 0;
  bool eof_ = false;

  // Appends what read(2) gives; false at the end of input.
  bool fill() {
    if (eof_) return false;
    buf_.erase(0, pos_);  // what was returned already
    pos_ = 0;
    char chunk[1 << 16];
    for (;;) {
      const ssize_t n = ::read(0, chunk, sizeof chunk);
      if (n > 0) {
        buf_.append(chunk, (size_t)n);
        return true;
      }
      if (n == 0) return !(eof_ = true);
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking descriptor inherited from the caller
        pollfd p{.fd = 0, .events = POLLIN, .revents = 0};
        ::poll(&p, 1, -1);
        continue;
      }
      fail("translate decode", "cannot read standard input: ", std::strerror(errno));
    }
  }
};

// Inputs waiting to be translated together, at most kBatch good ones: greedy_decode's
// batches, so that a file is translated in the same batches, to the same outputs,
// whether it comes whole or a batch at a time. A bad input reports its error (stderr)
// and leaves an empty output line, so that outputs stay aligned with inputs.
class PendingInputs {
 public:
  static constexpr size_t kBatch = 256;

  PendingInputs(const Loaded& l, bool from_stdin) : l_(l), from_stdin_(from_stdin) {}

  void add(std::string input) {
    try {
      sources_.push_back(source_ids(l_, input));
      where_.push_back(inputs_.size());
      errors_.emplace_back();
    } catch (const Error& e) {
      errors_.push_back(e.what());
    }
    bytes_ += input.size();
    inputs_.push_back(std::move(input));
  }

  // A batch's worth of good inputs, or of bytes in bad ones (each at most a long line).
  bool full() const { return sources_.size() >= kBatch || bytes_ >= (size_t(64) << 20); }

  // Translates and prints what is pending, flushed, in input order.
  void translate() {
    auto outputs = seq2seq::greedy_decode(*l_.model, sources_, l_.model->cfg.max_len - 1, (int64_t)kBatch);
    std::vector<std::string> results(inputs_.size());
    for (size_t k = 0; k < where_.size(); k++) results[where_[k]] = l_.tgt_vocab.decode(outputs[k]);
    for (size_t i = 0; i < inputs_.size(); i++) {
      if (!errors_[i].empty()) {
        failures_++;
        std::fflush(stdout);
        std::fprintf(stderr, "translate decode: %s %zu (%s): %s\n", from_stdin_ ? "line" : "argument", done_ + i + 1,
                     printable(inputs_[i]).c_str(), errors_[i].c_str());
      }
      std::printf("%s\n", results[i].c_str());
    }
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      fail("translate decode", "cannot write the translations: ", std::strerror(errno));
    done_ += inputs_.size();
    inputs_.clear(), errors_.clear(), sources_.clear(), where_.clear();
    bytes_ = 0;
  }

  int failures() const { return failures_; }

 private:
  const Loaded& l_;
  const bool from_stdin_;
  std::vector<std::string> inputs_, errors_;
  std::vector<std::vector<int64_t>> sources_;
  std::vector<size_t> where_;  // sources_[k] is inputs_[where_[k]]
  size_t bytes_ = 0, done_ = 0;
  int failures_ = 0;
};

}  // namespace

int decode(const DecodeOptions& o) {
  Loaded l = load_model(o.checkpoint);
  const bool from_stdin = o.texts.empty();
  PendingInputs pending(l, from_stdin);
  if (!from_stdin) {
    for (const std::string& text : o.texts) pending.add(text);
    pending.translate();
    return pending.failures() ? 1 : 0;
  }
  // Memory stays bounded and answers come as lines do: a batch is translated once it is
  // full, or once the input pauses.
  StdinLines in;
  try {
    while (auto line = in.next()) {
      pending.add(std::move(*line));
      if (pending.full() || !in.ready()) pending.translate();
    }
  } catch (const Error&) {
    pending.translate();  // the lines before a refused one are answered
    throw;
  }
  pending.translate();
  return pending.failures() ? 1 : 0;
}

int attention(const AttentionOptions& o) {
  const std::string &path = o.checkpoint, &out = o.out, &input = o.text;
  const int64_t pads = o.pad;
  Loaded l = load_model(path);
  std::vector<int64_t> ids = source_ids(l, input);
  if ((int64_t)ids.size() + 1 + pads > l.model->cfg.max_len)
    fail("translate attention", "the input (", ids.size(), " characters, and </s>) and --pad ", pads,
         " pad positions exceed the model's maximum length ", l.model->cfg.max_len);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("translate attention", "cannot create '", out, "': ", ec.message());
  auto produced = seq2seq::greedy_decode(*l.model, {ids}, l.model->cfg.max_len - 1)[0];

  // Teacher-force the produced output and keep every layer's weights. The source gets
  // `pads` pad positions, masked, to show that they receive no weight.
  std::vector<int64_t> src = ids, tgt_in = {CharVocab::kBegin};
  src.push_back(CharVocab::kEnd);
  for (int64_t p = 0; p < pads; p++) src.push_back(CharVocab::kPad);
  for (int64_t id : produced) tgt_in.push_back(id);
  nn::Transformer& m = *l.model;
  for (size_t i = 0; i < (size_t)m.cfg.num_encoder_layers; i++) m.encoder->layer(i)->keep_weights = true;
  for (size_t i = 0; i < (size_t)m.cfg.num_decoder_layers; i++) m.decoder->layer(i)->keep_weights = true;
  {
    NoGradGuard ng;
    m.forward(from_vector(src, {1, (int64_t)src.size()}), from_vector(tgt_in, {1, (int64_t)tgt_in.size()}));
  }
  std::vector<std::string> src_labels, out_labels;
  for (int64_t id : src)
    src_labels.push_back(id == CharVocab::kEnd ? "</s>" : id == CharVocab::kPad ? "pad" : l.src_vocab.tokens()[(size_t)id]);
  for (int64_t id : produced) out_labels.push_back(l.tgt_vocab.tokens()[(size_t)id]);
  out_labels.push_back("</s>");
  for (auto& s : src_labels)
    if (s == " ") s = "\xE2\x90\xA3";  // a visible space
  const std::string translation = l.tgt_vocab.decode(produced);

  std::vector<std::string> written;
  // the source's pad positions: blocked keys, and in the encoder padding queries
  std::vector<bool> pad_flags;
  for (int64_t id : src) pad_flags.push_back(id == CharVocab::kPad);
  const Tensor src_pad = from_bools(pad_flags, {1, (int64_t)src.size()});
  const Tensor blocked_keys = src_pad.reshape({1, 1, 1, (int64_t)src.size()});
  auto draw = [&](const std::string& file, const std::string& title, const Tensor& w /* [1, H, R, C] */,
                  const std::vector<std::string>& rows, const std::string& ylabel, const Tensor& query_padding) {
    const int64_t H = w.size(1);
    // per head: the mean entropy of its queries' weights and their mean largest weight
    auto stats = watch::head_statistics(Tensor(), w, Tensor(), Tensor(), blocked_keys, query_padding);
    std::vector<plot::Panel> panels;
    for (int64_t h = 0; h <= H; h++) {
      Tensor m2 = h < H ? w.select(0, 0).select(0, h) : mean(w.select(0, 0), {0});
      plot::Heatmap p;
      char head[128];
      if (h < H)
        std::snprintf(head, sizeof head, "head %lld: entropy %.2f, largest weight %.2f", (long long)(h + 1),
                      stats["entropy_mean"][(size_t)h], stats["max_weight_mean"][(size_t)h]);
      p.title = h < H ? head : "mean of the heads";
      p.xlabel = "source characters";
      p.ylabel = ylabel;
      p.values = matrix(m2);
      p.row_labels = rows;
      p.col_labels = src_labels;
      p.vmax = 1.0;
      panels.push_back(p);
    }
    const int columns = int(std::min<int64_t>(H + 1, 3));
    // panels tall enough for square cells, plus room for the labels
    const double cell = 490.0 / double(src_labels.size());
    const int height = std::clamp(int(cell * double(rows.size())) + 120, 200, 720);
    plot::save_png(out + "/" + file, panels, columns, 560, height, title);
    written.push_back(out + "/" + file);
  };
  for (int64_t i = 0; i < m.cfg.num_decoder_layers; i++)
    draw("cross_attention_layer" + std::to_string(i + 1) + ".png",
         "decoder layer " + std::to_string(i + 1) + " cross-attention: \"" + input + "\" -> " + translation,
         m.decoder->layer((size_t)i)->last_cross_weights, out_labels, "produced characters", Tensor());
  for (int64_t i = 0; i < m.cfg.num_encoder_layers; i++)
    draw("encoder_self_attention_layer" + std::to_string(i + 1) + ".png",
         "encoder layer " + std::to_string(i + 1) + " self-attention: \"" + input + "\"",
         m.encoder->layer((size_t)i)->last_weights, src_labels, "query characters", src_pad);
  std::printf("%s -> %s\n", input.c_str(), translation.c_str());
  for (auto& f : written) std::printf("wrote %s\n", f.c_str());
  return 0;
}

int watch_checkpoint(const WatchOptions& o) {
  Loaded l = load_model(o.checkpoint);
  auto pairs = text::read_pairs(o.data);
  // a target the model cannot write is still a target: <unk> (a source character must be known)
  std::vector<Example> set = seq2seq::encode_pairs(pairs, o.data, l.src_vocab, l.tgt_vocab, /*unknown_targets=*/true);
  check_lengths(pairs, set, o.data, l.model->cfg.max_len, "translate watch", "the model's max_len");
  const int64_t rows = std::min<int64_t>(o.rows, (int64_t)set.size());
  watch::Probe probe = probe_of(*l.model, set, rows);
  watch::Log log = watch::Log::for_sites(probe.sites);
  log.add(watch::measure(probe, l.checkpoint.progress.step));
  const nn::TransformerConfig& cfg = l.model->cfg;
  std::printf("%s: step %lld, d_model %lld, %lld heads (d_k %lld), --score-scale %g; the first %lld pairs of %s, "
              "teacher-forced, in eval mode\n",
              o.checkpoint.c_str(), (long long)l.checkpoint.progress.step, (long long)cfg.layer.d_model,
              (long long)cfg.layer.num_heads, (long long)(cfg.layer.d_model / cfg.layer.num_heads), cfg.layer.score_scale, (long long)rows, o.data.c_str());
  std::printf("score std: of the softmax's input over allowed keys; entropy in nats, H/logn normalised by the number "
              "of keys; max w: the largest weight; sat.: queries whose largest weight is above 0.99; P the weights, Z "
              "the scores, Wq and Wk the head's rows of the query and key projections\n\n%s",
              watch::table(log, log.snapshots.back()).c_str());
  return 0;
}

}  // namespace ember::translate
