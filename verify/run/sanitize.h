// compute-sanitizer hooks for `assay sanitize --tool memcheck|racecheck|synccheck|initcheck`.
// The runner wraps each worker as
//   compute-sanitizer --tool T --error-exitcode 86 [--leak-check full] assay __worker ...
// (86, not 1: the worker itself exits 1 on a CUDA error, and the two must stay apart), then
// parses the summary totals from the worker's output. A missing summary is a failure (a sanitizer
// that crashed or never ran proves nothing).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace assay {

inline constexpr int kSanitizerErrorExit = 86;

struct SanitizerSummary {
  bool found = false;      // a summary line was present
  int64_t errors = 0;      // "ERROR SUMMARY: N errors", or racecheck's "(N errors, M warnings)"
  int64_t warnings = 0;    // racecheck only
  int64_t hazards = -1;    // racecheck "N hazards displayed", -1 if absent
  std::string line;        // the line the totals came from
};

bool valid_sanitizer_tool(const std::string& tool);
// Parses compute-sanitizer output (any number of "=========" lines mixed with program output).
// Uses the LAST summary line. racecheck: the RACECHECK SUMMARY's parenthesised counts win when
// present; an ERROR SUMMARY line is also accepted.
SanitizerSummary parse_sanitizer_output(const std::string& text, const std::string& tool);
// The argv prefix that wraps a worker.
std::vector<std::string> sanitizer_prefix(const std::string& exe, const std::string& tool);

}  // namespace assay
