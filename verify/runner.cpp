#include "verify/runner.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/golden.h"
#include "verify/kernel_case.h"
#include "verify/h5.h"
#include "verify/sanitize.h"
#include "verify/stale.h"
#include "verify/tolerance.h"
#include "verify/worker.h"

namespace assay {
namespace fs = std::filesystem;
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

static std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

static std::string tail_text(const std::string& s0, size_t max_bytes, int max_lines) {
  std::string s = s0;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.size() > max_bytes) s = s.substr(s.size() - max_bytes);
  int n = 0;
  for (size_t i = s.size(); i-- > 0;)
    if (s[i] == '\n' && ++n >= max_lines) return s.substr(i + 1);
  return s;
}

std::string file_tail(const std::string& path, size_t max_bytes, int max_lines) {
  return tail_text(slurp(path), max_bytes, max_lines);
}

// ---- selection ---------------------------------------------------------------------------------------

Shard Shard::parse(const std::string& s) {
  Shard sh;
  const auto p = s.find('/');
  try {
    if (p == std::string::npos) throw std::invalid_argument("");
    size_t e1 = 0, e2 = 0;
    sh.k = std::stoi(s.substr(0, p), &e1);
    sh.n = std::stoi(s.substr(p + 1), &e2);
    if (e1 != p || e2 != s.size() - p - 1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw InputError(fmt::format("--shard '{}': expected k/n, e.g. 2/4", s));
  }
  if (sh.n < 1 || sh.k < 1 || sh.k > sh.n) throw InputError(fmt::format("--shard '{}': need 1 <= k <= n", s));
  return sh;
}

bool glob_match(const std::string& pattern, const std::string& s) { return ::fnmatch(pattern.c_str(), s.c_str(), 0) == 0; }

static bool any_match(const std::vector<std::string>& globs, const std::string& s) {
  if (globs.empty()) return true;
  for (const auto& g : globs)
    if (glob_match(g, s)) return true;
  return false;
}

std::vector<std::string> find_goldens(const std::string& dir, const std::vector<std::string>& ops) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) throw InputError(fmt::format("{}: golden directory not found", dir));
  for (const auto& d : fs::directory_iterator(dir)) {
    if (!d.is_directory()) continue;
    const auto op = d.path().filename().string();
    if (!ops.empty() && std::find(ops.begin(), ops.end(), op) == ops.end()) continue;
    for (const auto& f : fs::directory_iterator(d.path()))
      if (f.is_regular_file() && f.path().extension() == ".h5") out.push_back(f.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<WorkItem> plan_work(const std::vector<const kernels::KernelDef*>& ks, const std::vector<std::string>& goldens,
                                const std::vector<std::string>& kernel_globs, const std::vector<std::string>& case_globs,
                                const Shard& shard) {
  std::vector<WorkItem> all;
  for (const auto* k : ks) {
    if (!any_match(kernel_globs, k->name)) continue;
    for (const auto& g : goldens) {
      const fs::path p(g);
      const auto op = p.parent_path().filename().string();
      const auto cs = p.stem().string();
      if (op != k->op || !any_match(case_globs, cs)) continue;
      all.push_back({k, g, op, cs});
    }
  }
  std::sort(all.begin(), all.end(), [](const WorkItem& a, const WorkItem& b) {
    return std::tie(a.kernel->name, a.op, a.case_name) < std::tie(b.kernel->name, b.op, b.case_name);
  });
  std::vector<WorkItem> mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (shard.takes(i)) mine.push_back(all[i]);
  return mine;
}

// ---- one worker's outcome ----------------------------------------------------------------------------

WorkerOutcome classify_worker(const ProcResult& p, const std::string& result_text, const std::string& log_text,
                              double timeout_s, const std::string& tool) {
  WorkerOutcome o;
  nlohmann::json res;
  if (!result_text.empty()) {
    try {
      res = nlohmann::json::parse(result_text);
    } catch (const nlohmann::json::exception&) {
      res = nullptr;
    }
  }
  if (res.is_object()) {
    if (res.contains("kernel_ms")) o.kernel_ms = res["kernel_ms"].get<std::vector<double>>();
    if (res.contains("findings")) o.findings = res["findings"].get<std::vector<std::string>>();
  }
  const std::string status = res.is_object() ? res.value("status", std::string()) : std::string();
  const std::string msg = res.is_object() ? res.value("message", std::string()) : std::string();
  // Sanitizer totals (only under `sanitize`).
  SanitizerSummary ss;
  if (!tool.empty()) {
    ss = parse_sanitizer_output(log_text, tool);
    o.sanitizer_summary = ss.found ? ss.line : "no summary";
  }
  if (!p.started) {
    o.verdict = Verdict::Failed;
    o.reason = "could not start the worker: " + p.error;
    return o;
  }
  if (p.timed_out) {
    o.verdict = Verdict::Hung;
    o.reason = fmt::format("no result after {:.0f} s: the watchdog killed the worker", timeout_s);
    return o;
  }
  if (p.signaled) {
    o.verdict = Verdict::Failed;
    o.reason = fmt::format("the worker died of {}", signal_desc(p.signal));
    return o;
  }
  if (p.exited && p.exit_code == worker::kExitNoDevice && status == "no_device") {
    o.verdict = Verdict::NotRun;
    o.reason = msg;
    return o;
  }
  if (!tool.empty()) {
    if (!ss.found) {
      o.verdict = Verdict::Failed;
      o.reason = fmt::format("{}: no summary in the compute-sanitizer output (exit {}): the sanitizer did not complete", tool,
                             p.exit_code);
      return o;
    }
    if (ss.errors > 0 || p.exit_code == kSanitizerErrorExit) {
      o.verdict = Verdict::Failed;
      o.reason = fmt::format("{}: {} errors ({})", tool, ss.errors, ss.line.substr(ss.line.find_first_not_of("= ")));
      return o;
    }
  }
  if (status == "ok" && p.exit_code == 0) {
    if (!o.findings.empty()) {
      o.verdict = Verdict::Failed;
      o.reason = o.findings.front() + (o.findings.size() > 1 ? fmt::format(" (+{} more)", o.findings.size() - 1) : "");
      return o;
    }
    o.verdict = Verdict::Passed;  // compare next
    return o;
  }
  o.verdict = Verdict::Failed;
  if (!status.empty() && !msg.empty()) o.reason = fmt::format("{}: {}", status, msg);
  else o.reason = fmt::format("the worker exited with code {} without a result", p.exit_code);
  return o;
}

// ---- compare, determinism, repro -----------------------------------------------------------------------

namespace {

struct Candidate {
  std::vector<std::vector<uint64_t>> codes;  // per run
};

std::vector<uint64_t> read_codes(const h5::File& f, const std::string& ds, const Tensor& e) {
  if (!f.exists(ds)) throw InputError(fmt::format("{}: {}: missing", f.path(), ds));
  const auto inf = f.info(ds);
  if (inf.shape != e.shape) throw InputError(fmt::format("{}: {}: shape {} != {}", f.path(), ds, shape_str(inf.shape), shape_str(e.shape)));
  return f.read_u64(ds);
}

// Error map: mismatches aggregated by (batch, head, tile of the sequence axis), from the tensor's
// axis letters. Returns the map's axes, shape and counts.
struct ErrorMap {
  std::vector<std::string> axes;
  Shape shape;
  std::vector<int64_t> count;
  int64_t tile = 64;
};
ErrorMap error_map(const Tensor& t, const std::vector<uint8_t>& bad, int64_t tile) {
  ErrorMap m;
  m.tile = tile;
  std::vector<int> pick;  // which tensor axes are kept, and whether tiled
  std::vector<bool> tiled;
  for (size_t d = 0; d < t.axes.size(); ++d) {
    const auto& a = t.axes[d];
    if (a == "B") pick.push_back(static_cast<int>(d)), tiled.push_back(false);
    else if (a == "H" || a == "Hq" || a == "Hkv" || a == "HV" || a == "G") pick.push_back(static_cast<int>(d)), tiled.push_back(false);
    else if (a == "T" || a == "S" || a == "Sq" || a == "Sk" || a == "M" || a == "L")
      pick.push_back(static_cast<int>(d)), tiled.push_back(true);
  }
  if (pick.empty() && !t.shape.empty()) pick.push_back(0), tiled.push_back(t.shape[0] > tile);
  for (size_t j = 0; j < pick.size(); ++j) {
    const auto n = t.shape[static_cast<size_t>(pick[j])];
    m.axes.push_back(tiled[j] ? t.axes[static_cast<size_t>(pick[j])] + "/" + std::to_string(tile) : t.axes[static_cast<size_t>(pick[j])]);
    m.shape.push_back(tiled[j] ? (n + tile - 1) / tile : n);
  }
  m.count.assign(static_cast<size_t>(std::max<int64_t>(numel(m.shape), 1)), 0);
  for (size_t i = 0; i < bad.size(); ++i) {
    if (!bad[i]) continue;
    const auto idx = t.unravel(static_cast<int64_t>(i));
    int64_t flat = 0;
    for (size_t j = 0; j < pick.size(); ++j) {
      int64_t v = idx[static_cast<size_t>(pick[j])];
      if (tiled[j]) v /= tile;
      flat = flat * m.shape[j] + v;
    }
    ++m.count[static_cast<size_t>(flat)];
  }
  return m;
}

std::string worst_cells(const ErrorMap& m, int k) {
  std::vector<size_t> idx(m.count.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return m.count[a] > m.count[b]; });
  int64_t cells = 0;
  for (auto c : m.count) cells += c > 0;
  std::string s = fmt::format("error map by (");
  for (size_t j = 0; j < m.axes.size(); ++j) s += (j ? ", " : "") + m.axes[j];
  s += fmt::format("): {} of {} cells have mismatches; worst", cells, m.count.size());
  for (int r = 0; r < k && r < static_cast<int>(idx.size()) && m.count[idx[static_cast<size_t>(r)]] > 0; ++r) {
    int64_t f = static_cast<int64_t>(idx[static_cast<size_t>(r)]);
    std::vector<int64_t> c(m.shape.size());
    for (size_t j = m.shape.size(); j-- > 0;) c[j] = f % m.shape[j], f /= m.shape[j];
    s += " [";
    for (size_t j = 0; j < c.size(); ++j) s += fmt::format("{}{}={}", j ? ", " : "", m.axes[j], c[j]);
    s += fmt::format("]:{}", m.count[idx[static_cast<size_t>(r)]]);
  }
  return s;
}

void write_repro(const std::string& path, const Golden& g, const std::string& kernel,
                 const std::vector<std::vector<double>>& actual, const std::vector<Tolerance>& tols,
                 std::vector<std::string>& notes) {
  fs::create_directories(fs::path(path).parent_path());
  auto f = h5::File::create(path);
  f.set_attr("/", "op", g.prov.op);
  f.set_attr("/", "case", g.prov.case_name);
  f.set_attr("/", "kernel", kernel);
  f.set_attr("/", "case_toml", g.prov.case_toml);
  for (const char* grp : {"/inputs", "/expected", "/actual", "/absdiff", "/mismatch", "/error_map"}) f.create_group(grp);
  for (const auto& t : g.inputs) {
    const std::string ds = "/inputs/" + t.name;
    f.write(ds, h5::Elem::f64, t.shape, t.data.data());  // exact values of the storage codes
    f.set_attr(ds, "dtype", std::string(name(t.dtype)));
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const auto& o = g.outputs[k];
    const auto& e = o.expected;
    std::vector<double> d(e.data.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = std::fabs(actual[k][i] - e.data[i]);
    const std::vector<uint8_t> bad = mismatch_mask(o, tols[k], actual[k]);  // the verdict's own rule
    f.write("/expected/" + e.name, h5::Elem::f64, e.shape, e.data.data());
    f.write("/actual/" + e.name, h5::Elem::f64, e.shape, actual[k].data());
    f.write("/absdiff/" + e.name, h5::Elem::f64, e.shape, d.data());
    f.write("/mismatch/" + e.name, h5::Elem::u8, e.shape, bad.data());
    for (const char* grp : {"/expected/", "/actual/"}) f.set_attr(grp + e.name, "dtype", std::string(name(e.dtype)));
    const auto m = error_map(e, bad, 64);
    f.write("/error_map/" + e.name, h5::Elem::i64, m.shape, m.count.data());
    std::string ax;
    for (size_t j = 0; j < m.axes.size(); ++j) ax += (j ? "," : "") + m.axes[j];
    f.set_attr("/error_map/" + e.name, "axes", ax);
    int64_t nb = 0;
    for (auto b : bad) nb += b;
    if (nb) notes.push_back(fmt::format("'{}': {}", e.name, worst_cells(m, 3)));
  }
  f.close();
}

std::string safe_name(std::string s) {
  for (auto& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  return s;
}

// Compares a clean worker's candidate: fills tensors, verdict and reason.
void judge(CaseResult& cr, const Golden& g, const kernels::KernelDef& k, const std::string& cand_path, int runs,
           const TolerancePolicy& policy, const std::string& repro_dir) {
  const auto f = h5::File::open_read(cand_path);
  std::vector<std::vector<double>> actual;
  std::vector<Tolerance> tols;
  bool all_ok = true;
  std::vector<std::string> diffs;
  for (const auto& o : g.outputs) {
    const auto& e = o.expected;
    const auto c0 = read_codes(f, "/outputs/" + e.name, e);
    std::vector<double> a(c0.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = worker::decode_code(e.dtype, c0[i]);
    cr.tensors.push_back(compare_with_policy(policy, g.prov.op, o, a, k.profile));
    const Tolerance tol = cr.tensors.back().tol;
    all_ok = all_ok && cr.tensors.back().verdict == Verdict::Passed;
    for (int r = 1; r < runs; ++r) {
      const auto cr_ = read_codes(f, fmt::format("/run{}/{}", r, e.name), e);
      int64_t nd = 0, first = -1;
      for (size_t i = 0; i < c0.size(); ++i)
        if (c0[i] != cr_[i]) {
          ++nd;
          if (first < 0) first = static_cast<int64_t>(i);
        }
      if (nd)
        diffs.push_back(fmt::format("'{}': run 0 and run {} differ bitwise in {} of {} elements (first {}: {:#x} vs {:#x})",
                                    e.name, r, nd, c0.size(), e.index_str(first), c0[static_cast<size_t>(first)],
                                    cr_[static_cast<size_t>(first)]));
    }
    actual.push_back(std::move(a));
    tols.push_back(tol);
  }
  for (const auto& d : diffs) cr.findings.push_back((k.deterministic ? "nondeterministic: " : "(declared nondeterministic) ") + d);
  if (!all_ok) {
    cr.verdict = Verdict::Incorrect;
    for (const auto& t : cr.tensors)
      if (t.verdict != Verdict::Passed) {
        cr.reason = fmt::format("'{}': {} mismatches{}{}{}", t.name, t.mismatches,
                                t.first_bad >= 0 ? " first " + t.first_bad_index : std::string(),
                                t.never_pass.empty() ? std::string() : " NEVER-PASS: " + t.never_pass.front(),
                                t.hint.empty() ? std::string() : "; " + t.hint);
        break;
      }
  } else if (!diffs.empty() && k.deterministic) {
    cr.verdict = Verdict::Incorrect;
    cr.reason = "not bitwise reproducible: " + diffs.front();
  } else {
    cr.verdict = Verdict::Passed;
    cr.reason = fmt::format("{} output(s) within tolerance{}", cr.tensors.size(),
                            k.deterministic ? fmt::format(", {} runs bitwise identical", runs) : std::string());
  }
  if (cr.verdict == Verdict::Incorrect && !repro_dir.empty()) {
    cr.repro = (fs::path(repro_dir) / (safe_name(k.name) + "__" + safe_name(g.prov.op) + "__" + safe_name(g.prov.case_name) + ".h5")).string();
    try {
      std::vector<std::string> notes;
      write_repro(cr.repro, g, k.name, actual, tols, notes);
      for (auto& n : notes) cr.findings.push_back(n);
    } catch (const std::exception& e) {
      cr.findings.push_back(std::string("repro bundle not written: ") + e.what());
      cr.repro.clear();
    }
  }
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("assay") : p.string();
}

}  // namespace

// ---- the run -----------------------------------------------------------------------------------------

RunReport run_verify(const VerifyOptions& o) {
  const auto t0 = Clock::now();
  RunReport rep;
  rep.tool = o.sanitizer_tool.empty() ? "verify" : "sanitize:" + o.sanitizer_tool;
  rep.golden_dir = o.golden_dir;
  rep.fixtures_dir = o.fixtures_dir;
  rep.fixture_checked = o.fixture_check;
  rep.plugins = o.plugins;
  if (!o.sanitizer_tool.empty() && !valid_sanitizer_tool(o.sanitizer_tool))
    throw InputError(fmt::format("--tool '{}': expected memcheck, racecheck, synccheck or initcheck", o.sanitizer_tool));
  const Shard shard = o.shard.empty() ? Shard{} : Shard::parse(o.shard);
  if (!o.shard.empty()) rep.shard = o.shard;
  if (o.runs < 1 || o.runs > 8) throw InputError("--runs must be 1..8");

  for (const auto& p : o.plugins) kernels::load_plugin(p);
  const auto ks = kernels::all_kernels();
  if (!o.kernel_globs.empty())
    for (const auto& kg : o.kernel_globs) {
      bool hit = false;
      for (const auto* k : ks) hit = hit || glob_match(kg, k->name);
      if (!hit) {
        std::string known;
        for (const auto* k : ks) known += (known.empty() ? "" : ", ") + k->name;
        throw InputError(fmt::format("--kernel '{}' matches no registered kernel (known: {})", kg, known.empty() ? "none" : known));
      }
    }
  if (ks.empty())
    rep.device_error = "no kernel is registered: this assay was built without CUDA (no nvcc at build time) and no --plugin was given";
  const auto goldens = find_goldens(o.golden_dir, o.ops);
  if (goldens.empty())
    throw InputError(fmt::format("{}: no goldens{}", o.golden_dir, o.ops.empty() ? "" : " for the ops selected with --op"));
  const auto items = plan_work(ks, goldens, o.kernel_globs, o.case_globs, shard);

  // Work directory: candidates, worker logs, repro bundles.
  std::string work = o.work_dir;
  if (work.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "assay-verify-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw InputError(fmt::format("mkdtemp {}: {}", tmpl, std::strerror(errno)));
    work = tmpl;
  } else {
    fs::create_directories(work);
  }
  const std::string exe = o.self_exe.empty() ? self_exe() : o.self_exe;

  // Device probe (never under the sanitizer): a worker that only describes the GPU.
  if (!items.empty()) {
    const std::string log = work + "/probe.log";
    const auto p = run_process({exe, "__worker", "--probe"}, 120, log);
    const std::string text = slurp(log);
    if (p.exited && p.exit_code == 0) {
      std::istringstream in(text);
      std::string line;
      while (std::getline(in, line))
        if (!line.empty() && line[0] == '{') {
          try {
            rep.device = nlohmann::json::parse(line);
          } catch (const nlohmann::json::exception&) {
          }
        }
    }
    if (!rep.device.is_object()) {
      rep.device = nullptr;
      std::string t = tail_text(text, 400, 3);
      std::replace(t.begin(), t.end(), '\n', ' ');
      rep.device_error = "no usable GPU: " + (p.timed_out ? std::string("the device probe hung")
                                                          : (t.empty() ? fmt::format("device probe exit {}", p.exit_code) : t));
    }
  }
  if (!o.sanitizer_tool.empty() && rep.device.is_object()) {
    const std::string log = work + "/sanitizer-version.log";
    run_process({o.sanitizer_exe, "--version"}, 60, log);
    std::string v = tail_text(slurp(log), 400, 4);
    // "NVIDIA (R) Compute Sanitizer ... Version 2025.3.1.0 ..." -> keep the Version line
    std::istringstream in(v);
    std::string line, keep;
    while (std::getline(in, line))
      if (line.find("ersion") != std::string::npos) keep = line;
    rep.sanitizer_version = keep.empty() ? "compute-sanitizer: version unknown (" + v + ")" : keep;
  }

  // The tolerance tables of the ops being verified only: another op's half-edited fixture must not
  // stop this run.
  TolerancePolicy policy;
  {
    std::set<std::string> ops;
    for (const auto& it : items) ops.insert(it.op);
    for (const auto& op : ops) {
      const auto f = fs::path(o.fixtures_dir) / (op + ".toml");
      if (!o.fixtures_dir.empty() && fs::exists(f)) policy.add_file(f.string());
    }
    // A kernel that declares a profile its op does not have is a usage error, said before any run.
    for (const auto& it : items)
      policy.require_profile(it.op, it.kernel->profile, fmt::format("kernel '{}' ({})", it.kernel->name, it.kernel->source));
  }
  std::map<std::string, std::pair<std::shared_ptr<Golden>, StaleResult>> cache;  // golden path -> (golden, stale)
  std::map<std::string, std::string> unreadable;
  const std::string repro_dir = work + "/repro";
  size_t idx = 0;
  for (const auto& it : items) {
    ++idx;
    const auto tc = Clock::now();
    CaseResult cr;
    cr.kernel = it.kernel->name;
    cr.kernel_source = it.kernel->source;
    cr.op = it.op;
    cr.case_name = it.case_name;
    cr.golden = it.golden;
    cr.deterministic = it.kernel->deterministic;
    cr.profile = it.kernel->profile;
    auto done = [&] {
      cr.wall_s = std::chrono::duration<double>(Clock::now() - tc).count();
      if (o.verbose) fmt::print(stderr, "[{}/{}] {:<12} {} {}/{}\n", idx, items.size(), verdict_name(cr.verdict), cr.kernel, cr.op, cr.case_name);
      rep.cases.push_back(std::move(cr));
    };
    // 1. golden + staleness (once per golden)
    if (!cache.count(it.golden) && !unreadable.count(it.golden)) {
      try {
        auto g = std::make_shared<Golden>(read_golden(it.golden));
        auto st = check_stale(*g, o.fixture_check ? o.fixtures_dir : "");
        cache[it.golden] = {g, st};
      } catch (const std::exception& e) {
        unreadable[it.golden] = e.what();
      }
    }
    if (unreadable.count(it.golden)) {
      cr.verdict = Verdict::Stale;
      cr.reason = "unreadable golden: " + unreadable[it.golden];
      done();
      continue;
    }
    const auto& [g, st] = cache[it.golden];
    if (st.stale) {
      cr.verdict = Verdict::Stale;
      cr.reason = st.reason;
      done();
      continue;
    }
    // 2. can_implement
    try {
      const auto s = it.kernel->can_implement ? it.kernel->can_implement(kernel_case_of(*g)) : kernels::Support{};
      if (!s.ok) {
        cr.verdict = Verdict::NotSupported;
        cr.reason = s.reason;
        done();
        continue;
      }
    } catch (const std::exception& e) {
      cr.verdict = Verdict::Failed;
      cr.reason = std::string("can_implement threw: ") + e.what();
      done();
      continue;
    }
    // 3. a device?
    if (!rep.device.is_object()) {
      cr.verdict = Verdict::NotRun;
      cr.reason = rep.device_error;
      done();
      continue;
    }
    // 4. the worker
    const std::string dir = fmt::format("{}/{:04d}_{}__{}", work, idx, safe_name(it.kernel->name), safe_name(it.case_name));
    fs::create_directories(dir);
    std::vector<std::string> argv;
    if (!o.sanitizer_tool.empty()) argv = sanitizer_prefix(o.sanitizer_exe, o.sanitizer_tool);
    for (const auto& a : {exe, std::string("__worker"), std::string("--golden"), it.golden, std::string("--kernel"),
                          it.kernel->name, std::string("--out"), dir, std::string("--runs"), std::to_string(o.runs)})
      argv.push_back(a);
    for (const auto& p : o.plugins) argv.push_back("--plugin"), argv.push_back(p);
    const auto p = run_process(argv, o.timeout_s, dir + "/worker.log");
    const std::string log = slurp(dir + "/worker.log");
    auto w = classify_worker(p, slurp(dir + "/result.json"), log, o.timeout_s, o.sanitizer_tool);
    cr.kernel_ms = w.kernel_ms;
    cr.findings = w.findings;
    cr.sanitizer_summary = w.sanitizer_summary;
    if (w.verdict != Verdict::Passed) {
      cr.verdict = w.verdict;
      cr.reason = w.reason;
      cr.log_tail = tail_text(log, 3000, 20);
      done();
      continue;
    }
    // 5. compare + determinism
    try {
      judge(cr, *g, *it.kernel, dir + "/candidate.h5", o.runs, policy, repro_dir);
    } catch (const std::exception& e) {
      cr.verdict = Verdict::Failed;
      cr.reason = std::string("reading the worker's candidate: ") + e.what();
    }
    done();
  }
  rep.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool keep = o.keep || !o.work_dir.empty() || rep.count(Verdict::Incorrect) || rep.count(Verdict::Failed) ||
                    rep.count(Verdict::Hung);
  if (!keep) {
    std::error_code ec;
    fs::remove_all(work, ec);
  } else {
    if (o.work_dir.empty()) fmt::print(stderr, "assay: worker logs, candidates and repro bundles kept in {}\n", work);
  }
  return rep;
}

}  // namespace assay
