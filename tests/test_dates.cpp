// The date translator's data: the calendar, the eight forms, the shipped splits in
// data/dates, the pair-file reader and the character vocabulary.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "lib/dates/calendar.h"
#include "lib/text/text.h"

namespace dates = ember::dates;
namespace text = ember::text;

using namespace ember::testing;
using Catch::Matchers::Contains;
using dates::Date;

namespace {

std::string data_file(const char* split) { return std::string(EMBER_SOURCE_DIR) + "/data/dates/" + split + ".tsv"; }

// The form whose text s is for date d, or -1.
int form_of(const std::string& s, const Date& d) {
  for (int f = 0; f < dates::kForms; f++)
    if (dates::human(d, f) == s) return f;
  return -1;
}

std::string temp_file(const std::string& name, const std::string& contents) {
  std::string path = "/tmp/ember-test-" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

}  // namespace

TEST_CASE("the calendar knows leap years, month lengths and weekdays") {
  CHECK(dates::is_leap(2000));
  CHECK_FALSE(dates::is_leap(1900));
  CHECK(dates::is_leap(2024));
  CHECK_FALSE(dates::is_leap(2026));
  CHECK(dates::days_in_month(2024, 2) == 29);
  CHECK(dates::days_in_month(1900, 2) == 28);
  CHECK(dates::days_in_month(2026, 4) == 30);
  CHECK(dates::weekday({2026, 11, 22}) == 6);  // a Sunday
  CHECK(dates::weekday({1900, 1, 1}) == 0);    // a Monday
  CHECK(dates::weekday({2000, 1, 1}) == 5);    // a Saturday
  CHECK(dates::weekday({1969, 7, 20}) == 6);   // a Sunday
  CHECK(dates::day_number({1970, 1, 1}) == 0);
  CHECK(dates::day_number({2000, 3, 1}) - dates::day_number({2000, 2, 28}) == 2);
  // every day of the range is one more than the day before
  int64_t prev = dates::day_number({1899, 12, 31});
  int64_t count = 0, gaps = 0;
  for (int y = 1900; y <= 2099; y++)
    for (int m = 1; m <= 12; m++)
      for (int d = 1; d <= dates::days_in_month(y, m); d++, count++) {
        int64_t n = dates::day_number({y, m, d});
        gaps += n != prev + 1;
        prev = n;
      }
  CHECK(count == 73049);
  CHECK(gaps == 0);
  CHECK(dates::is_valid({2099, 12, 31}));
  CHECK_FALSE(dates::is_valid({1899, 12, 31}));
  CHECK_FALSE(dates::is_valid({2100, 1, 1}));
  CHECK_FALSE(dates::is_valid({2026, 2, 29}));
  CHECK_FALSE(dates::is_valid({2026, 13, 1}));
}

TEST_CASE("ordinal suffixes are right for every day of a month") {
  const std::map<int, std::string> expected = {{1, "1st"},   {2, "2nd"},   {3, "3rd"},   {4, "4th"},   {10, "10th"},
                                               {11, "11th"}, {12, "12th"}, {13, "13th"}, {14, "14th"}, {20, "20th"},
                                               {21, "21st"}, {22, "22nd"}, {23, "23rd"}, {24, "24th"}, {30, "30th"},
                                               {31, "31st"}};
  for (auto& [d, s] : expected) CHECK(dates::ordinal(d) == s);
}

TEST_CASE("the eight forms write a date as the data set does") {
  const Date d{2026, 11, 22};
  const char* expected[8] = {"22 November 2026", "November 22, 2026", "nov 22 2026", "sunday, november 22, 2026",
                             "22/11/2026",       "22.11.2026",        "2026 Nov 22", "the 22nd of november 2026"};
  for (int f = 0; f < 8; f++) CHECK(dates::human(d, f) == expected[f]);
  const Date e{1903, 3, 1};
  CHECK(dates::human(e, 0) == "1 March 1903");
  CHECK(dates::human(e, 3) == "sunday, march 1, 1903");
  CHECK(dates::human(e, 4) == "01/03/1903");
  CHECK(dates::human(e, 5) == "01.03.1903");
  CHECK(dates::human(e, 6) == "1903 Mar 1");
  CHECK(dates::human(e, 7) == "the 1st of march 1903");
  CHECK(dates::iso(e) == "1903-03-01");
  CHECK_THROWS_WITH(dates::human(d, 8), Contains("form must be 0-7"));
  CHECK_THROWS_WITH(dates::human({2026, 2, 30}, 0), Contains("2026-02-30"));
}

TEST_CASE("each character of a form has its role") {
  const Date d{2026, 11, 22};
  CHECK(dates::roles(d, 0) == "DDOMMMMMMMMOYYYY");
  CHECK(dates::roles(d, 3) == "WWWWWWOOMMMMMMMMODDOOYYYY");
  CHECK(dates::roles(d, 4) == "DDOMMOYYYY");
  CHECK(dates::roles(d, 6) == "YYYYOMMMODD");
  CHECK(dates::roles(d, 7) == "OOOODDDDOOOOMMMMMMMMOYYYY");
  for (int f = 0; f < dates::kForms; f++) CHECK(dates::roles({1999, 5, 3}, f).size() == dates::human({1999, 5, 3}, f).size());
}

TEST_CASE("parse_iso accepts exactly the valid ISO dates of the range") {
  CHECK(dates::parse_iso("2026-11-22") == Date{2026, 11, 22});
  CHECK(dates::parse_iso("2000-02-29") == Date{2000, 2, 29});
  for (const char* bad : {"2026-02-29", "1899-12-31", "2100-01-01", "2026-1-05", "2026/11/22", "20261122", "",
                          "2026-11-22 ", "2026-00-10", "2026-11-00", "2026-11-3a"})
    CHECK_FALSE(dates::parse_iso(bad).has_value());
}

TEST_CASE("the shipped splits hold true dates in the eight forms, balanced, with no date in two splits") {
  std::set<std::string> seen;
  const std::map<std::string, size_t> sizes = {{"train", 20000}, {"valid", 1000}, {"test", 1000}};
  for (auto& [split, size] : sizes) {
    INFO(split);
    auto pairs = text::read_pairs(data_file(split.c_str()));
    CHECK(pairs.size() == size);
    std::vector<int> per_form(dates::kForms, 0);
    int repeated = 0;
    for (auto& p : pairs) {
      auto d = dates::parse_iso(p.target);
      INFO(p.source << " -> " << p.target);
      REQUIRE(d.has_value());
      int f = form_of(p.source, *d);
      REQUIRE(f >= 0);
      per_form[f]++;
      repeated += !seen.insert(p.target).second;  // no date twice, within or across splits
    }
    CHECK(repeated == 0);
    for (int f = 0; f < dates::kForms; f++) CHECK(per_form[f] == int(size / dates::kForms));
  }
}

TEST_CASE("read_pairs reads tab-separated pairs, CRLF endings and a last line without newline") {
  auto pairs = text::parse_pairs("x.tsv", "a b\t1\r\nc\td e\nf\tg");
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[0].source == "a b");
  CHECK(pairs[0].target == "1");
  CHECK(pairs[1].target == "d e");
  CHECK(pairs[2].source == "f");
  CHECK(pairs[2].line == 3);
  auto utf = text::parse_pairs("u.tsv", "22 d\xC3\xA9\x63\x65mbre\t2026-12-22\n");
  CHECK(utf[0].source == "22 d\xC3\xA9\x63\x65mbre");
}

TEST_CASE("a malformed data line is an error naming the file and the line") {
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "a\t1\n\nb\t2\n"); }),
             Contains("read_pairs") && Contains("d.tsv:2") && Contains("empty line"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "a\t1\nb 2\n"); }), Contains("d.tsv:2") && Contains("no tab"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "a\t1\t2\n"); }), Contains("d.tsv:1") && Contains("more than one tab"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "a\t1\n\t2\n"); }), Contains("d.tsv:2") && Contains("source is empty"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "a\t\n"); }), Contains("d.tsv:1") && Contains("target is empty"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "a\x01\t1\n"); }), Contains("d.tsv:1") && Contains("U+0001"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "ok\t1\n\xFF\t1\n"); }),
             Contains("d.tsv:2") && Contains("invalid UTF-8 at byte 1"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "\xC3\t1\n"); }), Contains("invalid UTF-8"));
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", "\xC0\xAF\t1\n"); }), Contains("invalid UTF-8"));  // overlong
  CHECK_THAT(error_of([] { text::parse_pairs("d.tsv", ""); }), Contains("d.tsv") && Contains("no pairs"));
  CHECK_THAT(error_of([] { text::read_pairs("/nonexistent/d.tsv"); }),
             Contains("cannot open '/nonexistent/d.tsv'") && Contains("No such file"));
  const std::string path = temp_file("bad.tsv", "a\t1\nb\t2\nc\n");
  CHECK_THAT(error_of([&] { text::read_pairs(path); }), Contains(path + ":3") && Contains("no tab"));
  std::remove(path.c_str());
}

TEST_CASE("the character vocabulary puts the specials first and encodes and decodes text") {
  auto v = text::CharVocab::build({"nov 22", "2026-11-22", "d\xC3\xA9"});
  CHECK(v.tokens()[0] == "<pad>");
  CHECK(v.tokens()[1] == "<s>");
  CHECK(v.tokens()[2] == "</s>");
  CHECK(v.tokens()[3] == "<unk>");
  CHECK(v.size() == 4 + 11);  // space - 0 1 2 6 d n o v and e-acute
  CHECK(v.tokens()[4] == " ");
  CHECK(v.tokens().back() == "\xC3\xA9");
  auto ids = v.encode("2026-11-22");
  CHECK(ids.size() == 10);
  CHECK(v.decode(ids) == "2026-11-22");
  ids.push_back(text::CharVocab::kEnd);
  ids.push_back(v.encode("9", true)[0]);
  CHECK(v.decode(ids) == "2026-11-22");  // stops at </s>
  CHECK(v.decode({text::CharVocab::kBegin, v.encode("n")[0], text::CharVocab::kUnknown, text::CharVocab::kPad}) == "n?");
  CHECK(v.encode("x7", true) == std::vector<int64_t>{text::CharVocab::kUnknown, text::CharVocab::kUnknown});
  CHECK_THAT(error_of([&] { v.encode("nov 2x"); }),
             Contains("CharVocab::encode") && Contains("'x'") && Contains("position 6") && Contains("not in the vocabulary"));
  auto again = text::CharVocab::from_tokens(v.tokens());
  CHECK(again.encode("d\xC3\xA9 22") == v.encode("d\xC3\xA9 22"));
}

TEST_CASE("a vocabulary read back from tokens is checked") {
  CHECK_THAT(error_of([] { text::CharVocab::from_tokens({"<pad>", "<s>"}); }), Contains("at least the 4 special tokens"));
  CHECK_THAT(error_of([] { text::CharVocab::from_tokens({"<pad>", "<s>", "<unk>", "</s>"}); }),
             Contains("token 2 must be '</s>'"));
  CHECK_THAT(error_of([] { text::CharVocab::from_tokens({"<pad>", "<s>", "</s>", "<unk>", "ab"}); }),
             Contains("token 4 must be one character"));
  CHECK_THAT(error_of([] { text::CharVocab::from_tokens({"<pad>", "<s>", "</s>", "<unk>", "a", "a"}); }),
             Contains("token 5 'a' appears twice"));
}
