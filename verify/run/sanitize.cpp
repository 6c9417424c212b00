#include "verify/run/sanitize.h"

#include <regex>
#include <sstream>

namespace assay {

bool valid_sanitizer_tool(const std::string& t) {
  return t == "memcheck" || t == "racecheck" || t == "synccheck" || t == "initcheck";
}

SanitizerSummary parse_sanitizer_output(const std::string& text, const std::string& tool) {
  // "ERROR SUMMARY: 12 errors" but not "ERROR SUMMARY: 10396 errors were not printed. Use --print-limit ..."
  static const std::regex err_re(R"(ERROR SUMMARY:\s*([0-9]+)\s+errors?\s*$)");
  static const std::regex race_re(
      R"(RACECHECK SUMMARY:\s*([0-9]+)\s+hazards?\s+displayed\s*\(\s*([0-9]+)\s+errors?\s*,\s*([0-9]+)\s+warnings?\s*\))");
  SanitizerSummary s, race;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, race_re)) {
      race.found = true;
      race.hazards = std::stoll(m[1]);
      race.errors = std::stoll(m[2]);
      race.warnings = std::stoll(m[3]);
      race.line = line;
    } else if (std::regex_search(line, m, err_re)) {
      s.found = true;
      s.errors = std::stoll(m[1]);
      s.line = line;
    }
  }
  if (tool == "racecheck" && race.found) {
    // Both may be present: take the larger error count, keep the hazard and warning counts.
    if (s.found && s.errors > race.errors) race.errors = s.errors;
    return race;
  }
  return s;
}

std::vector<std::string> sanitizer_prefix(const std::string& exe, const std::string& tool) {
  std::vector<std::string> v{exe, "--tool", tool, "--error-exitcode", std::to_string(kSanitizerErrorExit)};
  if (tool == "memcheck") {
    v.push_back("--leak-check");
    v.push_back("full");
  }
  // A forked/exec'd child is not expected; the worker is the target itself.
  v.push_back("--print-limit");
  v.push_back("100");
  return v;
}

}  // namespace assay
