#include "verify/run/compare_dir.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/io/h5.h"
#include "verify/run/runner.h"
#include "verify/run/runner_internal.h"
#include "verify/io/safe_files.h"
#include "verify/io/stale.h"
#include "verify/run/relations.h"

namespace assay {
namespace fs = std::filesystem;
constexpr size_t kErrorCap = 64 * 1024;  // bytes of a <case>.error file that are read

std::string incorrect_reason(const std::vector<TensorReport>& tensors) {
  for (const auto& t : tensors)
    if (t.verdict != Verdict::Passed)
      return fmt::format("'{}': {} mismatches{}{}{}", t.name, t.mismatches, t.first_bad >= 0 ? " first " + t.first_bad_index : std::string(),
                         t.never_pass.empty() ? std::string() : " NEVER-PASS: " + t.never_pass.front(),
                         t.hint.empty() ? std::string() : "; " + t.hint);
  return "";
}

CaseResult case_result(const Golden& g, const CandidateResult& res, const std::string& kernel, const std::string& golden_path,
                       const std::string& repro_dir) {
  CaseResult cr;
  cr.kernel = kernel;
  cr.op = g.prov.op;
  cr.case_name = g.prov.case_name;
  cr.golden = golden_path;
  cr.profile = res.profile;
  cr.tensors = res.reports;
  cr.verdict = res.verdict;
  cr.findings = res.notes;
  if (res.verdict == Verdict::Passed) {
    const auto ni = std::count_if(res.reports.begin(), res.reports.end(), [](const TensorReport& t) { return t.intermediate; });
    cr.reason = fmt::format("{} output(s){} within tolerance", static_cast<int64_t>(res.reports.size()) - ni,
                            ni ? fmt::format(" and {} intermediate(s)", ni) : std::string());
    return cr;
  }
  cr.reason = incorrect_reason(res.reports);
  if (repro_dir.empty()) return cr;
  std::vector<std::vector<double>> actual;
  std::vector<Tolerance> tols;
  Golden sel = g;  // the bundle holds the compared outputs only (--output)
  sel.outputs.clear();
  for (size_t k = 0; k < res.reports.size(); ++k) {
    if (res.reports[k].intermediate) continue;  // `assay bisect` writes the bundle that walks those
    sel.outputs.push_back(*g.output(res.reports[k].name));
    actual.push_back(res.actual[k]);
    tols.push_back(res.reports[k].tol);
  }
  cr.repro = (fs::path(repro_dir) / (runner_detail::safe_name(kernel) + "__" + runner_detail::safe_name(g.prov.op) + "__" +
                                     runner_detail::safe_name(g.prov.case_name) + ".h5"))
                 .string();
  try {
    std::vector<std::string> notes;
    runner_detail::write_repro(cr.repro, sel, kernel, actual, tols, notes);
    for (auto& n : notes) cr.findings.push_back(n);
  } catch (const std::exception& e) {
    cr.findings.push_back(std::string("repro bundle not written: ") + e.what());
    cr.repro.clear();
  }
  return cr;
}

RunReport compare_dirs(const CompareDirOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (!fs::is_directory(o.golden_dir)) throw InputError(fmt::format("--golden-dir {}: not a directory", o.golden_dir));
  if (!fs::is_directory(o.candidate_dir)) throw InputError(fmt::format("--candidate-dir {}: not a directory", o.candidate_dir));
  RunReport rep;
  rep.tool = "compare";
  rep.golden_dir = o.golden_dir;
  rep.fixtures_dir = o.fixtures_dir;
  rep.fixture_checked = o.fixture_check;
  auto cp = fs::path(o.candidate_dir).lexically_normal();
  if (cp.filename().empty()) cp = cp.parent_path();
  const std::string kernel = !o.name.empty() ? o.name : cp.filename().string();
  const std::string repro_dir = !o.work_dir.empty() ? o.work_dir : (fs::path(o.candidate_dir) / ".." / "repro").lexically_normal().string();

  std::vector<fs::path> goldens;
  for (auto it = fs::recursive_directory_iterator(o.golden_dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it)
    if (std::error_code fe; it->is_regular_file(fe) && it->path().extension() == ".h5") goldens.push_back(it->path());
  std::sort(goldens.begin(), goldens.end());
  std::map<std::string, std::shared_ptr<TolerancePolicy>> policies;  // per op
  for (const auto& gp : goldens) {
    const auto rel = fs::relative(gp, o.golden_dir);
    const std::string case_name = gp.stem().string();
    if (!o.case_globs.empty() &&
        std::none_of(o.case_globs.begin(), o.case_globs.end(), [&](const std::string& g) { return glob_match(g, case_name); }))
      continue;
    const auto tc = Clock::now();
    CaseResult cr;
    cr.kernel = kernel;
    cr.kernel_source = o.candidate_dir;
    cr.op = rel.has_parent_path() ? rel.parent_path().filename().string() : gp.parent_path().filename().string();
    cr.case_name = case_name;
    cr.golden = gp.string();
    cr.profile = o.how.profile.empty() ? std::string(kStrictProfile) : o.how.profile;
    auto done = [&] {
      cr.wall_s = std::chrono::duration<double>(Clock::now() - tc).count();
      rep.cases.push_back(std::move(cr));
    };
    auto finish = [&](Verdict v, std::string reason) {
      cr.verdict = v;
      cr.reason = std::move(reason);
      done();
    };
    std::unique_ptr<Golden> g;
    try {
      g = std::make_unique<Golden>(read_golden(gp.string(), false));  // judges outputs only
      cr.op = g->prov.op;
      cr.case_name = g->prov.case_name;
    } catch (const std::exception& e) {
      finish(Verdict::Stale, std::string("unreadable golden: ") + e.what());
      continue;
    }
    // No fixture for this golden's op: a usage error naming where it looked, never a Stale case or a
    // candidate judged with the per-dtype defaults.
    if (const auto f = fs::path(o.fixtures_dir) / (g->prov.op + ".toml"); !o.fixtures_dir.empty() && !fs::exists(f))
      throw InputError(fmt::format("{}: no fixture for op '{}' of {} (the fixtures found for {}); give --fixtures DIR or set "
                                   "$ASSAY_FIXTURES",
                                   f.string(), g->prov.op, gp.string(), o.golden_dir));
    try {
      const auto st = check_stale(*g, o.fixture_check ? o.fixtures_dir : "");
      if (st.stale) {
        finish(Verdict::Stale, st.reason);
        continue;
      }
    } catch (const std::exception& e) {
      finish(Verdict::Stale, std::string("unreadable golden: ") + e.what());
      continue;
    }
    const fs::path cand = fs::path(o.candidate_dir) / rel;
    fs::path err = cand;
    err.replace_extension(".error");
    // The candidate directory is written by the producer (assay.check, a user's script): its files
    // are looked at without following links, and an .error file is read as a regular file of at
    // most kErrorCap bytes (a FIFO, device, link or huge file is the producer's failure, named).
    std::error_code ec;
    const auto est = fs::symlink_status(err, ec);
    if (!ec && fs::exists(est)) {
      cr.verdict = Verdict::Failed;
      cr.findings.push_back("error file: " + err.string());
      try {
        const auto et = read_small_text(err.string(), kErrorCap);
        const std::string& text = et.text;
        const std::string first = text.substr(0, text.find('\n'));
        // "Hung: ..." is what assay.check writes for a kernel killed at its --timeout;
        // "NotSupported: why" for a kernel that declined the case (raise assay.NotSupported).
        if (first.rfind("Hung:", 0) == 0) cr.verdict = Verdict::Hung;
        if (first.rfind("NotSupported:", 0) == 0) {
          cr.verdict = Verdict::NotSupported;
          const size_t b = first.find_first_not_of(' ', 13);
          cr.reason = b == std::string::npos ? std::string("declined by the kernel") : first.substr(b);
          cr.findings.clear();
          done();
          continue;
        }
        cr.reason = "the candidate's producer failed: " + (text.empty() ? std::string("(empty ") + err.string() + ")" : first);
        cr.log_tail = runner_detail::tail_text(text, 6000, 40);
        if (et.truncated) cr.findings.push_back(fmt::format("error file: only its first {} bytes were read", kErrorCap));
      } catch (const InputError& e) {
        cr.reason = std::string("the candidate's producer failed; its error file is unreadable: ") + e.what();
      }
      done();
      continue;
    }
    // A <case>.error name over NAME_MAX cannot exist (the golden's own name fits): no error file.
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::filename_too_long) {  // a loop in the path
      finish(Verdict::Failed, fmt::format("cannot look for the candidate's error file {}: {}", err.string(), ec.message()));
      continue;
    }
    const auto cst = fs::symlink_status(cand, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      finish(Verdict::Failed, fmt::format("cannot look for the candidate {}: {}", cand.string(), ec.message()));
      continue;
    }
    if (!fs::exists(cst)) {
      finish(Verdict::NotRun, "no candidate " + cand.string());
      continue;
    }
    auto& pol = policies[g->prov.op];
    if (!pol) {
      pol = std::make_shared<TolerancePolicy>(TolerancePolicy::for_ops(o.fixtures_dir, {g->prov.op}));
      // A profile the op does not declare is a usage error of the whole run, not one case's.
      if (!o.how.profile.empty()) pol->require_profile(g->prov.op, o.how.profile, "--profile");
    }
    bool base_read = false;
    try {
      h5::probe_in_child(cand.string(), [&] { (void)judge_candidate(*g, *pol, h5::File::open_read(cand.string()), o.how); });
      const auto res = judge_candidate(*g, *pol, h5::File::open_read(cand.string()), o.how);
      auto r = case_result(*g, res, kernel, gp.string(), repro_dir);
      r.kernel_source = cr.kernel_source;
      cr = std::move(r);
      base_read = true;
    } catch (const std::exception& e) {
      cr.verdict = Verdict::Failed;
      cr.reason = std::string("bad candidate: ") + e.what();
    }
    const CaseResult base_row = cr;
    done();
    // The case's relation candidates (assay.check(..., relations=True)), in name order.
    const fs::path rdir = o.relations_dir.empty() ? fs::path() : fs::path(o.relations_dir) / rel.parent_path();
    std::vector<fs::path> rels;
    if (!o.relations_dir.empty() && fs::is_directory(rdir, ec))
      for (const auto& e : fs::directory_iterator(rdir, fs::directory_options::skip_permission_denied, ec)) {
        const std::string fn = e.path().filename().string();
        if (e.path().extension() == ".h5" && fn.rfind(case_name + "@", 0) == 0) rels.push_back(e.path());
      }
    std::sort(rels.begin(), rels.end());
    for (const auto& rp : rels) {
      CaseResult rr;
      rr.kernel = base_row.kernel;
      rr.kernel_source = base_row.kernel_source;
      rr.op = base_row.op;
      rr.golden = base_row.golden;
      rr.profile = base_row.profile;
      rr.case_name = rp.stem().string();
      rr.relation = rr.case_name.substr(case_name.size() + 1);
      rr.candidate = rp.string();
      const auto tr = Clock::now();
      if (!base_read) {
        rr.verdict = Verdict::NotRun;
        rr.reason = fmt::format("relation {}: the case's own candidate could not be judged", rr.relation);
      } else {
        try {
          const auto rst = fs::symlink_status(rp, ec);
          if (!fs::is_regular_file(rst)) throw InputError(fmt::format("{}: not a regular file", rp.string()));
          h5::probe_in_child(rp.string(), [&] { (void)h5::File::open_read(rp.string()); });
          const auto rf = h5::File::open_read(rp.string());
          const auto v = relations::judge_relation_file(*g, *pol, rr.profile, h5::File::open_read(cand.string()), rf);
          rr.verdict = v.verdict;
          rr.reason = v.reason;
        } catch (const std::exception& e) {
          rr.verdict = Verdict::Failed;
          rr.reason = std::string("bad relation candidate: ") + e.what();
        }
      }
      rr.wall_s = std::chrono::duration<double>(Clock::now() - tr).count();
      rep.cases.push_back(std::move(rr));
    }
  }
  // A candidate no golden asked for is most often a misspelt case name: say so (it is not judged).
  for (auto it = fs::recursive_directory_iterator(o.candidate_dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    std::error_code fe;
    if (!it->is_regular_file(fe) || (it->path().extension() != ".h5" && it->path().extension() != ".error")) continue;
    auto g = fs::path(o.golden_dir) / fs::relative(it->path(), o.candidate_dir, fe);
    g.replace_extension(".h5");
    if (!fs::exists(g, fe)) rep.notes.push_back(fmt::format("{}: no golden {} for it: not judged", it->path().string(), g.string()));
  }
  if (rep.cases.empty())
    throw InputError(fmt::format("--golden-dir {}: no golden{}", o.golden_dir, o.case_globs.empty() ? "" : " matches --case"));
  rep.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return rep;
}

}  // namespace assay
