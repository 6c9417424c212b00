// assay bisect GOLDEN CANDIDATE: where one candidate first goes wrong (verify/bisect.h). The golden
// is checked for staleness and the candidate is read and judged exactly as `assay compare` does.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/bisect.h"
#include "verify/cli/cli.h"
#include "verify/golden.h"
#include "verify/h5.h"
#include "verify/stale.h"

namespace assay::cli {

int run_bisect_pair(const std::string& golden, const std::string& candidate, const BisectPairCli& o, const Common& common) {
  const Golden g = read_golden(golden);
  const auto stale = check_stale(g, o.no_fixture_check ? "" : common.fixtures_dir);
  if (stale.stale) {
    fmt::print("Stale      {}/{}: {}\n", g.prov.op, g.prov.case_name, stale.reason);
    return kExitInput;
  }
  TolerancePolicy policy;
  if (const auto f = std::filesystem::path(common.fixtures_dir) / (g.prov.op + ".toml"); std::filesystem::exists(f))
    policy.add_file(f.string());
  const CandidateJudging how{o.profile, o.outputs, -1, -1};
  h5::probe_in_child(candidate, [&] { (void)bisect_candidate(g, policy, h5::File::open_read(candidate), how); });
  const auto r = bisect_candidate(g, policy, h5::File::open_read(candidate), how);
  if (common.json) std::cout << r.json().dump(2) << "\n";
  else std::cout << r.text();
  return r.any_bad() ? kExitFail : kExitPass;
}

}  // namespace assay::cli
