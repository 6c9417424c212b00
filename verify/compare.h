// Compare one candidate tensor with its golden output.
//
// Metrics (over finite pairs): max abs error, max relative error with a floor
// (|a-e| / max(|e|, rel_floor), rel_floor = 1e-6 * max|e|, so near-zero entries do not dominate),
// RMS-relative error ||a-e||_2 / ||e||_2, cosine similarity, ULP error in the output dtype
// (|a-e| / ulp(dtype, e); max and p99), mismatch count under the tolerance, and the first and the
// worst mismatch as multi-indices in the op's axis letters.
//
// Never-pass rules (no tolerance overrides them):
//   - NaN or Inf in the candidate where the golden is finite, or a NaN/Inf position of the golden
//     that the candidate does not reproduce (same class: NaN, +Inf, -Inf);
//   - an all-zero candidate where the golden is not all zero;
//   - a constant candidate (n > 1) where the golden is not constant.
#pragma once
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "verify/tolerance.h"
#include "verify/verdict.h"

namespace assay {

struct TensorReport {
  std::string name;
  DType dtype = DType::f64;
  Shape shape;
  int64_t n = 0;
  double max_abs = 0, max_rel = 0, rms_rel = 0, cosine = 1, ulp_max = 0, ulp_p99 = 0;
  int64_t mismatches = 0, nonfinite_mismatches = 0;
  int64_t first_bad = -1, worst = -1;
  std::string first_bad_index, worst_index;
  double worst_actual = 0, worst_expected = 0, worst_allowed = 0;
  std::vector<std::string> never_pass;  // reasons
  Tolerance tol;
  Verdict verdict = Verdict::NotRun;
  std::string summary() const;  // one line
};

// `actual` holds the candidate's values as fp64 (codes already decoded). With tol.exact the
// candidate must equal the golden's spec-rounded value (decoded `rounded`, else the fp64 truth).
TensorReport compare_tensor(const Output& golden, const std::vector<double>& actual, const Tolerance& tol);

}  // namespace assay
