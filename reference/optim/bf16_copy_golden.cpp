// BF16-copy golden (optim_golden.h): RNE, TE remainder (split and merge) and torchao stochastic
// copies of fp32 masters from their bits, against second forms from the values (core codec,
// the two bf16 neighbours, the fraction in bf16 ulps); all outputs exact.
#include <cmath>

#include "reference/core/dtype.h"
#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

OracleResult bf16_copy_golden(const std::vector<double>& X, const std::vector<double>& R, const GoldenContext& ctx) {
  const int64_t N = static_cast<int64_t>(X.size());
  std::vector<float> rne(N), te(N), sr(N), rec(N);
  std::vector<double> rem(N), rne64(N), te64(N), sr64(N);
  for (int64_t i = 0; i < N; ++i) {
    const float x = static_cast<float>(X[i]);
    rne[i] = bf16_to_f32(bf16_rne(x));
    const Bf16Remainder pr = te_split_remainder(x);
    te[i] = bf16_to_f32(pr.param);
    rem[i] = pr.remainder;
    rec[i] = te_merge_remainder(pr);
    sr[i] = bf16_to_f32(bf16_sr_torchao(x, static_cast<uint16_t>(R[i])));
    // Second form, in fp64 from the value (not the bits): RNE via the core codec; ties away via
    // the two neighbours; SR via the fraction in units of the bf16 ulp.
    rne64[i] = round_to(DType::bf16, X[i]);
    const double ax = std::fabs(X[i]);
    const double lo = std::fabs(static_cast<double>(float_of(bits_of(x) & 0xFFFF0000u)));
    const double hi = std::fabs(static_cast<double>(float_of((bits_of(x) & 0xFFFF0000u) + 0x10000u)));
    const double sgn = X[i] < 0 ? -1.0 : 1.0;
    te64[i] = sgn * ((ax - lo >= hi - ax) ? hi : lo);
    const double frac = (hi > lo) ? (ax - lo) / (hi - lo) * 65536.0 : 0.0;  // exact: the low 16 bits
    sr64[i] = sgn * ((R[i] < frac) ? hi : lo);
  }
  detail::GoldenBuilder b(ctx);
  OracleResult& r = b.r;
  b.agree("p_bf16_rne", "bits", "core_codec", as_d(rne), rne64);
  b.agree("p_bf16_te", "bits", "neighbours", as_d(te), te64);
  b.agree("p_bf16_sr", "bits", "fraction", as_d(sr), sr64);
  b.agree("master_recovered", "merge", "input", as_d(rec), X);
  r.single_form["remainder"] =
      "the low 16 bits of the fp32 master, read from its bits; master_recovered (merge of the bf16 param and this "
      "remainder) is cross-checked against the input, which checks the remainder exactly";
  r.outputs.push_back(b.exact("p_bf16_rne", {N}, DType::bf16, rne64, rne));
  r.outputs.push_back(b.exact("p_bf16_te", {N}, DType::bf16, te64, te));
  r.outputs.push_back(b.exact("p_bf16_sr", {N}, DType::bf16, sr64, sr));
  r.outputs.push_back(b.out("remainder", {"N"}, {N}, DType::i32, rem));
  r.outputs.push_back(b.exact("master_recovered", {N}, DType::f32, X, rec));
  return std::move(b.r);
}

}  // namespace assay::optim
