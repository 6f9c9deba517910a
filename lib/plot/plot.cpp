// Line charts and heatmaps with Cairo (see plot.h).
#include "lib/plot/plot.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::plot {

namespace {

struct Rgb {
  double r, g, b;
};

// Line colours that stay distinct in print and for common colour blindness.
const Rgb kPalette[] = {{0.00, 0.45, 0.70}, {0.84, 0.37, 0.00}, {0.00, 0.62, 0.45}, {0.80, 0.47, 0.65},
                        {0.34, 0.71, 0.91}, {0.90, 0.62, 0.00}, {0.35, 0.35, 0.35}, {0.94, 0.89, 0.26}};

// White at 0, dark blue at 1.
Rgb ramp(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const Rgb lo{1, 1, 1}, mid{0.42, 0.68, 0.84}, hi{0.03, 0.19, 0.42};
  auto mix = [](Rgb a, Rgb b, double u) { return Rgb{a.r + (b.r - a.r) * u, a.g + (b.g - a.g) * u, a.b + (b.b - a.b) * u}; };
  return t < 0.5 ? mix(lo, mid, t * 2) : mix(mid, hi, (t - 0.5) * 2);
}

// How a text is set: its size, which point of it (0 left/top .. 1 right/bottom) sits at
// the given place, its weight and its rotation (radians).
struct TextStyle {
  double size = 10;
  double align_x = 0.5, align_y = 0.5;
  bool bold = false;
  double angle = 0;
};

// The text with every byte that is not part of valid UTF-8 replaced by '?': Cairo refuses
// to draw anything else (a title may hold a directory's name or a label from a file).
std::string valid_utf8(const std::string& s) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0, n = s.size(); i < n;) {
    const unsigned char c = p[i];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; ok && k < len; k++) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= least[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) && cp != 0;
    if (ok) out.append(s, i, len), i += len;
    else out += '?', i++;
  }
  return out;
}

void text_at(cairo_t* cr, double x, double y, const std::string& text, const TextStyle& style) {
  const std::string s = valid_utf8(text);
  const double align_x = style.align_x, align_y = style.align_y, angle = style.angle;
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         style.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, style.size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -e.x_advance * align_x, e.height * (1 - align_y) - (e.height + e.y_bearing));
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
}

std::string number(double v) {
  char b[32];
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (std::isfinite(v) && (a >= 1e5 || a < 1e-3)) {  // 1e+05, 1.5e+05, 1.25e+05
    std::snprintf(b, sizeof b, "%.2e", v);
    std::string s = b;
    const size_t e = s.find('e');
    size_t end = e;
    while (s[end - 1] == '0') end--;
    if (s[end - 1] == '.') end--;
    return s.erase(end, e - end);
  }
  if (a >= 100 || std::fabs(v - std::round(v)) < 1e-9) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

constexpr double kLargest = std::numeric_limits<double>::max();

// hi - lo, halved so that it cannot overflow (1e308 - -1e308); exact otherwise.
double half_span(double lo, double hi) { return hi / 2 - lo / 2; }

// About n round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int n) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  double step = half_span(lo, hi) / n * 2, mag = std::pow(10, std::floor(std::log10(step))), f = step / mag;
  step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9 && t.size() < 4 * size_t(n); v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

// An axis' range [lo, hi] of finite data (lo > hi when there is none) made fit to draw:
// ends finite and apart by more than the numbers resolve there. A single value v (a
// constant series, or 1e17 and 1e17 + 16) gets v - 0.5 .. v + 0.5, wider where 0.5 would
// be lost in rounding.
void drawable_range(double& lo, double& hi) {
  if (!(lo <= hi)) lo = 0, hi = 1;
  const double mid = lo / 2 + hi / 2;
  if (half_span(lo, hi) < std::max(1e-12, std::fabs(mid) * 1e-12) / 2) {
    const double half = std::max(0.5, std::fabs(mid) * 1e-9);
    lo = std::max(mid - half, -kLargest), hi = std::min(mid + half, kLargest);
  }
}

// Cairo's coordinates are fixed-point numbers of 24 integer bits: a point far outside
// the figure (a value of 1e308 on an axis from 0 to 1) is drawn at a distance it can hold.
double on_canvas(double v) { return std::clamp(v, -1e6, 1e6); }

void draw_lines(cairo_t* cr, const Lines& p, double W, double H) {
  const double left = 64, right = 16, top = 34, bottom = 46;
  const double pw = W - left - right, ph = H - top - bottom;
  text_at(cr, W / 2, 16, p.title, {.size = 14, .bold = true});
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto fx = [&](double x) { return p.log_x ? std::log10(x) : x; };
  auto fy = [&](double y) { return p.log_y ? std::log10(y) : y; };
  for (auto& s : p.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); i++) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      if ((p.log_x && s.x[i] <= 0) || (p.log_y && s.y[i] <= 0)) continue;
      x0 = std::min(x0, fx(s.x[i])), x1 = std::max(x1, fx(s.x[i]));
      y0 = std::min(y0, fy(s.y[i])), y1 = std::max(y1, fy(s.y[i]));
    }
  const bool fixed_y = p.ymin < p.ymax && std::isfinite(fy(p.ymin)) && std::isfinite(fy(p.ymax));
  if (fixed_y) y0 = fy(p.ymin), y1 = fy(p.ymax);
  drawable_range(x0, x1);
  drawable_range(y0, y1);
  if (!fixed_y) {
    const double pad = half_span(y0, y1) * 0.1;
    y0 = std::max(y0 - pad, -kLargest), y1 = std::min(y1 + pad, kLargest);
  }
  auto X = [&](double x) { return on_canvas(left + (fx(x) / 2 - x0 / 2) / half_span(x0, x1) * pw); };
  auto Y = [&](double y) { return on_canvas(top + ph - (fy(y) / 2 - y0 / 2) / half_span(y0, y1) * ph); };

  cairo_set_line_width(cr, 1);
  auto axis_ticks = [&](bool horizontal) {
    const double lo = horizontal ? x0 : y0, hi = horizontal ? x1 : y1;
    const bool log = horizontal ? p.log_x : p.log_y;
    std::vector<double> ts = log ? std::vector<double>{} : ticks(lo, hi, horizontal ? 6 : 5);
    for (size_t i = 1; i < ts.size(); i++)
      if (number(ts[i - 1]) == number(ts[i])) {  // a range too narrow for its labels: its middle, once
        ts = {lo / 2 + hi / 2};
        break;
      }
    if (log) {  // powers of ten, or 1-2-5 steps when the range spans less than two decades
      const bool fine = hi - lo < 2;
      for (double e = std::floor(lo); e <= hi + 1e-9; e++)
        for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
          const double t = e + std::log10(m);
          if (t >= lo - 1e-9 && t <= hi + 1e-9) ts.push_back(t);
        }
    }
    for (double t : ts) {
      const double v = log ? std::pow(10, t) : t;
      cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
      if (horizontal) {
        cairo_move_to(cr, X(v), top), cairo_line_to(cr, X(v), top + ph);
      } else {
        cairo_move_to(cr, left, Y(v)), cairo_line_to(cr, left + pw, Y(v));
      }
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
      if (horizontal) text_at(cr, X(v), top + ph + 12, number(v), {.size = 10});
      else text_at(cr, left - 5, Y(v), number(v), {.size = 10, .align_x = 1.0});
    }
  };
  axis_ticks(true);
  axis_ticks(false);
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_stroke(cr);
  text_at(cr, left + pw / 2, H - 12, p.xlabel, {.size = 11});
  text_at(cr, 14, top + ph / 2, p.ylabel, {.size = 11, .angle = -M_PI / 2});

  cairo_save(cr);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_clip(cr);
  for (size_t k = 0; k < p.series.size(); k++) {
    const Series& s = p.series[k];
    const Rgb c = kPalette[k % std::size(kPalette)];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 1.8);
    bool pen = false;
    size_t points = 0;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); i++) {
      const bool ok = std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && !(p.log_x && s.x[i] <= 0) && !(p.log_y && s.y[i] <= 0);
      if (!ok) {
        pen = false;
        continue;
      }
      if (pen) cairo_line_to(cr, X(s.x[i]), Y(s.y[i]));
      else cairo_move_to(cr, X(s.x[i]), Y(s.y[i]));
      pen = true;
      points++;
    }
    cairo_stroke(cr);
    if (points < 40)  // few points: mark them
      for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); i++)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && !(p.log_x && s.x[i] <= 0) && !(p.log_y && s.y[i] <= 0)) {
          cairo_arc(cr, X(s.x[i]), Y(s.y[i]), 2.5, 0, 2 * M_PI);
          cairo_fill(cr);
        }
  }
  cairo_restore(cr);
  // legend, top right
  double ly = top + 12;
  for (size_t k = 0; k < p.series.size(); k++) {
    if (p.series[k].label.empty()) continue;
    const Rgb c = kPalette[k % std::size(kPalette)];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 2.5);
    cairo_move_to(cr, left + pw - 150, ly), cairo_line_to(cr, left + pw - 130, ly);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, left + pw - 125, ly, p.series[k].label, {.size = 10, .align_x = 0.0});
    ly += 15;
  }
}

void draw_heatmap(cairo_t* cr, const Heatmap& p, double W, double H) {
  const size_t rows = p.values.size(), cols = rows ? p.values[0].size() : 0;
  text_at(cr, W / 2, 16, p.title, {.size = 13, .bold = true});
  if (rows == 0 || cols == 0) return;
  const double left = 56, right = 14, top = 34, bottom = 70;
  const double cell = std::min((W - left - right) / cols, (H - top - bottom) / rows);
  const double gx = left + ((W - left - right) - cell * cols) / 2, gy = top;
  double vmax = p.vmax > 0 && std::isfinite(p.vmax) ? p.vmax : 0;
  if (vmax == 0)
    for (auto& r : p.values)
      for (double v : r)
        if (std::isfinite(v)) vmax = std::max(vmax, v);
  if (vmax == 0) vmax = 1;
  const double font = std::clamp(cell * 0.55, 6.0, 12.0);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols && c < p.values[r].size(); c++) {
      const double v = p.values[r][c];
      const Rgb col = std::isnan(v) ? Rgb{0.8, 0.8, 0.8} : ramp(v / vmax);  // NaN grey
      cairo_set_source_rgb(cr, col.r, col.g, col.b);
      cairo_rectangle(cr, gx + c * cell, gy + r * cell, cell, cell);
      cairo_fill(cr);
      if (p.annotate && cell >= 22) {
        const double shade = v / vmax > 0.55 ? 1.0 : 0.1;
        cairo_set_source_rgb(cr, shade, shade, shade);
        char b[16];
        std::snprintf(b, sizeof b, "%.2f", v);
        text_at(cr, gx + (c + 0.5) * cell, gy + (r + 0.5) * cell, b, {.size = std::min(font, cell * 0.3)});
      }
    }
  cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
  cairo_set_line_width(cr, 0.8);
  cairo_rectangle(cr, gx, gy, cell * cols, cell * rows);
  cairo_stroke(cr);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  // column labels, turned upright when one is wider than its cell
  bool upright = false;
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, font);
  for (auto& label : p.col_labels) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, valid_utf8(label).c_str(), &e);
    upright = upright || e.x_advance > cell * 0.95;
  }
  for (size_t c = 0; c < cols && c < p.col_labels.size(); c++) {
    if (upright) text_at(cr, gx + (c + 0.5) * cell, gy + rows * cell + 4, p.col_labels[c], {.size = font, .align_x = 1.0, .angle = -M_PI / 2});
    else text_at(cr, gx + (c + 0.5) * cell, gy + rows * cell + 9, p.col_labels[c], {.size = font});
  }
  for (size_t r = 0; r < rows && r < p.row_labels.size(); r++)
    text_at(cr, gx - 5, gy + (r + 0.5) * cell, p.row_labels[r], {.size = font, .align_x = 1.0});
  text_at(cr, gx + cols * cell / 2, std::min(H - 10, gy + rows * cell + (upright ? 40 : 30)), p.xlabel, {.size = 11});
  text_at(cr, 12, gy + rows * cell / 2, p.ylabel, {.size = 11, .angle = -M_PI / 2});
}

}  // namespace

void save_png(const std::string& path, const std::vector<Panel>& panels, int columns, int width, int height,
              const std::string& title) {
  const char* op = "plot::save_png";
  if (panels.empty()) ember::fail(op, "no panels to draw for '", path, "'");
  if (columns < 1 || width < 100 || height < 100)
    ember::fail(op, "columns must be >= 1 and panels at least 100x100 pixels, got ", columns, " columns of ", width, "x", height);
  const int rows = int((panels.size() + columns - 1) / columns);
  const int cols = std::min<int>(columns, (int)panels.size());
  const int head = title.empty() ? 0 : 34;
  if (double(cols) * width > 32767 || double(rows) * height + head > 32767)  // Cairo's largest image side
    ember::fail(op, "a figure of ", panels.size(), " panels of ", width, "x", height, " pixels in ", columns,
                " columns is too large to draw into '", path, "' (at most 32767 pixels a side)");
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, cols * width, rows * height + head);
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  if (!title.empty()) {
    cairo_set_source_rgb(cr, 0.05, 0.05, 0.05);
    text_at(cr, cols * width / 2.0, 18, title, {.size = 16, .bold = true});
  }
  for (size_t i = 0; i < panels.size(); i++) {
    cairo_save(cr);
    cairo_translate(cr, double(i % columns) * width, double(i / columns) * height + head);
    cairo_rectangle(cr, 0, 0, width, height);
    cairo_clip(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    if (auto* l = std::get_if<Lines>(&panels[i])) draw_lines(cr, *l, width, height);
    else draw_heatmap(cr, std::get<Heatmap>(panels[i]), width, height);
    cairo_restore(cr);
  }
  cairo_status_t st = cairo_status(cr);
  cairo_destroy(cr);
  // encoded in memory, then written whole (a full disk names its reason, and an old
  // figure stays until the new one is complete)
  std::string png;
  if (st == CAIRO_STATUS_SUCCESS)
    st = cairo_surface_write_to_png_stream(
        surface,
        [](void* out, const unsigned char* data, unsigned int n) {
          static_cast<std::string*>(out)->append(reinterpret_cast<const char*>(data), n);
          return CAIRO_STATUS_SUCCESS;
        },
        &png);
  cairo_surface_destroy(surface);
  if (st != CAIRO_STATUS_SUCCESS) ember::fail(op, "cannot draw '", path, "': ", cairo_status_to_string(st));
  ember::io::replace_file(path, png.data(), png.size(), op);
}

}  // namespace ember::plot
