// assay bisect GOLDEN CANDIDATE: where one candidate first goes wrong (verify/bisect/bisect.h). The golden
// is checked for staleness and the candidate is read and judged exactly as `assay compare` does.
// assay bisect --kernel K --case C: the same for a registered or plugin kernel, run on the GPU by
// the verify runner first.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/bisect/bisect.h"
#include "verify/cli/cli.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/run/runner.h"
#include "verify/io/stale.h"

namespace assay::cli {

int run_bisect_pair(const std::string& golden, const std::string& candidate, const BisectPairCli& o, const Common& common) {
  const Golden g = read_golden(golden);
  const std::string fixtures_dir = fixtures_for(common, golden, g.prov.op);
  const auto stale = check_stale(g, o.no_fixture_check ? "" : fixtures_dir);
  if (stale.stale) {
    fmt::print("Stale      {}/{}: {}\n", g.prov.op, g.prov.case_name, stale.reason);
    return kExitInput;
  }
  const TolerancePolicy policy = TolerancePolicy::for_ops(fixtures_dir, {g.prov.op});
  const CandidateJudging how{o.profile, o.outputs, -1, -1};
  h5::probe_in_child(candidate, [&] { (void)bisect_candidate(g, policy, h5::File::open_read(candidate), how); });
  auto r = bisect_candidate(g, policy, h5::File::open_read(candidate), how);
  if (!o.no_repro) {
    std::string prefix = o.repro;
    if (prefix.empty()) {
      const std::filesystem::path c(candidate);
      prefix = (c.parent_path() / c.stem()).string() + ".bisect";
    }
    write_bisect_bundle(g, r, prefix);
  }
  if (common.json) std::cout << r.json().dump(2) << "\n";
  else std::cout << r.text();
  return r.any_bad() ? kExitFail : kExitPass;
}

int run_bisect_kernel(const std::string& kernel, const std::string& case_glob, const std::vector<std::string>& plugins,
                      const std::string& golden_dir, const std::string& work_dir, double timeout_s, BisectPairCli o,
                      const Common& common) {
  VerifyOptions v;
  v.kernel_globs = {kernel};
  v.case_globs = {case_glob};
  v.plugins = plugins;
  v.golden_dir = golden_dir;
  v.fixtures_dir = fixtures_for(common, golden_dir);
  v.fixture_check = !o.no_fixture_check;
  v.timeout_s = timeout_s;
  v.runs = 1;
  v.keep = true;
  v.work_dir = work_dir;  // empty: the runner makes a temp directory, keeps it and names it on stderr
  const RunReport rep = run_verify(v);
  if (rep.cases.size() != 1)
    throw InputError(fmt::format("bisect --kernel {} --case {}: selects {} (kernel, golden) pairs; name exactly one", kernel,
                                 case_glob, rep.cases.size()));
  const CaseResult& cr = rep.cases.front();
  if (cr.candidate.empty() || !std::filesystem::exists(cr.candidate)) {
    fmt::print("{} {}/{}: {}: {} (nothing to bisect; the worker's log is in {})\n", verdict_name(cr.verdict), cr.op,
               cr.case_name, cr.kernel, cr.reason, v.work_dir.empty() ? "the work directory named above" : v.work_dir);
    return cr.verdict == Verdict::NotRun || cr.verdict == Verdict::NotSupported ? kExitCouldNotRun : kExitFail;
  }
  if (o.profile.empty()) o.profile = cr.profile;
  // The bundle next to the case's worker directory: <work dir>/bisect.*
  if (o.repro.empty()) o.repro = (std::filesystem::path(cr.candidate).parent_path().parent_path() / "bisect").string();
  fmt::print("{}: {} on {}/{} ({}); candidate {}\n", cr.kernel, verdict_name(cr.verdict), cr.op, cr.case_name, cr.reason,
             cr.candidate);
  return run_bisect_pair(cr.golden, cr.candidate, o, common);
}

}  // namespace assay::cli
