// Attention KERNEL EMULATIONS (calibration only, `assay calibrate`): fp64 arithmetic with a
// FlashAttention-style GPU kernel's roundings applied explicitly, so that the tolerance policy can
// be proven against a correct low-precision kernel (fixtures/attention.cpp variants). These are NOT
// oracles: the goldens come from form (a) / form (b) in attention.h.
//
// Conventions: as attention.h (FlashAttention, Dao-AILab/flash-attention @ 0251105a2fb1): bottom-
// right causal, inclusive windows, GQA h / (Hq / Hkv), softcap on the scaled scores, learnable sink
// in the denominator only, fully masked rows O = 0 / LSE = -inf (= sink with a sink), natural-log LSE.
//
// Tensors (fp64 arrays holding values ALREADY in their storage dtype; layouts as attention.h):
//   q     [B, Sq, Hq, D] | varlen [total_q, Hq, D]                       dtype: storage (bf16 / fp16 / e4m3)
//   k, v  [B, Sk, Hkv, D|Dv] | packed [total_k, Hkv, .] | paged [num_pages, page_size, Hkv, .]
//   sink  [Hq] fp32                                   dout: layout of o, storage dtype
//   o     layout of q with Dv, rounded to KernelRounding::o (the kernel's stored O)
//   lse   [B, Hq, Sq] | [Hq, total_q], rounded to KernelRounding::acc (fp32)
//   dlse  layout of lse, fp32, or empty (= 0)
//   dq / dk / dv: layouts of q / k / v (NOT rounded to the storage dtype: the caller's store does
//   that, as the kernel's epilogue does); dsink [Hq] (acc precision).
//
// Forward (FA2 / FA3 / FA4 mainloop, per query row; `r` = round to acc, fp32):
//   s_ij  = r(r(<q_i, k_j>) * scale)            (the dot of storage-dtype values is exact in fp64,
//                                                 then one fp32 rounding: the MMA's fp32 accumulator)
//   softcap: s_ij = r(cap * r(tanh(r(s_ij / cap))))
//   m_i   = max_j s_ij                          the FINAL row max over the keys (a two-pass kernel;
//                                                 an online kernel rounds exp(s - m_running) with
//                                                 the same relative error, its rescale is an fp32
//                                                 multiply); the sink is not in the max
//   P~_ij = r(exp(s_ij - m_i) * p_scale)         fp32, p_scale = 2^8 for FA3 FP8 (Max_offset = 8)
//   l_i   = sum_j P~_ij                          per KV tile of tile_n keys in fp64, rounded to
//                                                 fp32, accumulated across tiles in fp32; then the
//                                                 sink at finalize (FA4 Softmax.finalize):
//                                                 l_i = r(l_i + r(p_scale * r(exp(sink_h - m_i))))
//   acc_i = sum_j round_to(p, P~_ij) * v_j       P rounded to `p` before the PV MMA; per-tile sums
//                                                 rounded to fp32 and accumulated in fp32
//   o_i   = round_to(o, r(acc_i / l_i))          LSE_i = r(m_i + log(l_i / p_scale))
//   A row with no visible key: O = 0, LSE = sink_h (-inf without a sink).
// Backward (FA2 structure, from the kernel's own stored o and fp32 lse):
//   Delta_i = r(r(<dO_i, o_i>) - dLSE_i);  P_ij = r(exp(s_ij - LSE_i)) (s_ij as above)
//   dP_ij = r(<dO_i, v_j>);  dS_ij = round_to(p, r(P_ij (dP_ij - Delta_i) t'_ij)), t' = 1 - tanh^2
//   dV_j += round_to(p, P_ij) dO_i;  dQ_i += scale dS_ij k_j;  dK_j += scale dS_ij q_i  (fp64 sums:
//   fp32 accumulation errors are << the storage rounding); dSink_h = -sum_i r(exp(sink_h - LSE_i)) Delta_i.
// With acc = p = o = f64 and p_scale = 1 every rounding is the identity and the results equal the
// oracle's (tests check 1e-12 agreement), which pins the masks, layouts and the sink handling.
#pragma once
#include <vector>

#include "reference/attention/attention.h"
#include "reference/core/dtype.h"

namespace assay::attention {

struct KernelRounding {
  DType acc = DType::f32;  // scores, exp, row sums, accumulators, LSE, Delta, dP
  DType p = DType::bf16;   // P before the PV MMA; backward: P before dV and dS before dQ / dK
  double p_scale = 1;      // P~ = exp(s - m) * p_scale before rounding to `p` (FA3 FP8: 256)
  DType o = DType::bf16;   // the stored O
};

// Forward emulation: fills o and lse only (no magnitudes, no partials).
ForwardResult forward_emulated(const Params& p, const std::vector<double>& q,
                               const std::vector<double>& k, const std::vector<double>& v,
                               const std::vector<double>& sink, const KernelRounding& kr);

// Backward emulation from the kernel's stored o / lse: fills dq, dk, dv, dsink (no magnitudes).
BackwardResult backward_emulated(const Params& p, const std::vector<double>& q,
                                 const std::vector<double>& k, const std::vector<double>& v,
                                 const std::vector<double>& sink, const std::vector<double>& o,
                                 const std::vector<double>& lse, const std::vector<double>& dout,
                                 const std::vector<double>& dlse, const KernelRounding& kr);

}  // namespace assay::attention
