// The watch's curvature: per head, the largest eigenvalue and the trace of the loss's
// Hessian on the head's block, and the whole model's spectral density, on the probe batch.
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "lib/watch/detail.h"
#include "lib/watch/watch.h"
#include "nn/curvature.h"

namespace ember::watch {

void measure_curvature(const Probe& probe, const CurvatureOptions& o, Snapshot& snap,
                       std::vector<std::vector<double>>& starts) {
  const char* op = "watch::measure_curvature";
  if (!probe.model || !probe.loss || probe.sites.empty()) fail(op, "expected a model, a loss function and sites");
  if (o.lanczos_steps < 1 || o.trace_probes < 1 || o.density_steps < 0)
    fail(op, "expected lanczos_steps >= 1, trace_probes >= 1 and density_steps >= 0, got ", o.lanczos_steps, ", ",
         o.trace_probes, " and ", o.density_steps);
  struct Restore {
    nn::Module* model;
    bool training;
    ~Restore() { model->train(training); }
  } restore{probe.model, probe.model->is_training()};
  probe.model->eval();

  const nn::ParameterSet all = nn::parameters_under(*probe.model);
  const nn::LossHessian hessian(probe.loss, all);
  const Log shape = Log::for_sites(probe.sites);

  // every head's block, in site order, and where each lies in their joint vector
  std::vector<nn::ParameterSet> blocks;
  nn::ParameterSet heads;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Site& s : probe.sites)
    for (int64_t h = 0; h < s.attention->num_heads; h++) {
      blocks.push_back(nn::head_parameters(*s.attention, h, s.module));
      ranges.push_back({nn::numel(heads), nn::numel(blocks.back())});
      heads.insert(heads.end(), blocks.back().begin(), blocks.back().end());
    }
  starts.resize(blocks.size());

  for (const std::string& m : shape.modules)
    for (const char* q : {"curvature_top", "curvature_trace", "curvature_trace_se"})
      snap.values[m][q].assign((size_t)(shape.layers * shape.heads), kNaN);
  const std::vector<curvature::Trace> traces =
      curvature::hutchinson_blocks(hessian.on(heads), nn::numel(heads), ranges, o.trace_probes, o.seed);
  size_t b = 0;
  for (const Site& s : probe.sites)
    for (int64_t h = 0; h < s.attention->num_heads; h++, b++) {
      const int64_t n = nn::numel(blocks[b]);
      curvature::LanczosOptions lo;
      lo.max_steps = std::min(o.lanczos_steps, n);
      lo.tol = 1e-3;
      lo.seed = o.seed + b + 1;
      if ((int64_t)starts[b].size() == n) lo.start = starts[b];
      const curvature::Eigen top = curvature::top_eigen(hessian.on(blocks[b]), n, 1, lo);
      starts[b] = top.vectors[0];
      const size_t at = (size_t)(s.layer * shape.heads + h);
      snap.values[s.module]["curvature_top"][at] = top.values[0];
      snap.values[s.module]["curvature_trace"][at] = traces[b].value;
      snap.values[s.module]["curvature_trace_se"][at] = traces[b].std_error;
    }
  if (o.density_steps > 0)
    snap.density = curvature::spectral_density(hessian.on(all), nn::numel(all), o.density_steps, 1, o.seed);
}

}  // namespace ember::watch
