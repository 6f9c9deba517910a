#include "core/version.h"

namespace ember {

const char* version() { return EMBER_VERSION; }  // from the CMake project's VERSION

}  // namespace ember
