// The git side of `assay bisect --git`: git commands run in the repository's top directory, each
// one's output appended to the work directory's git.log, and putting the repository back as found.
#pragma once
#include <string>
#include <vector>

namespace assay::git_bisect {

class Git {
 public:
  Git(std::string top, std::string work) : top_(std::move(top)), work_(std::move(work)) {}
  struct Out {
    int code;  // git's exit code, 128 + signal when killed
    std::string out;
  };
  // Throws InputError when git cannot run, Interrupted after SIGINT / SIGTERM (unless cleaning up).
  Out run(const std::vector<std::string>& args, double timeout_s = 120) const;
  // run(), then InputError "--repo TOP: WHAT failed: <git's last line>" on a non-zero exit; trimmed output.
  std::string must(const std::vector<std::string>& args, const std::string& what) const;
  const std::string& top() const { return top_; }

 private:
  std::string top_, work_;
};

// Ends the bisect (`git bisect reset` to the original branch, or hash when HEAD was detached), after
// killing every process left below us; undoes what an interrupted checkout or a BUILD_CMD left in the
// tracked files (the tree was clean when we started). Returns "" when HEAD, its branch and the
// bisect state are as found, else what is wrong.
std::string restore_repository(const Git& git, const std::string& orig_branch, const std::string& orig_hash);

}  // namespace assay::git_bisect
