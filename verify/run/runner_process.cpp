// Worker processes of the runner: run_process (fork/exec into its own process group, output to a
// log, a watchdog that kills the group, exit status decoding), signal names, and log-file tails.
#include "verify/run/runner.h"

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

#include "verify/run/runner_internal.h"

namespace assay {
using Clock = std::chrono::steady_clock;

// ---- processes -------------------------------------------------------------------------------------

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
