// PNG figures for the examples, drawn with Cairo: line charts (training curves, sweeps)
// and heatmaps (attention weights), arranged as panels in a grid.
#pragma once
#include <string>
#include <variant>
#include <vector>

namespace ember::plot {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

struct Lines {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool log_x = false, log_y = false;  // logarithmic axes (values must be positive)
  double ymin = 0, ymax = 0;          // fixed y range when ymin < ymax, else from the data
};
// Points that are not finite (or not positive on a logarithmic axis) are left out, the
// line broken there; a constant series, a range that overflows (-1e308 to 1e308) and
// points far outside a fixed range are drawn all the same. Text that is not UTF-8 shows
// '?' for its bad bytes.

// values[r][c] drawn from white (0) to dark blue (vmax; the largest finite value when 0),
// so exactly-zero weights - blocked or padded positions - show white; NaN shows grey.
struct Heatmap {
  std::string title, xlabel, ylabel;
  std::vector<std::vector<double>> values;
  std::vector<std::string> row_labels, col_labels;  // one per row / column (may be empty)
  double vmax = 0;
  bool annotate = false;  // print each value in its cell
};

using Panel = std::variant<Lines, Heatmap>;

// Draws the panels left to right, top to bottom, `columns` to a row, each panel
// width x height pixels, under an optional figure title. Throws ember::Error naming the
// file when it cannot be written.
void save_png(const std::string& path, const std::vector<Panel>& panels, int columns = 1, int width = 640,
              int height = 420, const std::string& title = "");

}  // namespace ember::plot
