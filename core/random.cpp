// The default generator.
#include "core/random.h"

#include "core/error.h"

namespace ember {

void Generator::set_state(const std::vector<uint64_t>& state) {
  check(state.size() == 2, "Generator::set_state", "expected a state of 2 integers, got ",
        state.size());
  seed_ = state[0];
  counter_ = state[1];
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
thread_local int64_t t_batch_offset = 0;
}  // namespace

BatchOffset::BatchOffset(int64_t first) : previous_(t_batch_offset) { t_batch_offset = first; }
BatchOffset::~BatchOffset() { t_batch_offset = previous_; }
int64_t BatchOffset::current() { return t_batch_offset; }

}  // namespace ember
