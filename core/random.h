// A seeded, counter-based random generator. The n-th draw is a pure function of
// (seed, n) - SplitMix64's mixer applied to seed + n * golden_gamma - so a tensor of
// draws can be filled by any number of threads with identical results, and the whole
// state is two integers that a checkpoint can save and restore.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace ember {

// A stream of random 64-bit draws, as torch.Generator; copying one copies its state. Draws
// differ from PyTorch's for the same seed.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}  // A generator at the start of seed's stream.

  // Restarts the stream of this seed (the counter goes back to 0).
  void manual_seed(uint64_t seed) { seed_ = seed; counter_ = 0; }
  uint64_t seed() const { return seed_; }  // The seed last set.

  // The full state: {seed, counter}. set_state(get_state()) resumes the same stream.
  std::vector<uint64_t> get_state() const { return {seed_, counter_}; }
  // Restores a state from get_state; an Error unless it holds exactly 2 integers.
  void set_state(const std::vector<uint64_t>& state);

  // Reserves n consecutive draws and returns the index of the first; draw(i) gives them.
  uint64_t reserve(uint64_t n) { uint64_t first = counter_; counter_ += n; return first; }
  // Draw i of the stream, 64 random bits; a pure function of (seed, i) that moves nothing.
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
  // Whether uniform(i) < p, for threshold = below_threshold(p).
  bool below(uint64_t i, uint64_t threshold) const { return (draw(i) >> 11) < threshold; }

  // Sequential helpers for scalar use: the next draw, as uniform or as 64 bits.
  ///@{
  double next_uniform() { return uniform(reserve(1)); }
  uint64_t next_u64() { return draw(reserve(1)); }
  ///@}

 private:
  uint64_t seed_ = 0;
  uint64_t counter_ = 0;
};

// The batch being computed is samples [first, first + n) of a larger batch (one part of
// a batch split between workers, or split to fit memory): while a BatchOffset lives on
// this thread, dropout draws for sample i the masks sample first + i of the larger batch
// would get (see DropoutDraws), so that the parts together are masked as the whole. 0
// outside any; scopes nest.
class BatchOffset {
 public:
  // Sets this thread's offset to first (not added to an enclosing one) until destroyed.
  explicit BatchOffset(int64_t first);
  ~BatchOffset();
  BatchOffset(const BatchOffset&) = delete;
  BatchOffset& operator=(const BatchOffset&) = delete;
  static int64_t current();  // This thread's offset: 0 outside any BatchOffset.

 private:
  int64_t previous_;
};

// Dropout's keep/drop decisions, made in this one place for every op that drops. They
// belong to the element, not to the layout of the batch it sits in: a dropped tensor is
// seen as rows (every dim but the last) of columns (the last dim), and element c of the
// row at coordinates (i0, i1, ...) is dropped when draw key + c of the generator falls
// below p, where key hashes this call's own draw with the coordinates. Padding a batch
// longer, packing its rows, or splitting it into parts (a BatchOffset moves i0, the
// sample) leaves every element's decision as it was. A kept element
// is scaled by 1/(1-p). The value holds the generator's seed rather than a reference to
// it, so that a backward keeps it to make the same decisions again.
struct DropoutDraws {
  Generator gen;  // A generator of the source's seed, for draw key + c.
  // call: this call's own draw, which every row key starts from; threshold:
  // Generator::below_threshold(p).
  ///@{
  uint64_t call = 0, threshold = 0;
  ///@}
  double scale = 1;  // 1/(1-p); 0 when p = 1
  int64_t sample_offset = 0;  // BatchOffset::current() when the draws were taken.
  std::vector<int64_t> row_dims;  // the dropped tensor's dims but the last

  // One draw of source for a tensor of this shape, dropping with probability p.
  static DropoutDraws take(Generator& source, double p, const std::vector<int64_t>& shape) {
    if (!(p >= 0.0 && p <= 1.0)) fail("DropoutDraws::take", "probability must be in [0, 1], got ", p);
    DropoutDraws d{Generator(source.seed()), source.draw(source.reserve(1)), Generator::below_threshold(p),
                   p < 1.0 ? 1.0 / (1.0 - p) : 0.0, BatchOffset::current(), {}};
    if (!shape.empty()) d.row_dims.assign(shape.begin(), shape.end() - 1);
    return d;
  }
  // The key of row r, a row-major index over row_dims.
  uint64_t row_key(int64_t r) const {
    uint64_t key = call;
    int64_t stride = 1;
    for (size_t i = row_dims.size(); i-- > 1;) stride *= row_dims[i];
    for (size_t i = 0; i < row_dims.size(); i++) {
      const int64_t coord = r / stride % row_dims[i];
      key = mix(key, i == 0 ? sample(coord) : (uint64_t)coord);
      if (i + 1 < row_dims.size()) stride /= row_dims[i + 1];
    }
    return key;
  }
  // The keys of rows [first, first + n), written to out: row_key of each, made from the
  // keys of its leading coordinates, which change only every so many rows - about one mix
  // a row instead of one a dim and a division for each.
  void row_keys(int64_t first, int64_t n, uint64_t* out) const {
    if (n <= 0) return;
    const size_t D = row_dims.size();
    if (D == 0) {
      for (int64_t k = 0; k < n; k++) out[k] = call;
      return;
    }
    std::vector<int64_t> coord(D);
    std::vector<uint64_t> prefix(D);  // prefix[i]: the key of coordinates 0..i
    for (size_t i = D, r = (size_t)first; i-- > 0;) {
      coord[i] = int64_t(r % (size_t)row_dims[i]);
      r /= (size_t)row_dims[i];
    }
    auto from = [&](size_t level) {
      for (size_t i = level; i < D; i++)
        prefix[i] = mix(i == 0 ? call : prefix[i - 1], i == 0 ? sample(coord[0]) : (uint64_t)coord[i]);
    };
    from(0);
    for (int64_t k = 0;; k++) {
      out[k] = prefix[D - 1];
      if (k + 1 == n) return;
      size_t level = D - 1;  // the next row: the last coordinate moves on, carrying into those before
      while (++coord[level] == row_dims[level] && level > 0) coord[level--] = 0;
      from(level);
    }
  }
  // The key of the row at (sample, position) of a [samples, positions, columns] tensor.
  uint64_t row_key(int64_t s, int64_t position) const { return mix(mix(call, sample(s)), (uint64_t)position); }
  // Whether element c of the row of this key is dropped.
  bool dropped(uint64_t key, int64_t c) const { return gen.below(key + (uint64_t)c, threshold); }
  // 0 for a dropped element, else scale.
  template <class T>
  T factor(uint64_t key, int64_t c) const {
    return dropped(key, c) ? T(0) : T(scale);
  }

 private:
  // The sample a leading coordinate stands for, in uint64 (where no sum overflows).
  uint64_t sample(int64_t coord) const { return (uint64_t)coord + (uint64_t)sample_offset; }
  static uint64_t mix(uint64_t key, uint64_t coord) {
    uint64_t z = key ^ (coord + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// The process-wide generator used when an op is given none.
Generator& default_generator();
// Seeds default_generator, as torch.manual_seed (which also seeds other devices' generators).
void manual_seed(uint64_t seed);

}  // namespace ember
