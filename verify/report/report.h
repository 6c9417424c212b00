// Reports of `assay verify` / `assay sanitize`: one CaseResult per (kernel, golden case), printed
// as a console table, JSON, and JUnit XML (one <testcase> per case: Incorrect -> <failure>,
// Failed/Hung/Stale -> <error>, NotSupported/NotRun -> <skipped>).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verify/judge/compare.h"
#include "verify/judge/verdict.h"

namespace assay {

struct CaseResult {
  std::string kernel, kernel_source, op, case_name, golden;
  bool deterministic = true;
  std::string profile = "strict";  // the kernel's declared precision profile (verify/judge/tolerance.h)
  Verdict verdict = Verdict::NotRun;
  std::string reason;                 // one line: why this verdict
  std::vector<std::string> findings;  // canaries, modified inputs, run-to-run differences, sanitizer
  std::vector<TensorReport> tensors;
  std::vector<double> kernel_ms;
  double wall_s = 0;
  std::string log_tail;  // the worker's output tail on Failed/Hung
  std::string repro;     // repro bundle path (Incorrect)
  std::string candidate;  // the worker's candidate file, when it was judged (kept with the work dir)
  std::string sanitizer_summary;
  // A relation check's row (verify/run/relations.h; case_name is "<case>@<relation>"), else "".
  std::string relation;
};

struct RunReport {
  std::string tool = "verify";  // or "sanitize:memcheck" ...
  std::string assay_version, git_rev;
  nlohmann::json device;  // from the worker probe: name, driver, cuda_runtime, ... (null: none)
  std::string device_error;
  std::string sanitizer_version;
  std::string shard;  // "k/n" or ""
  std::string golden_dir, fixtures_dir;
  bool fixture_checked = true;
  std::vector<std::string> plugins;
  std::vector<CaseResult> cases;
  std::vector<std::string> notes;  // run-level remarks (compare --candidate-dir: candidates with no golden)
  double wall_s = 0;

  // 1 if any Incorrect/Failed/Hung; else 2 if any Stale; else 125 if nothing Passed; else 0.
  int exit_code() const;
  int count(Verdict v) const;
};

// The run at a glance (the HTML matrix, the JSON "summary", the console's last lines).
// worst_ratio: the largest error / allowed over a case's tensors (-1 without tensors).
double worst_ratio(const CaseResult& c);
struct KernelSummary {
  std::string kernel;
  int passed = 0, incorrect = 0, failed = 0, hung = 0, stale = 0, not_supported = 0, not_run = 0;
  double closest_pass = -1;   // the largest worst_ratio among its Passed cases (how close to the limit)
  std::string closest_case;   // op/case of closest_pass
  bool bad() const { return incorrect + failed + hung + stale > 0; }
};
// One per kernel: kernels with an Incorrect / Failed / Hung / Stale case first, then by name.
std::vector<KernelSummary> kernel_summaries(const RunReport& r);
// NotSupported pairs grouped by reason, the most frequent first: (reason, pairs).
std::vector<std::pair<std::string, int>> not_supported_by_reason(const RunReport& r);

nlohmann::json to_json(const RunReport& r);
// One tensor's comparison (metrics, verdict, the tolerance entry and profile), as in the reports.
nlohmann::json tensor_json(const TensorReport& r);
std::string to_junit(const RunReport& r);
void print_console(const RunReport& r, bool verbose);
std::string xml_escape(const std::string& s);

}  // namespace assay
