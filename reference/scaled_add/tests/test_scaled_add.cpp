#include "catch_compat.h"
#include "reference/core/tensor.h"
#include "reference/scaled_add/scaled_add.h"

using namespace assay;

TEST_CASE("scaled_add forms agree and are exact on integers", "[cpu][L0]") {
  std::vector<double> x{1, -2, 3, 0, 7}, y{4, 5, -6, 0, 0.5};
  const auto a = ref::scaled_add_loop(x, y, 0.5, -2.0);
  const auto b = ref::scaled_add_eigen(x, y, 0.5, -2.0);
  // 0.5*1 - 2*4 = -7.5; 0.5*-2 - 2*5 = -11; 1.5 + 12 = 13.5; 0; 3.5 - 1 = 2.5
  REQUIRE(a == std::vector<double>{-7.5, -11, 13.5, 0, 2.5});
  REQUIRE(agreement_rel(a, b) == 0.0);
  REQUIRE(ref::scaled_add_bound(x, y, 0.5, -2.0) == std::vector<double>{8.5, 11, 13.5, 0, 4.5});
}
