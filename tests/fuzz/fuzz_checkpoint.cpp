// libFuzzer target: the checkpoint reader must turn any sequence of bytes into either a
// checkpoint or an ember::Error - never a crash, a hang or a sanitizer report.
//
// Inputs whose first byte is odd are also "resealed" (their header's size and checksum
// recomputed) before reading, so that mutations reach the HDF5 parsing and the schema
// checks behind the checksum, not only the checksum itself.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "optim/checkpoint.h"

namespace {

void reseal(std::vector<uint8_t>& b) {
  if (b.size() <= 512) return;
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b.data() + 512, (uInt)(b.size() - 512));
  char header[512] = {0};
  std::snprintf(header, sizeof header, "ember checkpoint\nschema 1\nsize %zu\ncrc32 %08x\n", b.size(), crc);
  std::memcpy(b.data(), header, 512);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size > 600 && (data[600] & 1)) reseal(bytes);
  try {
    ember::optim::Checkpoint c = ember::optim::read_checkpoint_bytes("fuzz-input", bytes);
    (void)c;
  } catch (const ember::Error&) {
  }
  return 0;
}
