// Restoring a checkpoint into a model, an optimizer, a schedule and generators: every
// target and every value checked before the first is changed, so that a refused load
// leaves them all as they were.
#include "io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "io/checkpoint_detail.h"

namespace ember::io {

using detail::all_finite;
using detail::check_tensor;

Checkpoint load_checkpoint(const std::string& path, ResumeTargets& t) {
  const char* op = "load_checkpoint";
  Checkpoint c = read_checkpoint(path);
  auto bad = [&](const std::string& key, const std::string& what) { fail(op, "'", path, "': key '", key, "': ", what); };

  // 1. check everything
  for (auto& [name, dst] : t.model) check_tensor(dst, "target model tensor", name, op);
  for (auto& [name, g] : t.generators)
    if (!g) fail(op, "generator '", name, "' is null");
  std::vector<std::string> problems;
  for (auto& [name, dst] : t.model) {
    auto it = c.model.find(name);
    if (it == c.model.end()) {
      problems.push_back(cat_str("key '/model/", name, "': missing from the file"));
      continue;
    }
    const Tensor& src = it->second;
    if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
      problems.push_back(cat_str("key '/model/", name, "': ", dtype_name(src.dtype()), " ", shape_str(src.shape()),
                                 " in the file, ", dtype_name(dst.dtype()), " ", shape_str(dst.shape()), " in the model"));
      continue;
    }
    // what copy_ would refuse once others are written: one memory location for several
    // elements (an expanded view)
    for (int64_t d = 0; d < dst.dim(); d++)
      if (dst.stride(d) == 0 && dst.size(d) > 1) {
        problems.push_back(cat_str("key '/model/", name, "': the model's tensor (shape ", shape_str(dst.shape()),
                                   ", strides ", shape_str(dst.strides()),
                                   ") holds several elements in one memory location and cannot take the file's values"));
        break;
      }
    // a parameter (it requires grad) never holds NaN or infinity in a saved checkpoint:
    // training stops on a non-finite loss before it saves
    if (dst.requires_grad() && !all_finite(src))
      problems.push_back(cat_str("key '/model/", name, "': holds a value that is not finite (NaN or infinity)"));
  }
  // Targets that share memory would take the file's values in turn, the last one winning:
  // the same elements (tied weights) must get the same values, and partly overlapping
  // targets are refused.
  {
    struct Span {
      const std::string* name;
      const Tensor* dst;
      int64_t first, last;  // the first and last element the target reaches
    };
    std::vector<Span> spans;
    for (auto& [name, dst] : t.model) {
      auto it = c.model.find(name);
      if (dst.numel() == 0 || it == c.model.end() || it->second.shape() != dst.shape() ||
          it->second.dtype() != dst.dtype())
        continue;  // reported above
      int64_t last = dst.offset();
      for (int64_t d = 0; d < dst.dim(); d++) last += (dst.size(d) - 1) * dst.stride(d);
      spans.push_back({&name, &dst, dst.offset(), last});
    }
    for (size_t i = 0; i < spans.size(); i++)
      for (size_t j = 0; j < i; j++) {
        const Span &a = spans[j], &b = spans[i];
        if (a.dst->storage() != b.dst->storage() || a.last < b.first || b.last < a.first) continue;
        const bool tied = a.dst->offset() == b.dst->offset() && a.dst->shape() == b.dst->shape() &&
                          a.dst->strides() == b.dst->strides() && a.dst->dtype() == b.dst->dtype();
        if (!tied)
          problems.push_back(cat_str("keys '/model/", *a.name, "' and '/model/", *b.name,
                                     "': the model's tensors overlap in memory, so one would overwrite the other"));
        else if (!equal(c.model.at(*a.name), c.model.at(*b.name)))
          problems.push_back(cat_str("keys '/model/", *a.name, "' and '/model/", *b.name,
                                     "': the model's tensors are one (tied), but the file holds different values"));
      }
  }
  for (auto& [name, src] : c.model)
    if (!t.model.count(name)) problems.push_back(cat_str("key '/model/", name, "': unexpected (the model has no such tensor)"));
  if (!problems.empty()) {
    std::string msg;
    for (auto& pr : problems) msg += "\n  " + pr;
    fail(op, "'", path, "' does not match the model:", msg);
  }

  if (!t.config.empty()) {
    for (auto& [k, v] : t.config) {
      auto it = c.config.find(k);
      if (it == c.config.end()) bad("/config", cat_str("attribute '", k, "' is missing (the model has ", to_string(v), ")"));
      bool same = it->second == v;
      // integers written as integers may come back as doubles from other writers
      if (!same && std::holds_alternative<int64_t>(v) && std::holds_alternative<double>(it->second))
        same = (double)std::get<int64_t>(v) == std::get<double>(it->second);
      if (!same)
        bad("/config", cat_str("attribute '", k, "' is ", to_string(it->second), " in the file but ", to_string(v),
                               " in the model"));
    }
    for (auto& [k, v] : c.config)
      if (!t.config.count(k)) bad("/config", cat_str("attribute '", k, "' is not part of the model's configuration"));
  }

  if (t.optimizer) {
    if (!c.optimizer) bad("/optimizer", "is missing (the checkpoint holds no optimizer state)");
    if (c.optimizer->kind != t.optimizer->kind())
      bad("/optimizer", cat_str("kind is '", c.optimizer->kind, "' in the file but '", t.optimizer->kind(), "' here"));
    auto mine = t.optimizer->hyper();
    for (auto& [k, v] : c.optimizer->hyper)
      if (!mine.count(k)) bad("/optimizer", cat_str("attribute '", k, "' is not a hyper-parameter of ", t.optimizer->kind()));
    for (auto& [k, v] : mine)
      if (!c.optimizer->hyper.count(k)) bad("/optimizer", cat_str("attribute '", k, "' is missing"));
    std::map<std::string, Tensor> params(t.optimizer->named_parameters().begin(), t.optimizer->named_parameters().end());
    for (auto& [name, ps] : c.optimizer->params) {
      auto it = params.find(name);
      if (it == params.end()) bad("/optimizer/state/" + name, "unexpected (the optimizer has no such parameter)");
      for (auto& [slot, st] : ps.slots)
        if (st.shape() != it->second.shape() || st.dtype() != it->second.dtype())
          bad("/optimizer/state/" + name + "/" + slot,
              cat_str(dtype_name(st.dtype()), " ", shape_str(st.shape()), " in the file, the parameter is ",
                      dtype_name(it->second.dtype()), " ", shape_str(it->second.shape())));
    }
  }

  std::unique_ptr<optim::Schedule> probe;
  if (t.schedule) {
    if (!c.schedule) bad("/schedule", "is missing (the checkpoint holds no schedule state)");
    if (c.schedule->kind != t.schedule->kind())
      bad("/schedule", cat_str("kind is '", c.schedule->kind, "' in the file but '", t.schedule->kind(), "' here"));
    if (c.schedule->settings != t.schedule->settings()) {
      std::string detail;
      for (auto& [k, v] : t.schedule->settings()) {
        auto it = c.schedule->settings.find(k);
        if (it == c.schedule->settings.end()) detail += cat_str(" '", k, "' missing;");
        else if (it->second != v) detail += cat_str(" '", k, "' is ", it->second, " in the file, ", v, " here;");
      }
      bad("/schedule", "settings differ from this schedule's:" + detail);
    }
  }

  for (auto& [name, g] : t.generators) {
    auto it = c.generators.find(name);
    if (it == c.generators.end()) bad("/rng/" + name, "is missing");
  }

  // 2. the optimizer is the only target whose restore can still refuse (slot names,
  // hyper-parameter values); load_state restores all or nothing.
  std::optional<optim::OptimizerState> before;
  if (t.optimizer) before = t.optimizer->state();
  if (t.optimizer) {
    try {
      t.optimizer->load_state(*c.optimizer);
    } catch (const Error& e) {
      fail(op, "'", path, "': key '/optimizer': ", e.what());
    }
  }

  // 3. restore the rest, which the checks above leave no reason to fail; should a copy
  // fail all the same, the tensors written so far get their old values back
  {
    NoGradGuard ng;
    std::vector<std::pair<Tensor, Tensor>> done;  // (target, its old values)
    try {
      for (auto& [name, dst] : t.model) {
        Tensor old = dst.detach().clone();
        try {
          dst.copy_(c.model.at(name));
        } catch (const Error& e) {
          fail(op, "'", path, "': key '/model/", name, "': ", e.what());
        }
        done.emplace_back(dst, old);
      }
    } catch (...) {
      for (auto& [dst, old] : done) dst.copy_(old);
      if (before) t.optimizer->load_state(*before);
      throw;
    }
  }
  if (t.schedule) t.schedule->set_last_step(c.schedule->last_step);
  for (auto& [name, g] : t.generators) g->set_state(c.generators.at(name));
  return c;
}

}  // namespace ember::io
