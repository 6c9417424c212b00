#include <cmath>
#include <limits>

#include "catch_compat.h"
#include "reference/core/tensor.h"

using namespace assay;

TEST_CASE("unravel and index_str name the axes", "[cpu][L0]") {
  Tensor t{"o", {"B", "T", "H"}, {2, 3, 4}, DType::bf16, std::vector<double>(24)};
  auto idx = t.unravel(1 * 12 + 2 * 4 + 3);
  REQUIRE(idx == std::vector<int64_t>{1, 2, 3});
  REQUIRE(t.index_str(23) == "[b=1, t=2, h=3]");
  REQUIRE(numel({2, 3, 4}) == 24);
  REQUIRE(numel({5, 0}) == 0);
}

TEST_CASE("agreement_rel is relative with an rms floor and NaN-aware", "[cpu][L0]") {
  std::vector<double> b{1.0, -2.0, 0.0, 4.0};
  REQUIRE(agreement_rel(b, b) == 0.0);
  auto a = b;
  a[1] = -2.0 * (1 + 1e-13);
  // |diff| = 2e-13; the denominator is max(|-2|, rms(b) = sqrt(21/4)) = 2.29.
  REQUIRE(agreement_rel(a, b) == Approx(2e-13 / std::sqrt(21.0 / 4)).epsilon(1e-3));
  a = b;
  a[2] = 1e-10;  // relative to the rms floor (sqrt(21/4)), not to |0|
  REQUIRE(agreement_rel(a, b) == Approx(1e-10 / std::sqrt(21.0 / 4)).epsilon(1e-9));
  a = b;
  a[0] = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(std::isinf(agreement_rel(a, b)));
}
