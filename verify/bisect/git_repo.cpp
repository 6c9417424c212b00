#include "verify/bisect/git_repo.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/core/check.h"
#include "verify/bisect/git_supervisor.h"

namespace assay::git_bisect {
namespace fs = std::filesystem;

Git::Out Git::run(const std::vector<std::string>& args, double timeout_s) const {
  std::vector<std::string> argv{"git"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string tmp = (fs::path(work_) / "git.out").string();
  fs::remove(tmp);
  const auto r = spawn(argv, top_, tmp, timeout_s);
  if (!r.error.empty()) throw InputError(fmt::format("--repo {}: cannot run git: {}", top_, r.error));
  const std::string out = slurp(tmp);
  std::ofstream(fs::path(work_) / "git.log", std::ios::app) << "$ git " << fmt::format("{}", fmt::join(args, " ")) << "  [exit "
                                                             << r.code << "]\n" << out;
  if (pending_signal() && !cleaning()) throw Interrupted{};
  return {r.sig ? 128 + r.sig : r.code, out};
}

std::string Git::must(const std::vector<std::string>& args, const std::string& what) const {
  auto r = run(args);
  if (r.code != 0)
    throw InputError(fmt::format("--repo {}: {} failed: {}", top_, what, last_line(r.out).empty() ? "git exited " + std::to_string(r.code) : last_line(r.out)));
  return trim(r.out);
}

std::string restore_repository(const Git& git, const std::string& orig_branch, const std::string& orig_hash) {
  begin_cleanup();
  const std::string& top = git.top();
  kill_descendants();
  auto rr = git.run({"bisect", "reset", orig_branch.empty() ? orig_hash : orig_branch});
  if (rr.code != 0) {
    // An interrupted checkout can leave index.lock (ours: git status worked before we started) or
    // half-updated tracked files (the tree was clean): put HEAD's files back and retry.
    const auto lock = fs::path(top) / trim(git.run({"rev-parse", "--git-path", "index.lock"}).out);
    std::error_code ec;
    fs::remove(lock, ec);
    git.run({"reset", "-q", "--hard"});
    rr = git.run({"bisect", "reset", orig_branch.empty() ? orig_hash : orig_branch});
  }
  // A BUILD_CMD that edits tracked files: the tree was clean, so HEAD's files are what we found.
  if (!trim(git.run({"status", "--porcelain", "--untracked-files=no"}).out).empty()) git.run({"reset", "-q", "--hard"});
  std::string wrong;
  const auto head = trim(git.run({"rev-parse", "HEAD"}).out);
  const auto b = git.run({"symbolic-ref", "-q", "--short", "HEAD"});
  const std::string now_branch = b.code == 0 ? trim(b.out) : "";
  if (head != orig_hash || now_branch != orig_branch)
    wrong = fmt::format("HEAD is {}{} instead of {}{}", head.substr(0, 12), now_branch.empty() ? "" : " (" + now_branch + ")",
                        orig_hash.substr(0, 12), orig_branch.empty() ? "" : " (" + orig_branch + ")");
  const auto sf = trim(git.run({"rev-parse", "--git-path", "BISECT_START"}).out);
  if (fs::exists(fs::path(top) / sf)) wrong += std::string(wrong.empty() ? "" : "; ") + "a bisect is still in progress";
  return wrong;
}

}  // namespace assay::git_bisect
