// watch_plot: the figures of a watched run (translate train --watch, tag_dates --watch)
// drawn again from its watch.h5 alone, and several runs compared.
//
//   watch_plot RUN/watch.h5 --out DIR                        the run's figures, as training drew them
//   watch_plot A/watch.h5 B/watch.h5 --label a --label b --compare PREFIX
//                                                            PREFIX_attention.png and a summary table
//
// The summary gives, per run and module, the mean over layers and heads of the score
// spread, the normalised entropy, the saturated share and the gradient ratio at the first
// and the last measurement, and the largest saturated share seen. The file's layout is in
// docs/watch-format.md.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/error.h"
#include "lib/watch/watch.h"

using namespace ember;

namespace {

// "a -> b" of a series' first and last finite values
std::string start_end(const std::vector<double>& v, const char* format) {
  double first = NAN, last = NAN;
  for (double x : v)
    if (std::isfinite(x)) {
      if (std::isnan(first)) first = x;
      last = x;
    }
  char a[32], b[32];
  std::snprintf(a, sizeof a, format, first);
  std::snprintf(b, sizeof b, format, last);
  return std::string(a) + " -> " + b;
}

double largest(const std::vector<double>& v) {
  double m = NAN;
  for (double x : v)
    if (std::isfinite(x) && !(x <= m)) m = x;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("watch_plot", [&] {
    CLI::App app{"Draws a watched run's figures again from its watch.h5, or compares several runs.", "watch_plot"};
    std::vector<std::string> files, labels;
    std::string out, compare;
    app.add_option("FILE", files, "watch.h5 files")->required();
    cli::text(app, "--out", out, "directory for the figures of one run");
    cli::text(app, "--compare", compare, "compare the runs: write PREFIX_attention.png");
    app.add_option("--label", labels, "a name per run, in order (default: the file's directory)");
    cli::parse(app, argc, argv);
    if (out.empty() == compare.empty()) throw cli::UsageError{"give either --out DIR (one run) or --compare PREFIX"};
    if (!out.empty() && files.size() != 1)
      throw cli::UsageError{cat_str("--out draws one run's figures; got ", files.size(), " files (use --compare)")};
    if (!labels.empty() && labels.size() != files.size())
      throw cli::UsageError{cat_str("give one --label per file: ", files.size(), " files, ", labels.size(), " labels")};
    std::vector<watch::Log> logs;
    for (const std::string& f : files) logs.push_back(watch::Log::read_h5(f));
    if (!out.empty()) {
      cli::make_output_dir("--out", out);
      for (const std::string& written : logs[0].draw(out)) std::printf("wrote %s\n", written.c_str());
      return 0;
    }
    if (labels.empty())
      for (const std::string& f : files) labels.push_back(std::filesystem::path(f).parent_path().filename().string());
    const std::string png = compare + "_attention.png";
    watch::draw_comparison(logs, labels, png);
    std::printf("\n| run | module | score spread | entropy / log(keys) | saturated share | largest saturated share | "
                "gradient ratio |\n|---|---|---|---|---|---|---|\n");
    for (size_t r = 0; r < logs.size(); r++)
      for (const std::string& m : logs[r].modules) {
        const std::vector<double> sat = watch::average(logs[r], m, "saturated_share");
        std::printf("| %s | %s | %s | %s | %s | %.3f | %s |\n", labels[r].c_str(), m.c_str(),
                    start_end(watch::average(logs[r], m, "score_std"), "%.2f").c_str(),
                    start_end(watch::average(logs[r], m, "entropy_norm_mean"), "%.2f").c_str(),
                    start_end(sat, "%.3f").c_str(), largest(sat),
                    start_end(watch::average(logs[r], m, "grad_ratio"), "%.3f").c_str());
      }
    std::printf("\nfirst -> last measurement, each the mean over layers and heads\nwrote %s\n", png.c_str());
    return 0;
  });
}
