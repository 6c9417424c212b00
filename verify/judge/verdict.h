// Verdicts (docs/DESIGN.md "Verdicts and exit codes"). A case is Passed only when every output
// tensor passed.
#pragma once
#include <string_view>

namespace assay {

enum class Verdict { Passed, Incorrect, Failed, Hung, NotSupported, Stale, NotRun };

constexpr std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Passed: return "Passed";
    case Verdict::Incorrect: return "Incorrect";
    case Verdict::Failed: return "Failed";
    case Verdict::Hung: return "Hung";
    case Verdict::NotSupported: return "NotSupported";
    case Verdict::Stale: return "Stale";
    case Verdict::NotRun: return "NotRun";
  }
  return "?";
}

// CLI exit codes: 0 pass, 1 numerical failure, 2 usage or input error, 125 could not run.
inline constexpr int kExitPass = 0, kExitFail = 1, kExitInput = 2, kExitCouldNotRun = 125;

constexpr int exit_code(Verdict v) {
  switch (v) {
    case Verdict::Passed: return kExitPass;
    case Verdict::Incorrect: case Verdict::Failed: case Verdict::Hung: return kExitFail;
    case Verdict::Stale: return kExitInput;
    case Verdict::NotSupported: case Verdict::NotRun: return kExitCouldNotRun;
  }
  return kExitFail;
}

}  // namespace assay
