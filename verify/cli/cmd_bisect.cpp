// assay bisect: where a numerical regression starts.
//   assay bisect GOLDEN CANDIDATE                 where one candidate first goes wrong: the first
//                                                 bad position (and chunk) of each output
//                                                 (verify/bisect/bisect.h, cmd_bisect_pair.cpp)
//   assay bisect --kernel K --case C [--plugin P]  the same for a kernel run on the GPU
//                                                 (cmd_bisect_pair.cpp)
//   assay bisect --git GOOD BAD [options] -- BUILD_CMD...
//                                                 the first bad commit (verify/bisect/bisect_git.h)
#include <signal.h>

#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "assay_build.h"
#include "reference/core/check.h"
#include "verify/bisect/bisect_git.h"
#include "verify/cli/cli.h"
#include "verify/judge/verdict.h"

namespace assay::cli {
namespace {

struct BisectCli {
  bool git = false;
  std::vector<std::string> args;  // GOLDEN CANDIDATE, or GOOD BAD BUILD_CMD...
  GitBisectOptions g;
  BisectPairCli pair;
};

int run_git(BisectCli& b, const Common& common) {
  if (b.args.size() < 2) throw InputError("bisect --git: give GOOD BAD [-- BUILD_CMD...]");
  auto& o = b.g;
  o.good = b.args[0];
  o.bad = b.args[1];
  o.build_cmd.insert(o.build_cmd.begin(), b.args.begin() + 2, b.args.end());
  o.fixtures_dir = fixtures_for(common, o.golden_dir);
  if (o.assay_exe.empty()) o.assay_exe = "/proc/self/exe";
  const auto r = run_git_bisect(o);
  if (r.interrupted) {
    std::cerr << fmt::format("assay: bisect interrupted ({}); the repository is back as found; logs in {}\n",
                             r.interrupted == SIGINT ? "SIGINT" : r.interrupted == SIGTERM ? "SIGTERM" : "signal " + std::to_string(r.interrupted),
                             r.work_dir);
    return 128 + r.interrupted;
  }
  if (o.verbose && !r.log.empty()) std::cerr << "git bisect log:\n" << r.log << std::flush;
  if (!r.found) {
    fmt::print("bisect: no first bad commit: {}\n", r.message);
    if (!r.skipped.empty()) fmt::print("skipped (did not build or could not be judged): {}\n", fmt::join(r.skipped, " "));
    fmt::print("logs: {}\n", r.work_dir);
    return kExitCouldNotRun;
  }
  fmt::print("first bad commit: {} {}\n", r.first_bad, r.subject);
  for (const auto& f : r.failing) fmt::print("  {}\n", f);
  if (!r.skipped.empty()) fmt::print("skipped (did not build or could not be judged): {}\n", fmt::join(r.skipped, " "));
  fmt::print("logs: {}\n", r.work_dir);
  return kExitFail;
}

}  // namespace

void add_bisect(CLI::App& app, Common& common, int& rc) {
  auto b = std::make_shared<BisectCli>();
  auto* s = app.add_subcommand("bisect", "Find where a numerical regression starts: first bad chunk/step, or first bad commit (--git)");
  s->add_flag("--git", b->git, "Bisect commits: GOOD BAD [-- BUILD_CMD...] with git bisect run");
  s->add_option("args", b->args, "GOLDEN CANDIDATE, or with --git: GOOD BAD -- BUILD_CMD...");
  // Hidden, never filled: a positional still expecting a value keeps CLI11 (2.x) from handing
  // everything after `--` back to the main app; BUILD_CMD lands in `args` after GOOD BAD.
  s->add_option("build_cmd", b->g.build_cmd, "")->expected(1)->group("");
  s->add_option("--repo", b->g.repo, "With --git: the repository (default: .)");
  s->add_option("--kernel", b->g.kernels, "With --git: judge this kernel with assay verify (repeatable)")->type_size(1)->allow_extra_args(false);
  s->add_option("--plugin", b->g.plugins, "With --git: a plugin .so built by BUILD_CMD (relative to the repository)")->type_size(1)->allow_extra_args(false);
  s->add_option("--candidate-cmd", b->g.candidate_cmd, "With --git: writes a candidate: \"CMD ... {golden} {out}\", judged by assay compare");
  s->add_option("--case", b->g.cases, "Only cases whose name matches (glob; repeatable)")->type_size(1)->allow_extra_args(false);
  s->add_option("--golden", b->g.golden_dir, "With --git: golden directory (default: the committed L0 goldens)");
  s->add_option("--fixtures", common.fixtures_dir, "Fixtures directory (staleness check and tolerance policy)")->check(CLI::ExistingDirectory);
  s->add_option("--timeout", b->g.timeout_s, "With --git: seconds per commit for build and judging")->check(kFinitePositive);
  s->add_option("--work-dir", b->g.work_dir, "Logs, scripts and candidates (default: a temp directory)");
  s->add_flag("-v,--verbose", b->g.verbose, "Progress on stderr");
  s->add_option("--profile", b->pair.profile, "GOLDEN CANDIDATE: the kernel's precision profile (as compare)");
  s->add_option("--output", b->pair.outputs, "GOLDEN CANDIDATE: only this output (repeatable)")->type_size(1)->allow_extra_args(false);
  s->add_flag("--no-fixture-check", b->pair.no_fixture_check, "GOLDEN CANDIDATE: skip regenerating inputs from the fixture");
  s->add_flag("--json", common.json, "GOLDEN CANDIDATE: JSON on stdout");
  s->add_option("--repro", b->pair.repro, "GOLDEN CANDIDATE: repro bundle prefix (default <candidate>.bisect)");
  s->add_flag("--no-repro", b->pair.no_repro, "GOLDEN CANDIDATE: write no repro bundle");
  s->callback([b, &common, &rc] {
    if (b->git) {
      if (!b->pair.profile.empty() || !b->pair.outputs.empty() || common.json)
        throw InputError("bisect --git: --profile, --output and --json apply to bisect GOLDEN CANDIDATE");
      if (b->g.golden_dir.empty()) b->g.golden_dir = default_golden_dir("L0");
      rc = run_git(*b, common);
      return;
    }
    if (!b->g.kernels.empty() && b->args.empty()) {  // --kernel K --case C: run it on the GPU, then bisect
      if (b->g.kernels.size() != 1 || b->g.cases.size() != 1 || !b->g.candidate_cmd.empty())
        throw InputError("bisect --kernel K --case C: one kernel and one case (glob), no --candidate-cmd");
      if (b->g.golden_dir.empty()) b->g.golden_dir = default_golden_dir("L0");
      rc = run_bisect_kernel(b->g.kernels[0], b->g.cases[0], b->g.plugins, b->g.golden_dir, b->g.work_dir, b->g.timeout_s,
                             b->pair, common);
      return;
    }
    if (!b->g.kernels.empty() || !b->g.plugins.empty() || !b->g.candidate_cmd.empty() || !b->g.cases.empty())
      throw InputError("bisect GOLDEN CANDIDATE: --kernel, --plugin, --candidate-cmd and --case apply to bisect --git and bisect --kernel K --case C");
    if (b->args.size() != 2)
      throw InputError("bisect: give GOLDEN CANDIDATE, --kernel K --case C, or --git GOOD BAD -- BUILD_CMD...");
    rc = run_bisect_pair(b->args[0], b->args[1], b->pair, common);
  });
}

}  // namespace assay::cli
