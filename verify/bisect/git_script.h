// The scripts `assay bisect --git` hands to `git bisect run` (written into the work directory):
//   bisect.sh  what git calls at each commit: runs step.sh under `timeout` (its own process group,
//              killed as a whole) and maps its result to 0 / 1 / 125, logging "start" and "done";
//   step.sh    BUILD_CMD, then the candidates (--candidate-cmd) and `assay compare`, or `assay
//              verify`; exits 0 / 1 / 125, logging "build" and "judge".
// Every path and argument is quoted for sh (sq); a golden's path reaches --candidate-cmd only as an
// environment variable (bind_placeholders), never as shell text.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace assay::git_bisect {

// 'text' for sh, with ' as '\''.
std::string sq(const std::string& s);
// The --candidate-cmd with {golden} and {out} bound to "$ASSAY_GOLDEN" and "$ASSAY_OUT" (see the .cpp).
std::string bind_placeholders(const std::string& cmd);
// The goldens the candidate command is run for: <dir>/**/*.h5 whose case name (stem) matches a glob.
std::vector<std::filesystem::path> select_goldens(const std::filesystem::path& dir, const std::vector<std::string>& globs);
// The absolute path of the judging assay binary (this process's own when exe is empty).
std::string abs_assay(const std::string& exe);

struct ScriptPlan {
  std::filesystem::path work;                  // the work directory (scripts, progress, commits/)
  std::string top;                             // the repository's top directory
  std::string judge_exe;                       // the assay binary that judges every commit
  std::string golden, fixtures;                // canonical --golden and --fixtures ("" = none)
  std::vector<std::string> build_cmd;          // argv; empty: no build step
  bool compare_mode = false;                   // --candidate-cmd (else --kernel through assay verify)
  std::string candidate_cmd;                   // compare mode
  std::vector<std::filesystem::path> goldens;  // compare mode: one candidate each
  std::vector<std::string> kernels, plugins;   // verify mode (plugins relative to top unless absolute)
  std::vector<std::string> cases;              // --case globs (both modes)
  double timeout_s = 600;                      // per commit: build + judge
};
// Writes <work>/step.sh and <work>/bisect.sh (executable). InputError when they cannot be written.
void write_scripts(const ScriptPlan& p);

}  // namespace assay::git_bisect
