// Watching attention learn: for every attention module, layer and head of a model, how
// peaked its softmax is and how much of the loss's gradient the softmax lets through,
// measured on a fixed probe batch while the model trains (translate train --watch,
// tag_dates --watch) or for one checkpoint (translate watch).
//
// A measurement runs the probe batch forward in eval mode (no dropout) with an attention
// hook on every watched module, which hands over that module's scores and weights as
// tensors of the graph; autograd::grad then gives the loss's gradient reaching them and
// the query and key projections' weights. No .grad is touched, no generator drawn from,
// no parameter changed: training goes on bitwise as it would without the watch.
//
// Per head, over the probe's queries that are not padding and have at least two allowed
// keys (with one, the softmax has no choice to make), and over each one's allowed keys
// (P the weights, Z the softmax's input - the scaled scores - and dL/dP, dL/dZ the loss's
// gradient reaching them):
//   score_std          std over allowed keys of Z, averaged over queries ("std 1 vs std 100")
//   entropy_mean       -sum P log P per query, averaged over queries (nats)
//   entropy_p10        its 10th percentile over queries
//   entropy_norm_mean  entropy / log(allowed keys), averaged over queries (1: uniform)
//   entropy_norm_p10   its 10th percentile
//   max_weight_mean    the largest weight per query, averaged
//   saturated_share    the share of queries whose largest weight is above 0.99
//   grad_weights_norm  |dL/dP| over allowed pairs (Frobenius)
//   grad_scores_norm   |dL/dZ| over allowed pairs
//   grad_ratio         grad_scores_norm / grad_weights_norm: how much the softmax lets through
//   grad_q_proj_norm   |dL/dWq| over the head's rows of the query projection's weight
//   grad_k_proj_norm   |dL/dWk| over the head's rows of the key projection's weight
//   grad_scores_example_cv         each example's |dL/dZ| (its own gradient: the loss sums
//                                  over examples, and each example's scores see only it):
//                                  std / mean over the batch's examples
//   grad_scores_example_max_ratio  the same norms' largest / median
//   max_logit          the largest Z over the allowed pairs of those queries (the "max
//                      attention logit" of Wortsman et al. 2023, which grows without bound
//                      before attention-logit divergence)
// And, at the steps curvature is measured (CurvatureOptions; NaN at the others), of the
// loss's Hessian on the head's block - its rows of Wq, Wk, Wv and their biases and its
// columns of Wo (nn::head_parameters) - by Hessian-vector products (nn/curvature.h):
//   curvature_top       the largest eigenvalue (Lanczos): the sharpest direction
//   curvature_trace     the trace (Hutchinson): the sum of every direction's curvature
//   curvature_trace_se  its standard error
// with the spectral density of the whole model's Hessian (stochastic Lanczos quadrature).
//
// A run's measurements are kept as a Log, written as one HDF5 file (docs/watch-format.md),
// a CSV and PNG figures; the figures can be drawn again from the HDF5 file alone.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/curvature.h"
#include "core/tensor.h"
#include "nn/multihead_attention.h"

namespace ember::watch {

using ember::Tensor;

// The quantities above, in the order of the CSV's columns.
extern const std::vector<std::string> kQuantities;
// Those a file written before them lacks: read as NaN.
extern const std::set<std::string> kLaterQuantities;
// What each quantity is, one line (stored with each dataset).
const std::string& meaning(const std::string& quantity);

// One watched attention module: its role ("encoder_self", "decoder_self",
// "decoder_cross") and layer (from 0).
struct Site {
  std::string module;
  int64_t layer = 0;
  ember::nn::MultiHeadAttention* attention = nullptr;
};

// The measurements of one probe: values.at(module).at(quantity)[layer * heads + head].
struct Snapshot {
  int64_t step = 0;  // the optimizer step measured after
  std::map<std::string, std::map<std::string, std::vector<double>>> values;  // see above
  // The whole model's Hessian spectral density, when curvature was measured (n = 0: not).
  curvature::SpectralDensity density;
};

// What a probe needs from the program: the model (put in eval mode for the measurement,
// its mode restored), the sites, and a function that runs the model on the probe batch
// and returns the loss, with which queries are padding, per module role (bool [B, L],
// true at padding; a role absent from the map has no padding). Curvature is measured on
// curvature_loss, the loss of the batch's first rows (empty: loss).
struct Probe {
  ember::nn::Module* model = nullptr;  // the model measured
  std::vector<Site> sites;  // its attention modules
  std::function<Tensor()> loss;  // the probe batch's loss
  std::map<std::string, Tensor> query_padding;  // per role, bool [B, L]
  std::function<Tensor()> curvature_loss;  // the loss curvature is measured on (empty: loss)
};

// Measures every site on the probe batch once.
Snapshot measure(const Probe& probe, int64_t step);

// How the watch measures curvature: at steps that are multiples of `every` (0: never),
// per head of every site the largest eigenvalue of the loss's Hessian on its block, by
// `lanczos_steps` steps of Lanczos started from that head's eigenvector of the measurement
// before (so few steps suffice), and its trace, from `trace_probes` sign vectors shared by
// every head (one product each for all heads); and the spectral density of the whole
// model's Hessian from one probe of `density_steps` Lanczos steps (0: none). A measurement
// takes heads x lanczos_steps + trace_probes + density_steps Hessian-vector products on the
// curvature batch, each about two forward-backward passes. The first measurement, with no
// eigenvector to start from, runs first_lanczos_steps per head.
struct CurvatureOptions {
  int64_t every = 0;  // measure at steps that are multiples of it (0: never)
  int64_t lanczos_steps = 3;  // per head, from the eigenvector of the measurement before
  int64_t first_lanczos_steps = 6;  // per head, from a random vector
  int64_t trace_probes = 4;  // shared by the heads
  int64_t density_steps = 12;  // of the whole model's density (0: none)
  uint64_t seed = 0;  // of the probes and first start vectors
};

// Adds the curvature quantities of every site's heads and the model's density to snap,
// measured on the probe's curvature_loss (model in eval mode, its mode restored, no hooks: attention
// runs as in training). starts holds each head's last eigenvector, (site, head) in order,
// updated here (empty at first). No .grad is touched and no generator drawn from. An Error
// when options are out of range (the Lanczos steps and trace_probes >= 1, density_steps >= 0).
void measure_curvature(const Probe& probe, const CurvatureOptions& options, Snapshot& snap,
                       std::vector<std::vector<double>>& starts);

// Per head, the quantities of one attention module on one batch, from its scores and
// weights, the gradients reaching them, which pairs are blocked (bool, broadcasting to
// [B, H, L, S]; undefined: none) and which queries are padding (bool [B, L]; undefined:
// none). dscores and dweights may be undefined (zero), scores too (score_std is then NaN).
// Returns quantity -> [H] (the
// projection norms excepted, which measure() adds).
std::map<std::string, std::vector<double>> head_statistics(const Tensor& scores, const Tensor& weights,
                                                           const Tensor& dscores, const Tensor& dweights,
                                                           const Tensor& blocked, const Tensor& query_padding);

// The measurements of a run, in step order, and what they were measured on.
struct Log {
  std::vector<std::string> modules;  // the roles, in the order first seen
  int64_t layers = 0, heads = 0;  // per module (every module has the same)
  std::map<std::string, std::string> info;  // attributes: program, model, score_scale, probe, ...
  std::vector<Snapshot> snapshots;

  // Starts a log for these sites (modules in site order; layers, heads from them).
  static Log for_sites(const std::vector<Site>& sites);
  void add(Snapshot s);
  // Drops the snapshots after step (a run resumed from an earlier checkpoint).
  void truncate_after(int64_t step);
  // The same modules, layers and heads.
  bool same_shape(const Log& other) const;

  // The HDF5 file and the CSV, each replaced whole or not at all (errors name the file).
  // read_h5 refuses, naming the file, what is not a regular file (a FIFO, a device)
  // before opening it, and a module whose name could not name a figure file ("a/b",
  // "..": letters, digits, '_', '-' and '.' only).
  void write_h5(const std::string& path) const;
  void write_csv(const std::string& path) const;
  static Log read_h5(const std::string& path);

  // The figures, into dir, named prefix + "_" + what + ".png": per module, the entropy and
  // saturation of each head against the step; the gradient ratio; the score spread; the
  // spread of the examples' gradients reaching the scores; the largest logit (the
  // first 64 layers of a deeper model: a PNG holds 32767 pixels a side). Returns the paths
  // written.
  std::vector<std::string> draw(const std::string& dir, const std::string& prefix = "watch") const;
};

// Per snapshot, the mean of a quantity over a module's layers and heads (NaN values left
// out; NaN when none is left).
std::vector<double> average(const Log& log, const std::string& module, const std::string& quantity);

// Runs side by side (their modules in common, in the first run's order): per module, the
// mean over layers and heads of the score spread, the normalised entropy, the saturated
// share, the gradient ratio and the largest logit against the step, one line per run. One PNG at path.
void draw_comparison(const std::vector<Log>& runs, const std::vector<std::string>& labels, const std::string& path);

// The snapshot's per-head table, one line per (module, layer, head), for a terminal.
std::string table(const Log& log, const Snapshot& s);

// The largest probe batch the programs accept (--watch-rows): a measurement runs it forward
// and backward at once, so its time and memory grow with it (1024 date pairs: about a
// second and a few hundred MB on two cores).
constexpr int64_t kMaxProbeRows = 1024;

// The watch of a training run: measures the probe every `every` steps and keeps the log;
// write() puts watch.h5, watch.csv and the figures into dir. A file that cannot be written
// is a warning (said once, on stderr, naming program), never a reason to stop training.
class Recorder {
 public:
  // info: what the log says about the run (Log::info)
  // curvature: when and how curvature is measured (every: a multiple of `every`, or 0)
  Recorder(Probe probe, std::string dir, int64_t every, std::string program, std::map<std::string, std::string> info,
           CurvatureOptions curvature = {});
  // A resumed run: continues the log of dir/watch.h5 up to step. A missing file starts a
  // new log; so does one that cannot be read, or that watched another model or probe
  // batch (its info differs), which is said on stdout.
  void resume(int64_t step);
  // Measures when step is a multiple of `every` (step 0 included) and not measured yet.
  void after_step(int64_t step);
  // Writes watch.h5 and watch.csv, and with figures the PNGs too, each file on its own;
  // returns whether all were written.
  bool write(bool figures = true);
  // Writes the files and says what the watch did, one line: "watch: N measurements of
  // <probe>, S s with the files (P% of training[, curvature every K steps C s of it]);
  // <the files>" - S counts measuring and writing, figures included.
  std::string finish(const std::string& probe, double training_seconds);
  const Log& log() const { return log_; }
  int64_t probes() const { return probes_; }   // measurements made by this process
  double curvature_seconds() const { return curvature_seconds_; }  // spent measuring curvature
  std::string h5_path() const { return dir_ + "/watch.h5"; }

 private:
  Probe probe_;
  std::string dir_, program_;
  int64_t every_;
  CurvatureOptions curvature_;
  std::vector<std::vector<double>> starts_;  // each head's last eigenvector
  Log log_;
  double seconds_ = 0;  // measuring and writing
  double curvature_seconds_ = 0;  // of which measuring curvature
  int64_t probes_ = 0;
  bool warned_ = false;
};

}  // namespace ember::watch
