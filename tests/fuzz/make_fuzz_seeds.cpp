// Writes the seed corpus of the checkpoint fuzz target: small valid checkpoints with and
// without optimizer and schedule state, vocabularies and extras.
#include <cstdio>
#include <string>

#include "core/ops.h"
#include "optim/checkpoint.h"

using namespace ember;
using namespace ember::optim;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  Generator g(1);
  Tensor w = randn({3, 4}, kFloat32, &g).requires_grad_();
  Tensor b = randn({3}, kFloat64, &g).requires_grad_();
  Adam opt({{"layer.weight", w}, {"layer.bias", b}});
  InverseSqrtSchedule sched(4, 2);
  w.set_grad(ones({3, 4}));
  b.set_grad(ones({3}, kFloat64));
  sched.step(opt);
  opt.step();

  Checkpoint small;
  small.model["w"] = ones({2});
  save_checkpoint(dir + "/small.h5", small);

  Checkpoint full = make_checkpoint({{"layer.weight", w}, {"layer.bias", b}}, &opt, &sched, {{"data", &g}},
                                    {1, 0, 3}, {{"d_model", int64_t(4)}, {"dropout", 0.1}, {"act", std::string("relu")}});
  full.vocab["src"] = {"<pad>", "<s>", "</s>", "a", "b"};
  full.extra["losses"] = from_vector(std::vector<float>{1.0f, 0.5f}, {2});
  save_checkpoint(dir + "/full.h5", full);
  return 0;
}
