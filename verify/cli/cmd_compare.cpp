// assay compare GOLDEN CANDIDATE: checks a candidate HDF5 (outputs under the golden's names, as
// /outputs/<name> or /<name>) against a golden. This is how Python, Triton, TileLang and CuTe
// kernels are checked: read the golden's /inputs, run the kernel, write the candidate, compare.
//
// The candidate is judged under a precision profile (verify/tolerance.h): `--profile P`, else the
// candidate's root attribute `precision_profile`, else "strict"; both given and different is an
// error. `--atol/--rtol` replace the selected entry's atol and rtol (and turn `exact` off); its
// bound_k and period stay.
//
// Candidate datasets: any float type (fp64/fp32/fp16; bf16 upcast to fp32 is exact), or integer
// storage codes with a string attribute dtype = "bf16" | "fp8e4m3" | ... . Shapes must match.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/core/check.h"
#include "verify/cli/cli.h"
#include "verify/candidate.h"
#include "verify/compare.h"
#include "verify/golden.h"
#include "verify/h5.h"
#include "verify/report.h"
#include "verify/stale.h"

namespace assay::cli {
namespace {

struct CompareOpts {
  std::string golden, candidate;
  std::vector<std::string> outputs;
  bool no_fixture_check = false;
  double atol = -1, rtol = -1;
  std::string profile;
};

int run_compare(const CompareOpts& o, const Common& common) {
  const Golden g = read_golden(o.golden);
  const auto stale = check_stale(g, o.no_fixture_check ? "" : common.fixtures_dir);
  nlohmann::json js{{"golden", o.golden}, {"candidate", o.candidate}, {"op", g.prov.op}, {"case", g.prov.case_name},
                    {"fixture_checked", !o.no_fixture_check}};
  if (stale.stale) {
    js["verdict"] = verdict_name(Verdict::Stale);
    js["reason"] = stale.reason;
    if (common.json) std::cout << js.dump(2) << "\n";
    else fmt::print("Stale      {}/{}: {}\n", g.prov.op, g.prov.case_name, stale.reason);
    return exit_code(Verdict::Stale);
  }
  // Only this op's policy entries: another op's fixture file cannot break this comparison.
  TolerancePolicy policy;
  if (const auto f = std::filesystem::path(common.fixtures_dir) / (g.prov.op + ".toml"); std::filesystem::exists(f))
    policy.add_file(f.string());
  // The candidate comes from anywhere: judge it once in a child first (h5::probe_in_child).
  const CandidateJudging how{o.profile, o.outputs, o.atol, o.rtol};
  h5::probe_in_child(o.candidate, [&] { (void)judge_candidate(g, policy, h5::File::open_read(o.candidate), how); });
  const auto cand = h5::File::open_read(o.candidate);
  const auto res = judge_candidate(g, policy, cand, how);
  const auto& profile = res.profile;
  const auto& reports = res.reports;
  const Verdict verdict = res.verdict;
  js["profile"] = profile;
  if (common.json) {
    js["verdict"] = verdict_name(verdict);
    for (const auto& r : reports) js["tensors"].push_back(tensor_json(r));
    std::cout << js.dump(2) << "\n";
  } else {
    fmt::print("{}/{}: golden {} vs candidate {} (profile {}){}\n", g.prov.op, g.prov.case_name, o.golden, o.candidate,
               profile, o.no_fixture_check ? " (fixture not checked: --no-fixture-check)" : "");
    for (const auto& r : reports) fmt::print("  {}\n    tolerance {}: {}\n", r.summary(), r.tol.source, r.tol.why);
    fmt::print("{} {}/{}\n", verdict_name(verdict), g.prov.op, g.prov.case_name);
  }
  return exit_code(verdict);
}

}  // namespace

void add_compare(CLI::App& app, Common& common, int& rc) {
  auto o = std::make_shared<CompareOpts>();
  auto* s = app.add_subcommand("compare", "Compare a candidate HDF5 (a kernel's outputs) with a golden");
  s->add_option("golden", o->golden, "Golden .h5")->required();
  s->add_option("candidate", o->candidate, "Candidate .h5 with /outputs/<name> datasets")->required();
  s->add_option("--output", o->outputs, "Compare only these outputs");
  s->add_option("--fixtures", common.fixtures_dir, "Fixtures directory (staleness check and tolerance policy)")->check(CLI::ExistingDirectory);
  s->add_flag("--no-fixture-check", o->no_fixture_check, "Skip regenerating inputs from the fixture (hashes still checked)");
  s->add_option("--profile", o->profile, "The kernel's precision profile (default: the candidate's precision_profile attribute, else strict)");
  s->add_option("--atol", o->atol, "Override the selected entry's absolute tolerance (bound_k and period stay)")
      ->check(kFiniteNonNegative);
  s->add_option("--rtol", o->rtol, "Override the selected entry's relative tolerance (bound_k and period stay)")
      ->check(kFiniteNonNegative);
  s->add_flag("--json", common.json, "JSON report on stdout");
  s->callback([o, &common, &rc] { rc = run_compare(*o, common); });
}

}  // namespace assay::cli
