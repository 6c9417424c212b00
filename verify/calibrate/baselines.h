// The usual correctness checks, judged beside assay's element rule (`assay calibrate --baselines`):
// what torch.testing.assert_close, KernelBench's allclose, flash-linear-attention's RMS ratio,
// flash-attention's "twice the same-precision error" rule and mamba_ssm's Mamba-3 95th-percentile
// rule would have said about every calibration mutant and precision emulation.
//
// Tensors: one output at a time: `got` (the variant's values as stored in the output dtype),
// `want` (the golden's exact expected values, fp64) and, for the flash-attention rule, `same`
// (the op's strict emulation, the same-precision reference), all of the golden's length.
//
// Each rule as we read it (the references the rules compare against are the golden's):
//   assert_close  |got - ref| <= atol + rtol |ref| on every element, ref = want rounded to the output
//                 dtype; torch's per-dtype defaults (rtol, atol): fp16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5),
//                 fp32 (1.3e-6, 1e-5), fp64 (1e-7, 1e-7), every other dtype (fp8, fp4, codes) exact.
//   kernelbench   the same form with atol = rtol = 1e-2 (fp16, bf16), 1e-4 (fp32, fp64), exact otherwise.
//   fla           pass if max |got - want| <= 1e-6, else RMS(got - want) / RMS(want) <= 0.005 for outputs
//                 and states, 0.008 for gradients (an output d<x> of an input x), 0.02 for the gradients
//                 of gates and step sizes (beta, g, gk, A, A_log, dt, dt_bias).
//   flash_attn    max |got - ref| <= 2 max |same - ref| + fwd_atol, ref = want rounded to the output
//                 dtype, fwd_atol = 2 max |((ref + 0.3) - 0.3) - ref| computed in the output dtype; n/a
//                 where the op has no strict emulation for the case.
//   mamba3_p95    the 95th percentile (linear interpolation) of |got - want| / |want| is < 5e-2
//                 (0 where got == want, +inf where want == 0 and got differs).
// Every rule counts an element where got equals the reference (infinities, and NaN against NaN: the
// rules run with equal_nan) as error 0, and fails on any other non-finite difference.
#pragma once
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace assay::baselines {

struct Rule {
  std::string name, what;
};

// The rules, in table order.
const std::vector<Rule>& rules();

enum class Verdict { accept, reject, not_applicable };

struct OutputValues {
  std::string name;                           // the output's name (the fla rule reads gradients by it)
  DType dtype;
  const std::vector<double>* got = nullptr;
  const std::vector<double>* want = nullptr;
  const std::vector<double>* same = nullptr;  // may be null: flash_attn is then not applicable
  bool is_gradient = false;                   // an output d<x> of an input x
  bool gate_gradient = false;                 // ... of a gate or step size
};

// One verdict per rule (aligned with rules()).
std::vector<Verdict> judge(const OutputValues& o);

}  // namespace assay::baselines
