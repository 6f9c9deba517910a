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

}  // namespace ember
