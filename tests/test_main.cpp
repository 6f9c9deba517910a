// The Catch2 entry point shared by every test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

// Sanitizer builds: fontconfig, which Cairo uses to draw text in the figures, keeps a
// cache for the life of the process; LeakSanitizer would report it as a leak of ours. And
// clang's OpenMP runtime (libomp) holds its threads' structures from those threads only: a
// child made by fork() has none of them, so at the child's exit they would read as leaked.
extern "C" const char* __lsan_default_suppressions() { return "leak:libfontconfig.so\nleak:libomp.so\n"; }
// An allocation too large for any machine returns null under AddressSanitizer too (its
// default is to abort), so the tests of ember's out-of-memory errors run there as well.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
