// `assay compare` as a report: one golden and one candidate file, or every golden of a directory
// paired with a candidate directory (`--golden-dir D --candidate-dir C`). Both produce the RunReport
// of `assay verify` (verify/report/report.h: console table, --json / --json-file, --junit, --html), with a
// repro bundle per Incorrect case, so the three entry points (verify, compare, Python's
// assay.check) share one report format.
//
// Pairing: every golden D/<rel>.h5 (D searched recursively, sorted) whose case name matches a
// --case glob is paired with C/<rel>.h5. Per pair, in this order:
//   unreadable golden, or its hashes / fixture disagree (verify/io/stale.h)  -> Stale
//   C/<rel>.error exists (a text file: the producer of the candidate failed; Python's
//   assay.check writes the traceback there; its first line is the reason; read as a regular
//   file, never through a link, at most 64 KiB)                            -> Failed
//     (Hung when its first line starts with "Hung:": a kernel killed at its timeout)
//   C/<rel>.h5 missing                                                       -> NotRun
//   a candidate that is not a valid candidate (malformed HDF5, missing output, wrong shape or
//   dtype: the one-line error of the single-file mode)                       -> Failed
//   compare under the tolerance policy (verify/judge/candidate.h)                  -> Passed / Incorrect
// Exit code: RunReport::exit_code (1 any Incorrect/Failed/Hung, else 2 any Stale, else 125 nothing
// Passed, else 0).
#pragma once
#include <string>
#include <vector>

#include "verify/judge/candidate.h"
#include "verify/io/golden.h"
#include "verify/report/report.h"
#include "verify/judge/tolerance.h"

namespace assay {

struct CompareDirOptions {
  std::string golden_dir, candidate_dir;
  std::vector<std::string> case_globs;  // empty: all
  std::string fixtures_dir;             // tolerance policy and staleness
  bool fixture_check = true;
  std::string work_dir;                 // repro bundles; empty: <candidate_dir>/../repro
  std::string name;                     // the "kernel" column; empty: the candidate directory's name
  // Relation candidates (verify/run/relations.h judge_relation_file): <dir>/<same relative folder>/
  // <case>@<check>.h5, each judged against the case's candidate as a row "<case>@<check>".
  std::string relations_dir;
  CandidateJudging how;
};

RunReport compare_dirs(const CompareDirOptions& o);

// One judged pair as a report row: the verdict, the reason (for Incorrect: the first failing
// tensor, its first mismatch and never-pass rule), the tensors; writes the repro bundle into
// repro_dir (when not empty) for an Incorrect case.
CaseResult case_result(const Golden& g, const CandidateResult& res, const std::string& kernel,
                       const std::string& golden_path, const std::string& repro_dir);

// "'out': 12 mismatches first [b=0, t=3] NEVER-PASS: ...; hint" for the first tensor that failed.
std::string incorrect_reason(const std::vector<TensorReport>& tensors);

}  // namespace assay
