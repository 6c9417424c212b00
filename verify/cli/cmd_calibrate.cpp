// assay calibrate [--op OP]... [--case GLOB] [--json] [--json-file F] [-v] [--baselines]: the kill matrix and the
// precision-emulation margins of each op's tolerance policy (verify/calibrate/calibrate.h). Exit 0 when
// every op calibrates, 1 when one does not, 2 on bad input.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/calibrate/calibrate.h"
#include "verify/cli/cli.h"
#include "verify/report/report_html.h"
#include "verify/io/safe_files.h"
#include "verify/judge/verdict.h"

namespace assay::cli {

void add_calibrate(CLI::App& app, Common& common, int& rc) {
  auto o = std::make_shared<CalibrateOptions>();
  auto json_file = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  auto* s = app.add_subcommand("calibrate", "Prove each op's tolerances: mutants must be rejected, precision emulations accepted");
  s->add_option("--op", o->ops, "Only these ops (default: every op with a fixture)");
  s->add_option("--case", o->case_glob, "Only L0 cases whose name matches this glob");
  s->add_option("--golden", o->golden_dir, "Golden directory (default: the committed golden/)")->check(CLI::ExistingDirectory);
  s->add_option("--fixtures", common.fixtures_dir, "Fixtures directory")->check(CLI::ExistingDirectory);
  s->add_option("-j,--jobs", o->jobs, "Parallel cases, 1 to 256 (default: all cores)")->check(CLI::Range(1, 256));
  s->add_flag("--json", common.json, "The report as JSON on stdout (kill matrix included)");
  s->add_option("--json-file", *json_file, "Also write the JSON report to this file");
  s->add_flag("-v,--verbose", *verbose, "Print the whole kill matrix");
  s->add_flag("--baselines", o->baselines,
              "Also judge every variant by the usual checks (assert_close, KernelBench, fla, flash-attention, "
              "mamba_ssm's p95) and print, per op and check, the mutants missed and correct emulations rejected");
  s->callback([o, json_file, verbose, &common, &rc] {
    if (o->golden_dir.empty()) o->golden_dir = default_golden_dir("L0");
    o->fixtures_dir = fixtures_for(common, o->golden_dir);
    if (!json_file->empty()) check_output_path(*json_file, "--json-file");  // before the work, not after
    const auto r = calibrate(*o);
    const auto j = calibration_json(r);
    if (common.json) std::cout << j.dump(2) << "\n";
    else print_calibration(r, *verbose);
    if (!json_file->empty()) {
      write_text_file(*json_file, j.dump(2) + "\n");
    }
    rc = r.ok() ? kExitPass : kExitFail;
  });
}

}  // namespace assay::cli
