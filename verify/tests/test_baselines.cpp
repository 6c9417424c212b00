// The usual checks as `assay calibrate --baselines` applies them (verify/calibrate/baselines.h): each rule on
// hand-made tensors whose verdict follows from the rule's own numbers.
#include <cmath>
#include <vector>

#include "catch_compat.h"
#include "verify/calibrate/baselines.h"

using namespace assay;
using baselines::Verdict;

namespace {
enum Rule { kAssertClose, kKernelBench, kFla, kFlashAttn, kP95 };

std::vector<Verdict> run(DType t, const std::vector<double>& got, const std::vector<double>& want,
                         const std::vector<double>* same = nullptr, bool grad = false) {
  baselines::OutputValues o;
  o.name = grad ? "dq" : "o", o.dtype = t, o.got = &got, o.want = &want, o.same = same, o.is_gradient = grad;
  return baselines::judge(o);
}
}  // namespace

TEST_CASE("baselines: assert_close takes torch's per-dtype defaults, exact for codes") {
  // bf16 (rtol 1.6e-2, atol 1e-5): one ulp at 1 (2^-7) passes, three (0.0234) do not.
  CHECK(run(DType::bf16, {1.0078125}, {1.0})[kAssertClose] == Verdict::accept);
  CHECK(run(DType::bf16, {1.0234375}, {1.0})[kAssertClose] == Verdict::reject);
  // fp32 (1.3e-6, 1e-5): 2^-23 passes, 2e-5 > 1.13e-5 does not.
  CHECK(run(DType::f32, {1.0 + std::ldexp(1.0, -23)}, {1.0})[kAssertClose] == Verdict::accept);
  CHECK(run(DType::f32, {1.00002}, {1.0})[kAssertClose] == Verdict::reject);
  // the reference is the golden rounded to the output dtype: 1 + 2^-9 is 1 in bf16.
  CHECK(run(DType::bf16, {1.0}, {1.0 + std::ldexp(1.0, -9)})[kAssertClose] == Verdict::accept);
  CHECK(run(DType::u8, {4}, {4})[kAssertClose] == Verdict::accept);
  CHECK(run(DType::u8, {5}, {4})[kAssertClose] == Verdict::reject);
}

TEST_CASE("baselines: KernelBench's allclose is 1e-2 in bf16") {
  CHECK(run(DType::bf16, {1.0078125}, {1.0})[kKernelBench] == Verdict::accept);
  CHECK(run(DType::bf16, {1.03125}, {1.0})[kKernelBench] == Verdict::reject);
}

TEST_CASE("baselines: fla's rule is an RMS ratio once the max error passes 1e-6") {
  const std::vector<double> want{1, -1, 1, -1};  // RMS 1
  CHECK(run(DType::f32, {1.004, -1.004, 1.004, -1.004}, want)[kFla] == Verdict::accept);  // 0.004 <= 0.005
  CHECK(run(DType::f32, {1.006, -1.006, 1.006, -1.006}, want)[kFla] == Verdict::reject);  // 0.006 > 0.005
  CHECK(run(DType::f32, {1.006, -1.006, 1.006, -1.006}, want, nullptr, true)[kFla] == Verdict::accept);  // dq: 0.008
  CHECK(run(DType::f32, {1e-7, 0}, {0, 0})[kFla] == Verdict::accept);  // max error 1e-7 <= 1e-6
}

TEST_CASE("baselines: flash-attention's rule allows twice the same-precision error plus fwd_atol") {
  const std::vector<double> want{0.5, 0.25}, same{0.501, 0.25};  // the same-precision error is 1e-3
  // fp32: fwd_atol = 2 max |((ref + 0.3) - 0.3) - ref| is a few fp32 ulps (< 1e-7)
  CHECK(run(DType::f32, {0.502, 0.25}, want, &same)[kFlashAttn] == Verdict::accept);
  CHECK(run(DType::f32, {0.5021, 0.25}, want, &same)[kFlashAttn] == Verdict::reject);
  CHECK(run(DType::f32, {0.5, 0.25}, want)[kFlashAttn] == Verdict::not_applicable);
}

TEST_CASE("baselines: mamba_ssm's rule is the 95th percentile of the relative error") {
  std::vector<double> want(20, 1.0), one(20, 1.0), two(20, 1.0);
  one[3] = 1.1;              // sorted: 19 zeros then 0.1; p95 at position 18.05: 0.005
  two[3] = two[7] = 1.1;     // 18 zeros then two 0.1: p95 = 0.1
  CHECK(run(DType::f32, one, want)[kP95] == Verdict::accept);
  CHECK(run(DType::f32, two, want)[kP95] == Verdict::reject);
  std::vector<double> zeros(20, 0.0), off = zeros;
  off[0] = off[1] = 1e-9;    // against an exact 0 the relative error is +inf
  CHECK(run(DType::f32, off, zeros)[kP95] == Verdict::reject);
}

TEST_CASE("baselines: equal non-finite values are no error, a NaN elsewhere fails every rule") {
  const std::vector<double> want{NAN, -INFINITY, 1.0};
  for (auto v : run(DType::f32, {NAN, -INFINITY, 1.0}, want)) CHECK(v != Verdict::reject);
  const std::vector<double> same{NAN, -INFINITY, 1.0};
  for (auto v : run(DType::f32, {1.0, -INFINITY, NAN}, {1.0, -INFINITY, 1.0}, &same)) CHECK(v == Verdict::reject);
}
