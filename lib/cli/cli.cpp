// The command-line helpers of cli.h.
#include "lib/cli/cli.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include "core/error.h"

namespace ember::cli {

namespace {

std::string got(const std::string& text) { return ember::printable(text, 40); }

std::string range_text(int64_t lo, int64_t hi) {
  auto show = [](int64_t v) {
    if (v == std::numeric_limits<int64_t>::max()) return std::string("2^63-1");
    if (v > 0 && (v & (v - 1)) == 0 && v >= (int64_t(1) << 20)) return "2^" + std::to_string(__builtin_ctzll((unsigned long long)v));
    return std::to_string(v);
  };
  return "[" + show(lo) + ", " + show(hi) + "]";
}

std::string real_range_text(double lo, double hi) {
  auto show = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  if (std::isinf(lo) && std::isinf(hi)) return "any finite number";
  if (std::isinf(hi)) return "at least " + show(lo);
  if (std::isinf(lo)) return "at most " + show(hi);
  return "in [" + show(lo) + ", " + show(hi) + "]";
}

// "in (0, hi]": above 0, which a closed range cannot say
std::string positive_range_text(double hi) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", hi);
  return "in (0, " + std::string(b) + "]";
}

// "a", "a or b", "a, b or c"
std::string either(const std::vector<std::string>& choices) {
  std::string list;
  for (size_t i = 0; i < choices.size(); i++)
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return list;
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  const std::string need = flag + " needs an integer in " + range_text(lo, hi) + ", got " + got(text);
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) negative = text[i++] == '-';
  if (i == text.size()) throw UsageError{need};
  // decimal digits only, whole: no spaces, no exponent, no hex or octal prefixes
  unsigned __int128 v = 0;
  for (; i < text.size(); i++) {
    if (text[i] < '0' || text[i] > '9') throw UsageError{need};
    v = v * 10 + unsigned(text[i] - '0');
    if (v > (unsigned __int128)1 << 64) break;  // certainly out of range; keep scanning for junk below
  }
  for (; i < text.size(); i++)
    if (text[i] < '0' || text[i] > '9') throw UsageError{need};
  const __int128 s = negative ? -(__int128)v : (__int128)v;
  if (v > (unsigned __int128)1 << 64 || s < lo || s > hi) throw UsageError{need};
  return (int64_t)s;
}

double parse_real(const std::string& flag, const std::string& text, double lo, double hi) {
  const std::string need = flag + " needs a number " + real_range_text(lo, hi) + ", got " + got(text);
  if (text.empty() || std::isspace((unsigned char)text[0])) throw UsageError{need};
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  const bool hex = text.find_first_of("xX") != std::string::npos;
  // (ERANGE also flags an underflow to a denormal or 0, which is a number all the same)
  if (*end != '\0' || hex || !std::isfinite(v) || v < lo || v > hi) throw UsageError{need};
  return v;
}

double parse_positive_real(const std::string& flag, const std::string& text, double hi) {
  try {
    const double v = parse_real(flag, text, 0, hi);
    if (v > 0) return v;
  } catch (const UsageError&) {
  }
  throw UsageError{flag + " needs a number " + positive_range_text(hi) + ", got " + got(text)};
}

CLI::Option* integer(CLI::App& app, const std::string& name, int64_t& value, int64_t lo, int64_t hi,
                     const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name, [&value, name, lo, hi](const std::string& s) { value = parse_int(name, s, lo, hi); }, help);
  return o->type_name("INT in " + range_text(lo, hi))->default_str(std::to_string(value));
}

CLI::Option* integer(CLI::App& app, const std::string& name, int& value, int lo, int hi, const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name, [&value, name, lo, hi](const std::string& s) { value = (int)parse_int(name, s, lo, hi); }, help);
  return o->type_name("INT in " + range_text(lo, hi))->default_str(std::to_string(value));
}

CLI::Option* real(CLI::App& app, const std::string& name, double& value, double lo, double hi,
                  const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name, [&value, name, lo, hi](const std::string& s) { value = parse_real(name, s, lo, hi); }, help);
  char b[32];
  std::snprintf(b, sizeof b, "%g", value);
  return o->type_name("NUMBER " + real_range_text(lo, hi))->default_str(b);
}

CLI::Option* positive_real(CLI::App& app, const std::string& name, double& value, double hi,
                           const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name, [&value, name, hi](const std::string& s) { value = parse_positive_real(name, s, hi); }, help);
  char b[32];
  std::snprintf(b, sizeof b, "%g", value);
  return o->type_name("NUMBER " + positive_range_text(hi))->default_str(b);
}

CLI::Option* text(CLI::App& app, const std::string& name, std::string& value, const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name,
      [&value, name](const std::string& s) {
        if (s.empty()) throw UsageError{name + " needs a non-empty value"};
        // `--out --steps 5`: the next option taken for a value is a mistake, not a name
        if (s.size() > 2 && s.compare(0, 2, "--") == 0)
          throw UsageError{name + " needs a value, got the option \"" + s + "\" (write ./" + s + " for a file of that name)"};
        value = s;
      },
      help);
  o->type_name("TEXT");
  if (!value.empty()) o->default_str(value);
  return o;
}

namespace {

// Every (sub)command keeps what it does not know, so that parse() can name it plainly;
// a repeated option takes its last value, as in most command lines.
void prepare(CLI::App* app) {
  app->allow_extras(true);
  for (CLI::Option* o : app->get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) prepare(sub);
}

// What an option's value must be, in words, from the type names the helpers above give
// ("INT in [1, 2^40]", "NUMBER at least 0", "float64|float32"); empty for a text.
std::string kind_of(const CLI::Option* o) {
  const std::string type = o->get_type_name();
  if (type.rfind("INT in ", 0) == 0) return "an integer" + type.substr(3);
  if (type.rfind("NUMBER ", 0) == 0) {
    const std::string range = type.substr(7);
    return range == "any finite number" ? range : "a number " + range;
  }
  if (type.find('|') == std::string::npos) return "";
  std::vector<std::string> choices;
  for (size_t at = 0, bar = 0; bar != std::string::npos; at = bar + 1) {
    bar = type.find('|', at);
    choices.push_back(type.substr(at, bar == std::string::npos ? bar : bar - at));
  }
  return either(choices);
}

// ": an integer in [1, 1024]", ": float64 or float32", or a text's help: ": the checkpoint"
std::string takes(const CLI::Option* o) {
  std::string kind = kind_of(o);
  if (kind.empty()) kind = o->get_description();
  return kind.empty() ? "" : ": " + kind;
}

// The option a CLI11 message is about: the one of app, or of a command above it (whose
// options may follow a subcommand), whose name starts the message.
const CLI::Option* named_in(const CLI::App* app, const std::string& message) {
  for (; app; app = app->get_parent())
    for (const CLI::Option* o : app->get_options()) {
      const std::string name = o->get_name();
      if (!name.empty() && message.rfind(name, 0) == 0 &&
          (message.size() == name.size() || message[name.size()] == ':' || message[name.size()] == ' '))
        return o;
    }
  return nullptr;
}

// A CLI11 parse error in the words of this project's own messages: the option, what it
// needs (its kind and range, or its choices) and what it got.
std::string plainly(CLI::App& where, const CLI::ParseError& e) {
  std::string message = e.what();
  if (dynamic_cast<const CLI::RequiredError*>(&e) && message.rfind("A subcommand", 0) == 0) {
    std::vector<std::string> names;
    for (const CLI::App* c : where.get_subcommands([](CLI::App*) { return true; })) names.push_back(c->get_name());
    return "a command is needed: " + either(names);
  }
  const std::string unconverted = "Could not convert: ";
  if (message.rfind(unconverted, 0) == 0) message = message.substr(unconverted.size());
  const CLI::Option* o = named_in(&where, message);
  if (!o) return message;
  const std::string name = o->get_name();
  const std::string value = o->results().empty() ? "" : o->results().back();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) return name + " needs a value" + takes(o);
  if (dynamic_cast<const CLI::RequiredError*>(&e)) return name + " is required" + takes(o);
  if (dynamic_cast<const CLI::ConversionError*>(&e) || dynamic_cast<const CLI::ValidationError*>(&e)) {
    if (o->get_items_expected_max() == 0) return name + " is a switch and takes no value, got " + got(value);
    const std::string kind = kind_of(o);
    return kind.empty() ? name + " cannot take " + got(value) + takes(o) : name + " needs " + kind + ", got " + got(value);
  }
  if (dynamic_cast<const CLI::RequiresError*>(&e))
    return name + " needs " + message.substr(name.size() + std::string(" requires ").size()) + " as well";
  if (dynamic_cast<const CLI::ExcludesError*>(&e))
    return name + " cannot be given with " + message.substr(name.size() + std::string(" excludes ").size());
  return message;
}

}  // namespace

void parse(CLI::App& app, int argc, char** argv) {
  prepare(&app);
  const auto commands = app.get_subcommands([](CLI::App*) { return true; });
  if (!commands.empty() && argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (CLI::App* c : commands) known = known || c->check_name(argv[1]), names += (names.empty() ? "" : ", ") + c->get_name();
    if (!known) {
      std::fprintf(stderr, "%s: unknown command %s (the commands: %s)\nRun '%s --help' for the options.\n",
                   app.get_name().c_str(), ember::printable(argv[1], 40).c_str(), names.c_str(), app.get_name().c_str());
      throw Exit{2};
    }
  }
  // the innermost subcommand that was named, for messages and the help pointer
  auto innermost = [&] {
    CLI::App* where = &app;
    for (auto subs = where->get_subcommands(); !subs.empty(); subs = where->get_subcommands()) where = subs.back();
    std::string name = where->get_name();
    for (const CLI::App* p = where->get_parent(); p; p = p->get_parent()) name = p->get_name() + " " + name;
    return std::pair<CLI::App*, std::string>{where, name};
  };
  auto refuse = [](const std::string& name, const std::string& what) {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", name.c_str(), what.c_str(), name.c_str());
    throw Exit{2};
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    throw Exit{app.exit(e)};
  } catch (const CLI::CallForAllHelp& e) {
    throw Exit{app.exit(e)};
  } catch (const CLI::ParseError& e) {
    const auto [where, name] = innermost();
    refuse(name, plainly(*where, e));
  } catch (const UsageError& e) {  // a value refused by integer() or real()
    refuse(innermost().second, e.message);
  }
  auto [where, name] = innermost();
  std::vector<std::string> extra = where->remaining();
  for (CLI::App* p = where->get_parent(); p; p = p->get_parent())
    for (auto& r : p->remaining()) extra.push_back(r);
  if (!extra.empty()) {
    const std::string& first = extra.front();
    if (first.size() > 1 && first[0] == '-' && !(first.size() > 1 && std::isdigit((unsigned char)first[1])))
      refuse(name, "unknown option " + ember::printable(first, 40));
    refuse(name, "unexpected argument " + ember::printable(first, 40) +
                     (where->get_subcommands([](CLI::App*) { return true; }).empty() ? "" : " (not a command)"));
  }
}

int run(const std::string& program, const std::function<int()>& body) {
  auto say = [&](const std::string& what) {
    std::fflush(stdout);
    if (what.rfind(program, 0) == 0) std::fprintf(stderr, "%s\n", what.c_str());
    else std::fprintf(stderr, "%s: %s\n", program.c_str(), what.c_str());
  };
  // Output that could not be written (a full disk, /dev/full, a closed stdout) is a
  // failure, not a success that printed nothing.
  auto output_written = [&](int code) {
    errno = 0;
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
    const int err = errno;
    std::clearerr(stdout);
    std::fprintf(stderr, "%s: cannot write standard output%s%s\n", program.c_str(), err ? ": " : "",
                 err ? std::strerror(err) : "");
    return code ? code : 1;
  };
  // A write past `ulimit -f` then fails with its reason (EFBIG) instead of killing the
  // program mid-write; and progress reaches a log or a pipe line by line.
  std::signal(SIGXFSZ, SIG_IGN);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    // OpenMP would start this many threads at the first parallel region, whatever it is
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
      const std::string text = env;
      const std::string first = text.substr(0, text.find(','));  // a list sets nested levels
      try {
        parse_int("OMP_NUM_THREADS", first, 1, kMaxThreads);
      } catch (const UsageError& e) {
        say("the environment's " + e.message);
        return 2;
      }
    }
    return output_written(body());
  } catch (const Exit& e) {
    return output_written(e.code);
  } catch (const UsageError& e) {
    const std::string where = e.command.empty() ? program : program + " " + e.command;
    std::fflush(stdout);
    if (e.message.rfind(program, 0) == 0) std::fprintf(stderr, "%s\n", e.message.c_str());
    else std::fprintf(stderr, "%s: %s\n", where.c_str(), e.message.c_str());
    std::fprintf(stderr, "Run '%s --help' for the options.\n", where.c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    say("out of memory (a request for more memory than the system could give)");
    return 1;
  } catch (const std::length_error& e) {
    say(std::string("out of memory: a size too large for this machine (") + e.what() + ")");
    return 1;
  } catch (const std::exception& e) {  // ember::Error and OutOfMemory included
    say(e.what());
    return 1;
  }
}

int64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

void check_fits_in_memory(const char* op, double bytes, const std::string& what) {
  const int64_t have = physical_memory();
  if (have > 0 && bytes > double(have))
    ember::fail(op, what, " would need about ", std::llround(bytes / 1e9), " GB, more than this machine's ",
                std::llround(double(have) / 1e9), " GB of memory");
}

CLI::Option* choice(CLI::App& app, const std::string& name, std::string& value, const std::vector<std::string>& choices,
                    const std::string& help) {
  const std::string list = either(choices);
  auto* o = app.add_option_function<std::string>(
      name,
      [&value, name, choices, list](const std::string& s) {
        for (const std::string& c : choices)
          if (s == c) {
            value = s;
            return;
          }
        throw UsageError{name + " needs " + list + ", got " + got(s)};
      },
      help);
  std::string bars;
  for (const std::string& c : choices) bars += (bars.empty() ? "" : "|") + c;
  o->type_name(bars);
  if (!value.empty()) o->default_str(value);
  return o;
}

void make_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) throw UsageError{flag + " needs a directory name, got \"\""};
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec && !fs::is_directory(dir, ec)) ec = std::make_error_code(std::errc::not_a_directory);
  if (ec)
    throw ember::Error(
        ember::cat_str("cannot create the directory ", ember::printable(dir), " (", flag, "): ", ec.message()));
  const std::string probe = dir + "/.write-test-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    throw ember::Error(
        ember::cat_str("cannot write into the directory ", ember::printable(dir), " (", flag, "): ", std::strerror(err)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_file(const char* op, const std::string& path, const std::string& what) {
  if (path.empty()) ember::fail(op, "the path for ", what, " is empty; expected a file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    ember::fail(op, "cannot write ", what, " to '", path, "': it is a directory; expected a file name");
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0)
    ember::fail(op, "cannot write ", what, " to '", path, "': '", dir, "': ", std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    ember::fail(op, "cannot write ", what, " to '", path, "': '", dir, "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    ember::fail(op, "cannot write ", what, " to '", path, "': '", dir, "': ", std::strerror(errno));
}

}  // namespace ember::cli
