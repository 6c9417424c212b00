// `assay calibrate`: proves the tolerance policy of each op against the op's calibration variants
// (fixtures/gen/op.h Variant): mutants, which the gate must reject, and precision emulations,
// which it must accept under the profile they claim.
//
// For every selected op and every L0 case with a committed golden:
//   - the golden must not be Stale (verify/io/stale.h: recorded hashes, case text, regenerated inputs);
//   - every variant runs on those inputs; its outputs are rounded to each output's dtype and judged
//     by the real policy (fixtures/<op>.toml, verify/judge/tolerance.h) and the real compare_tensor;
//   - margin = max over the variant's outputs and elements of error / allowed
//     (TensorReport::max_ratio; +inf for a code, NaN/Inf-position or never-pass failure).
// Mutants are judged under every profile of the op; emulations under their own profile and, when
// that is not "strict", under strict too (they must fail there: otherwise the profile is not needed);
// strict emulations under every profile (they must pass there too: profiles are monotone).
//
// The op fails calibration (exit 1) when: a mutant is rejected on no case, or its best margin is
// below kill_min (under any profile); an emulation fails a case, or its worst margin is above
// emulation_max; a profile (strict included) has no emulation, or its emulation passes strict everywhere;
// a strict emulation is rejected under another profile; a profile entry is tighter than strict's
// tolerance for its (output, dtype) in any term; a policy entry can never be selected (no L0 golden
// has that output in that dtype); a per-dtype DEFAULT tolerance's atol alone admits a 100% error on some non-zero golden element; the op has no
// mutant. The floors come from the fixture's [calibrate] table (defaults 0.5 and 10).
//
// --baselines: each variant's outputs are also judged by the usual checks (verify/calibrate/baselines.h) on
// its own profile's cells; the summary counts, per rule, the mutants it never rejects and the
// correct emulations it rejects on some case. Information only: it changes no exit code.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace assay {

struct CalibrateOptions {
  std::string fixtures_dir, golden_dir;
  std::vector<std::string> ops;  // empty: every fixtures/*.toml whose op is built in
  std::string case_glob = "*";
  int jobs = 0;                  // parallel cases; 0 = all cores
  bool baselines = false;        // also judge each variant by the usual checks (verify/calibrate/baselines.h)
};

struct CalibrationCell {
  std::string variant, case_name, profile;
  bool applies = false, passed = true;
  double ratio = 0;          // error / allowed, worst output
  std::string worst_output;  // which output gave `ratio`
  std::string hint;          // emulations judged under strict: the profile that would describe them
  // --baselines, on the variant's own profile's cell: per rule of baselines::rules(), 1 accepted,
  // 0 rejected, -1 not applicable (over the golden's outputs the variant writes).
  std::vector<int> baselines;
};

struct VariantSummary {
  std::string name, kind, profile, what;  // kind: "mutant" | "emulation"
  int cases_applied = 0, cases_failed = 0;  // failed = rejected by the gate under `profile`
  double margin = 0;                        // mutant: best kill (strict); emulation: worst ratio
  std::string margin_case, margin_output;
  // mutants: best kill under each profile of the op; emulations (non-strict): strict failures.
  std::vector<std::pair<std::string, double>> kill_by_profile;
  int strict_failures = 0;
  std::string strict_hint;
  // strict emulations: cases rejected under some other profile of the op (must be none).
  int profile_failures = 0;
  std::string profile_hint;
  std::vector<std::string> problems;
  // --baselines: per rule, the cases it rejected and the cases it could judge.
  std::vector<int> baseline_rejected, baseline_judged;
};

struct OpCalibration {
  std::string op;
  double emulation_max = 0.5, kill_min = 10;
  std::vector<std::string> cases, profiles;
  std::vector<VariantSummary> variants;
  std::vector<CalibrationCell> cells;
  std::vector<std::string> problems;  // policy-level (dead entries, unproven profiles, lint)
  bool baselines = false;
  bool ok() const;
};

struct CalibrationReport {
  std::vector<OpCalibration> ops;
  bool ok() const;
};

CalibrationReport calibrate(const CalibrateOptions& o);
void print_calibration(const CalibrationReport& r, bool verbose);
// --baselines: per op and rule, mutants missed and correct emulations rejected, beside assay's
// (markdown; the README's table is this text).
std::string baselines_table(const CalibrationReport& r);
nlohmann::json calibration_json(const CalibrationReport& r);

}  // namespace assay
