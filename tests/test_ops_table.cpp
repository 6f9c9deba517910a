// core/ops.h opens with the table of every op, what it saves and its gradient per input.
// This keeps the table whole: every op the header declares must appear in it.
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("every op declared in core/ops.h appears in its gradient table") {
  const std::string header = read(std::string(EMBER_SOURCE_DIR) + "/core/ops.h");
  REQUIRE(!header.empty());
  // the table: the comment lines that start with "// |"
  std::string table;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("// |", 0) == 0) table += line.substr(4, line.find('|', 4) - 4) + "\n";  // the op column
  REQUIRE(table.size() > 100);
  // "logical_and _or _not" names logical_or and logical_not too
  table = std::regex_replace(table, std::regex(R"(logical_and _or _not)"), "logical_and logical_or logical_not");
  // the declarations: functions returning tensors
  const std::regex decl(R"(^(?:Tensor|std::pair<Tensor, Tensor>|std::vector<Tensor>) (\w+)\()");
  std::set<std::string> declared, missing;
  std::istringstream body(header);
  for (std::string line; std::getline(body, line);) {
    std::smatch m;
    if (std::regex_search(line, m, decl)) declared.insert(m[1]);
  }
  CHECK(declared.size() > 40);
  for (const std::string& op : declared)
    if (!std::regex_search(table, std::regex("\\b" + op + "\\b"))) missing.insert(op);
  std::string names;
  for (auto& op : missing) names += op + " ";
  INFO("ops declared but not in the table: " << names);
  CHECK(missing.empty());
}
