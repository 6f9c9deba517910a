// Command lines for ember's programs, on CLI11: typed options with their valid range,
// --help on every program and subcommand, and one way to end a program on any error.
//
//   int main(int argc, char** argv) {
//     return cli::run("fit_sine", [&] {
//       CLI::App app{"Fits a sine with a small MLP.", "fit_sine"};
//       int64_t steps = 2000;
//       cli::integer(app, "--steps", steps, 1, cli::kMaxSteps, "optimizer steps");
//       cli::parse(app, argc, argv);
//       ...
//       return 0;
//     });
//   }
//
// Exit codes: 0 done (and --help), 1 an error (a message on stderr naming the program,
// what was expected and what was received), 2 a bad command line.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/parallel.h"

namespace ember::cli {

// A bad command line found after parsing (a missing TEXT, two options that conflict):
// the message, then a pointer to --help; exit code 2.
struct UsageError {
  std::string message;
  std::string command;  // the subcommand whose --help to point at, if any
};

// Ends the program with this code (thrown by parse() for --help and parse errors, whose
// message it has already printed).
struct Exit {
  int code;
};

// Generous but finite limits for sizes and counts given on a command line: far beyond any
// real use, and small enough that no product of two of them overflows.
constexpr int64_t kMaxSteps = int64_t(1) << 40;
constexpr int64_t kMaxSize = int64_t(1) << 20;  // a width, a length, a batch, a count of layers
constexpr int64_t kMaxCount = int64_t(1) << 31;  // pairs, samples, examples
using ember::kMaxThreads;  // what set_num_threads takes

// The integer a flag's text holds, in decimal and whole, within [lo, hi]; otherwise a
// UsageError naming the flag, what it needs and what it got.
int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo,
                  int64_t hi = std::numeric_limits<int64_t>::max());
// A finite real number within [lo, hi].
double parse_real(const std::string& flag, const std::string& text, double lo = -INFINITY, double hi = INFINITY);
// A finite real number above 0 and at most hi, "in (0, hi]": a rate that must move.
double parse_positive_real(const std::string& flag, const std::string& text, double hi);

// Options whose values are checked as parse_int/parse_real do; the default is shown by
// --help. Return the option, so that callers can ask option->count() whether it was given.
CLI::Option* integer(CLI::App& app, const std::string& name, int64_t& value, int64_t lo, int64_t hi,
                     const std::string& help);
CLI::Option* integer(CLI::App& app, const std::string& name, int& value, int lo, int hi, const std::string& help);
CLI::Option* real(CLI::App& app, const std::string& name, double& value, double lo, double hi,
                  const std::string& help);
CLI::Option* positive_real(CLI::App& app, const std::string& name, double& value, double hi,
                           const std::string& help);
CLI::Option* text(CLI::App& app, const std::string& name, std::string& value, const std::string& help);

// Parses the command line; throws Exit after printing --help (code 0) or a parse error
// (code 2), the error prefixed by the app's name and said as the helpers above say
// theirs: "--dtype needs a value: float64 or float32", "--checkpoint is required: the
// checkpoint", "a command is needed: train, eval or decode".
void parse(CLI::App& app, int argc, char** argv);

// Runs a program's body and turns whatever it throws into a message and an exit code.
// Before it, SIGXFSZ is ignored (a write past `ulimit -f` fails with its reason), stdout
// is line-buffered, and OMP_NUM_THREADS is checked like --threads. Exit codes:
// Exit as given, UsageError 2, ember::Error, out of memory and any other exception 1.
// Messages are prefixed by program (and a UsageError's command) unless they already
// start with it.
int run(const std::string& program, const std::function<int()>& body);

// This machine's physical memory in bytes (0 when unknown).
int64_t physical_memory();
// Refuses (ember::Error naming op) a job that would need more than the machine's memory
// before any of it is allocated: bytes is an estimate, what says what it is for.
void check_fits_in_memory(const char* op, double bytes, const std::string& what);

// An option whose value is one of choices; anything else is a UsageError listing them.
CLI::Option* choice(CLI::App& app, const std::string& name, std::string& value, const std::vector<std::string>& choices,
                    const std::string& help);

// Makes dir and its parents for a program's output, before any work, and checks that a
// file can be created in it: an empty name is a UsageError naming flag; a directory that
// cannot be made or written into is an ember::Error naming it and the system's reason.
void make_output_dir(const std::string& flag, const std::string& dir);

// Refuses (ember::Error naming op) an output path that cannot be written, before any
// work is done: path must not be a directory, and its folder must exist, be a directory
// and be writable. what says what the file is for. The write itself still checks every
// system call; this only makes a doomed run fail at once.
void check_output_file(const char* op, const std::string& path, const std::string& what);

}  // namespace ember::cli
