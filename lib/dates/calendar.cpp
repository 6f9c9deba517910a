// The Gregorian calendar and the date forms of calendar.h.
#include "lib/dates/calendar.h"

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace ember::dates {

namespace {

const char* const kMonths[12] = {"January", "February", "March",     "April",   "May",      "June",
                                 "July",    "August",   "September", "October", "November", "December"};
const char* const kWeekdays[7] = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"};

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

std::string two(int v) {
  char b[8];
  std::snprintf(b, sizeof b, "%02d", v);
  return b;
}

// Leap days in the years 1 .. year-1.
int64_t leaps_before(int64_t year) { return (year - 1) / 4 - (year - 1) / 100 + (year - 1) / 400; }

}  // namespace

bool is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int days_in_month(int y, int m) {
  static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12) return 0;
  return days[m - 1] + (m == 2 && is_leap(y) ? 1 : 0);
}

bool is_valid(const Date& d) {
  return d.year >= kFirstYear && d.year <= kLastYear && d.month >= 1 && d.month <= 12 && d.day >= 1 &&
         d.day <= days_in_month(d.year, d.month);
}

int64_t day_number(const Date& d) {
  int64_t n = 365 * int64_t(d.year - 1970) + leaps_before(d.year) - leaps_before(1970);
  for (int m = 1; m < d.month; m++) n += days_in_month(d.year, m);
  return n + d.day - 1;
}

int weekday(const Date& d) {
  // 1970-01-01 was a Thursday (3 when Monday is 0)
  return int(((day_number(d) + 3) % 7 + 7) % 7);
}

std::string ordinal(int day) {
  const char* suffix = "th";
  if (day % 100 < 11 || day % 100 > 13) {
    if (day % 10 == 1) suffix = "st";
    else if (day % 10 == 2) suffix = "nd";
    else if (day % 10 == 3) suffix = "rd";
  }
  return std::to_string(day) + suffix;
}

namespace {

struct Piece {
  std::string text;
  char role;
};

// The form as pieces of text, each with its role.
std::vector<Piece> pieces(const Date& d, int form) {
  if (!is_valid(d)) throw std::invalid_argument("dates::human: not a date between 1900 and 2099: " + iso(d));
  const std::string month = kMonths[d.month - 1], day = std::to_string(d.day), year = std::to_string(d.year);
  switch (form) {
    case 0: return {{day, 'D'}, {" ", 'O'}, {month, 'M'}, {" ", 'O'}, {year, 'Y'}};
    case 1: return {{month, 'M'}, {" ", 'O'}, {day, 'D'}, {", ", 'O'}, {year, 'Y'}};
    case 2: return {{lower(month.substr(0, 3)), 'M'}, {" ", 'O'}, {day, 'D'}, {" ", 'O'}, {year, 'Y'}};
    case 3:
      return {{kWeekdays[weekday(d)], 'W'}, {", ", 'O'}, {lower(month), 'M'}, {" ", 'O'},
              {day, 'D'},                   {", ", 'O'}, {year, 'Y'}};
    case 4: return {{two(d.day), 'D'}, {"/", 'O'}, {two(d.month), 'M'}, {"/", 'O'}, {year, 'Y'}};
    case 5: return {{two(d.day), 'D'}, {".", 'O'}, {two(d.month), 'M'}, {".", 'O'}, {year, 'Y'}};
    case 6: return {{year, 'Y'}, {" ", 'O'}, {month.substr(0, 3), 'M'}, {" ", 'O'}, {day, 'D'}};
    case 7: return {{"the ", 'O'}, {ordinal(d.day), 'D'}, {" of ", 'O'}, {lower(month), 'M'}, {" ", 'O'}, {year, 'Y'}};
  }
  throw std::invalid_argument("dates::human: form must be 0-7, got " + std::to_string(form));
}

}  // namespace

std::string human(const Date& d, int form) {
  std::string s;
  for (auto& p : pieces(d, form)) s += p.text;
  return s;
}

std::string roles(const Date& d, int form) {
  std::string s;
  for (auto& p : pieces(d, form)) s += std::string(p.text.size(), p.role);
  return s;
}

std::string iso(const Date& d) {
  char b[32];
  std::snprintf(b, sizeof b, "%04d-%02d-%02d", d.year, d.month, d.day);
  return b;
}

std::optional<Date> parse_iso(const std::string& s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return std::nullopt;
  for (int i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
  Date d{std::stoi(s.substr(0, 4)), std::stoi(s.substr(5, 2)), std::stoi(s.substr(8, 2))};
  if (!is_valid(d)) return std::nullopt;
  return d;
}

}  // namespace ember::dates
