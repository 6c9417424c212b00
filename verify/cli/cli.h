// The assay CLI: subcommand entry points and shared options.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace assay::cli {

struct Common {
  bool json = false;
  std::string fixtures_dir;  // --fixtures; empty: found from the goldens (fixtures_for)
};

void add_gen(CLI::App& app, Common& common, int& rc);
void add_inspect(CLI::App& app, Common& common, int& rc);
void add_compare(CLI::App& app, Common& common, int& rc);
void add_verify(CLI::App& app, Common& common, int& rc);    // verify + the hidden __worker
void add_sanitize(CLI::App& app, Common& common, int& rc);
void add_calibrate(CLI::App& app, Common& common, int& rc);
void add_bisect(CLI::App& app, Common& common, int& rc);  // bisect GOLDEN CANDIDATE, and bisect --git

// assay bisect GOLDEN CANDIDATE (cmd_bisect_pair.cpp): 1 when an output is out of tolerance (the
// first bad position printed), 0 when every output is within it.
struct BisectPairCli {
  std::string profile;
  std::vector<std::string> outputs;
  bool no_fixture_check = false;
  std::string repro;  // bundle prefix ("" = <candidate without .h5>.bisect)
  bool no_repro = false;
};
int run_bisect_pair(const std::string& golden, const std::string& candidate, const BisectPairCli& o, const Common& common);
// bisect --kernel K --case C: runs the kernel on the case's golden through the verify runner (GPU),
// keeps its candidate (with the intermediates it declares) and bisects it as above.
int run_bisect_kernel(const std::string& kernel, const std::string& case_glob, const std::vector<std::string>& plugins,
                      const std::string& golden_dir, const std::string& work_dir, double timeout_s, BisectPairCli o,
                      const Common& common);

// The fixtures that judge (or generate) the goldens at `golden` (a golden file or a golden
// directory), never the current directory's: --fixtures, else $ASSAY_FIXTURES, else the nearest
// `fixtures/` holding *.toml beside an ancestor of `golden` (the repository's layout, golden/<op>/
// <case>.h5 next to fixtures/, and the install's share/assay/{golden,fixtures}), else the installed
// data (<exe>/../share/assay/fixtures), else the source tree this binary was built from.
// InputError naming every place it looked when none exists.
// With `op`, a fixtures/ folder counts only if it holds <op>.toml.
std::string fixtures_for(const Common& common, const std::string& golden, const std::string& op = "");
// Validators: a finite number >= 0 (tolerances), a finite number > 0 (timeouts). NaN and Inf fail.
inline const CLI::Validator kFiniteNonNegative(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !(v >= 0) || !std::isfinite(v)) return "must be a finite number >= 0, not " + s;
      return {};
    },
    "FINITE>=0");
inline const CLI::Validator kNonEmpty(
    [](std::string& s) -> std::string { return s.empty() ? "must not be empty" : std::string(); }, "NONEMPTY");
inline const CLI::Validator kFinitePositive(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !(v > 0) || !std::isfinite(v)) return "must be a finite number > 0, not " + s;
      return {};
    },
    "FINITE>0");
// The memory limit given by --max-memory or $ASSAY_MAX_MEMORY (main.cpp), or nullopt when neither
// is: `gen` then budgets a fraction of the available memory (fixtures/gen/schedule.h).
std::optional<int64_t> max_memory_given();
void set_max_memory_given(int64_t bytes);

// L0: $ASSAY_GOLDEN, else the installed data (<exe>/../share/assay/golden), else the source tree's
// golden/ (InputError when none exists); L1/L2: <build>/golden-<level>.
std::string default_golden_dir(const std::string& level);

}  // namespace assay::cli
