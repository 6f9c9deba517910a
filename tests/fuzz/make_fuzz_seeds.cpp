// Writes the seed corpus of the checkpoint fuzz target: small valid checkpoints with and
// without optimizer and schedule state, vocabularies and extras; with "npy", the seeds of
// the NumPy-format target instead: .npy and .npz files of every dtype.
#include <cstdio>
#include <string>
#include <vector>

#include "core/ops.h"
#include "io/checkpoint.h"
#include "io/tensor_file.h"

using namespace ember;
using namespace ember::optim;
using namespace ember::io;

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "npy")) {
    std::fprintf(stderr, "usage: make_fuzz_seeds DIR [npy]\n");
    return 2;
  }
  std::string dir = argv[1];
  if (argc == 3) {
    const NamedTensors set = {{"f32", ones({2, 3})},
                              {"f64", tensor({0.5, -1.0}, kFloat64)},
                              {"i64", tensor({int64_t(-3), int64_t(7)})},
                              {"bool", tensor({true, false})},
                              {"scalar", tensor(1.0)}};
    io::save(dir + "/set.npz", set);
    for (const auto& [name, t] : set) io::save(dir + "/" + name + ".npy", t);
    return 0;
  }
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

  // recipes (see fuzz_checkpoint.cpp): a flags byte below 0x20, then edits
  const std::vector<std::vector<uint8_t>> recipes = {
      {0x1e},                    // the valid checkpoint, every target
      {0x1e, 0, 3},              // one key removed
      {0x16, 1, 2, 3},           // one dtype changed
      {0x1e, 2, 4, 2, 3, 5},     // one shape changed
      {0x0e, 3, 1, 2, 4},        // a stray key
      {0x1e, 4, 1, 0, 0, 0, 0, 0, 0, 0, 9},  // schema version 9
  };
  for (size_t i = 0; i < recipes.size(); i++) {
    std::FILE* f = std::fopen((dir + "/recipe-" + std::to_string(i)).c_str(), "wb");
    std::fwrite(recipes[i].data(), 1, recipes[i].size(), f);
    std::fclose(f);
  }
  return 0;
}
