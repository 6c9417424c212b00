// Tests of the SSD golden assembly (reference/ssd/ssd_golden.cpp, ssd::oracle): the outputs,
// bounds, intermediates and agreement entries it packages.
#include "catch_compat.h"
#include "reference/core/tensor.h"
#include "reference/ssd/ssd.h"
#include "reference/ssd/tests/ssd_test_inputs.h"

using namespace assay;
using ssd::Inputs;
using ssd::Params;
using ssd_test::Cfg;
using ssd_test::make_inputs;
using ssd_test::params;

TEST_CASE("ssd: oracle() packages outputs, bounds, intermediates and agreement", "[cpu][L0]") {
  Cfg c;
  c.T = 65, c.seed = 21;
  const Inputs in = make_inputs(c);
  Params p = params(16);
  p.out_dtype = DType::bf16;
  const OracleResult o = ssd::oracle(p, in);
  REQUIRE(o.outputs.size() == 2);
  REQUIRE(o.outputs[0].expected.name == "out");
  REQUIRE(o.outputs[0].expected.shape == Shape{1, 65, 4, 8});
  REQUIRE(o.outputs[0].expected.dtype == DType::bf16);
  REQUIRE(o.outputs[0].bound.has_value());
  REQUIRE(o.outputs[1].expected.name == "final_states");
  REQUIRE(o.outputs[1].expected.shape == Shape{1, 4, 8, 8});
  REQUIRE(o.outputs[1].expected.dtype == DType::f32);
  REQUIRE(o.intermediates.size() == 3);
  REQUIRE(o.intermediates[0].name == "chunk_states");
  REQUIRE(o.intermediates[0].shape == Shape{1, 5, 4, 8, 8});
  REQUIRE(o.intermediates[2].name == "dA_cumsum");
  REQUIRE(o.intermediates[2].shape == Shape{1, 4, 5, 16});
  // dA_cumsum of the last (partial: 1 token) chunk is flat after its one valid position.
  const auto& da = o.intermediates[2].data;
  const double last0 = da[((0 * 4 + 0) * 5 + 4) * 16 + 0];
  REQUIRE(last0 < 0);
  REQUIRE(da[((0 * 4 + 0) * 5 + 4) * 16 + 15] == last0);
  REQUIRE(o.agreement.size() == 3);
  for (const auto& a : o.agreement) REQUIRE(a.max_rel <= ssd::kFormTolerance);
}

TEST_CASE("ssd: oracle() cross-checks further chunk sizes", "[cpu][L0]") {
  Cfg c;
  c.T = 70, c.seed = 51;
  const Inputs in = make_inputs(c);
  Params p = params(16);
  p.cross_check_chunk_sizes = {1, 16, 64, 70};
  const OracleResult o = ssd::oracle(p, in);
  // 3 entries for Q = 16 (out, final_states, chunk_states), 2 each for Q = 1, 64, 70.
  REQUIRE(o.agreement.size() == 9);
  for (const auto& a : o.agreement) {
    INFO(a.tensor << " " << a.form_b);
    REQUIRE(a.max_rel <= ssd::kFormTolerance);
  }
  REQUIRE(o.agreement.back().form_b == "chunked(Q=70)");
}
