// `assay bisect --git` (verify/bisect/bisect_git.h): `git bisect run` with a generated script.
//
// The work directory holds
//   bisect.sh      what `git bisect run` calls at each commit: runs step.sh under `timeout` (its own
//                  process group, killed as a whole) and maps its result to 0 / 1 / 125,
//   step.sh        BUILD_CMD, then the candidates (--candidate-cmd) and `assay compare`, or
//                  `assay verify`; exits 0 / 1 / 125,
//   progress       one line per event ("start H SUBJECT", "build H RC", "judge H RC", "done H RC MAPPED"),
//                  read back for -v and for the messages,
//   commits/<hash>/ build.log, judge.log, report.json, candidates/, repro bundles,
//   bin/assay      a copy of the judging binary (a BUILD_CMD that rebuilds assay itself cannot change the judge),
//   git.log        the output of every git command.
// The repository is put back with `git bisect reset <original>` on every way out; SIGINT / SIGTERM are
// forwarded to the running child's process group, every process left below us is killed (we are a
// child subreaper while bisecting), then the repository is reset.
#include "verify/bisect/bisect_git.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "reference/core/check.h"
#include "verify/run/process.h"
#include "verify/run/runner.h"


namespace assay {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// ---- signals -----------------------------------------------------------------------------------------

volatile sig_atomic_t g_signal = 0;      // SIGINT / SIGTERM received
volatile sig_atomic_t g_child_pgid = 0;  // the running child's process group (0: none)
volatile sig_atomic_t g_cleaning = 0;    // putting the repository back: signals are only recorded

void on_signal(int sig) {
  if (!g_signal) g_signal = sig;
  const pid_t pg = g_child_pgid;
  if (pg > 0 && !g_cleaning) ::kill(-pg, sig);
}

// Installs the handlers and makes us a child subreaper (orphans below us reparent to us, so that an
// interrupted run can kill them all); puts everything back on destruction.
class SignalScope {
 public:
  SignalScope() {
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
  ~SignalScope() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::prctl(PR_SET_CHILD_SUBREAPER, old_reaper_, 0, 0, 0);
    g_child_pgid = 0;
    g_cleaning = 0;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
  int old_reaper_ = 0;
};

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

// ---- processes ---------------------------------------------------------------------------------------

struct Spawned {
  int code = -1;        // exit code, or -1
  int sig = 0;          // killed by this signal (SIGKILL after a timeout)
  bool timed_out = false;
  std::string error;    // could not start
};

// Runs argv in cwd through run_process (verify/run/process.h): its own process group, stdout and
// stderr appended to log_path, stdin from /dev/null, a C locale and no pager, prompt or inherited
// GIT_DIR / GIT_WORK_TREE / GIT_INDEX_FILE; polls `tick` while it runs. SIGINT / SIGTERM reach its
// group (on_signal); after one, the group gets 10 s before SIGKILL. timeout_s <= 0: no timeout.
Spawned spawn(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log_path, double timeout_s,
              const std::function<void()>& tick = {}) {
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

// The file that marks a --work-dir as made by assay bisect (only then are its contents replaced).
constexpr const char* kWorkMarker = ".assay-bisect";

// 'text' for sh, with ' as '\''.
std::string sq(const std::string& s) {
  std::string o = "'";
  for (char c : s) {
    if (c == '\'') o += "'\\''";
    else o += c;
  }
  return o + "'";
}

// The --candidate-cmd with {golden} and {out} standing for the shell variables $ASSAY_GOLDEN and
// $ASSAY_OUT, never for the paths themselves: a golden's file name is data, and pasted into a shell
// command it would run (`x$(touch PWNED).h5`). Each placeholder becomes a double-quoted expansion
// whatever quotes the user put around it (the shell never re-parses an expansion's value):
//   {golden}      -> "$ASSAY_GOLDEN"
//   "..{golden}.."-> "..${ASSAY_GOLDEN}.."   (inside double quotes)
//   '..{golden}..'-> '..'"$ASSAY_GOLDEN"'..' (single quotes closed around it)
std::string bind_placeholders(const std::string& cmd) {
  std::string o;
  enum { kPlain, kSingle, kDouble } q = kPlain;
  for (size_t i = 0; i < cmd.size(); ++i) {
    const char c = cmd[i];
    const char* var = cmd.compare(i, 8, "{golden}") == 0 ? "ASSAY_GOLDEN" : cmd.compare(i, 5, "{out}") == 0 ? "ASSAY_OUT" : nullptr;
    if (var) {
      if (q == kPlain) o += fmt::format("\"${{{}}}\"", var);
      else if (q == kDouble) o += fmt::format("${{{}}}", var);
      else o += fmt::format("'\"${{{}}}\"'", var);
      i += std::string_view(var) == "ASSAY_GOLDEN" ? 7 : 4;
      continue;
    }
    o += c;
    if (q == kPlain && c == '\\' && i + 1 < cmd.size()) o += cmd[++i];
    else if (q == kDouble && c == '\\' && i + 1 < cmd.size()) o += cmd[++i];
    else if (q == kPlain && c == '\'') q = kSingle;
    else if (q == kSingle && c == '\'') q = kPlain;
    else if (q == kPlain && c == '"') q = kDouble;
    else if (q == kDouble && c == '"') q = kPlain;
  }
  return o;
}

struct Interrupted {};

// Git in the repository's top directory; every command's output is also appended to git.log.
class Git {
 public:
  Git(std::string top, std::string work) : top_(std::move(top)), work_(std::move(work)) {}
  struct Out {
    int code;
    std::string out;
  };
  Out run(const std::vector<std::string>& args, double timeout_s = 120) const {
    std::vector<std::string> argv{"git"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string tmp = (fs::path(work_) / "git.out").string();
    fs::remove(tmp);
    const auto r = spawn(argv, top_, tmp, timeout_s);
    if (!r.error.empty()) throw InputError(fmt::format("--repo {}: cannot run git: {}", top_, r.error));
    const std::string out = slurp(tmp);
    std::ofstream(fs::path(work_) / "git.log", std::ios::app) << "$ git " << fmt::format("{}", fmt::join(args, " ")) << "  [exit "
                                                               << r.code << "]\n" << out;
    if (g_signal && !g_cleaning) throw Interrupted{};
    return {r.sig ? 128 + r.sig : r.code, out};
  }
  std::string must(const std::vector<std::string>& args, const std::string& what) const {
    auto r = run(args);
    if (r.code != 0)
      throw InputError(fmt::format("--repo {}: {} failed: {}", top_, what, last_line(r.out).empty() ? "git exited " + std::to_string(r.code) : last_line(r.out)));
    return trim(r.out);
  }
  const std::string& top() const { return top_; }

 private:
  std::string top_, work_;
};

// What the scripts said about one commit (from the progress file).
struct CommitState {
  std::string subject;
  int build_rc = -1, judge_rc = -1, rc = -1, mapped = -1;
  bool done = false;
};

class Progress {
 public:
  Progress(fs::path file, fs::path commits, bool verbose) : file_(std::move(file)), commits_(std::move(commits)), verbose_(verbose) {}
  void poll() {
    const std::string s = slurp(file_);
    while (pos_ < s.size()) {
      const auto nl = s.find('\n', pos_);
      if (nl == std::string::npos) return;
      handle(s.substr(pos_, nl - pos_));
      pos_ = nl + 1;
    }
  }
  const CommitState* get(const std::string& h) const {
    auto it = states_.find(h);
    return it == states_.end() ? nullptr : &it->second;
  }
  // "Passed", "1 Incorrect, 2 Passed", "build failed (exit 2)", "timed out", ...
  std::string summary(const std::string& h, double timeout_s) const {
    const auto* c = get(h);
    if (!c) return "not run";
    if (c->rc == 124 || c->rc == 137) return fmt::format("timed out after {:g} s (build and judge)", timeout_s);
    if (c->build_rc > 0) {
      // The first line that says "error", else the last line.
      const std::string log = slurp(commits_ / h / "build.log");
      std::string tail = last_line(log);
      std::istringstream ls(log);
      for (std::string l; std::getline(ls, l);)
        if (l.find("error") != std::string::npos) {
          tail = trim(l);
          break;
        }
      return fmt::format("build failed (exit {}){}", c->build_rc, tail.empty() ? "" : ": " + tail);
    }
    try {
      const auto j = nlohmann::json::parse(slurp(commits_ / h / "report.json"));
      std::map<std::string, int> n;
      for (const auto& cj : j.at("cases")) n[cj.at("verdict").get<std::string>()]++;
      std::string o;
      for (const char* v : {"Incorrect", "Failed", "Hung", "Stale", "NotRun", "NotSupported", "Passed"})
        if (n.count(v)) o += fmt::format("{}{} {}", o.empty() ? "" : ", ", n[v], v);
      if (!o.empty()) return o;
    } catch (const std::exception&) {
    }
    if (c->judge_rc >= 0) {
      const auto tail = last_line(slurp(commits_ / h / "judge.log"));
      return fmt::format("could not judge (assay exit {}){}", c->judge_rc, tail.empty() ? "" : ": " + tail);
    }
    return fmt::format("could not judge (exit {})", c->rc);
  }
  // "op/case: Verdict: reason" for every case that did not pass.
  std::vector<std::string> failing(const std::string& h) const {
    std::vector<std::string> out;
    try {
      const auto j = nlohmann::json::parse(slurp(commits_ / h / "report.json"));
      for (const auto& cj : j.at("cases")) {
        const auto v = cj.at("verdict").get<std::string>();
        if (v == "Passed") continue;
        out.push_back(fmt::format("{}/{}: {}: {}", cj.value("op", "?"), cj.value("case", "?"), v, cj.value("reason", "")));
      }
    } catch (const std::exception&) {
    }
    return out;
  }
  double timeout_s = 0;

 private:
  void handle(const std::string& line) {
    std::istringstream ss(line);
    std::string kind, h;
    ss >> kind >> h;
    auto& c = states_[h];
    if (kind == "start") {
      c = CommitState{};
      std::getline(ss, c.subject);
      c.subject = trim(c.subject);
    } else if (kind == "build") {
      ss >> c.build_rc;
    } else if (kind == "judge") {
      ss >> c.judge_rc;
    } else if (kind == "done") {
      ss >> c.rc >> c.mapped;
      c.done = true;
      if (verbose_)
        std::cerr << fmt::format("bisect: {} {}: {} -> {} ({})\n", h.substr(0, 12), c.subject, summary(h, timeout_s), c.mapped,
                                 c.mapped == 0 ? "good" : c.mapped == 1 ? "bad" : "skip")
                  << std::flush;
    }
  }
  fs::path file_, commits_;
  bool verbose_;
  size_t pos_ = 0;
  std::map<std::string, CommitState> states_;
};

// The goldens the candidate command is run for: <dir>/**/*.h5 whose case name (stem) matches a glob.
std::vector<fs::path> select_goldens(const fs::path& dir, const std::vector<std::string>& globs) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied); it != fs::recursive_directory_iterator(); ++it)
    if (it->is_regular_file() && it->path().extension() == ".h5") {
      const std::string c = it->path().stem().string();
      if (globs.empty() || std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_match(g, c); }))
        out.push_back(it->path());
    }
  std::sort(out.begin(), out.end());
  return out;
}

void write_script(const fs::path& p, const std::string& text) {
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw InputError(fmt::format("--work-dir: cannot write {}", p.string()));
  }
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
}

std::string abs_assay(const std::string& exe) {
  std::error_code ec;
  if (exe.empty() || exe == "/proc/self/exe") {
    const auto p = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) return p.string();
  }
  const auto c = fs::canonical(exe, ec);
  return ec ? fs::absolute(exe).string() : c.string();
}

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
    const double timeout_s = o.timeout_s;
    std::string step =
        "#!/bin/sh\n"
        "# Generated by assay bisect --git: build and judge the checked-out commit ($1).\n"
        "# Exit 0: good, 1: bad, 125: could not build or judge (git skips it).\n"
        "H=\"$1\"\n"
        "W=" + sq(work.string()) + "\n"
        "D=\"$W/commits/$H\"\n"
        "C=\"$D/candidates\"\n"
        "cd " + sq(top) + " || exit 125\n"
        "rm -rf \"$D\" && mkdir -p \"$C\" || exit 125\n";
    if (!o.build_cmd.empty()) {
      std::string cmd;
      for (const auto& a : o.build_cmd) cmd += (cmd.empty() ? "" : " ") + sq(a);
      step += "# BUILD_CMD\n" + cmd + " </dev/null >\"$D/build.log\" 2>&1\n"
              "rc=$?\n"
              "printf 'build %s %s\\n' \"$H\" \"$rc\" >>\"$W/progress\"\n"
              "[ \"$rc\" -eq 0 ] || exit 125\n";
    } else {
      step += "printf 'build %s 0\\n' \"$H\" >>\"$W/progress\"\n";
    }
    std::string judge;
    if (compare_mode) {
      step += "# one candidate per golden\n";
      for (const auto& g : goldens) {
        const auto rel = fs::relative(g, golden);
        // The paths reach the command as environment variables (bind_placeholders), never as text.
        const std::string cmd = "ASSAY_GOLDEN=" + sq(g.string()) + " ASSAY_OUT=\"$C\"/" + sq(rel.string()) +
                                "; export ASSAY_GOLDEN ASSAY_OUT; " + bind_placeholders(o.candidate_cmd);
        auto err_rel = rel;
        err_rel.replace_extension(".error");
        auto log_rel = rel;
        log_rel.replace_extension(".log");
        step += fmt::format(
            "mkdir -p \"$C\"/{dir}\n"
            "( {cmd} ) </dev/null >\"$C\"/{log} 2>&1\n"
            "rc=$?\n"
            "if [ \"$rc\" -ne 0 ]; then\n"
            "  {{ printf 'candidate command exited %s: %s\\n' \"$rc\" \"$(tail -n 1 \"$C\"/{log})\"; cat \"$C\"/{log}; }} >\"$C\"/{err}\n"
            "fi\n",
            fmt::arg("dir", sq(rel.parent_path().empty() ? "." : rel.parent_path().string())), fmt::arg("cmd", cmd),
            fmt::arg("log", sq(log_rel.string())), fmt::arg("err", sq(err_rel.string())));
      }
      judge = sq(judge_exe) + " compare --golden-dir " + sq(golden) + " --candidate-dir \"$C\" --json-file \"$D/report.json\" --work-dir \"$D/repro\"";
    } else {
      judge = sq(judge_exe) + " verify --golden " + sq(golden) + " --json-file \"$D/report.json\" --work-dir \"$D/verify\"";
      for (const auto& k : o.kernels) judge += " --kernel=" + sq(k);
      for (const auto& p : o.plugins) judge += " --plugin=" + sq(fs::path(p).is_absolute() ? p : (fs::path(top) / p).string());
    }
    for (const auto& c : o.cases) judge += " --case=" + sq(c);
    if (!fixtures.empty()) judge += " --fixtures " + sq(fixtures);
    step += "# judge\n" + judge + " </dev/null >\"$D/judge.log\" 2>&1\n"
            "rc=$?\n"
            "printf 'judge %s %s\\n' \"$H\" \"$rc\" >>\"$W/progress\"\n"
            "case \"$rc\" in 0) exit 0 ;; 1) exit 1 ;; *) exit 125 ;; esac\n";
    write_script(work / "step.sh", step);
    const std::string bisect_sh =
        "#!/bin/sh\n"
        "# Generated by assay bisect --git: what `git bisect run` calls at each commit.\n"
        "W=" + sq(work.string()) + "\n"
        "cd " + sq(top) + " || exit 125\n"
        "H=$(git rev-parse HEAD) || exit 125\n"
        "S=$(git log -1 --format=%s HEAD)\n"
        "printf 'start %s %s\\n' \"$H\" \"$S\" >>\"$W/progress\"\n"
        "timeout -k 5 " + fmt::format("{:.3f}", timeout_s) + " /bin/sh \"$W/step.sh\" \"$H\"\n"
        "rc=$?\n"
        "case \"$rc\" in 0) m=0 ;; 1) m=1 ;; *) m=125 ;; esac\n"
        "printf 'done %s %s %s\\n' \"$H\" \"$rc\" \"$m\" >>\"$W/progress\"\n"
        "exit \"$m\"\n";
    write_script(work / "bisect.sh", bisect_sh);

    Progress prog(progress_file, commits, o.verbose);
    prog.timeout_s = timeout_s;
    const std::string run_log = (work / "bisect-run.log").string();
    auto run_script_at = [&](const std::string& hash) {
      git.must({"checkout", "-q", "--detach", hash}, "git checkout " + hash);
      const auto r = spawn({"/bin/sh", (work / "bisect.sh").string()}, top, run_log, timeout_s + 30, [&] { prog.poll(); });
      if (g_signal) throw Interrupted{};
      prog.poll();
      const auto* c = prog.get(hash);
      return c && c->done ? c->mapped : (r.code == 0 || r.code == 1 ? r.code : 125);
    };

    // ---- bisect ----
    bool started = false;
    auto cleanup = [&]() -> std::string {  // "" when the repository is back as found, else what is wrong
      if (!started) return "";
      g_cleaning = 1;
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
          if (g_signal) throw Interrupted{};
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
        res.interrupted = g_signal;
      }
    } catch (...) {
      const auto wrong = cleanup();
      if (!wrong.empty()) std::cerr << fmt::format("assay: error: --repo {}: could not restore the repository: {}\n", top, wrong);
      throw;
    }
    if (!res.interrupted && g_signal) res.interrupted = g_signal;
    const auto wrong = cleanup();
    if (!wrong.empty()) throw InputError(fmt::format("--repo {}: could not restore the repository: {}", top, wrong));
    if (res.interrupted && res.message.empty()) res.message = "interrupted";
    return res;
  } catch (const Interrupted&) {  // before `git bisect start`: nothing to undo
    res.interrupted = g_signal;
    res.message = "interrupted";
    return res;
  }
}

}  // namespace assay
