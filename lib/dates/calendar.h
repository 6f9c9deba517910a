// Dates for the translator example: the Gregorian calendar from 1900 to 2099, the eight
// human-written forms the model reads, and the ISO form (YYYY-MM-DD) it writes.
//
//   form 0  22 November 2026            form 4  22/11/2026
//   form 1  November 22, 2026           form 5  22.11.2026
//   form 2  nov 22 2026                 form 6  2026 Nov 22
//   form 3  sunday, november 22, 2026   form 7  the 22nd of november 2026
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace ember::dates {

constexpr int kFirstYear = 1900, kLastYear = 2099;
constexpr int kForms = 8;

struct Date {
  int year = 0, month = 0, day = 0;  // month 1-12, day 1-31
  bool operator==(const Date&) const = default;
};

bool is_leap(int year);
int days_in_month(int year, int month);
bool is_valid(const Date& d);             // a real date in [kFirstYear, kLastYear]
int64_t day_number(const Date& d);        // days since 1970-01-01 (negative before)
int weekday(const Date& d);               // 0 = Monday ... 6 = Sunday
std::string ordinal(int day);             // 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st, ...
std::string human(const Date& d, int form);  // one of the eight forms above
// The role of each character of human(d, form): 'D' day (ordinal suffix included),
// 'M' month, 'Y' year, 'W' weekday, 'O' other (spaces, punctuation, "the", "of").
std::string roles(const Date& d, int form);
constexpr const char* kRoles = "DMYWO";  // role letters, in class-id order
std::string iso(const Date& d);             // 2026-11-22
std::optional<Date> parse_iso(const std::string& s);  // a valid date in ISO form, or nothing

}  // namespace ember::dates
