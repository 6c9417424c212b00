// `assay bisect --git` (verify/bisect/bisect_git.h): checks the options and the repository, writes
// the scripts (git_script.h), drives `git bisect run` (git_repo.h, git_supervisor.h) and reads the
// result back (git_progress.h).
//
// The work directory holds
//   bisect.sh, step.sh  the generated scripts (git_script.h),
//   progress       one line per event, read back for -v and for the messages (git_progress.h),
//   commits/<hash>/ build.log, judge.log, report.json, candidates/, repro bundles,
//   bin/assay      a copy of the judging binary (a BUILD_CMD that rebuilds assay itself cannot change the judge),
//   git.log        the output of every git command.
// The repository is put back with `git bisect reset <original>` on every way out; SIGINT / SIGTERM are
// forwarded to the running child's process group, every process left below us is killed (we are a
// child subreaper while bisecting), then the repository is reset.
#include "verify/bisect/bisect_git.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/core/check.h"
#include "verify/bisect/git_progress.h"
#include "verify/bisect/git_repo.h"
#include "verify/bisect/git_script.h"
#include "verify/bisect/git_supervisor.h"

namespace assay {
namespace fs = std::filesystem;
using namespace git_bisect;

namespace {
// The file that marks a --work-dir as made by assay bisect (only then are its contents replaced).
constexpr const char* kWorkMarker = ".assay-bisect";
}  // namespace

GitBisectResult run_git_bisect(const GitBisectOptions& o) {
  // ---- options ----
  if (o.good.empty() || o.bad.empty()) throw InputError("bisect --git: give GOOD and BAD commits");
  const bool compare_mode = !o.candidate_cmd.empty();
  if (compare_mode == !o.kernels.empty())
    throw InputError(o.kernels.empty() ? "bisect --git: give --kernel K (judged by assay verify) or --candidate-cmd \"CMD {golden} {out}\" (judged by assay compare)"
                                       : "bisect --git: --kernel and --candidate-cmd exclude each other");
  if (compare_mode && o.candidate_cmd.find("{out}") == std::string::npos)
    throw InputError(fmt::format("--candidate-cmd '{}': has no {{out}} (where the candidate is written)", o.candidate_cmd));
  if (!(std::isfinite(o.timeout_s) && o.timeout_s > 0)) throw InputError("--timeout: must be a finite number > 0");
  if (o.golden_dir.empty() || !fs::is_directory(o.golden_dir)) throw InputError(fmt::format("--golden {}: not a directory", o.golden_dir));
  if (!o.fixtures_dir.empty() && !fs::is_directory(o.fixtures_dir))
    throw InputError(fmt::format("--fixtures {}: not a directory", o.fixtures_dir));
  if (!fs::is_directory(o.repo)) throw InputError(fmt::format("--repo {}: not a directory", o.repo));
  const std::string golden = fs::canonical(o.golden_dir).string();
  const std::string fixtures = o.fixtures_dir.empty() ? "" : fs::canonical(o.fixtures_dir).string();
  std::vector<fs::path> goldens;
  if (compare_mode) {
    goldens = select_goldens(golden, o.cases);
    if (goldens.empty())
      throw InputError(fmt::format("--golden {}: no golden{}", o.golden_dir, o.cases.empty() ? "" : " matches --case"));
  }
  const std::string assay_src = abs_assay(o.assay_exe);
  if (::access(assay_src.c_str(), X_OK) != 0) throw InputError(fmt::format("assay executable {}: not executable", assay_src));

  // ---- work dir ----
  bool made_temp = false;
  fs::path work;
  if (o.work_dir.empty()) {
    std::string t = (fs::temp_directory_path() / "assay-bisect-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw InputError(fmt::format("cannot create a temp directory: {}", std::strerror(errno)));
    work = t;
    made_temp = true;
  } else {
    // Nothing is created or deleted in a --work-dir before the checks below: it must be a new or
    // empty directory, or one an earlier bisect made (its marker file), and outside the work tree
    // (git checks out every commit there).
    std::error_code ec;
    const auto st = fs::symlink_status(o.work_dir, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st)) throw InputError(fmt::format("--work-dir {}: exists and is not a directory", o.work_dir));
      const bool empty = fs::is_empty(o.work_dir, ec);
      if (!empty && !fs::exists(fs::path(o.work_dir) / kWorkMarker))
        throw InputError(fmt::format("--work-dir {}: not empty and not made by assay bisect (no {}): refused (it would be "
                                     "overwritten); give a new directory",
                                     o.work_dir, kWorkMarker));
      work = fs::canonical(o.work_dir);
    } else {
      work = fs::weakly_canonical(fs::absolute(o.work_dir));
    }
  }
  const fs::path commits = work / "commits", progress_file = work / "progress";

  SignalScope signals;
  GitBisectResult res;
  res.work_dir = work.string();

  // ---- the repository ----
  // Until every check passed, git's own output goes to a private temp dir, not the --work-dir.
  struct CheckDir {
    fs::path p;
    ~CheckDir() {
      std::error_code ec;
      if (!p.empty()) fs::remove_all(p, ec);
    }
  } check_dir;
  if (!made_temp) {
    std::string t = (fs::temp_directory_path() / "assay-bisect-check-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw InputError(fmt::format("cannot create a temp directory: {}", std::strerror(errno)));
    check_dir.p = t;
  }
  const std::string check_log = made_temp ? work.string() : check_dir.p.string();
  std::string top;
  {
    Git pre(fs::absolute(o.repo).string(), check_log);
    auto r = pre.run({"rev-parse", "--show-toplevel"});
    if (r.code != 0) {
      if (made_temp) fs::remove_all(work);
      throw InputError(fmt::format("--repo {}: not a git repository", o.repo));
    }
    top = trim(r.out);
  }
  // The work dir must not lie inside the work tree that git checks out at every commit.
  if (!made_temp) {
    const auto rel = fs::path(work).lexically_relative(fs::weakly_canonical(top));
    if (!rel.empty() && *rel.begin() != "..")
      throw InputError(fmt::format("--work-dir {}: inside the repository {} (git checks out every commit there); give a "
                                   "directory outside it",
                                   o.work_dir, top));
  }
  Git git(top, check_log);
  auto refuse = [&](const std::string& why) {
    if (made_temp) fs::remove_all(work);
    throw InputError(fmt::format("--repo {}: {}", top, why));
  };
  std::string orig_branch, orig_hash;  // the branch (short name) HEAD was on, or "" when detached
  try {
    if (!trim(git.must({"status", "--porcelain", "--untracked-files=no"}, "git status")).empty())
      refuse("the working tree has uncommitted changes (commit or stash them first)");
    const auto start_file = git.must({"rev-parse", "--git-path", "BISECT_START"}, "git rev-parse");
    if (fs::exists(fs::path(top) / start_file))
      refuse("a bisect is already in progress (git bisect reset ends it)");
    auto resolve = [&](const std::string& rev, const char* what) {
      auto r = git.run({"rev-parse", "--verify", "--quiet", rev + "^{commit}"});
      if (r.code != 0) refuse(fmt::format("{} '{}' is not a commit", what, rev));
      return trim(r.out);
    };
    res.first_bad.clear();
    const std::string good = resolve(o.good, "GOOD"), bad = resolve(o.bad, "BAD");
    if (git.run({"merge-base", "--is-ancestor", good, bad}).code != 0)
      refuse(fmt::format("GOOD {} is not an ancestor of BAD {}", o.good, o.bad));
    auto br = git.run({"symbolic-ref", "-q", "--short", "HEAD"});
    orig_branch = br.code == 0 ? trim(br.out) : "";
    orig_hash = git.must({"rev-parse", "HEAD"}, "git rev-parse HEAD");

    // ---- the work dir, now that every check passed ----
    fs::create_directories(work);
    git = Git(top, work.string());
    std::ofstream(work / kWorkMarker) << "made by assay bisect --git; its commits/ and progress are rewritten by the next run\n";
    fs::remove_all(commits);
    fs::create_directories(commits);
    fs::remove(progress_file);
    std::ofstream(progress_file).flush();

    // ---- the scripts ----
    fs::create_directories(work / "bin");
    std::string judge_exe = assay_src;
    {
      std::error_code ec;
      fs::copy_file(assay_src, work / "bin" / "assay", fs::copy_options::overwrite_existing, ec);
      if (!ec) judge_exe = (work / "bin" / "assay").string();
    }
    ScriptPlan plan;
    plan.work = work;
    plan.top = top;
    plan.judge_exe = judge_exe;
    plan.golden = golden;
    plan.fixtures = fixtures;
    plan.build_cmd = o.build_cmd;
    plan.compare_mode = compare_mode;
    plan.candidate_cmd = o.candidate_cmd;
    plan.goldens = goldens;
    plan.kernels = o.kernels;
    plan.plugins = o.plugins;
    plan.cases = o.cases;
    plan.timeout_s = o.timeout_s;
    write_scripts(plan);
    const double timeout_s = o.timeout_s;

    Progress prog(progress_file, commits, o.verbose);
    prog.timeout_s = timeout_s;
    const std::string run_log = (work / "bisect-run.log").string();
    auto run_script_at = [&](const std::string& hash) {
      git.must({"checkout", "-q", "--detach", hash}, "git checkout " + hash);
      const auto r = spawn({"/bin/sh", (work / "bisect.sh").string()}, top, run_log, timeout_s + 30, [&] { prog.poll(); });
      if (pending_signal()) throw Interrupted{};
      prog.poll();
      const auto* c = prog.get(hash);
      return c && c->done ? c->mapped : (r.code == 0 || r.code == 1 ? r.code : 125);
    };

    // ---- bisect ----
    bool started = false;
    auto cleanup = [&]() -> std::string {  // "" when the repository is back as found, else what is wrong
      if (!started) return "";
      auto wrong = restore_repository(git, orig_branch, orig_hash);
      started = false;
      return wrong;
    };
    try {
      try {
        git.must({"bisect", "start"}, "git bisect start");
        started = true;
        const int g_rc = run_script_at(good);
        if (g_rc == 1)
          throw InputError(fmt::format("--repo {}: GOOD {} ({}) is not good: {} (logs: {})", top, o.good, good.substr(0, 12), prog.summary(good, timeout_s), (commits / good).string()));
        const int b_rc = g_rc == 0 ? run_script_at(bad) : -1;
        if (b_rc == 0)
          throw InputError(fmt::format("--repo {}: BAD {} ({}) is not bad: {} (logs: {})", top, o.bad, bad.substr(0, 12), prog.summary(bad, timeout_s), (commits / bad).string()));
        if (g_rc != 0 || b_rc != 1) {
          const auto& h = g_rc != 0 ? good : bad;
          res.message = fmt::format("could not judge {} {} ({}): {}; logs in {}", g_rc != 0 ? "GOOD" : "BAD", g_rc != 0 ? o.good : o.bad,
                                    h.substr(0, 12), prog.summary(h, timeout_s), (commits / h).string());
        } else {
          git.must({"bisect", "bad", bad}, "git bisect bad");
          // `git bisect good` checks out the first commit to test, or finds the answer already (BAD is
          // GOOD's child, or every commit between them was skipped).
          const auto gb = git.run({"bisect", "good", good});
          if (gb.code != 0) throw InputError(fmt::format("--repo {}: git bisect good failed: {}", top, last_line(gb.out)));
          std::ofstream(run_log, std::ios::app) << gb.out;
          Spawned r;
          r.code = 0;
          if (gb.out.find(" is the first bad commit") == std::string::npos)
            r = spawn({"git", "bisect", "run", (work / "bisect.sh").string()}, top, run_log, 0, [&] { prog.poll(); });
          if (pending_signal()) throw Interrupted{};
          prog.poll();
          const std::string out = slurp(run_log);
          const std::string marker = " is the first bad commit";
          const auto m = out.rfind(marker);
          if (m != std::string::npos) {
            const auto ls = out.rfind('\n', m);
            res.first_bad = trim(out.substr(ls == std::string::npos ? 0 : ls + 1, m - (ls == std::string::npos ? 0 : ls + 1)));
            res.found = !res.first_bad.empty();
          }
          const auto only_skip = out.find("There are only 'skip'ped commits left to test.");
          if (!res.found) {
            if (only_skip != std::string::npos) {
              std::vector<std::string> cand;
              std::istringstream ss(out.substr(only_skip));
              std::string line;
              while (std::getline(ss, line)) {
                line = trim(line);
                if (line.size() >= 40 && line.find_first_not_of("0123456789abcdef") == std::string::npos) cand.push_back(line);
                if (line.find("We cannot bisect more") != std::string::npos) break;
              }
              res.message = fmt::format("only skipped commits are left to test; the first bad commit could be any of: {}", fmt::join(cand, " "));
            } else {
              res.message = fmt::format("git bisect run failed (exit {}): {}; see {}", r.code, last_line(out), run_log);
            }
          }
        }
        const auto lg = git.run({"bisect", "log"});
        res.log = lg.code == 0 ? lg.out : "";
        std::istringstream ls(res.log);
        std::string line;
        while (std::getline(ls, line))
          if (line.rfind("git bisect skip ", 0) == 0) {
            std::istringstream ws(line.substr(16));
            std::string h;
            while (ws >> h) res.skipped.push_back(h);
          }
        if (res.found) {
          res.subject = trim(git.run({"log", "-1", "--format=%s", res.first_bad}).out);
          res.failing = prog.failing(res.first_bad);
        }
      } catch (const Interrupted&) {
        res.interrupted = pending_signal();
      }
    } catch (...) {
      const auto wrong = cleanup();
      if (!wrong.empty()) std::cerr << fmt::format("assay: error: --repo {}: could not restore the repository: {}\n", top, wrong);
      throw;
    }
    if (!res.interrupted && pending_signal()) res.interrupted = pending_signal();
    const auto wrong = cleanup();
    if (!wrong.empty()) throw InputError(fmt::format("--repo {}: could not restore the repository: {}", top, wrong));
    if (res.interrupted && res.message.empty()) res.message = "interrupted";
    return res;
  } catch (const Interrupted&) {  // before `git bisect start`: nothing to undo
    res.interrupted = pending_signal();
    res.message = "interrupted";
    return res;
  }
}

}  // namespace assay

