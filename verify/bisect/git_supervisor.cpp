#include "verify/bisect/git_supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "verify/run/process.h"

namespace assay::git_bisect {
namespace fs = std::filesystem;

namespace {

volatile sig_atomic_t g_signal = 0;      // SIGINT / SIGTERM received
volatile sig_atomic_t g_child_pgid = 0;  // the running child's process group (0: none)
volatile sig_atomic_t g_cleaning = 0;    // putting the repository back: signals are only recorded

void on_signal(int sig) {
  if (!g_signal) g_signal = sig;
  const pid_t pg = g_child_pgid;
  if (pg > 0 && !g_cleaning) ::kill(-pg, sig);
}

}  // namespace

int pending_signal() { return g_signal; }
void begin_cleanup() { g_cleaning = 1; }
bool cleaning() { return g_cleaning != 0; }

SignalScope::SignalScope() {
  g_signal = 0;
  g_child_pgid = 0;
  g_cleaning = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  int v = 0;
  if (::prctl(PR_GET_CHILD_SUBREAPER, &v, 0, 0, 0) == 0) old_reaper_ = v;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

SignalScope::~SignalScope() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::prctl(PR_SET_CHILD_SUBREAPER, old_reaper_, 0, 0, 0);
  g_child_pgid = 0;
  g_cleaning = 0;
}

// Every process below us (by parent pid, from /proc), killed with SIGKILL until none is left, then reaped.
void kill_descendants() {
  const pid_t me = ::getpid();
  for (int round = 0; round < 20; ++round) {
    std::map<pid_t, std::vector<pid_t>> kids;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(e.path() / "stat");
      std::string stat;
      std::getline(in, stat);
      const auto rp = stat.rfind(')');
      if (rp == std::string::npos) continue;
      std::istringstream ss(stat.substr(rp + 2));
      char state = 0;
      pid_t ppid = 0;
      ss >> state >> ppid;
      if (state == 'Z') continue;
      kids[ppid].push_back(static_cast<pid_t>(std::stol(name)));
    }
    std::vector<pid_t> todo{me}, found;
    while (!todo.empty()) {
      const pid_t p = todo.back();
      todo.pop_back();
      for (pid_t c : kids[p]) {
        found.push_back(c);
        todo.push_back(c);
      }
    }
    for (pid_t p : found) ::kill(p, SIGKILL);
    int st = 0;
    while (::waitpid(-1, &st, WNOHANG) > 0) {
    }
    if (found.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Spawned spawn(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log_path, double timeout_s,
              const std::function<void()>& tick) {
  ProcOptions o;
  o.cwd = cwd;
  o.set_env = {"LC_ALL=C", "LANG=C", "GIT_TERMINAL_PROMPT=0", "GIT_PAGER=cat", "PAGER=cat"};
  o.unset_env = {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"};
  o.append_log = true;
  o.stdin_null = true;
  o.kill_group_after = false;
  o.tick = tick;
  o.child_pgid = &g_child_pgid;
  o.pending_signal = &g_signal;
  o.suppress = &g_cleaning;
  const ProcResult p = run_process(argv, timeout_s, log_path, o);
  Spawned r;
  r.error = p.error;
  r.timed_out = p.timed_out;
  r.code = p.exited ? p.exit_code : -1;
  r.sig = p.signaled ? p.signal : p.timed_out ? SIGKILL : 0;
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  return s.substr(i);
}

std::string last_line(const std::string& s0) {
  const std::string s = trim(s0);
  const auto nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

}  // namespace assay::git_bisect
