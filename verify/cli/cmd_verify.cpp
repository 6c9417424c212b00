// assay verify: registered and plugin kernels vs goldens on the GPU (verify/run/runner.h), and the
// hidden `assay __worker` subcommand that runs one (kernel, golden) in its own process.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "assay_build.h"
#include "assay_git_rev.h"
#include "reference/core/check.h"
#include "verify/cli/cli.h"
#include "verify/report/report_html.h"
#include "verify/run/runner.h"
#include "verify/io/safe_files.h"
#include "verify/run/sanitize.h"
#include "verify/run/worker.h"

#ifndef ASSAY_CUDA
namespace assay::worker {
int worker_main(const WorkerArgs& a) {
  const char* msg = "this assay was built without CUDA (no nvcc at build time): no kernel can run";
  if (!a.out_dir.empty()) {
    std::filesystem::create_directories(a.out_dir);
    std::ofstream(a.out_dir + "/result.json") << nlohmann::json{{"status", "no_device"}, {"message", msg}}.dump() << "\n";
  }
  std::fprintf(stderr, "assay worker: %s\n", msg);
  return kExitNoDevice;
}
}  // namespace assay::worker
#endif

namespace assay::cli {

struct VerifyCli {
  VerifyOptions o;
  std::string json_file, junit_file, html_file;
  bool list = false;
};

int run_verify_cli(VerifyCli& v, const Common& common) {
  if (v.o.golden_dir.empty()) v.o.golden_dir = default_golden_dir("L0");
  v.o.fixtures_dir = fixtures_for(common, v.o.golden_dir);
  if (!v.o.shard.empty()) (void)Shard::parse(v.o.shard);  // also with --list: 0/0 is no shard
  for (const auto& [p, opt] : {std::pair{&v.json_file, "--json-file"}, {&v.junit_file, "--junit"}, {&v.html_file, "--html"}})
    if (!p->empty()) check_output_path(*p, opt);  // before any work, not after it
  if (v.list) {
    for (const auto& p : v.o.plugins) kernels::load_plugin(p);
    for (const auto* k : kernels::all_kernels())
    {
      std::string rels;
      for (const auto& r : k->relations) rels += (rels.empty() ? "" : ",") + r;
      if (k->batch_invariant) rels += " (batch-invariant)";
      fmt::print("{:<28} op {:<14} {:<16} {}  [{}]{}\n", k->name, k->op, k->deterministic ? "deterministic" : "nondeterministic",
                 k->description, k->source, rels.empty() ? "" : "  relations: " + rels);
    }
    return kExitPass;
  }
  RunReport r = run_verify(v.o);
  r.assay_version = ASSAY_VERSION;
  r.git_rev = ASSAY_GIT_REV;
  if (common.json) std::cout << to_json(r).dump(2) << "\n";
  else print_console(r, v.o.verbose);
  if (!v.json_file.empty()) write_text_file(v.json_file, to_json(r).dump(2) + "\n");
  if (!v.junit_file.empty()) write_text_file(v.junit_file, to_junit(r));
  if (!v.html_file.empty()) write_text_file(v.html_file, to_html(r));
  if (r.cases.empty()) {
    std::cerr << "assay: no (kernel, golden) pair selected: nothing ran\n";
    return kExitCouldNotRun;
  }
  return r.exit_code();
}

void add_run_options(CLI::App* s, VerifyCli& v, Common& common) {
  auto& o = v.o;
  s->add_option("--op", o.ops, "Only these ops (golden/<op>/)");
  s->add_option("--kernel", o.kernel_globs, "Only kernels whose name matches (glob)");
  s->add_option("--case", o.case_globs, "Only cases whose name matches (glob)");
  s->add_option("--golden", o.golden_dir, "Golden directory (default: the committed L0 goldens)")->check(CLI::ExistingDirectory);
  s->add_option("--fixtures", common.fixtures_dir, "Fixtures directory (staleness check and tolerance policy)")->check(CLI::ExistingDirectory);
  s->add_flag("--no-fixture-check", [&o](int64_t) { o.fixture_check = false; },
              "Skip regenerating inputs from the fixture (input hashes are still checked)");
  s->add_option("--timeout", o.timeout_s, "Watchdog per worker, seconds (a case that takes longer is Hung)")
      ->check(kFinitePositive);
  s->add_option("--plugin", o.plugins, "Load kernels from a C ABI plugin .so (kernels/plugin/assay_plugin.h)");
  s->add_option("--shard", o.shard, "Run only shard k of n (1-based): item i goes to shard i % n + 1");
  s->add_option("--runs", o.runs, "Runs per case, each with a different poison (default 2)");
  s->add_option("--work-dir", o.work_dir, "Keep worker logs, candidates and repro bundles here");
  s->add_flag("--keep", o.keep, "Keep the work directory even when everything passed");
  s->add_flag("--json", common.json, "JSON report on stdout");
  s->add_option("--json-file", v.json_file, "Also write the JSON report to this file");
  s->add_option("--junit", v.junit_file, "Also write a JUnit XML report to this file");
  s->add_option("--html", v.html_file, "Also write a self-contained HTML report with error plots to this file");
  s->add_flag("-v,--verbose", o.verbose, "Progress on stderr and every tensor's metrics");
  s->add_flag("--relations", o.relations,
              "Also run each kernel's declared relations (batch, continuation, varlen): one row per check, <case>@<check>");
}

void add_verify(CLI::App& app, Common& common, int& rc) {
  auto v = std::make_shared<VerifyCli>();
  auto* s = app.add_subcommand("verify", "Run registered and plugin kernels against the goldens on the GPU");
  add_run_options(s, *v, common);
  s->add_flag("--list", v->list, "List the registered kernels (and those of --plugin) and exit");
  s->callback([v, &common, &rc] { rc = run_verify_cli(*v, common); });

  // Hidden: one (kernel, golden) in this process; the parent's runner starts it.
  auto w = std::make_shared<worker::WorkerArgs>();
  auto* ws = app.add_subcommand("__worker", "");
  ws->group("");
  ws->add_option("--golden", w->golden);
  ws->add_option("--kernel", w->kernel);
  ws->add_option("--out", w->out_dir);
  ws->add_option("--plugin", w->plugins);
  ws->add_option("--runs", w->runs);
  ws->add_flag("--relations", w->relations);
  ws->add_flag("--probe", w->probe);
  ws->callback([w, &rc] { rc = worker::worker_main(*w); });
}

// assay sanitize --tool memcheck|racecheck|synccheck|initcheck [verify options]: the same run with
// every worker under compute-sanitizer (verify/run/sanitize.h); errors or a missing summary -> Failed.
void add_sanitize(CLI::App& app, Common& common, int& rc) {
  auto v = std::make_shared<VerifyCli>();
  v->o.timeout_s = 600;
  auto* s = app.add_subcommand("sanitize", "Run the verify workers under compute-sanitizer");
  s->add_option("--tool", v->o.sanitizer_tool, "memcheck (with --leak-check full), racecheck, synccheck or initcheck")
      ->required();
  s->add_option("--sanitizer", v->o.sanitizer_exe, "compute-sanitizer executable (default: on PATH)");
  add_run_options(s, *v, common);
  s->callback([v, &common, &rc] { rc = run_verify_cli(*v, common); });
}

}  // namespace assay::cli
