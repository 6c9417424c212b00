// The process side of `assay bisect --git` (verify/bisect/bisect_git.h): signal handling, the child
// subreaper, and every command it runs (git, the build, the generated scripts) through run_process
// (verify/run/process.h) in a process group of its own that SIGINT / SIGTERM reach.
#pragma once
#include <csignal>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace assay::git_bisect {

// Installs the SIGINT / SIGTERM handlers and makes this process a child subreaper (orphans below us
// reparent to us, so that an interrupted run can kill them all); puts everything back on destruction.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
  int old_reaper_ = 0;
};

// The signal received since the SignalScope began (SIGINT / SIGTERM), or 0.
int pending_signal();
// From now on signals are only recorded, not forwarded (the repository is being put back).
void begin_cleanup();
bool cleaning();
// Thrown where a signal stops the run.
struct Interrupted {};

// Every process below us (by parent pid, from /proc), killed with SIGKILL until none is left, then reaped.
void kill_descendants();

struct Spawned {
  int code = -1;        // exit code, or -1
  int sig = 0;          // killed by this signal (SIGKILL after a timeout)
  bool timed_out = false;
  std::string error;    // could not start
};

// Runs argv in cwd through run_process (verify/run/process.h): its own process group, stdout and
// stderr appended to log_path, stdin from /dev/null, a C locale and no pager, prompt or inherited
// GIT_DIR / GIT_WORK_TREE / GIT_INDEX_FILE; polls `tick` while it runs. SIGINT / SIGTERM reach its
// group; after one, the group gets 10 s before SIGKILL. timeout_s <= 0: no timeout.
Spawned spawn(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log_path, double timeout_s,
              const std::function<void()>& tick = {});

// Log text: a file's bytes ("" if unreadable), without surrounding blanks, its last line.
std::string slurp(const std::filesystem::path& p);
std::string trim(std::string s);
std::string last_line(const std::string& s);

}  // namespace assay::git_bisect
