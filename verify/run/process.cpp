#include "verify/run/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace assay {
using Clock = std::chrono::steady_clock;

namespace {
std::string env_key(const std::string& kv) { return kv.substr(0, kv.find('=')); }
}  // namespace

ProcResult run_process(const std::vector<std::string>& argv, double timeout_s, const std::string& log_path,
                       const ProcOptions& o) {
  ProcResult r;
  if (argv.empty()) {
    r.error = "empty command";
    return r;
  }
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  const bool own_env = !o.set_env.empty() || !o.unset_env.empty();
  std::vector<std::string> env_s;
  if (own_env) {
    std::set<std::string> drop(o.unset_env.begin(), o.unset_env.end());
    for (const auto& kv : o.set_env) drop.insert(env_key(kv));
    env_s = o.set_env;
    for (char** e = environ; *e; ++e)
      if (!drop.count(env_key(*e))) env_s.emplace_back(*e);
  }
  std::vector<char*> av, ev;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (const auto& e : env_s) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | (o.append_log ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd < 0) {
    r.error = fmt::format("cannot open {}: {}", log_path, std::strerror(errno));
    return r;
  }
  const int devnull = o.stdin_null ? ::open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  const bool forwarding = o.child_pgid || o.pending_signal;
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    if (devnull >= 0) ::close(devnull);
    r.error = fmt::format("fork: {}", std::strerror(errno));
    return r;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    if (forwarding) {  // the parent's handlers forward signals; the child takes them as they come
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
    }
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(127);
    if (own_env) ::execvpe(av[0], av.data(), ev.data());
    else ::execvp(av[0], av.data());
    const std::string m = fmt::format("assay: cannot execute {}: {}\n", argv[0], std::strerror(errno));
    (void)!::write(2, m.data(), m.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent: no race with a kill of the group below
  if (o.child_pgid) *o.child_pgid = pid;
  ::close(fd);
  if (devnull >= 0) ::close(devnull);
  r.started = true;
  int st = 0;
  bool forwarded = false;
  Clock::time_point sig_at{};
  auto sleep = std::chrono::microseconds(200);
  for (;;) {
    const pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      r.error = fmt::format("waitpid: {}", std::strerror(errno));
      break;
    }
    if (o.pending_signal && *o.pending_signal && !forwarded && !(o.suppress && *o.suppress)) {
      forwarded = true;  // a signal that came before *child_pgid was set
      sig_at = Clock::now();
      ::kill(-pid, *o.pending_signal);
    }
    const auto now = Clock::now();
    if ((forwarded && now - sig_at > std::chrono::duration<double>(o.grace_s)) ||
        (timeout_s > 0 && now - t0 >= std::chrono::duration<double>(timeout_s))) {
      r.timed_out = !forwarded;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (o.tick) o.tick();
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  if (o.child_pgid) *o.child_pgid = 0;
  if (o.tick) o.tick();
  if (o.kill_group_after) ::kill(-pid, SIGKILL);  // what the child left in its group; ESRCH if none
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r.timed_out) {
    if (WIFEXITED(st)) {
      r.exited = true;
      r.exit_code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
      r.signaled = true;
      r.signal = WTERMSIG(st);
    }
  }
  return r;
}

}  // namespace assay
