// The runner of `assay verify` and `assay sanitize`: for each (kernel, golden case) selected,
//   1. the golden is read and checked for staleness (verify/io/stale.h)      -> Stale
//   2. the kernel's can_implement                                        -> NotSupported
//   3. no GPU (the device probe, a worker run, failed)                   -> NotRun (exit 125)
//   4. a worker process (`assay __worker`, verify/run/worker.h) runs it twice with different poison,
//      under a watchdog: killed after the timeout                        -> Hung
//      a signal, nonzero exit, CUDA or launch error, canary or input corruption -> Failed
//      (under `sanitize`: sanitizer errors or no sanitizer summary)      -> Failed
//   5. compare (verify/judge/compare.h with the tolerance policy)              -> Passed / Incorrect
//      and run 0 vs run 1 bitwise unless the kernel is nondeterministic  -> Incorrect
// Incorrect cases get a repro bundle HDF5 (inputs, expected, actual, |diff|, an error map).
#pragma once
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "verify/run/process.h"
#include "verify/report/report.h"

namespace assay {

// ---- processes (run_process: verify/run/process.h) --------------------------------------------------------

std::string signal_desc(int sig);  // "SIGSEGV (Segmentation fault)"
// The last max_lines lines (at most max_bytes) of a file.
std::string file_tail(const std::string& path, size_t max_bytes = 4000, int max_lines = 25);

// ---- selection ---------------------------------------------------------------------------------------

struct Shard {
  int k = 1, n = 1;  // 1 <= k <= n
  static Shard parse(const std::string& s);  // "k/n"; throws InputError
  bool takes(size_t i) const { return static_cast<int>(i % static_cast<size_t>(n)) == k - 1; }
};

bool glob_match(const std::string& pattern, const std::string& s);  // fnmatch

struct WorkItem {
  const kernels::KernelDef* kernel = nullptr;
  std::string golden, op, case_name;
};

// Goldens <dir>/<op>/*.h5, sorted; ops empty = all.
std::vector<std::string> find_goldens(const std::string& dir, const std::vector<std::string>& ops);
// Every (kernel, golden) with kernel->op == golden's op (the golden's folder name), filtered by
// kernel and case globs, sorted by (kernel, op, case), then sharded (item i goes to shard i % n + 1).
std::vector<WorkItem> plan_work(const std::vector<const kernels::KernelDef*>& kernels, const std::vector<std::string>& goldens,
                                const std::vector<std::string>& kernel_globs, const std::vector<std::string>& case_globs,
                                const Shard& shard);

// ---- the run -----------------------------------------------------------------------------------------

struct VerifyOptions {
  std::vector<std::string> ops, kernel_globs, case_globs, plugins;
  std::string golden_dir, fixtures_dir;
  bool fixture_check = true;
  double timeout_s = 60;
  std::string shard;       // "k/n"
  std::string work_dir;    // default: a fresh /tmp/assay-verify-XXXXXX
  bool keep = false;       // keep work_dir even when everything passed
  int runs = 2;
  std::string self_exe;    // default: /proc/self/exe
  std::string sanitizer_tool;  // "" = plain verify
  std::string sanitizer_exe = "compute-sanitizer";
  bool verbose = false;
  // Also run each kernel's declared relations (KernelDef::relations, verify/run/relations.h): one
  // more row per check, "<case>@<check>".
  bool relations = false;
};

// Runs everything; never throws for a per-case problem (it becomes that case's verdict). Throws
// InputError for bad options (unknown kernel, no goldens, bad shard).
RunReport run_verify(const VerifyOptions& o);

// The verdict for one finished worker (exposed for tests): maps the process result, the worker's
// result.json (may be absent) and the sanitizer output into a Failed/Hung reason, or "" when the
// worker ran cleanly and the candidate should be compared.
struct WorkerOutcome {
  Verdict verdict = Verdict::NotRun;  // Failed / Hung / NotRun, or Passed meaning "compare next"
  std::string reason;
  std::vector<std::string> findings;
  std::vector<double> kernel_ms;
  std::string sanitizer_summary;
};
WorkerOutcome classify_worker(const ProcResult& p, const std::string& result_json_text, const std::string& log_text,
                              double timeout_s, const std::string& sanitizer_tool);

}  // namespace assay
