// The figures of the examples: PNG files of the requested size, heatmap cells shaded
// by value with exact zeros white, and clear errors.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cairo.h>

#include <cstdio>

#include "plot/plot.h"

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
