// make_dates: writes the date-translation data set. Every date from 1900-01-01 to
// 2099-12-31 is shuffled with a seeded generator; the first ones become the training
// split, the next ones validation and test, so no date is in two splits. Each date is
// written in one of the eight forms of calendar.h, the forms taking turns so that each
// split holds them in equal numbers. One pair a line, tab-separated: source, ISO date.
//
//   make_dates [--out DIR] [--seed N] [--train N] [--valid N] [--test N]
//
// The three files are built in memory, written to temporary files in DIR and only then
// renamed over DIR/{train,valid,test}.tsv: a run that fails (a full disk, a bad DIR)
// leaves the files that were there untouched.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "lib/cli/cli.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/random.h"
#include "lib/dates/calendar.h"

namespace cli = ember::cli;
namespace dates = ember::dates;

namespace {

const char* const kOp = "make_dates";

std::vector<dates::Date> every_date() {
  std::vector<dates::Date> all;
  for (int y = dates::kFirstYear; y <= dates::kLastYear; y++)
    for (int m = 1; m <= 12; m++)
      for (int d = 1; d <= dates::days_in_month(y, m); d++) all.push_back({y, m, d});
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run(kOp, [&] {
    std::vector<dates::Date> all = every_date();
    const int64_t days = (int64_t)all.size();
    CLI::App app{"Writes the date-translation data set: DIR/{train,valid,test}.tsv.", kOp};
    std::string out = "data/dates";
    int64_t seed = 2026, sizes[3] = {20000, 1000, 1000};
    const char* names[3] = {"train", "valid", "test"};
    cli::text(app, "--out", out, "the directory to write the three splits into (made if missing)");
    cli::integer(app, "--seed", seed, 0, std::numeric_limits<int64_t>::max(), "the shuffle's seed");
    cli::integer(app, "--train", sizes[0], 0, days, "pairs in the training split");
    cli::integer(app, "--valid", sizes[1], 0, days, "pairs in the validation split");
    cli::integer(app, "--test", sizes[2], 0, days, "pairs in the test split");
    cli::parse(app, argc, argv);
    const int64_t total = sizes[0] + sizes[1] + sizes[2];  // each at most `days`: no overflow
    if (total > days)
      throw cli::UsageError{ember::cat_str("--train, --valid and --test ask for ", total, " dates in all (", sizes[0],
                                           " + ", sizes[1], " + ", sizes[2], "); there are only ", days,
                                           " from 1900-01-01 to 2099-12-31")};
    cli::make_output_dir("--out", out);
    std::string paths[3], temps[3];
    for (int s = 0; s < 3; s++) {
      paths[s] = out + "/" + names[s] + ".tsv";
      temps[s] = ember::cat_str(out, "/.", names[s], ".tsv.tmp-", ::getpid(), "-0");
      cli::check_output_file(kOp, paths[s], ember::cat_str("the ", names[s], " split"));
    }

    ember::Generator gen((uint64_t)seed);
    for (size_t i = all.size() - 1; i > 0; i--) {  // Fisher-Yates
      size_t j = (size_t)(gen.next_u64() % (i + 1));
      std::swap(all[i], all[j]);
    }
    std::string contents[3];
    size_t next = 0;
    for (int s = 0; s < 3; s++)
      for (int64_t k = 0; k < sizes[s]; k++, next++) {
        const dates::Date& d = all[next];
        contents[s] += dates::human(d, int(k % dates::kForms)) + '\t' + dates::iso(d) + '\n';
      }

    // Every file to a temporary name first; only when all three are written are they
    // renamed into place.
    int written = 0;
    auto remove_temps = [&] {
      for (int s = 0; s < written; s++) ::unlink(temps[s].c_str());
    };
    try {
      for (int s = 0; s < 3; s++, written++) {
        const std::string op = ember::cat_str(kOp, ": ", paths[s]);
        ember::io::write_file(temps[s], contents[s].data(), contents[s].size(), op.c_str());
      }
    } catch (const ember::Error& e) {
      remove_temps();
      throw ember::Error(std::string(e.what()) + " (no split was replaced)");
    }
    for (int s = 0; s < 3; s++)
      if (std::rename(temps[s].c_str(), paths[s].c_str()) != 0) {
        const int err = errno;
        remove_temps();
        ember::fail(kOp, "cannot rename '", temps[s], "' to '", paths[s], "': ", std::strerror(err),
                    s > 0 ? " (the splits before it were replaced)" : " (nothing was replaced)");
      }
    const int dir_fd = ::open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // the renames survive a power cut
    if (dir_fd >= 0) {
      ::fsync(dir_fd);
      ::close(dir_fd);
    }
    for (int s = 0; s < 3; s++) std::printf("%s: %lld pairs\n", paths[s].c_str(), (long long)sizes[s]);
    return 0;
  });
}
