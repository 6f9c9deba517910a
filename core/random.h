// A seeded, counter-based random generator. The n-th draw is a pure function of
// (seed, n) - SplitMix64's mixer applied to seed + n * golden_gamma - so a tensor of
// draws can be filled by any number of threads with identical results, and the whole
// state is two integers that a checkpoint can save and restore.
#pragma once
#include <cstdint>
#include <vector>

namespace ember {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  void manual_seed(uint64_t seed) { seed_ = seed; counter_ = 0; }
  uint64_t seed() const { return seed_; }

  // The full state: {seed, counter}. set_state(get_state()) resumes the same stream.
  std::vector<uint64_t> get_state() const { return {seed_, counter_}; }
  void set_state(const std::vector<uint64_t>& state);

  // Reserves n consecutive draws and returns the index of the first; draw(i) gives them.
  uint64_t reserve(uint64_t n) { uint64_t first = counter_; counter_ += n; return first; }
  uint64_t draw(uint64_t i) const {
    uint64_t z = seed_ + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t i) const { return (double)(draw(i) >> 11) * 0x1.0p-53; }
  // uniform(i) < p decided in integers (the same answer: uniform(i) is u * 2^-53 for an
  // integer u, so u * 2^-53 < p exactly when u < ceil(p * 2^53)), which vectorises.
  // below_threshold(p) is that bound; below(i, t) the test.
  static uint64_t below_threshold(double p) {
    if (!(p > 0.0)) return 0;
    if (p >= 1.0) return uint64_t(1) << 53;
    double t = p * 0x1.0p53, c = (double)(uint64_t)t;
    return (uint64_t)t + (c < t);
  }
  bool below(uint64_t i, uint64_t threshold) const { return (draw(i) >> 11) < threshold; }

  // Sequential helpers for scalar use.
  double next_uniform() { return uniform(reserve(1)); }
  uint64_t next_u64() { return draw(reserve(1)); }

 private:
  uint64_t seed_ = 0;
  uint64_t counter_ = 0;
};

// Dropout's keep/drop decisions, made in this one place for every op that drops: element
// i (a flat, row-major index into the dropped tensor) is dropped when draw first + i of
// the generator falls below p, and a kept element is scaled by 1/(1-p). A small value that
// holds the generator's seed rather than a reference to it: loops that take it by value
// vectorise, and a backward keeps it to make the same decisions again.
struct DropoutDraws {
  Generator gen;
  uint64_t first = 0, threshold = 0;
  double scale = 1;  // 1/(1-p); 0 when p = 1

  // Takes n draws from source for dropping with probability p.
  static DropoutDraws take(Generator& source, double p, uint64_t n) {
    return {Generator(source.seed()), source.reserve(n), Generator::below_threshold(p), p < 1.0 ? 1.0 / (1.0 - p) : 0.0};
  }
  bool dropped(uint64_t i) const { return gen.below(first + i, threshold); }
  // 0 for a dropped element, else scale.
  template <class T>
  T factor(uint64_t i) const {
    return dropped(i) ? T(0) : T(scale);
  }
};

// The process-wide generator used when an op is given none.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace ember
