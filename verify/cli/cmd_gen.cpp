// assay gen: fixtures -> goldens. Cases run side by side (OpenMP), largest first, each with a share
// of the -j threads by its work, and only as many at once as fit into the memory budget by their
// estimates (fixtures/gen/schedule.h CaseScheduler: --max-memory / $ASSAY_MAX_MEMORY, else 0.8 of
// MemAvailable); HDF5 writes are serialised.
//   assay gen [--op OP]... [--case GLOB] [--level L0|L1|L2] [--out DIR] [--check] [--list] [-j N]
//             [--shard k/n]
// --shard k/n: only the k-th of n work-balanced parts of the selected cases (a job array's task);
// shards writing into one directory update their own MANIFEST lines under a lock.
// --check regenerates in memory and compares with the stored goldens and MANIFEST: inputs
// bit-identical, outputs within 1e-12 relative, the stored file's own content hashes intact
// (verify/io/stale.h); missing, orphaned or stale files are reported, and how many are bit-identical.
#include <fcntl.h>
#include <fnmatch.h>
#include <omp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assay_build.h"
#include "assay_git_rev.h"
#include "fixtures/gen/op.h"
#include "fixtures/gen/schedule.h"
#include "reference/core/check.h"
#include "verify/cli/cli.h"
#include "verify/judge/compare.h"
#include "verify/io/golden.h"
#include "verify/io/safe_files.h"
#include "verify/io/stale.h"
#include "verify/judge/verdict.h"
#include "verify/run/runner.h"

namespace fs = std::filesystem;

namespace assay::cli {
namespace {

struct GenOpts {
  std::vector<std::string> ops;
  std::string case_glob = "*", level = "L0", out;
  bool check = false, list = false, quiet = false;
  int jobs = 0;
  std::string shard;  // "k/n"
};

struct Job {
  const gen::Fixture* fx;
  const gen::Case* c;
  const gen::OpDef* op;
  std::string status = "ok";  // ok | input-error | disagreement | mismatch | error
  std::vector<std::string> messages;
  std::vector<FormAgreement> agreement;
  std::string manifest;
  double seconds = 0;
  double work = 1;    // gen::case_work: orders the cases and shares the threads
  int threads = 1;    // the threads its oracles ran on
  int lent = 0;       // the most threads of ended cases it borrowed at once (fixtures/gen/lend.h)
  double memory = 0;  // gen::case_memory on those threads: the bytes it was budgeted
  bool identical = false;  // --check: the stored golden's content hash equals the fresh one's
};

// `<case>.h5.tmp.<pid>` files whose process is gone (a run killed mid-write; write_golden
// renames its temp file into place or removes it). A live pid's file is another run's: kept.
// `only` given: just these cases' files (a shard leaves the others' alone: their writer may be a
// live process on another machine sharing the directory, whose pid means nothing here).
std::vector<std::string> remove_stale_temps(const fs::path& dir, const std::set<std::string>* only = nullptr) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto k = name.rfind(".h5.tmp.");
    if (k == std::string::npos) continue;
    if (only && !only->count(name.substr(0, k))) continue;
    const std::string digits = name.substr(k + 8);
    long pid = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size() || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) removed.push_back(it->path().string());
  }
  return removed;
}

Golden pack(const gen::Case& c, gen::Generated&& g) {
  Golden gd;
  auto& p = gd.prov;
  p.op = c.op;
  p.case_name = c.name;
  p.level = c.level;
  p.case_toml = c.text;
  p.seed = c.seed;
  p.generator = std::string("assay ") + ASSAY_VERSION;
  p.git_rev = ASSAY_GIT_REV;
  p.compiler = ASSAY_CXX_COMPILER;
  gd.input_hashes = g.input_hashes;
  // Random inputs the case asks to store as recipes (case field `inputs`, golden/SCHEMA.md).
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (g.store_as_recipe(i)) {
      gd.input_recipes.resize(g.inputs.size());
      gd.input_recipes[i] = g.recipes[i];
    }
  gd.inputs = std::move(g.inputs);
  gd.outputs = std::move(g.result.outputs);
  gd.sample = std::move(g.sample);
  gd.intermediates = std::move(g.result.intermediates);
  gd.intermediate_bounds = std::move(g.result.intermediate_bounds);
  gd.agreement = std::move(g.result.agreement);
  gd.single_form = std::move(g.result.single_form);
  gd.case_fields = c.resolved();
  return gd;
}

std::map<std::string, std::string> read_manifest(const fs::path& p) {
  std::map<std::string, std::string> m;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    m[line.substr(0, line.find(' '))] = line;
  }
  return m;
}

void write_manifest(const fs::path& p, const std::map<std::string, std::string>& m) {
  check_output_path(p.string(), "MANIFEST");  // never renamed over a device, FIFO or link
  const auto tmp = p.string() + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp);
    out << "# assay golden manifest: <op>/<case>.h5 <level> <input>=<fnv1a64 of storage bits> ...\n"
           "# Written by `assay gen`; checked by `assay gen --check`. Do not edit by hand.\n";
    for (const auto& [k, v] : m) out << v << "\n";
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw InputError(fmt::format("{}: cannot write (disk full?)", p.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError(fmt::format("{}: cannot replace: {}", p.string(), ec.message()));
  }
}

int run_gen(const GenOpts& o, const Common& common) {
  if (o.level != "L0" && o.level != "L1" && o.level != "L2")
    throw InputError(fmt::format("--level: expected L0, L1 or L2 (got '{}')", o.level));
  // Which fixture files: beside the goldens being written or checked (fixtures_for).
  const fs::path out = o.out.empty() ? fs::path(default_golden_dir(o.level)) : fs::path(o.out);
  const std::string fixtures_dir = fixtures_for(common, out.string());
  std::vector<std::string> ops = o.ops;
  if (ops.empty()) {
    std::error_code ec;
    if (!fs::is_directory(fixtures_dir, ec)) throw InputError(fmt::format("{}: no such fixtures directory", fixtures_dir));
    for (const auto& de : fs::directory_iterator(fixtures_dir))
      if (de.path().extension() == ".toml") ops.push_back(de.path().stem().string());
    std::sort(ops.begin(), ops.end());
  }
  std::vector<std::unique_ptr<gen::Fixture>> fixtures;
  std::vector<Job> jobs;
  for (const auto& name : ops) {
    const auto* op = gen::find_op(name);
    const auto path = (fs::path(fixtures_dir) / (name + ".toml")).string();
    if (!op) {
      std::string known;
      for (const auto& n : gen::op_names()) known += (known.empty() ? "" : ", ") + n;
      throw InputError(fmt::format("{}: unknown op '{}' (built-in ops: {})", path, name, known));
    }
    fixtures.push_back(std::make_unique<gen::Fixture>(gen::load_fixture(path)));
    for (const auto& c : fixtures.back()->cases)
      if (c.level == o.level && fnmatch(o.case_glob.c_str(), c.name.c_str(), 0) == 0)
        jobs.push_back(Job{fixtures.back().get(), &c, op, "ok", {}, {}, {}, 0, gen::case_work(c)});
  }
  if (!o.shard.empty()) {
    const Shard sh = Shard::parse(o.shard);
    std::vector<double> work;
    for (const auto& j : jobs) work.push_back(j.work);
    const auto part = gen::assign_shards(work, sh.n);
    std::vector<Job> mine;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (part[i] == sh.k - 1) mine.push_back(std::move(jobs[i]));
    jobs = std::move(mine);
  }
  const int total_threads = o.jobs > 0 ? o.jobs : omp_get_max_threads();
  if (o.list) {
    // With the memory estimate on every thread of -j (fixtures/gen/schedule.h case_memory).
    for (const auto& j : jobs)
      std::cout << fmt::format("{}/{}  {}  {:.3g} GB\n", j.c->op, j.c->name, j.c->level,
                               gen::case_memory(*j.op, *j.c, total_threads) / 1e9);
    return kExitPass;
  }
  if (!o.check) check_output_path((out / "MANIFEST").string(), "MANIFEST");  // before any golden is written
  const bool tty = isatty(fileno(stderr)) && !o.quiet && !common.json;
  int done = 0;
  const int n = static_cast<int>(jobs.size());
  const auto t0 = std::chrono::steady_clock::now();
  if (!o.check) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out))
      throw InputError(fmt::format("{}: --out: cannot create the output directory ({})", out.string(),
                                   ec ? ec.message() : "a file is in the way"));
    std::map<std::string, std::set<std::string>> shard_cases;  // op -> this shard's case names
    for (const auto& j : jobs) shard_cases[j.c->op].insert(j.c->name);
    for (const auto& op : ops)
      for (const auto& f : remove_stale_temps(out / op, o.shard.empty() ? nullptr : &shard_cases[op]))
        if (!o.quiet && !common.json) fmt::print(stderr, "gen: removed {} (left by a killed run)\n", f);
  }

  // Each op's tolerance policy: a golden whose own /rounded codes its strict rule rejects is never
  // written (check_rounded_accepted).
  std::map<std::string, TolerancePolicy> policies;
  for (const auto& fx : fixtures) policies[fx->op] = TolerancePolicy::for_fixture(*fx);

  // Largest first; each case's oracles get the threads ThreadBudget gives it (nested OpenMP).
  std::vector<size_t> order(jobs.size());
  double total_work = 0;
  for (size_t i = 0; i < order.size(); ++i) order[i] = i, total_work += jobs[i].work;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[a].work > jobs[b].work; });
  // Memory: --max-memory / $ASSAY_MAX_MEMORY if given, else a fraction of what is available now.
  const double mem_budget = max_memory_given() ? static_cast<double>(*max_memory_given()) : gen::default_memory_budget();
  std::vector<double> works;
  for (const size_t i : order) works.push_back(jobs[i].work);
  gen::CaseScheduler budget(total_threads, mem_budget, works, [&](size_t k, int t) {
    const Job& j = jobs[order[k]];
    return gen::case_memory(*j.op, *j.c, t);
  });
  // Level 1: the cases; 2: a case's oracle loops or a recipe input's block hashing; 3: loops those
  // nest. A sampled case's slices run on std::threads (fixtures/gen/op.cpp run_sampled), each its own
  // OpenMP initial thread with its share of the case's threads (attention splits a slice's query
  // tiles; the others' loops over (sequence, head) have one item there).
  omp_set_max_active_levels(3);
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);

#pragma omp parallel for schedule(dynamic, 1) num_threads(std::max(1, std::min(budget.total_threads(), n)))
  for (int oi = 0; oi < n; ++oi) {
    Job& j = jobs[order[static_cast<size_t>(oi)]];
    const auto slot = budget.start(static_cast<size_t>(oi));  // waits until its memory estimate fits
    const int threads = slot.threads;
    j.memory = slot.bytes;
    if (slot.alone) {
#pragma omp critical(progress)
      fmt::print(stderr, "gen: {}/{} needs about {:.3g} GB, more than the memory budget of {:.3g} GB: it runs alone\n",
                 j.c->op, j.c->name, slot.bytes / 1e9, mem_budget / 1e9);
    }
    omp_set_num_threads(threads);
    const gen::LenderScope lend(&budget.lender(static_cast<size_t>(oi)));  // threads of ended cases, once all started
    const auto s0 = std::chrono::steady_clock::now();
    const auto file = out / golden_rel_path(j.c->op, j.c->name);
    try {
      Golden g = pack(*j.c, gen::generate_case(*j.op, *j.c));
      check_rounded_accepted(g, policies.at(j.c->op));
      j.agreement = g.agreement;
      j.manifest = manifest_line(g);
      if (o.check) {
        std::error_code ec;
        if (!fs::exists(file, ec)) {
          j.status = "mismatch";
          j.messages.push_back(fmt::format("{}: missing (run: assay gen --op {})", file.string(), j.c->op));
        } else {
          Golden stored;
#pragma omp critical(hdf5)
          {
            try {
              // Inputs compared by hash, a recipe input by its recipe and recorded hash against the
              // case's and the fresh codes' (golden_diff): not regenerated a second time, and
              // nothing slow inside this critical section, which every case's HDF5 access shares.
              stored = read_golden_recipes_unhashed(file.string());
            } catch (const std::exception& e) {
              j.messages.push_back(e.what());
            }
          }
          if (!j.messages.empty()) j.status = "mismatch";
          else {
            // The stored file must be what it recorded (hashes, case text) and what the oracles
            // give now: bit-identical (same content hash), or within golden_diff's limits.
            j.messages = golden_diff(g, stored);
            if (const auto st = check_stale(stored, ""); st.stale) j.messages.push_back("stored golden is Stale: " + st.reason);
            j.identical = content_hash(g) == stored.recorded_content_hash;
            if (!j.messages.empty()) j.status = "mismatch";
          }
        }
      } else {
        // No exception may leave an OpenMP critical section (it would terminate the process):
        // the write's error travels out as a value.
        std::string write_error;
#pragma omp critical(hdf5)
        {
          try {
            write_golden(file.string(), g);
          } catch (const std::exception& e) {
            write_error = e.what();
          }
        }
        if (!write_error.empty()) {
          j.manifest.clear();  // no golden, no MANIFEST line
          throw InputError(write_error);
        }
      }
    } catch (const InputError& e) {
      j.status = "input-error";
      j.messages.push_back(e.what());
    } catch (const OracleDisagreement& e) {
      j.status = "disagreement";
      j.messages.push_back(e.what());
    } catch (const std::exception& e) {
      j.status = "error";
      j.messages.push_back(e.what());
    }
    j.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    j.threads = threads;
    j.lent = budget.peak_borrowed(static_cast<size_t>(oi));
    budget.finish(static_cast<size_t>(oi), slot);
#pragma omp critical(progress)
    {
      ++done;
      if (tty) {
        const int w = 30, f = n ? done * w / n : w;
        fmt::print(stderr, "\r[{}{}] {}/{} {:<50.50}", std::string(static_cast<size_t>(f), '#'),
                   std::string(static_cast<size_t>(w - f), '.'), done, n, j.c->op + "/" + j.c->name);
        if (done == n) fmt::print(stderr, "\n");
      } else if (!o.quiet) {  // also under --json (stdout): a run killed part way shows what it finished
        fmt::print(stderr, "gen [{}/{}] {}/{} {} ({:.2f} s on {} threads{})\n", done, n, j.c->op, j.c->name, j.status, j.seconds,
                   threads, j.lent ? fmt::format(", up to {} more lent", j.lent) : "");
      }
    }
  }

  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  auto secs_of = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  const double cpu_s = secs_of(ru1.ru_utime) - secs_of(ru0.ru_utime) + secs_of(ru1.ru_stime) - secs_of(ru0.ru_stime);

  // MANIFEST, orphans. A shard owns only its own cases' lines; shards sharing a directory take
  // turns (an flock on the directory itself, so nothing is left in it) so that no line is lost.
  std::vector<std::string> global_msgs;
  const bool whole_ops = o.case_glob == "*" && o.shard.empty();
  const fs::path mpath = out / "MANIFEST";
  struct DirLock {  // closing the descriptor releases the flock
    int fd = -1;
    ~DirLock() {
      if (fd >= 0) ::close(fd);
    }
  } lock;
  if (!o.check) {
    lock.fd = ::open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX) != 0)
      throw InputError(fmt::format("{}: cannot lock the directory for its MANIFEST ({})", out.string(), std::strerror(errno)));
  }
  auto manifest = read_manifest(mpath);
  std::map<std::string, std::string> fresh;
  for (const auto& j : jobs)
    if (!j.manifest.empty()) fresh[golden_rel_path(j.c->op, j.c->name)] = j.manifest;
  std::set<std::string> processed_ops(ops.begin(), ops.end());
  auto op_of = [](const std::string& key) { return key.substr(0, key.find('/')); };
  bool all_ok = std::all_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.status == "ok"; });
  if (whole_ops) {
    for (const auto& opname : processed_ops) {
      const fs::path dir = out / opname;
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) continue;
      for (const auto& de : fs::directory_iterator(dir)) {
        if (de.path().extension() != ".h5") continue;
        const auto key = opname + "/" + de.path().filename().string();
        bool known = false;
        for (const auto& j : jobs) known |= golden_rel_path(j.c->op, j.c->name) == key;
        if (known) continue;
        if (o.check) global_msgs.push_back(fmt::format("{}: orphan golden (no {} case in its fixture)", de.path().string(), o.level));
        else {
          fs::remove(de.path());
          if (!o.quiet && !common.json) fmt::print(stderr, "gen: removed orphan {}\n", de.path().string());
        }
      }
    }
  }
  if (o.check) {
    for (const auto& [k, v] : fresh) {
      auto it = manifest.find(k);
      if (it == manifest.end()) global_msgs.push_back(fmt::format("{}: no MANIFEST entry for {}", mpath.string(), k));
      else if (it->second != v) global_msgs.push_back(fmt::format("{}: entry for {} differs:\n  have {}\n  want {}", mpath.string(), k, it->second, v));
    }
    if (whole_ops)
      for (const auto& [k, v] : manifest)
        if (processed_ops.count(op_of(k)) && !fresh.count(k))
          global_msgs.push_back(fmt::format("{}: entry {} has no {} case", mpath.string(), k, o.level));
  } else if (all_ok || !fresh.empty()) {
    if (whole_ops)
      for (auto it = manifest.begin(); it != manifest.end();)
        it = processed_ops.count(op_of(it->first)) && !fresh.count(it->first) ? manifest.erase(it) : std::next(it);
    for (const auto& [k, v] : fresh) manifest[k] = v;
    if (!jobs.empty() || whole_ops) write_manifest(mpath, manifest);
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int rc = kExitPass;
  int n_ok = 0;
  for (const auto& j : jobs) {
    if (j.status == "ok") ++n_ok;
    else if (j.status == "input-error") rc = std::max(rc, kExitInput);
    else if (j.status == "error") rc = std::max(rc, kExitCouldNotRun);
    else if (rc != kExitInput && rc != kExitCouldNotRun) rc = kExitFail;
  }
  if (!global_msgs.empty() && rc == kExitPass) rc = kExitFail;
  if (jobs.empty() && rc == kExitPass && (!o.ops.empty() || o.case_glob != "*")) {
    // An explicit --op/--case selecting nothing is a usage error, not a silent pass.
    throw InputError(fmt::format("no {} case matches --case '{}' in the selected fixtures", o.level, o.case_glob));
  }

  if (common.json) {
    nlohmann::json js;
    js["command"] = o.check ? "gen --check" : "gen";
    js["level"] = o.level;
    js["out"] = out.string();
    js["seconds"] = secs;
    js["cpu_seconds"] = cpu_s;
    js["threads"] = budget.total_threads();
    js["memory_budget"] = mem_budget;
    js["memory_peak_estimate"] = budget.peak();
    if (!o.shard.empty()) js["shard"] = o.shard;
    js["exit_code"] = rc;
    for (const auto& j : jobs) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& x : j.agreement) a.push_back({{"tensor", x.tensor}, {"forms", x.form_a + " vs " + x.form_b}, {"max_rel", x.max_rel}});
      js["cases"].push_back({{"op", j.c->op}, {"case", j.c->name}, {"status", j.status}, {"seconds", j.seconds},
                             {"threads", j.threads}, {"threads_lent", j.lent}, {"memory_estimate", j.memory},
                             {"agreement", a}, {"messages", j.messages}});
      if (o.check) js["cases"].back()["bit_identical"] = j.identical;
    }
    js["messages"] = global_msgs;
    std::cout << js.dump(2) << "\n";
  } else {
    for (const auto& j : jobs)
      for (const auto& m : j.messages) std::cerr << "assay gen: " << j.c->op << "/" << j.c->name << ": " << j.status << ": " << m << "\n";
    for (const auto& m : global_msgs) std::cerr << "assay gen: " << m << "\n";
    struct OpRow {
      int cases = 0, ok = 0;
      double worst = 0, secs = 0;
    };
    std::map<std::string, OpRow> rows;
    double worst = 0;
    for (const auto& j : jobs) {
      auto& r = rows[j.c->op];
      ++r.cases;
      r.ok += j.status == "ok";
      r.secs += j.seconds;
      for (const auto& a : j.agreement) r.worst = std::max(r.worst, a.max_rel), worst = std::max(worst, a.max_rel);
    }
    {
      fmt::print("{:<20} {:>6} {:>6} {:>18} {:>9}\n", "op", "cases", "ok", "oracle agreement", "case s");
      for (const auto& [op, r] : rows) fmt::print("{:<20} {:>6} {:>6} {:>18.2e} {:>9.2f}\n", op, r.cases, r.ok, r.worst, r.secs);
    }
    fmt::print("assay gen{}: {}/{} {} cases {} in {:.1f} s (worst oracle-form agreement {:.2e}) -> {}\n",
               o.check ? " --check" : "", n_ok, n, o.level, o.check ? "match" : "written", secs, worst, out.string());
    // How busy the machine was: CPU time over wall time and the threads given (-j).
    const auto big = std::max_element(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.seconds < b.seconds; });
    if (big != jobs.end())
      fmt::print("  CPU {:.1f} s in {:.1f} s on {} threads: {:.0f}% busy{}; longest case {}/{} {:.1f} s on {} thread{}\n",
                 cpu_s, secs, budget.total_threads(), secs > 0 ? 100.0 * cpu_s / (secs * budget.total_threads()) : 0.0,
                 o.shard.empty() ? "" : fmt::format(" (shard {})", o.shard), big->c->op, big->c->name, big->seconds,
                 big->threads, big->threads == 1 ? "" : "s");
    if (!jobs.empty())
      fmt::print("  memory: estimates of the cases running at once {:.3g} GB at most, {} at once at most, within a budget of "
                 "{:.3g} GB ({})\n",
                 budget.peak() / 1e9, budget.peak_running(), mem_budget / 1e9,
                 max_memory_given() ? "--max-memory" : fmt::format("{:.0f}% of MemAvailable", 100 * gen::kMemoryFraction));
    if (o.check)
      fmt::print("  {}/{} bit-identical to the stored goldens (same content hash); the rest within 1e-12 relative\n",
                 std::count_if(jobs.begin(), jobs.end(), [](const Job& j) { return j.identical; }), n);
  }
  return rc;
}

}  // namespace

void add_gen(CLI::App& app, Common& common, int& rc) {
  auto o = std::make_shared<GenOpts>();
  auto* s = app.add_subcommand("gen", "Generate goldens from fixtures (both oracle forms, cross-checked)");
  s->add_option("--op", o->ops, "Only these ops (default: every fixtures/*.toml)");
  s->add_option("--case", o->case_glob, "Only cases whose name matches this glob");
  s->add_option("--level", o->level, "Fixture level: L0 (committed), L1, L2")->check(CLI::IsMember({"L0", "L1", "L2"}));
  s->add_option("--out", o->out, "Output directory (default: golden/ for L0, <build>/golden-<level> otherwise)")
      ->check(kNonEmpty);
  s->add_option("--fixtures", common.fixtures_dir, "Fixtures directory")->check(CLI::ExistingDirectory);
  s->add_flag("--check", o->check, "Regenerate in memory and compare with the stored goldens and MANIFEST");
  s->add_flag("--list", o->list, "List the selected cases and exit");
  s->add_flag("--json", common.json, "Machine-readable summary on stdout");
  s->add_flag("-q,--quiet", o->quiet, "No progress output");
  s->add_option("-j,--jobs", o->jobs,
                "Threads in all, 1 to 256 (default: all cores): cases side by side, each with a share by its work, as "
                "many at once as their memory estimates fit into --max-memory (default: 80% of MemAvailable)")
      ->check(CLI::Range(1, 256));
  s->add_option("--shard", o->shard, "Only part k of n (k/n) of the selected cases, split by work (job arrays)");
  s->callback([o, &common, &rc] { rc = run_gen(*o, common); });
}

}  // namespace assay::cli
