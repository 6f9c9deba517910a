// The figures of the examples: PNG files of the requested size, heatmap cells shaded
// by value with exact zeros white, ranges no finite data can break (constant, huge,
// overflowing, finer than the numbers resolve), text that is not UTF-8, and clear errors.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cairo.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>

#include "lib/plot/plot.h"

namespace plot = ember::plot;

using namespace ember::testing;
using Catch::Matchers::Contains;

namespace {

// The RGB of pixel (x, y) of a PNG, as 0xRRGGBB.
uint32_t pixel(const std::string& png, int x, int y, int* width = nullptr, int* height = nullptr) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(png.c_str());
  REQUIRE(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS);
  cairo_surface_flush(s);
  if (width) *width = cairo_image_surface_get_width(s);
  if (height) *height = cairo_image_surface_get_height(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  uint32_t v = *reinterpret_cast<const uint32_t*>(data + y * stride + x * 4) & 0xFFFFFF;
  cairo_surface_destroy(s);
  return v;
}

// Draws in a child process that SIGALRM ends after 10 seconds; returns the Error's
// message, no_error when the figure was written, or how the child ended (a drawing that
// loops fails the test instead of hanging it).
std::string save_within_seconds(const std::string& path, const std::vector<plot::Panel>& panels, int width = 400,
                                int height = 300, const std::string& title = "") {
  return error_of_within(10, [&] { plot::save_png(path, panels, 1, width, height, title); });
}

// The first line colour of the palette (0, 0.45, 0.70): blue well above red.
bool first_series_colour(uint32_t rgb) { return (rgb & 0xFF) > 0x90 && ((rgb >> 16) & 0xFF) < 0x40; }

}  // namespace

TEST_CASE("a heatmap draws zero weights white and large weights dark") {
  plot::Heatmap h;
  h.title = "weights";
  h.values = {{0.0, 0.5, 1.0, 0.0}, {0.0, 0.5, 1.0, 0.0}};
  h.row_labels = {"a", "b"};
  h.col_labels = {"w", "x", "y", "<pad>"};
  const std::string png = "/tmp/ember-test-heatmap.png";
  plot::save_png(png, {h}, 1, 400, 300);
  int w = 0, ht = 0;
  pixel(png, 0, 0, &w, &ht);
  CHECK(w == 400);
  CHECK(ht == 300);
  // the grid: left 56, right 14, top 34, bottom 70 -> cells of min(330/4, 196/2) = 82.5 px
  const double cell = 82.5, gx = 56, gy = 34;
  auto at = [&](int r, int c) { return pixel(png, int(gx + (c + 0.5) * cell), int(gy + (r + 0.5) * cell)); };
  CHECK(at(0, 0) == 0xFFFFFF);
  CHECK(at(1, 3) == 0xFFFFFF);
  const uint32_t mid = at(0, 1), dark = at(0, 2);
  CHECK(mid != 0xFFFFFF);
  CHECK((dark & 0xFF) < (mid & 0xFF));  // darker blue channel for the larger weight
  CHECK(((dark >> 16) & 0xFF) < ((mid >> 16) & 0xFF));
  std::remove(png.c_str());
}

TEST_CASE("line charts and grids of panels make one PNG of the requested size") {
  plot::Lines l;
  l.title = "loss";
  l.xlabel = "step";
  l.ylabel = "loss";
  l.log_y = true;
  l.series = {{"train", {1, 2, 3, 4}, {3.0, 1.0, 0.5, 0.1}}, {"valid", {2, 4}, {1.5, 0.2}}};
  plot::Lines empty;  // no data still draws axes
  const std::string png = "/tmp/ember-test-lines.png";
  plot::save_png(png, {l, empty, plot::Heatmap{}}, 2, 300, 200, "a figure");
  int w = 0, h = 0;
  pixel(png, 0, 0, &w, &h);
  CHECK(w == 600);
  CHECK(h == 2 * 200 + 34);
  std::remove(png.c_str());
}

TEST_CASE("figures that cannot be drawn or written are clear errors") {
  plot::Lines l;
  CHECK_THAT(error_of([&] { plot::save_png("/nonexistent-dir/x.png", {l}); }),
             Contains("plot::save_png") && Contains("cannot write '/nonexistent-dir/x.png'"));
  CHECK_THAT(error_of([] { plot::save_png("/tmp/x.png", {}); }), Contains("no panels"));
  CHECK_THAT(error_of([&] { plot::save_png("/tmp/x.png", {l}, 0); }), Contains("columns must be >= 1"));
}

TEST_CASE("line charts of constant, huge, overflowing or finely split ranges are drawn where the values are") {
  // panels of 400x300: the plot area spans x 64..384 and y 34..254, its middle (224, 144)
  const std::string png = "/tmp/ember-test-ranges.png";
  const double largest = std::numeric_limits<double>::max();
  auto lines = [](std::vector<double> x, std::vector<double> y) {
    plot::Lines l;
    l.title = "q";
    l.series = {{"a", std::move(x), std::move(y)}};
    return l;
  };
  struct Case {
    const char* what;
    plot::Lines panel;
    bool through_middle;
  };
  const Case cases[] = {
      {"a constant 1e308", lines({1, 2, 3, 4}, {1e308, 1e308, 1e308, 1e308}), true},
      {"a constant -1e308", lines({1, 3}, {-1e308, -1e308}), true},
      {"from the lowest to the largest double (the range overflows)", lines({1, 3}, {-largest, largest}), true},
      {"1e17 and 1e17 + 16 (steps of 2 are lost in rounding)", lines({1, 3}, {1e17, 1e17 + 16}), true},
      {"a constant 5", lines({1, 3}, {5, 5}), true},
      {"a constant step", lines({7, 7}, {0, 2}), true},
      {"a constant at the largest double (on the top edge: nothing lies above it)", lines({1, 3}, {largest, largest}),
       false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::remove(png.c_str());
    CHECK(save_within_seconds(png, {c.panel}) == no_error);
    if (c.through_middle && std::ifstream(png)) CHECK(first_series_colour(pixel(png, 224, 144)));
  }
  std::remove(png.c_str());
}

TEST_CASE("points that are not finite, far outside a fixed range or on an impossible log axis leave the rest drawn") {
  const std::string png = "/tmp/ember-test-outside.png";
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  plot::Lines fixed;  // an entropy panel of a watch file whose values are all 1e308
  fixed.ymin = 0, fixed.ymax = 1;
  fixed.series = {{"head 1", {0, 10, 20}, {1e308, 1e308, 1e308}}, {"head 2", {0, 10}, {-1e308, 1e308}}};
  plot::Lines holes;
  holes.series = {{"a", {1, 2, 3, 4, 5}, {nan, 1, inf, -inf, 2}}, {"b", {nan, inf}, {1, 2}}};
  plot::Lines log;
  log.log_y = true;
  log.ymin = 0, log.ymax = 1;  // log(0) has no place: the data's range instead
  log.series = {{"a", {1, 2}, {1e-300, 1e300}}};
  plot::Heatmap heat;
  heat.values = {{nan, inf, -inf}, {1e308, std::numeric_limits<double>::max(), 0}};
  CHECK(save_within_seconds(png, {fixed}) == no_error);
  CHECK(save_within_seconds(png, {holes}) == no_error);
  CHECK(save_within_seconds(png, {log}) == no_error);
  CHECK(save_within_seconds(png, {heat}) == no_error);
  std::remove(png.c_str());
}

TEST_CASE("text that is not UTF-8 is drawn with '?' for its bad bytes") {
  const std::string png = "/tmp/ember-test-text.png";
  plot::Lines l;
  l.title = "run \xff\xfe";
  l.series = {{"label \xc3", {1, 2}, {1, 2}}};
  plot::Heatmap h;
  h.col_labels = {"\x80", "b"};
  h.row_labels = {"\xed\xa0\x80"};  // a surrogate
  h.values = {{0.5, 1}};
  CHECK(save_within_seconds(png, {l, h}, 400, 300, "title \xff") == no_error);
  std::remove(png.c_str());
}
