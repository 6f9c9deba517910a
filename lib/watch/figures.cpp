// The watch's figures: a log's quantities per layer and head over training, runs compared,
// and the table of one snapshot.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "lib/plot/plot.h"
#include "lib/watch/detail.h"
#include "lib/watch/watch.h"

namespace ember::watch {

namespace {

// a PNG holds at most 32767 pixels a side: figures show at most this many layers
constexpr int64_t kMaxFigureLayers = 64;

}  // namespace

namespace detail {

std::string label(const std::string& module) {
  if (module == "encoder_self") return "encoder self-attention";
  if (module == "decoder_self") return "decoder self-attention";
  if (module == "decoder_cross") return "decoder cross-attention";
  return module;
}

}  // namespace detail

// ------------------------------------------------------------------ figures

std::vector<std::string> Log::draw(const std::string& dir, const std::string& prefix) const {
  // one line per head: quantity q of module m, layer l, against the step (NaN points left out)
  auto panel = [&](const std::string& m, int64_t l, const std::string& q, const std::string& title,
                   const std::string& ylabel, double ymin, double ymax) {
    plot::Lines p;
    p.title = title;
    p.xlabel = "step";
    p.ylabel = ylabel;
    p.ymin = ymin, p.ymax = ymax;
    for (int64_t h = 0; h < heads; h++) {
      plot::Series s;
      s.label = "head " + std::to_string(h + 1);
      for (const Snapshot& snap : snapshots) {
        const double v = snap.values.at(m).at(q)[(size_t)(l * heads + h)];
        if (std::isfinite(v)) s.x.push_back(double(snap.step)), s.y.push_back(v);
      }
      p.series.push_back(s);
    }
    return p;
  };
  auto layer_name = [&](int64_t l) { return layers > 1 ? cat_str(", layer ", l + 1) : std::string(); };
  const int64_t shown = std::min(layers, kMaxFigureLayers);
  const std::string part = shown < layers ? cat_str(" (layers 1-", shown, " of ", layers, ")") : std::string();
  std::vector<std::string> written;
  const std::string base = dir + "/" + prefix + "_";
  const int width = 520, height = 340;
  for (const std::string& m : modules) check_module_name(m, "watch::Log::draw", "the log ");
  for (const std::string& m : modules) {
    std::vector<plot::Panel> panels;
    for (int64_t l = 0; l < shown; l++) {
      panels.push_back(panel(m, l, "entropy_norm_mean", "entropy / log(keys)" + layer_name(l), "mean over queries", 0, 1));
      panels.push_back(panel(m, l, "saturated_share", "saturated queries (top weight > 0.99)" + layer_name(l),
                             "share of queries", 0, 1));
    }
    const std::string file = base + m + ".png";
    plot::save_png(file, panels, 2, width, height, label(m) + ": how peaked each head's softmax is" + part);
    written.push_back(file);
  }
  auto grid = [&](const std::string& what, const std::string& q, const std::string& ylabel, const std::string& title) {
    std::vector<plot::Panel> panels;
    for (const std::string& m : modules)
      for (int64_t l = 0; l < shown; l++) panels.push_back(panel(m, l, q, label(m) + layer_name(l), ylabel, 0, 0));
    const std::string file = base + what + ".png";
    plot::save_png(file, panels, (int)std::min<int64_t>(shown, 3), width, height, title + part);
    written.push_back(file);
  };
  grid("grad_ratio", "grad_ratio", "|dL/dscores| / |dL/dweights|",
       "how much of the gradient reaching the weights the softmax passes to the scores");
  grid("score_spread", "score_std", "std of the scaled scores", "spread of the softmax's input per query");
  grid("example_spread", "grad_scores_example_cv", "std / mean over examples",
       "how unevenly the examples' gradients reach the scores");
  grid("max_logit", "max_logit", "largest scaled score", "the largest attention logit (softmax input) per head");
  // curvature, when it was measured: each head's largest eigenvalue and trace, and the
  // whole model's density at up to four steps (the first, the last and two between)
  bool curvature = false;
  for (const Snapshot& snap : snapshots)
    for (const std::string& m : modules)
      for (double v : snap.values.at(m).at("curvature_top")) curvature = curvature || std::isfinite(v);
  if (curvature) {
    grid("curvature", "curvature_top", "largest Hessian eigenvalue",
         "the sharpest curvature of each head's block of the loss's Hessian (Wq, Wk, Wv rows, Wo columns)");
    grid("curvature_trace", "curvature_trace", "Hessian trace (Hutchinson)",
         "the total curvature of each head's block of the loss's Hessian");
  }
  std::vector<const Snapshot*> dens;
  for (const Snapshot& snap : snapshots)
    if (snap.density.n > 0) dens.push_back(&snap);
  if (!dens.empty()) {
    std::vector<const Snapshot*> shown_steps;
    for (size_t i = 0; i < 4 && i < dens.size(); i++) {
      const Snapshot* s = dens[dens.size() <= 4 ? i : i * (dens.size() - 1) / 3];
      if (shown_steps.empty() || shown_steps.back() != s) shown_steps.push_back(s);
    }
    plot::Lines p;
    p.title = "the whole model's Hessian: eigenvalue density (stochastic Lanczos quadrature)";
    p.xlabel = "eigenvalue";
    p.ylabel = "density";
    p.log_y = true;
    double lo = INFINITY, hi = -INFINITY;
    for (const Snapshot* s : shown_steps) lo = std::min(lo, s->density.range().first), hi = std::max(hi, s->density.range().second);
    const double pad = 0.05 * std::max(hi - lo, 1e-9), sigma = 0.01 * std::max(hi - lo, 1e-9);
    for (const Snapshot* s : shown_steps) {
      plot::Series line;
      line.label = "step " + std::to_string(s->step);
      const int64_t points = 400;
      line.y = s->density.on_grid(lo - pad, hi + pad, points, sigma);
      // six decades below the peak is the floor: the Gaussians' tails underflow past it
      const double peak = *std::max_element(line.y.begin(), line.y.end());
      for (double& y : line.y)
        if (!(y > peak * 1e-6)) y = kNaN;
      for (int64_t i = 0; i < points; i++) line.x.push_back(lo - pad + (hi - lo + 2 * pad) * double(i) / double(points - 1));
      p.series.push_back(line);
    }
    const std::string file = base + "density.png";
    plot::save_png(file, {p}, 1, 720, 420);
    written.push_back(file);
  }
  return written;
}

std::vector<double> average(const Log& log, const std::string& module, const std::string& quantity) {
  std::vector<double> out;
  for (const Snapshot& s : log.snapshots) {
    double sum = 0;
    int64_t n = 0;
    for (double v : s.values.at(module).at(quantity))
      if (std::isfinite(v)) sum += v, n++;
    out.push_back(n ? sum / double(n) : kNaN);
  }
  return out;
}

void draw_comparison(const std::vector<Log>& runs, const std::vector<std::string>& labels, const std::string& path) {
  const char* op = "watch::draw_comparison";
  if (runs.empty() || runs.size() != labels.size()) fail(op, "expected one label per run, got ", runs.size(), " runs and ", labels.size(), " labels");
  std::vector<std::string> modules;
  for (const std::string& m : runs[0].modules) {
    bool everywhere = true;
    for (const Log& r : runs) everywhere = everywhere && std::count(r.modules.begin(), r.modules.end(), m);
    if (everywhere) modules.push_back(m);
  }
  if (modules.empty()) fail(op, "the runs have no attention module in common");
  struct Column {
    const char* quantity;
    const char* title;
    double ymin, ymax;
  };
  const Column columns[] = {{"score_std", "score spread (std)", 0, 0},
                            {"entropy_norm_mean", "entropy / log(keys)", 0, 1},
                            {"saturated_share", "saturated queries", 0, 1},
                            {"grad_ratio", "|dL/dscores| / |dL/dweights|", 0, 0},
                            {"max_logit", "largest logit per head", 0, 0}};
  std::vector<plot::Panel> panels;
  for (const std::string& m : modules)
    for (const Column& c : columns) {
      plot::Lines p;
      p.title = label(m) + ": " + c.title;
      p.xlabel = "step";
      p.ylabel = "mean over layers and heads";
      p.ymin = c.ymin, p.ymax = c.ymax;
      for (size_t r = 0; r < runs.size(); r++) {
        plot::Series s;
        s.label = labels[r];
        const std::vector<double> v = average(runs[r], m, c.quantity);
        for (size_t i = 0; i < v.size(); i++)
          if (std::isfinite(v[i])) s.x.push_back(double(runs[r].snapshots[i].step)), s.y.push_back(v[i]);
        p.series.push_back(s);
      }
      panels.push_back(p);
    }
  plot::save_png(path, panels, 5, 420, 320, "the runs' attention, averaged over layers and heads");
}

std::string table(const Log& log, const Snapshot& s) {
  std::string out;
  char b[256];
  std::snprintf(b, sizeof b, "%-24s %5s %4s %9s %8s %8s %7s %6s %10s %10s %7s %10s %10s\n", "module", "layer", "head",
                "score std", "entropy", "H/logn", "max w", "sat.", "|dL/dP|", "|dL/dZ|", "ratio", "|dL/dWq|",
                "|dL/dWk|");
  out += b;
  for (const std::string& m : log.modules)
    for (int64_t l = 0; l < log.layers; l++)
      for (int64_t h = 0; h < log.heads; h++) {
        auto v = [&](const char* q) { return s.values.at(m).at(q)[(size_t)(l * log.heads + h)]; };
        if (std::isnan(v("grad_weights_norm")) && std::isnan(v("entropy_mean"))) continue;  // no such layer
        std::snprintf(b, sizeof b, "%-24s %5lld %4lld %9.3f %8.3f %8.3f %7.3f %5.1f%% %10.3e %10.3e %7.4f %10.3e %10.3e\n",
                      label(m).c_str(), (long long)(l + 1), (long long)(h + 1), v("score_std"), v("entropy_mean"),
                      v("entropy_norm_mean"), v("max_weight_mean"), 100 * v("saturated_share"), v("grad_weights_norm"),
                      v("grad_scores_norm"), v("grad_ratio"), v("grad_q_proj_norm"), v("grad_k_proj_norm"));
        out += b;
      }
  return out;
}

}  // namespace ember::watch
