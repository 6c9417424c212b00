// assay compare GOLDEN CANDIDATE: checks a candidate HDF5 (outputs under the golden's names, as
// /outputs/<name> or /<name>) against a golden. This is how Python, Triton, TileLang and CuTe
// kernels are checked: read the golden's /inputs, run the kernel, write the candidate, compare.
// assay compare --golden-dir D --candidate-dir C: every golden of D against C/<same path>
// (verify/run/compare_dir.h), with the reports of `assay verify` (--json-file, --junit, --html).
//
// The candidate is judged under a precision profile (verify/judge/tolerance.h): `--profile P`, else the
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

#include "assay_build.h"
#include "assay_git_rev.h"
#include "reference/core/check.h"
#include "verify/cli/cli.h"
#include "verify/judge/candidate.h"
#include "verify/judge/compare.h"
#include "verify/run/compare_dir.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/report/report.h"
#include "verify/report/report_html.h"
#include "verify/io/safe_files.h"
#include "verify/io/stale.h"

namespace assay::cli {
namespace {

struct CompareOpts {
  std::string golden, candidate;
  std::string golden_dir, candidate_dir, name, work_dir, relations_dir;
  std::vector<std::string> case_globs;
  std::vector<std::string> outputs;
  bool no_fixture_check = false;
  double atol = -1, rtol = -1;
  std::string profile;
  std::string json_file, junit_file, html_file;
  bool verbose = false;
};

// The report files (--json-file, --junit, --html), each written whole or not at all.
void write_reports(const RunReport& r, const CompareOpts& o) {
  if (!o.json_file.empty()) write_text_file(o.json_file, to_json(r).dump(2) + "\n");
  if (!o.junit_file.empty()) write_text_file(o.junit_file, to_junit(r));
  if (!o.html_file.empty()) write_text_file(o.html_file, to_html(r));
}

int run_compare_dirs(const CompareOpts& o, const Common& common) {
  if (!o.golden.empty() || !o.candidate.empty())
    throw InputError("compare: give GOLDEN CANDIDATE or --golden-dir with --candidate-dir, not both");
  if (!o.relations_dir.empty() && o.golden_dir.empty()) throw InputError("compare: --relations-dir needs --golden-dir and --candidate-dir");
  if (o.golden_dir.empty() || o.candidate_dir.empty())
    throw InputError(fmt::format("compare: --{} needs --{}", o.golden_dir.empty() ? "candidate-dir" : "golden-dir",
                                 o.golden_dir.empty() ? "golden-dir" : "candidate-dir"));
  CompareDirOptions d;
  d.golden_dir = o.golden_dir;
  d.candidate_dir = o.candidate_dir;
  d.case_globs = o.case_globs;
  d.fixtures_dir = fixtures_for(common, o.golden_dir);
  d.fixture_check = !o.no_fixture_check;
  d.work_dir = o.work_dir;
  d.name = o.name;
  d.relations_dir = o.relations_dir;
  d.how = CandidateJudging{o.profile, o.outputs, o.atol, o.rtol};
  RunReport r = compare_dirs(d);
  r.assay_version = ASSAY_VERSION;
  r.git_rev = ASSAY_GIT_REV;
  if (common.json) std::cout << to_json(r).dump(2) << "\n";
  else print_console(r, o.verbose);
  write_reports(r, o);
  return r.exit_code();
}

// The report paths, checked before any work: each must be a regular file or new, and none of them
// an input (the golden or the candidate) or another report path.
void check_report_paths(const CompareOpts& o) {
  for (const auto& in : {o.golden, o.candidate}) if (!in.empty()) note_input(in);
  const std::pair<const std::string*, const char*> outs[] = {{&o.json_file, "--json-file"}, {&o.junit_file, "--junit"},
                                                             {&o.html_file, "--html"}};
  for (const auto& [p, opt] : outs) {
    if (p->empty()) continue;
    check_output_path(*p, opt);
    for (const auto& [q, opt2] : outs)
      if (q != p && !q->empty() && *q == *p) throw InputError(fmt::format("{} and {}: the same file {}", opt, opt2, *p));
  }
}

int run_compare(const CompareOpts& o, const Common& common) {
  check_report_paths(o);
  if (!o.golden_dir.empty() || !o.candidate_dir.empty()) return run_compare_dirs(o, common);
  if (o.golden.empty() || o.candidate.empty())
    throw InputError("compare: give GOLDEN CANDIDATE, or --golden-dir DIR --candidate-dir DIR");
  if (!o.case_globs.empty() || !o.name.empty())
    throw InputError(fmt::format("compare: {} applies to --golden-dir only", o.case_globs.empty() ? "--name" : "--case"));
  const Golden g = read_golden(o.golden, false);  // judges outputs: recipe inputs hashed, not held
  const std::string fixtures_dir = fixtures_for(common, o.golden, g.prov.op);
  const auto stale = check_stale(g, o.no_fixture_check ? "" : fixtures_dir);
  nlohmann::json js{{"golden", o.golden}, {"candidate", o.candidate}, {"op", g.prov.op}, {"case", g.prov.case_name},
                    {"fixture_checked", !o.no_fixture_check}};
  RunReport rep;
  rep.tool = "compare";
  rep.assay_version = ASSAY_VERSION;
  rep.git_rev = ASSAY_GIT_REV;
  rep.golden_dir = std::filesystem::path(o.golden).parent_path().string();
  rep.fixtures_dir = fixtures_dir;
  rep.fixture_checked = !o.no_fixture_check;
  if (stale.stale) {
    js["verdict"] = verdict_name(Verdict::Stale);
    js["reason"] = stale.reason;
    if (common.json) std::cout << js.dump(2) << "\n";
    else fmt::print("Stale      {}/{}: {}\n", printable(g.prov.op), printable(g.prov.case_name), printable(stale.reason));
    CaseResult cr;
    cr.kernel = o.candidate;
    cr.op = g.prov.op;
    cr.case_name = g.prov.case_name;
    cr.golden = o.golden;
    cr.verdict = Verdict::Stale;
    cr.reason = stale.reason;
    rep.cases.push_back(cr);
    write_reports(rep, o);
    return exit_code(Verdict::Stale);
  }
  // Only this op's policy entries: another op's fixture file cannot break this comparison.
  const TolerancePolicy policy = TolerancePolicy::for_ops(fixtures_dir, {g.prov.op});
  // The candidate comes from anywhere: judge it once in a child first (h5::probe_in_child).
  const CandidateJudging how{o.profile, o.outputs, o.atol, o.rtol};
  h5::probe_in_child(o.candidate, [&] { (void)judge_candidate(g, policy, h5::File::open_read(o.candidate), how); });
  const auto cand = h5::File::open_read(o.candidate);
  const auto res = judge_candidate(g, policy, cand, how);
  const auto& profile = res.profile;
  const auto& reports = res.reports;
  const Verdict verdict = res.verdict;
  js["profile"] = profile;
  // The report files, and a repro bundle of an Incorrect case when --work-dir is given.
  rep.cases.push_back(case_result(g, res, o.candidate, o.golden, o.work_dir));
  if (common.json) {
    js["verdict"] = verdict_name(verdict);
    for (const auto& r : reports) js["tensors"].push_back(tensor_json(r));
    js["notes"] = res.notes;
    if (!rep.cases.back().repro.empty()) js["repro"] = rep.cases.back().repro;
    std::cout << js.dump(2) << "\n";
  } else {
    // Names, attributes and notes come from the files: printed through printable().
    fmt::print("{}/{}: golden {} vs candidate {} (profile {}){}\n", printable(g.prov.op), printable(g.prov.case_name),
               printable(o.golden), printable(o.candidate), printable(profile),
               o.no_fixture_check ? " (fixture not checked: --no-fixture-check)" : "");
    for (const auto& r : reports)
      fmt::print("  {}\n    tolerance {}: {}\n", printable(r.summary()), printable(r.tol.source), printable(r.tol.why));
    for (const auto& n : res.notes) fmt::print("  {}\n", printable(n));
    for (size_t i = res.notes.size(); i < rep.cases.back().findings.size(); ++i)
      fmt::print("  {}\n", printable(rep.cases.back().findings[i]));
    if (!rep.cases.back().repro.empty()) fmt::print("  repro bundle: {}\n", printable(rep.cases.back().repro));
    fmt::print("{} {}/{}\n", verdict_name(verdict), printable(g.prov.op), printable(g.prov.case_name));
  }
  write_reports(rep, o);
  return exit_code(verdict);
}

}  // namespace

void add_compare(CLI::App& app, Common& common, int& rc) {
  auto o = std::make_shared<CompareOpts>();
  auto* s = app.add_subcommand("compare", "Compare candidate HDF5 files (a kernel's outputs) with goldens");
  s->add_option("golden", o->golden, "Golden .h5");
  s->add_option("candidate", o->candidate, "Candidate .h5 with /outputs/<name> datasets");
  s->add_option("--golden-dir", o->golden_dir, "Every golden under this directory (recursive) ...");
  s->add_option("--candidate-dir", o->candidate_dir,
                "... against the candidate at the same relative path here (<case>.error: the producer failed)");
  // One value per flag (repeat the flag), so that the positionals after it stay positionals.
  s->add_option("--case", o->case_globs, "With --golden-dir: only cases whose name matches (glob; repeatable)")
      ->type_size(1)->allow_extra_args(false);
  s->add_option("--relations-dir", o->relations_dir,
                "With --golden-dir: relation candidates <op>/<case>@<check>.h5 here (assay.check(..., relations=True)), "
                "each judged against its case's candidate: one more row each")
      ->check(CLI::ExistingDirectory);
  s->add_option("--name", o->name, "With --golden-dir: the name of the kernel in the reports (default: the candidate directory's)");
  s->add_option("--work-dir", o->work_dir,
                "Repro bundles of Incorrect cases (default with --golden-dir: <candidate-dir>/../repro; single pair: none)");
  s->add_option("--output", o->outputs, "Compare only this output (repeatable)")
      ->type_size(1)->allow_extra_args(false);
  s->add_option("--fixtures", common.fixtures_dir, "Fixtures directory (staleness check and tolerance policy)")->check(CLI::ExistingDirectory);
  s->add_flag("--no-fixture-check", o->no_fixture_check, "Skip regenerating inputs from the fixture (hashes still checked)");
  s->add_option("--profile", o->profile, "The kernel's precision profile (default: the candidate's precision_profile attribute, else strict)");
  s->add_option("--atol", o->atol, "Override the selected entry's absolute tolerance (bound_k and period stay)")
      ->check(kFiniteNonNegative);
  s->add_option("--rtol", o->rtol, "Override the selected entry's relative tolerance (bound_k and period stay)")
      ->check(kFiniteNonNegative);
  s->add_flag("--json", common.json, "JSON report on stdout");
  s->add_option("--json-file", o->json_file, "Also write the JSON report (the format of assay verify) to this file");
  s->add_option("--junit", o->junit_file, "Also write a JUnit XML report to this file");
  s->add_option("--html", o->html_file, "Also write a self-contained HTML report with error plots to this file");
  s->add_flag("-v,--verbose", o->verbose, "With --golden-dir: every tensor's metrics");
  s->callback([o, &common, &rc] { rc = run_compare(*o, common); });
}

}  // namespace assay::cli
