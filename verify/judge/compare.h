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
#include <memory>
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "verify/judge/tolerance.h"
#include "verify/judge/verdict.h"

namespace assay {

struct ErrorProfile;  // verify/judge/error_profile.h

struct TensorReport {
  std::string name;
  bool intermediate = false;  // a row for a golden /intermediates tensor the candidate provided
  DType dtype = DType::f64;
  Shape shape;
  int64_t n = 0;
  double max_abs = 0, max_rel = 0, rms_rel = 0, cosine = 1, ulp_max = 0, ulp_p99 = 0;
  int64_t mismatches = 0, nonfinite_mismatches = 0;
  int64_t first_bad = -1, worst = -1;
  std::string first_bad_index, worst_index;
  double worst_actual = 0, worst_expected = 0, worst_allowed = 0;
  // max over elements of error / allowed (0 where allowed = 0 and the error is 0); +inf for an
  // exact-code or NaN/Inf-position mismatch or a never-pass rule. > 1 <=> some element failed.
  // `assay calibrate` reports it as the margin.
  double max_ratio = 0;
  std::vector<std::string> never_pass;  // reasons
  std::string hint;  // for a failure: the other profile(s) of the op under which it would pass
  Tolerance tol;
  Verdict verdict = Verdict::NotRun;
  // Where the error lives (seq plot, heatmap, histogram): attached by the reports to a tensor that did
  // not pass (attach_error_profile, verify/judge/error_profile.h); null otherwise.
  std::shared_ptr<const ErrorProfile> error_profile;
  std::string summary() const;  // one line
};

// THE element rule (verify/judge/tolerance.h), the only one: compare_tensor and the repro bundle's
// mismatch mask both call it. Returns whether element i of the candidate is a mismatch; `ratio`
// (optional) receives error / allowed (+inf for a code or NaN/Inf-position mismatch).
struct ElementCheck {
  bool bad = false;
  bool nonfinite = false;  // a NaN/Inf position mismatch (judged in the output dtype)
  double err = 0, allowed = 0, ratio = 0;
};
ElementCheck check_element(const Output& golden, const Tolerance& tol, size_t i, double actual);
// The repro bundle's /mismatch mask: 1 where check_element says bad (so it flags exactly the
// elements the verdict counted).
std::vector<uint8_t> mismatch_mask(const Output& golden, const Tolerance& tol, const std::vector<double>& actual);

// `actual` holds the candidate's values as fp64 (codes already decoded). With tol.exact the
// candidate must equal the golden's spec-rounded value (decoded `rounded`, else the fp64 truth).
TensorReport compare_tensor(const Output& golden, const std::vector<double>& actual, const Tolerance& tol);

// compare_tensor under the policy's entry for (op, output, dtype, profile); a failure gets a
// `hint` naming each other profile of the op under which the candidate would pass.
TensorReport compare_with_policy(const TolerancePolicy& policy, std::string_view op, const Output& golden,
                                 const std::vector<double>& actual, std::string_view profile = kStrictProfile);

// Scale links (Output::scaled_by: MX codes, packed bytes and dequantized values by their UE8M0
// scale). compare_with_policy for output k of `outs`, where `actual[j]` holds the candidate's
// values of outs[j] (empty where not read). For an exact output with a scale link, every element
// of a block whose candidate scale is NaN, where the golden allows a NaN scale for that block (its
// expected or /alt scale is NaN), is accepted whatever its code: a NaN-scaled block decodes to
// NaN whatever its codes. For a failing non-exact output with a scale link, the report's hint says
// how many wrong elements are candidate zeros in blocks of scale byte 0 (2^-127), which the OCP MX
// spec decodes as 2^-127, not 0. `tol_override` replaces the policy's entry (--atol/--rtol).
// The waiver compare_output applies to outs[k] (Output::waived; empty: none), for the repro mask.
std::vector<uint8_t> scale_waiver(const std::vector<Output>& outs, size_t k, const std::vector<std::vector<double>>& actual);
TensorReport compare_output(const TolerancePolicy& policy, std::string_view op, const std::vector<Output>& outs, size_t k,
                            const std::vector<std::vector<double>>& actual, std::string_view profile,
                            const Tolerance* tol_override = nullptr);

// A golden must accept itself: every output's /rounded codes (what a kernel in the output dtype
// writes), decoded, pass that output's strict rule. OracleDisagreement naming the output, its first
// rejected element and why otherwise (assay gen refuses to write such a golden; a test checks
// every committed one).
struct Golden;
void check_rounded_accepted(const Golden& g, const TolerancePolicy& policy);

}  // namespace assay
