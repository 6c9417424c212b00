// Private to verify/runner*.cpp: the helpers that the runner's translation units share
// (file reading, repro bundles, judging a candidate). Not part of the public API (verify/run/runner.h).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "verify/io/golden.h"
#include "verify/report/report.h"
#include "verify/judge/tolerance.h"

namespace assay::runner_detail {

// runner_process.cpp: a whole file as a string ("" when unreadable), and the last max_lines lines
// (at most max_bytes) of a text, trailing newlines dropped.
std::string slurp(const std::string& path);
std::string tail_text(const std::string& s0, size_t max_bytes, int max_lines);

// runner_repro.cpp: a string made safe as a file name (anything but [A-Za-z0-9_.-] -> '_'), and the
// repro bundle of an Incorrect case (notes: one error-map line per output that has mismatches).
std::string safe_name(std::string s);
void write_repro(const std::string& path, const Golden& g, const std::string& kernel,
                 const std::vector<std::vector<double>>& actual, const std::vector<Tolerance>& tols,
                 std::vector<std::string>& notes);

// runner_judge.cpp: compares a clean worker's candidate: fills tensors, verdict and reason.
void judge(CaseResult& cr, const Golden& g, const kernels::KernelDef& k, const std::string& cand_path, int runs,
           const TolerancePolicy& policy, const std::string& repro_dir);

// runner_judge.cpp: the relation rows of a case whose worker ran with --relations (verify/run/relations.h):
// one CaseResult per planned check, named "<case>@<check>", judged from the candidate's /relations.
std::vector<CaseResult> judge_relations(const CaseResult& base, const Golden& g, const kernels::KernelDef& k,
                                        const std::string& cand_path, const TolerancePolicy& policy);

}  // namespace assay::runner_detail
