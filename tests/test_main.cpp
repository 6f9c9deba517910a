// The Catch2 entry point shared by every test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

// Sanitizer builds: fontconfig, which Cairo uses to draw text in the figures, keeps a
// cache for the life of the process; LeakSanitizer would report it as a leak of ours.
extern "C" const char* __lsan_default_suppressions() { return "leak:libfontconfig.so\n"; }
// An allocation too large for any machine returns null under AddressSanitizer too (its
// default is to abort), so the tests of ember's out-of-memory errors run there as well.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
