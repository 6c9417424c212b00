// `assay bisect GOLDEN CANDIDATE` over the outputs (verify/bisect.h): a candidate that goes wrong
// from a position chosen by the test on is bisected to exactly that position and its chunk.
#include <cmath>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "catch_compat.h"
#include "tests/common.h"
#include "verify/bisect.h"
#include "verify/golden.h"
#include "verify/h5.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {

// The golden's outputs rounded to their dtypes, as float32; from sequence position `from` on,
// every element of the output `name` is off by `rel` relative (and by `rel` * max|out| absolute,
// so that small elements are off too).
void write_planted(const fs::path& path, const Golden& g, const std::string& name, int64_t from, double rel) {
  auto h = h5::File::create(path.string());
  h.create_group("/outputs");
  for (const auto& o : g.outputs) {
    const auto& e = o.expected;
    int64_t t_axis = -1;
    for (size_t d = 0; d < e.axes.size(); ++d)
      if (e.axes[d] == "T") t_axis = static_cast<int64_t>(d);
    double scale = 0;
    for (double x : e.data) scale = std::max(scale, std::fabs(x));
    std::vector<float> v(e.data.size());
    for (size_t i = 0; i < v.size(); ++i) {
      double x = round_to(e.dtype, e.data[i]);
      if (e.name == name && t_axis >= 0 && e.unravel(static_cast<int64_t>(i))[static_cast<size_t>(t_axis)] >= from)
        x = x * (1 + rel) + rel * scale;
      v[i] = static_cast<float>(x);
    }
    h.write("/outputs/" + e.name, h5::Elem::f32, e.shape, v.data());
  }
}

BisectReport bisect_file(const Golden& g, const fs::path& cand) {
  TolerancePolicy policy;
  policy.add_file((fs::path(ASSAY_SOURCE_DIR) / "fixtures" / (g.prov.op + ".toml")).string());
  return bisect_candidate(g, policy, h5::File::open_read(cand.string()), CandidateJudging{});
}

}  // namespace

TEST_CASE("bisect over the outputs finds the first bad position and chunk a test planted (ssd, mamba3, gated_delta)", "[cpu][L0]") {
  struct Case {
    std::string golden, output;
  };
  const std::vector<Case> cases{{"ssd/t1000_q64.h5", "out"}, {"mamba3/siso_T1000_q64.h5", "out"},
                                {"gated_delta/t300_c64_gva_l2.h5", "o"}};
  assay_test::SplitMix64 rng{20261125};
  const auto d = assay_test::fresh_dir("assay_test_bisect", "outputs");
  for (const auto& c : cases) {
    const auto g = read_golden((fs::path(ASSAY_SOURCE_DIR) / "golden" / c.golden).string());
    const int64_t Q = g.case_fields.get_int("chunk_size"), T = g.case_fields.get_int("T");
    REQUIRE(T / Q >= 3);
    // The exact candidate passes: nothing to bisect.
    write_planted(d / "exact.h5", g, c.output, T, 0.0);
    const auto ok = bisect_file(g, d / "exact.h5");
    INFO(c.golden << "\n" << ok.text());
    REQUIRE_FALSE(ok.any_bad());
    // Wrong from chunk k on (k drawn by the test, never 0, so the earlier chunks are checked too).
    for (int rep = 0; rep < 2; ++rep) {
      const int64_t k = 1 + static_cast<int64_t>(rng.u01() * static_cast<double>(T / Q - 1));
      const int64_t from = k * Q + static_cast<int64_t>(rng.u01() * static_cast<double>(Q));
      write_planted(d / "bad.h5", g, c.output, from, 0.05);
      const auto r = bisect_file(g, d / "bad.h5");
      INFO(c.golden << " planted from t=" << from << " (chunk " << k << ")\n" << r.text());
      REQUIRE(r.any_bad());
      REQUIRE(r.outputs.front().name == c.output);
      CHECK(r.outputs.front().first_bad_pos == from);
      CHECK(r.outputs.front().chunk == k);
      CHECK(r.outputs.front().before_ratio <= 1.0);
      CHECK(r.outputs.front().first_bad_ratio > 1.0);
      CHECK_THAT(r.text(), assay_test::Contains(fmt::format("at T={} of {}", from, T)));
      CHECK_THAT(r.text(), assay_test::Contains(fmt::format("= chunk {} x {}", k, Q)));
    }
  }
}
