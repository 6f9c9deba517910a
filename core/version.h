// The version of ember a program runs with: the CMake package's version too, so that a
// project can ask find_package(ember 0.3 REQUIRED). What changed at each version is in
// CHANGELOG.md.
#pragma once

namespace ember {

const char* version();  // "0.3.0": major.minor.patch

}  // namespace ember
