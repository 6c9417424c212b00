// verify/run/process.h: the one way assay runs a child process: the runner's workers and probes
// (verify/run/runner.h), and assay bisect --git's git, build and bisect-script commands
// (verify/bisect/bisect_git.h). The child runs in its own process group with stdout and stderr to a log
// file; a timeout kills the whole group.
#pragma once
#include <csignal>
#include <functional>
#include <string>
#include <vector>

namespace assay {

struct ProcResult {
  bool started = false;
  bool exited = false;  // exit_code is set (not after a timeout)
  int exit_code = -1;
  bool signaled = false;  // signal is set (not after a timeout)
  int signal = 0;
  bool timed_out = false;
  double wall_s = 0;
  std::string error;  // why it could not start or be waited for
};

struct ProcOptions {
  std::string cwd;                     // the child's working directory (empty: this process's)
  std::vector<std::string> set_env;    // KEY=VALUE entries replacing those keys of the environment
  std::vector<std::string> unset_env;  // keys removed from the child's environment
  bool append_log = false;             // append to log_path (default: truncate it)
  bool stdin_null = false;             // stdin from /dev/null (default: inherited)
  bool kill_group_after = true;        // SIGKILL what the child left in its group once it exits
  std::function<void()> tick;          // called about every 20 ms while it runs, and once after
  // Signal forwarding (assay bisect --git): while the child runs, *child_pgid holds its process
  // group, so that a signal handler can kill that group. A signal recorded in *pending_signal before
  // the handler could see the group is forwarded once, unless *suppress is set; once forwarded, the
  // group gets grace_s to exit before SIGKILL (timed_out stays false then).
  volatile std::sig_atomic_t* child_pgid = nullptr;
  const volatile std::sig_atomic_t* pending_signal = nullptr;
  const volatile std::sig_atomic_t* suppress = nullptr;
  double grace_s = 10;
};

// Runs argv (argv[0] searched on PATH) with stdout and stderr to log_path. After timeout_s (<= 0:
// none) the whole group gets SIGKILL and timed_out is set.
ProcResult run_process(const std::vector<std::string>& argv, double timeout_s, const std::string& log_path,
                       const ProcOptions& o = {});

}  // namespace assay
