// assay: fixtures -> goldens (gen), what a golden holds (inspect), golden vs candidate (compare).
// Exit codes: 0 pass, 1 numerical failure, 2 usage or input error, 125 could not run.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "assay_build.h"
#include "reference/core/check.h"
#include "reference/core/prefault.h"
#include "reference/core/tensor.h"
#include "verify/cli/cli.h"
#include "verify/verdict.h"

namespace assay::cli {

std::string default_fixtures_dir() {
  // $ASSAY_FIXTURES, else the source tree this binary was built from, else ./fixtures (a copy
  // of the tree elsewhere, e.g. on a GPU machine).
  if (const char* e = std::getenv("ASSAY_FIXTURES")) return e;
  const std::string built = std::string(ASSAY_SOURCE_DIR) + "/fixtures";
  return std::filesystem::is_directory(built) ? built : "fixtures";
}
std::string default_golden_dir(const std::string& level) {
  if (level == "L0") {
    if (const char* e = std::getenv("ASSAY_GOLDEN")) return e;
    const std::string built = std::string(ASSAY_SOURCE_DIR) + "/golden";
    return std::filesystem::is_directory(built) ? built : "golden";
  }
  return std::string(ASSAY_BINARY_DIR) + "/golden-" + level;
}

}  // namespace assay::cli

int main(int argc, char** argv) {
  using namespace assay;
  keep_freed_memory();  // fresh outputs reuse mapped pages (prefault.h)
  CLI::App app{"assay " ASSAY_VERSION ": reference oracles, goldens and a differential gate for GPU kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("assay ") + ASSAY_VERSION);
  // A global option, also accepted after the subcommand (fallthrough): `assay gen --max-memory 8G`.
  app.fallthrough();
  app.add_option_function<int64_t>("--max-memory", [](const int64_t& b) { set_memory_limit(b); },
                                   "Refuse a tensor or dataset larger than this (bytes, or 512M / 8G; default: a quarter of RAM)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber);
  cli::Common common;
  common.fixtures_dir = cli::default_fixtures_dir();
  int rc = kExitPass;
  cli::add_gen(app, common, rc);
  cli::add_inspect(app, common, rc);
  cli::add_compare(app, common, rc);
  cli::add_verify(app, common, rc);
  cli::add_sanitize(app, common, rc);
  cli::add_calibrate(app, common, rc);
  cli::add_bisect(app, common, rc);
  // An unknown first word is named as such (CLI11 alone says "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto* sc : app.get_subcommands([](const CLI::App*) { return true; })) {
      found = found || sc->get_name() == argv[1];
      if (sc->get_name().rfind("__", 0) != 0) known += (known.empty() ? "" : ", ") + sc->get_name();
    }
    if (!found) {
      std::cerr << "assay: usage error: unknown subcommand '" << argv[1] << "' (" << known << ")\n";
      return kExitInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "assay: usage error: " << e.what() << " (see assay --help)\n";
    return kExitInput;
  } catch (const InputError& e) {
    std::cerr << "assay: error: " << e.what() << "\n";
    return kExitInput;
  } catch (const OracleDisagreement& e) {
    std::cerr << "assay: oracle disagreement: " << e.what() << "\n";
    return kExitFail;
  } catch (const std::exception& e) {
    std::cerr << "assay: internal error: " << e.what() << "\n";
    return kExitCouldNotRun;
  }
  return rc;
}
