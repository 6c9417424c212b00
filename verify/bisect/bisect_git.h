// `assay bisect --git GOOD BAD -- BUILD_CMD...`: finds the first commit at which a kernel's verdict
// turns bad, by driving `git bisect run` with a script that, at each commit,
//   1. runs BUILD_CMD in the repository (a build failure: exit 125, git skips the commit),
//   2. judges the kernel there:
//      - C++ path: `assay verify --kernel K [--case C]... [--plugin P]... --golden DIR` (the
//        plugin path is relative to the repository, rebuilt at every commit), or
//      - Python / any producer: `--candidate-cmd "python -m mypkg.write {golden} {out}"` run once
//        per selected golden ({golden}: the golden's path, {out}: where to write the candidate),
//        then one `assay compare --golden-dir ... --candidate-dir ...`. The paths reach the
//        command as the environment variables ASSAY_GOLDEN and ASSAY_OUT: each placeholder
//        becomes a quoted expansion of one of them (whatever quotes surround it), so no file name
//        is ever parsed by the shell,
//   3. maps the verdicts to git's codes: Passed 0; Incorrect / Failed / Hung 1; NotRun / Stale /
//      anything else (could not judge) 125.
// The repository is left as it was found (`git bisect reset` to the original HEAD), also on error
// and on Ctrl-C (SIGINT / SIGTERM). Refuses a dirty working tree or a bisect already in progress.
// The result names the first bad commit (hash and subject) and its failing cases.
#pragma once
#include <string>
#include <vector>

namespace assay {

struct GitBisectOptions {
  std::string repo = ".";                  // the repository to bisect (--repo)
  std::string good, bad;                   // commits (any git revision)
  std::vector<std::string> build_cmd;      // argv after `--`; empty: no build step
  // What is judged at each commit (one of the two):
  std::vector<std::string> kernels;        // --kernel K (verify path)
  std::vector<std::string> plugins;        // --plugin P (relative to repo, or absolute)
  std::string candidate_cmd;               // --candidate-cmd "... {golden} {out}" (compare path)
  std::vector<std::string> cases;          // --case GLOB (both paths)
  std::string golden_dir;                  // --golden DIR (goldens: a directory of <op>/<case>.h5 or of <case>.h5)
  std::string fixtures_dir;                // for staleness and the tolerance policy
  std::string assay_exe;                   // this assay binary (judges every commit; never rebuilt)
  std::string work_dir;                    // logs, scripts, candidates; empty: a temp dir. Must be new,
                                           // empty or made by an earlier bisect, and outside the repository
  double timeout_s = 600;                  // per commit: build + judge
  bool verbose = false;
};

struct GitBisectResult {
  bool found = false;
  std::string first_bad, subject;          // the first bad commit
  std::vector<std::string> failing;        // "op/case: Verdict: reason" at that commit
  std::vector<std::string> skipped;        // commits git skipped (did not build / could not judge)
  std::string log;                         // git bisect's own log (git bisect log)
  std::string message;                     // why nothing was found, when !found
  std::string work_dir;                    // where the scripts, logs, candidates and reports are
  int interrupted = 0;                     // SIGINT / SIGTERM stopped the run (the repo was reset)
};

// Throws InputError for bad options or a repository that cannot be bisected (dirty, bisect in
// progress, GOOD not an ancestor of BAD, GOOD not good or BAD not bad).
GitBisectResult run_git_bisect(const GitBisectOptions& o);

}  // namespace assay
