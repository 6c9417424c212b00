// The run loop of `assay verify` / `assay sanitize` (run_verify); worker processes, planning, judging
// and repro bundles live in runner_process.cpp, runner_plan.cpp, runner_judge.cpp, runner_repro.cpp.
#include "verify/run/runner.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/io/golden.h"
#include "verify/run/kernel_case.h"
#include "verify/run/runner_internal.h"
#include "verify/run/sanitize.h"
#include "verify/io/stale.h"
#include "verify/judge/tolerance.h"

namespace assay {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using runner_detail::judge;
using runner_detail::safe_name;
using runner_detail::slurp;
using runner_detail::tail_text;

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("assay") : p.string();
}

}  // namespace

// ---- the run -----------------------------------------------------------------------------------------

RunReport run_verify(const VerifyOptions& o) {
  const auto t0 = Clock::now();
  RunReport rep;
  rep.tool = o.sanitizer_tool.empty() ? "verify" : "sanitize:" + o.sanitizer_tool;
  rep.golden_dir = o.golden_dir;
  rep.fixtures_dir = o.fixtures_dir;
  rep.fixture_checked = o.fixture_check;
  rep.plugins = o.plugins;
  if (!o.sanitizer_tool.empty() && !valid_sanitizer_tool(o.sanitizer_tool))
    throw InputError(fmt::format("--tool '{}': expected memcheck, racecheck, synccheck or initcheck", o.sanitizer_tool));
  const Shard shard = o.shard.empty() ? Shard{} : Shard::parse(o.shard);
  if (!o.shard.empty()) rep.shard = o.shard;
  if (o.runs < 1 || o.runs > 8) throw InputError("--runs must be 1..8");

  for (const auto& p : o.plugins) kernels::load_plugin(p);
  const auto ks = kernels::all_kernels();
  if (!o.kernel_globs.empty())
    for (const auto& kg : o.kernel_globs) {
      bool hit = false;
      for (const auto* k : ks) hit = hit || glob_match(kg, k->name);
      if (!hit) {
        std::string known;
        for (const auto* k : ks) known += (known.empty() ? "" : ", ") + k->name;
        throw InputError(fmt::format("--kernel '{}' matches no registered kernel (known: {})", kg, known.empty() ? "none" : known));
      }
    }
  if (ks.empty())
    rep.device_error = "no kernel is registered: this assay was built without CUDA (no nvcc at build time) and no --plugin was given";
  const auto goldens = find_goldens(o.golden_dir, o.ops);
  if (goldens.empty())
    throw InputError(fmt::format("{}: no goldens{}", o.golden_dir, o.ops.empty() ? "" : " for the ops selected with --op"));
  const auto items = plan_work(ks, goldens, o.kernel_globs, o.case_globs, shard);

  // Work directory: candidates, worker logs, repro bundles.
  std::string work = o.work_dir;
  if (work.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "assay-verify-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw InputError(fmt::format("mkdtemp {}: {}", tmpl, std::strerror(errno)));
    work = tmpl;
  } else {
    fs::create_directories(work);
  }
  const std::string exe = o.self_exe.empty() ? self_exe() : o.self_exe;

  // Device probe (never under the sanitizer): a worker that only describes the GPU.
  if (!items.empty()) {
    const std::string log = work + "/probe.log";
    const auto p = run_process({exe, "__worker", "--probe"}, 120, log);
    const std::string text = slurp(log);
    if (p.exited && p.exit_code == 0) {
      std::istringstream in(text);
      std::string line;
      while (std::getline(in, line))
        if (!line.empty() && line[0] == '{') {
          try {
            rep.device = nlohmann::json::parse(line);
          } catch (const nlohmann::json::exception&) {
          }
        }
    }
    if (!rep.device.is_object()) {
      rep.device = nullptr;
      std::string t = tail_text(text, 400, 3);
      std::replace(t.begin(), t.end(), '\n', ' ');
      rep.device_error = "no usable GPU: " + (p.timed_out ? std::string("the device probe hung")
                                                          : (t.empty() ? fmt::format("device probe exit {}", p.exit_code) : t));
    }
  }
  if (!o.sanitizer_tool.empty() && rep.device.is_object()) {
    const std::string log = work + "/sanitizer-version.log";
    run_process({o.sanitizer_exe, "--version"}, 60, log);
    std::string v = tail_text(slurp(log), 400, 4);
    // "NVIDIA (R) Compute Sanitizer ... Version 2025.3.1.0 ..." -> keep the Version line
    std::istringstream in(v);
    std::string line, keep;
    while (std::getline(in, line))
      if (line.find("ersion") != std::string::npos) keep = line;
    rep.sanitizer_version = keep.empty() ? "compute-sanitizer: version unknown (" + v + ")" : keep;
  }

  // The tolerance tables of the ops being verified only: another op's half-edited fixture must not
  // stop this run.
  TolerancePolicy policy;
  {
    std::set<std::string> ops;
    for (const auto& it : items) ops.insert(it.op);
    // No fixture for an op being judged: a usage error naming it, never a Stale case or a run judged
    // with the per-dtype defaults.
    policy = TolerancePolicy::for_ops(o.fixtures_dir, std::vector<std::string>(ops.begin(), ops.end()));
    // A kernel that declares a profile its op does not have is a usage error, said before any run.
    for (const auto& it : items)
      policy.require_profile(it.op, it.kernel->profile, fmt::format("kernel '{}' ({})", it.kernel->name, it.kernel->source));
  }
  std::map<std::string, std::pair<std::shared_ptr<Golden>, StaleResult>> cache;  // golden path -> (golden, stale)
  std::map<std::string, std::string> unreadable;
  const std::string repro_dir = work + "/repro";
  size_t idx = 0;
  for (const auto& it : items) {
    ++idx;
    const auto tc = Clock::now();
    CaseResult cr;
    cr.kernel = it.kernel->name;
    cr.kernel_source = it.kernel->source;
    cr.op = it.op;
    cr.case_name = it.case_name;
    cr.golden = it.golden;
    cr.deterministic = it.kernel->deterministic;
    cr.profile = it.kernel->profile;
    auto done = [&] {
      cr.wall_s = std::chrono::duration<double>(Clock::now() - tc).count();
      if (o.verbose) fmt::print(stderr, "[{}/{}] {:<12} {} {}/{}\n", idx, items.size(), verdict_name(cr.verdict), cr.kernel, cr.op, cr.case_name);
      rep.cases.push_back(std::move(cr));
    };
    auto finish = [&](Verdict v, std::string reason) {
      cr.verdict = v;
      cr.reason = std::move(reason);
      done();
    };
    // 1. golden + staleness (once per golden)
    if (!cache.count(it.golden) && !unreadable.count(it.golden)) {
      try {
        // No recipe input's values in the parent (it judges outputs; the worker reads the golden
        // whole): a golden with a 2^31-element recipe input is not held twice, once per golden cached.
        auto g = std::make_shared<Golden>(read_golden(it.golden, false));
        auto st = check_stale(*g, o.fixture_check ? o.fixtures_dir : "");
        cache[it.golden] = {g, st};
      } catch (const std::exception& e) {
        unreadable[it.golden] = e.what();
      }
    }
    if (unreadable.count(it.golden)) {
      finish(Verdict::Stale, "unreadable golden: " + unreadable[it.golden]);
      continue;
    }
    const auto& [g, st] = cache[it.golden];
    if (st.stale) {
      finish(Verdict::Stale, st.reason);
      continue;
    }
    // 2. can_implement
    try {
      const auto s = it.kernel->can_implement ? it.kernel->can_implement(kernel_case_of(*g)) : kernels::Support{};
      if (!s.ok) {
        finish(Verdict::NotSupported, s.reason);
        continue;
      }
    } catch (const std::exception& e) {
      finish(Verdict::Failed, std::string("can_implement threw: ") + e.what());
      continue;
    }
    // 3. a device?
    if (!rep.device.is_object()) {
      finish(Verdict::NotRun, rep.device_error);
      continue;
    }
    // 4. the worker
    const std::string dir = fmt::format("{}/{:04d}_{}__{}", work, idx, safe_name(it.kernel->name), safe_name(it.case_name));
    fs::create_directories(dir);
    std::vector<std::string> argv;
    if (!o.sanitizer_tool.empty()) argv = sanitizer_prefix(o.sanitizer_exe, o.sanitizer_tool);
    for (const auto& a : {exe, std::string("__worker"), std::string("--golden"), it.golden, std::string("--kernel"),
                          it.kernel->name, std::string("--out"), dir, std::string("--runs"), std::to_string(o.runs)})
      argv.push_back(a);
    for (const auto& p : o.plugins) argv.push_back("--plugin"), argv.push_back(p);
    const bool rel = o.relations && !it.kernel->relations.empty();
    if (rel) argv.push_back("--relations");
    const auto p = run_process(argv, o.timeout_s, dir + "/worker.log");
    const std::string log = slurp(dir + "/worker.log");
    auto w = classify_worker(p, slurp(dir + "/result.json"), log, o.timeout_s, o.sanitizer_tool);
    cr.kernel_ms = w.kernel_ms;
    cr.findings = w.findings;
    cr.sanitizer_summary = w.sanitizer_summary;
    if (w.verdict != Verdict::Passed) {
      cr.verdict = w.verdict;
      cr.reason = w.reason;
      cr.log_tail = tail_text(log, 3000, 20);
      done();
      continue;
    }
    // 5. compare + determinism
    try {
      cr.candidate = dir + "/candidate.h5";
      judge(cr, *g, *it.kernel, cr.candidate, o.runs, policy, repro_dir);
    } catch (const std::exception& e) {
      cr.verdict = Verdict::Failed;
      cr.reason = std::string("reading the worker's candidate: ") + e.what();
    }
    std::vector<CaseResult> rel_rows;
    if (rel) {
      try {
        rel_rows = runner_detail::judge_relations(cr, *g, *it.kernel, cr.candidate, policy);
      } catch (const std::exception& e) {
        CaseResult rr = cr;
        rr.case_name += "@relations";
        rr.relation = "relations";
        rr.tensors.clear();
        rr.findings.clear();
        rr.verdict = Verdict::Failed;
        rr.reason = std::string("judging the relations: ") + e.what();
        rel_rows.push_back(std::move(rr));
      }
    }
    done();
    for (auto& rr : rel_rows) {
      if (o.verbose) fmt::print(stderr, "       {:<12} {} {}/{}\n", verdict_name(rr.verdict), rr.kernel, rr.op, rr.case_name);
      rep.cases.push_back(std::move(rr));
    }
  }
  rep.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool keep = o.keep || !o.work_dir.empty() || rep.count(Verdict::Incorrect) || rep.count(Verdict::Failed) ||
                    rep.count(Verdict::Hung);
  if (!keep) {
    std::error_code ec;
    fs::remove_all(work, ec);
  } else {
    if (o.work_dir.empty()) fmt::print(stderr, "assay: worker logs, candidates and repro bundles kept in {}\n", work);
  }
  return rep;
}

}  // namespace assay
