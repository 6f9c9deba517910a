// libFuzzer target for NumPy's formats (io/npy.h): any bytes, read as a .npy image and as
// an .npz archive, give tensors or an ember::Error - never a crash, a hang or a sanitizer
// report - and a tensor read survives a round trip through ember's own writer.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "io/npy.h"

namespace npy = ember::io::npy;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// what ember writes of t, it reads back as the same bytes (NaN payloads included)
void round_trip(const ember::Tensor& t) {
  const std::vector<uint8_t> again = npy::encode(t);
  const ember::Tensor back = npy::decode(again.data(), again.size(), "again", "fuzz");
  check(back.dtype() == t.dtype() && back.shape() == t.shape());
  check(npy::encode(back) == again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    round_trip(npy::decode(data, size, "fuzz.npy", "fuzz"));
  } catch (const ember::Error&) {
  }
  try {
    const std::vector<uint8_t> file(data, data + size);
    for (const auto& [name, bytes] : npy::unzip(file, "fuzz.npz", "fuzz")) {
      try {
        round_trip(npy::decode(bytes.data(), bytes.size(), "member", "fuzz"));
      } catch (const ember::Error&) {
      }
    }
  } catch (const ember::Error&) {
  }
  return 0;
}
