// Judging one case: classify_worker maps a finished worker (process result, result.json, sanitizer
// output) to a verdict; judge compares its candidate with the golden and checks run-to-run determinism.
#include "verify/run/runner.h"

#include <filesystem>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/judge/candidate.h"
#include "verify/run/compare_dir.h"
#include "verify/io/h5.h"
#include "verify/run/relations.h"
#include "verify/run/runner_internal.h"
#include "verify/run/sanitize.h"
#include "verify/run/worker.h"

namespace assay {
namespace fs = std::filesystem;

// ---- one worker's outcome ----------------------------------------------------------------------------

WorkerOutcome classify_worker(const ProcResult& p, const std::string& result_text, const std::string& log_text,
                              double timeout_s, const std::string& tool) {
  WorkerOutcome o;
  nlohmann::json res;
  if (!result_text.empty()) {
    try {
      res = nlohmann::json::parse(result_text);
    } catch (const nlohmann::json::exception&) {
      res = nullptr;
    }
  }
  if (res.is_object()) {
    if (res.contains("kernel_ms")) o.kernel_ms = res["kernel_ms"].get<std::vector<double>>();
    if (res.contains("findings")) o.findings = res["findings"].get<std::vector<std::string>>();
  }
  const std::string status = res.is_object() ? res.value("status", std::string()) : std::string();
  const std::string msg = res.is_object() ? res.value("message", std::string()) : std::string();
  // Sanitizer totals (only under `sanitize`).
  SanitizerSummary ss;
  if (!tool.empty()) {
    ss = parse_sanitizer_output(log_text, tool);
    o.sanitizer_summary = ss.found ? ss.line : "no summary";
  }
  if (!p.started) {
    o.verdict = Verdict::Failed;
    o.reason = "could not start the worker: " + p.error;
    return o;
  }
  if (p.timed_out) {
    o.verdict = Verdict::Hung;
    o.reason = fmt::format("no result after {:.0f} s: the watchdog killed the worker", timeout_s);
    return o;
  }
  if (p.signaled) {
    o.verdict = Verdict::Failed;
    o.reason = fmt::format("the worker died of {}", signal_desc(p.signal));
    return o;
  }
  if (p.exited && p.exit_code == worker::kExitNoDevice && status == "no_device") {
    o.verdict = Verdict::NotRun;
    o.reason = msg;
    return o;
  }
  if (!tool.empty()) {
    if (!ss.found) {
      o.verdict = Verdict::Failed;
      o.reason = fmt::format("{}: no summary in the compute-sanitizer output (exit {}): the sanitizer did not complete", tool,
                             p.exit_code);
      return o;
    }
    if (ss.errors > 0 || p.exit_code == kSanitizerErrorExit) {
      o.verdict = Verdict::Failed;
      o.reason = fmt::format("{}: {} errors ({})", tool, ss.errors, ss.line.substr(ss.line.find_first_not_of("= ")));
      return o;
    }
  }
  if (status == "ok" && p.exit_code == 0) {
    if (!o.findings.empty()) {
      o.verdict = Verdict::Failed;
      o.reason = o.findings.front() + (o.findings.size() > 1 ? fmt::format(" (+{} more)", o.findings.size() - 1) : "");
      return o;
    }
    o.verdict = Verdict::Passed;  // compare next
    return o;
  }
  o.verdict = Verdict::Failed;
  if (!status.empty() && !msg.empty()) o.reason = fmt::format("{}: {}", status, msg);
  else o.reason = fmt::format("the worker exited with code {} without a result", p.exit_code);
  return o;
}

// ---- compare, determinism ------------------------------------------------------------------------------

namespace {

std::vector<uint64_t> read_codes(const h5::File& f, const std::string& ds, const Tensor& e) {
  if (!f.exists(ds)) throw InputError(fmt::format("{}: {}: missing", f.path(), ds));
  const auto inf = f.info(ds);
  if (inf.shape != e.shape) throw InputError(fmt::format("{}: {}: shape {} != {}", f.path(), ds, shape_str(inf.shape), shape_str(e.shape)));
  return f.read_u64(ds);
}

}  // namespace

namespace runner_detail {

// Compares a clean worker's candidate: fills tensors, verdict and reason. The candidate is judged
// the way `assay compare` judges a file (judge_candidate: every output, then the intermediates the
// kernel wrote) under the kernel's declared profile; the runs after the first only feed the
// bitwise determinism check.
void judge(CaseResult& cr, const Golden& g, const kernels::KernelDef& k, const std::string& cand_path, int runs,
           const TolerancePolicy& policy, const std::string& repro_dir) {
  const auto f = h5::File::open_read(cand_path);
  CandidateJudging how;
  how.profile = k.profile;
  CandidateResult res = judge_candidate(g, policy, f, how);
  std::vector<std::string> diffs;
  for (const auto& o : g.outputs) {
    const auto& e = o.expected;
    if (runs <= 1) break;
    const auto c0 = read_codes(f, "/outputs/" + e.name, e);
    for (int r = 1; r < runs; ++r) {
      const auto cr_ = read_codes(f, fmt::format("/run{}/{}", r, e.name), e);
      int64_t nd = 0, first = -1;
      for (size_t i = 0; i < c0.size(); ++i)
        if (c0[i] != cr_[i]) {
          ++nd;
          if (first < 0) first = static_cast<int64_t>(i);
        }
      if (nd)
        diffs.push_back(fmt::format("'{}': run 0 and run {} differ bitwise in {} of {} elements (first {}: {:#x} vs {:#x})",
                                    e.name, r, nd, c0.size(), e.index_str(first), c0[static_cast<size_t>(first)],
                                    cr_[static_cast<size_t>(first)]));
    }
  }
  // judge_candidate's reports and values: the outputs in golden order, then the intermediates.
  const size_t n_out = g.outputs.size();
  std::vector<std::vector<double>> actual(res.actual.begin(), res.actual.begin() + static_cast<std::ptrdiff_t>(n_out));
  std::vector<Tolerance> tols;
  size_t n_inter = 0;
  for (auto& t : res.reports) {
    if (!t.intermediate) tols.push_back(t.tol);
    else ++n_inter;
    cr.tensors.push_back(std::move(t));
  }
  for (auto& n : res.notes) cr.findings.push_back(std::move(n));
  const bool all_ok = res.verdict == Verdict::Passed;
  for (const auto& d : diffs) cr.findings.push_back((k.deterministic ? "nondeterministic: " : "(declared nondeterministic) ") + d);
  if (!all_ok) {
    cr.verdict = Verdict::Incorrect;
    cr.reason = incorrect_reason(cr.tensors);
  } else if (!diffs.empty() && k.deterministic) {
    cr.verdict = Verdict::Incorrect;
    cr.reason = "not bitwise reproducible: " + diffs.front();
  } else {
    cr.verdict = Verdict::Passed;
    cr.reason = fmt::format("{} output(s){} within tolerance{}", n_out,
                            n_inter == 0 ? std::string() : fmt::format(" and {} intermediate(s)", n_inter),
                            k.deterministic ? fmt::format(", {} runs bitwise identical", runs) : std::string());
  }
  if (cr.verdict == Verdict::Incorrect && !repro_dir.empty()) {
    cr.repro = (fs::path(repro_dir) / (safe_name(k.name) + "__" + safe_name(g.prov.op) + "__" + safe_name(g.prov.case_name) + ".h5")).string();
    try {
      std::vector<std::string> notes;
      write_repro(cr.repro, g, k.name, actual, tols, notes);
      for (auto& n : notes) cr.findings.push_back(n);
    } catch (const std::exception& e) {
      cr.findings.push_back(std::string("repro bundle not written: ") + e.what());
      cr.repro.clear();
    }
  }
}

std::vector<CaseResult> judge_relations(const CaseResult& base, const Golden& g, const kernels::KernelDef& k,
                                        const std::string& cand_path, const TolerancePolicy& policy) {
  std::vector<CaseResult> rows;
  const auto checks = relations::plan_checks(g, k.relations, k.batch_invariant);
  if (checks.empty()) return rows;
  const auto f = h5::File::open_read(cand_path);
  std::vector<std::vector<uint64_t>> base_codes;
  for (const auto& o : g.outputs) base_codes.push_back(read_codes(f, "/outputs/" + o.expected.name, o.expected));
  for (const auto& c : checks) {
    CaseResult r;
    r.kernel = base.kernel;
    r.kernel_source = base.kernel_source;
    r.op = base.op;
    r.case_name = base.case_name + "@" + c.name;
    r.relation = c.name;
    r.golden = base.golden;
    r.deterministic = base.deterministic;
    r.profile = base.profile;
    r.candidate = cand_path;
    relations::Executed e;
    if (c.not_applicable.empty()) {
      try {
        e = relations::read_executed(f, g, c);
      } catch (const std::exception& ex) {
        r.verdict = Verdict::Failed;
        r.reason = fmt::format("relation {}: {}", c.name, ex.what());
        rows.push_back(std::move(r));
        continue;
      }
    }
    const auto v = relations::judge_check(c, g, policy, k.profile, base_codes, e);
    r.verdict = v.verdict;
    r.reason = v.reason;
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace runner_detail

}  // namespace assay
