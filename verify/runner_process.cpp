// Worker processes of the runner: run_process (fork/exec into its own process group, output to a
// log, a watchdog that kills the group, exit status decoding), signal names, and log-file tails.
#include "verify/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "verify/runner_internal.h"

namespace assay {
using Clock = std::chrono::steady_clock;

// ---- processes -------------------------------------------------------------------------------------

ProcResult run_process(const std::vector<std::string>& argv, double timeout_s, const std::string& log_path) {
  ProcResult r;
  if (argv.empty()) {
    r.error = "empty command";
    return r;
  }
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    r.error = fmt::format("cannot open {}: {}", log_path, std::strerror(errno));
    return r;
  }
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    r.error = fmt::format("fork: {}", std::strerror(errno));
    return r;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execvp(av[0], av.data());
    const std::string m = fmt::format("assay: cannot execute {}: {}\n", argv[0], std::strerror(errno));
    (void)!::write(2, m.data(), m.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent: no race with the kill below
  ::close(fd);
  r.started = true;
  int st = 0;
  const auto deadline = t0 + std::chrono::duration<double>(timeout_s);
  auto sleep = std::chrono::microseconds(200);
  for (;;) {
    const pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      r.error = fmt::format("waitpid: {}", std::strerror(errno));
      break;
    }
    if (Clock::now() >= deadline) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  ::kill(-pid, SIGKILL);  // whatever the worker left in its group (a sanitizer's helpers); ESRCH if none
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

std::string signal_desc(int sig) {
  static const std::map<int, const char*> names{{SIGSEGV, "SIGSEGV"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},
                                                {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},   {SIGKILL, "SIGKILL"},
                                                {SIGTERM, "SIGTERM"}, {SIGTRAP, "SIGTRAP"}};
  auto it = names.find(sig);
  const char* d = ::strsignal(sig);
  return fmt::format("{} ({})", it == names.end() ? fmt::format("signal {}", sig) : std::string(it->second),
                     d ? d : "unknown");
}

namespace runner_detail {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string tail_text(const std::string& s0, size_t max_bytes, int max_lines) {
  std::string s = s0;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.size() > max_bytes) s = s.substr(s.size() - max_bytes);
  int n = 0;
  for (size_t i = s.size(); i-- > 0;)
    if (s[i] == '\n' && ++n >= max_lines) return s.substr(i + 1);
  return s;
}

}  // namespace runner_detail

std::string file_tail(const std::string& path, size_t max_bytes, int max_lines) {
  return runner_detail::tail_text(runner_detail::slurp(path), max_bytes, max_lines);
}

}  // namespace assay
