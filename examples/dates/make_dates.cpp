// make_dates: writes the date-translation data set. Every date from 1900-01-01 to
// 2099-12-31 is shuffled with a seeded generator; the first ones become the training
// split, the next ones validation and test, so no date is in two splits. Each date is
// written in one of the eight forms of calendar.h, the forms taking turns so that each
// split holds them in equal numbers. One pair a line, tab-separated: source, ISO date.
//
//   make_dates [--out DIR] [--seed N] [--train N] [--valid N] [--test N]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "dates/calendar.h"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "make_dates: %s\n"
               "usage: make_dates [--out DIR] [--seed N] [--train N] [--valid N] [--test N]\n",
               why.c_str());
  std::exit(2);
}

long long number(const std::string& flag, const char* text) {
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < 0) usage(flag + " needs a non-negative integer, got '" + text + "'");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "data/dates";
  long long seed = 2026, sizes[3] = {20000, 1000, 1000};
  const char* names[3] = {"train", "valid", "test"};
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage("missing value after " + a);
    if (a == "--out") out = argv[++i];
    else if (a == "--seed") seed = number(a, argv[++i]);
    else if (a == "--train") sizes[0] = number(a, argv[++i]);
    else if (a == "--valid") sizes[1] = number(a, argv[++i]);
    else if (a == "--test") sizes[2] = number(a, argv[++i]);
    else usage("unknown option " + a);
  }

  std::vector<dates::Date> all;
  for (int y = dates::kFirstYear; y <= dates::kLastYear; y++)
    for (int m = 1; m <= 12; m++)
      for (int d = 1; d <= dates::days_in_month(y, m); d++) all.push_back({y, m, d});
  if (sizes[0] + sizes[1] + sizes[2] > (long long)all.size())
    usage("the splits ask for more dates than the " + std::to_string(all.size()) + " there are");

  ember::Generator gen((uint64_t)seed);
  for (size_t i = all.size() - 1; i > 0; i--) {  // Fisher-Yates
    size_t j = (size_t)(gen.next_u64() % (i + 1));
    std::swap(all[i], all[j]);
  }

  size_t next = 0;
  for (int s = 0; s < 3; s++) {
    const std::string path = out + "/" + names[s] + ".tsv";
    std::ofstream f(path);
    if (!f) usage("cannot write " + path);
    for (long long k = 0; k < sizes[s]; k++, next++) {
      const dates::Date& d = all[next];
      f << dates::human(d, int(k % dates::kForms)) << '\t' << dates::iso(d) << '\n';
    }
    if (!f.flush()) usage("cannot write " + path);
    std::printf("%s: %lld pairs\n", path.c_str(), sizes[s]);
  }
  return 0;
}
