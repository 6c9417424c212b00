// Mamba-3 forward oracles (fp64): SISO and MIMO (rank R), each as a step recurrence (the ground
// truth) and as a chunked form (intra-chunk decay-masked scores, chunk states, state passing,
// state-to-output, separate same-step gamma term), plus per-element error-bound magnitudes and
// per-chunk start states for bisection.
//
// Semantics: written out below (section tags 2.1-2.6), checked against the upstream code
// of state-spaces/mamba:
//   SISO  tests/ops/triton/test_mamba3_siso.py (mamba3_siso_step_ref, mamba3_siso_fwd_ref),
//         mamba_ssm/ops/triton/mamba3/mamba3_siso_fwd.py (mamba3_siso_fwd_kernel),
//         mamba_ssm/ops/triton/mamba3/angle_dt.py (angle_dt_fwd_kernel).
//   MIMO  tests/ops/tilelang/test_mamba3_mimo.py (mamba3_MIMO_step_ref, mamba3_MIMO_chunk_ref),
//         mamba_ssm/ops/tilelang/mamba3/mamba3_mimo_fwd.py (mamba_mimo_fwd_kernel),
//         mamba_ssm/ops/tilelang/mamba3/mamba3_mimo.py (_Mamba3Function.forward).
//
// ---- The math (one (sequence, head); r, r' ranks; SISO is R = 1 with Psi = zeta = 1, no Phi) ----
//   theta_t = pi * tanh(Angles_t) * DT_t;  phi_t = (phi_{t-1} + theta_t) mod 2pi   (phi_{-1} = angle
//   state or 0);  q_{t,r} = Rot(phi_t)(Q_{t,r} + Q_bias[h,r]),  k_{t,r} = Rot(phi_t)(K_{t,r} + K_bias[h,r])
//   v_{t,r} = V_t (.) Psi[h,r]     lambda_t = sigmoid(Trap_t)     alpha_t = exp(ADT_t)
//   beta_t = (1 - lambda_t) DT_t alpha_t      gamma_t = lambda_t DT_t
//   H_t = alpha_t H_{t-1} + beta_t sum_r v_{t-1,r} k_{t-1,r}^T + gamma_t sum_r v_{t,r} k_{t,r}^T   (P x N)
//   y_{t,r} = H_t q_{t,r} + D[h] v_{t,r}
//   gate:   y * silu(Z_t (.) zeta[h,r])            (SISO: y * silu(Z_t))
//   fused pre-gate RMSNorm (MIMO option): y * rsqrt(mean_P(y^2) + eps) * w[h,:] * silu(Z_t (.) zeta[h,r])
//   down-projection (MIMO with Phi): out_t = sum_r Phi[h,r] (.) gated y_{t,r}; without Phi the
//   output keeps the rank axis.
//   (k_{-1,r}, v_{-1}) are the input K state (biased AND rotated) and the raw input V state.
//   Carried out: (phi_{T-1}, H_{T-1}, k_{T-1,r}, V_{T-1}).
//
// ---- Rotation pairing ----
//   adjacent   (SISO kernel, MIMO step reference, Mamba3.step for SISO): pair (2i, 2i+1), i < S.
//   half_split (TileLang MIMO kernel and mamba3_MIMO_chunk_ref default): pair (i, i + N/2), i < S,
//              S = N / rotary_dim_divisor; divisor 4 rotates [0, N/4) with [N/2, 3N/4) only.
//   Both map (u, w) -> (u cos - w sin, u sin + w cos). Dims outside the pairs pass through.
//
// ---- Chunk start states (intermediates) ----
//   The state that enters chunk c (its first token t0 = c*Q relative to the sequence start), in the
//   kernels' folded convention: S_c = H_{t0-1} + (1 - lambda_{t0}) DT_{t0} sum_r v_{t0-1,r} k_{t0-1,r}^T
//   (the beta term of t0 without its alpha, which the chunk applies through exp(Acum)). For c = 0
//   this is the spec's H0' = H_init + (1 - lambda_0) DT_0 v_init k_init^T. The SISO kernel stores
//   exactly this per chunk (SSM_States, before its update); the MIMO kernel keeps the same running
//   state (0 at chunk 0 since it takes no initial state).
//   Kernel dtype (the golden intermediate's Tensor::dtype, what a candidate's chunk_states is judged
//   as): SISO bf16 -- mamba3_siso_fwd allocates SSM_States as torch.bfloat16 whatever the activation
//   dtype and stores the fp32 running state cast to it; MIMO fp32 -- the TileLang forward keeps the
//   running state in an fp32 fragment (accum_dtype) and stores no per-chunk copy, so fp32 is the
//   state as the kernel holds it (its q-side read is a kernel-dtype cast, not the state).
//   Bound (chunk_states_bound): the same folding applied to the magnitudes, i.e. the final_ssm_bound
//   recurrence snapshotted at t0: |S|_c = Hbound_{t0-1} + (1 - lambda_{t0}) DT_{t0} sum_r |v_{t0-1,r}|
//   |k_{t0-1,r}|^T (every factor in absolute value; |H_init| and |v_state| |k_state| at c = 0). It
//   equals the final_ssm_bound of the sequence truncated before t0 folded with the same beta term
//   (bit for bit in the step form: same operations in the same order).
//
// ---- Error-bound magnitudes ----
//   bound = the same expression evaluated with every factor replaced by its absolute value
//   (|q_rot|, |k_rot|, |v|, |H_init|, |v_state| |k_state|, |D|, |silu(.)|, |w|, |Phi|; the decay and
//   trapezoid weights are already >= 0), i.e. sum over all products of |terms|. For the fused
//   RMSNorm the magnitude is scaled by the same rsqrt(mean(y^2)+eps) as the value. A tolerance is
//   then c * eps_dtype * bound elementwise. Also given for the final SSM state, the final K
//   (|u| + |w| for both elements of a rotated pair (u, w) = biased key: the scale of a rotation,
//   which covers rounding of u and w and an angle error delta alike, since each element moves by
//   at most |delta| (|u| + |w|); |k^| for dims that are not rotated) and the final angle
//   (|angle_state| + sum_t pi |tanh(Angles_t)| DT_t: the scale of the kernels' fp32 cumsum with
//   tanh.approx; compare angles circularly, they live in [0, 2pi)). final_ssm has a second
//   magnitude, final_ssm_rot_bound (the golden's bound2): the recurrence with each rotated key
//   element replaced by its pair's |u| + |w|, for a kernel that rotates the keys of its state update
//   with angles stored in bf16 (the Triton SISO kernel: profile bf16-angles).
//
// ---- Where the spec and upstream disagree / choices made ----
//   * MIMO angle state: mamba3_MIMO_step_ref does not reduce the running angle mod 2pi;
//     angle_dt_fwd (used by the kernels) does, per chunk, and the wrapper returns the final angle
//     mod 2pi. We reduce mod 2pi (cos/sin are 2pi-periodic, so only rounding can differ). fp64
//     numerics: the running angle sums are compensated (exact two-sums) and every token's angle is
//     reduced once with a Cody-Waite double-double 2pi, so angles stay accurate to ~1e-15 rad for
//     any T and chunk size (a plain fp64 cumsum drifts to ~1e-13 at T = 2048, near the 1e-12
//     form-agreement gate). The chunked form keeps angle_dt_fwd's structure (chunk-local cumsum +
//     carried state) but carries the state unreduced.
//   * MIMO V state: the kernel wrapper / module decode cache keep the RAW V (B, H, P) and apply Psi
//     inside; mamba3_MIMO_step_ref keeps v (.) Psi. We follow the kernel/module: raw V in and out.
//   * MIMO initial states: the TileLang chunked kernel takes none; the step reference and the decode
//     path do. We accept them (optional) with the SISO folding rule; fixtures for the TileLang
//     kernel simply leave them out.
//   * Final K state: MIMO layout (NS, R, H, N) as the kernel's FINAL_K; SISO (NS, H, N).
//   * The kernels clamp decay exponents to <= 0; we require ADT <= 0 and DT >= 0 (InputError
//     otherwise), where the clamp is a no-op. ADT = -inf is accepted and is a full reset
//     (alpha = beta = 0) in both forms, never NaN (the chunked form sums segments directly and
//     never subtracts cumsums, so no -inf - -inf).
//   * Varlen (cu_seqlens, B == 1): every sequence is independent, starts from its own input-state
//     row (or zero), chunks restart at every sequence start, and has its own final states
//     (mamba3_siso_fwd varlen semantics; the MIMO varlen wrapper follows the same rule).
//   * Trap is taken raw (pre-sigmoid), as the chunked kernels and both references take it.
//
// Preconditions (InputError otherwise): sizes as documented; all values finite except ADT, which
// may be -inf; ADT <= 0, DT >= 0; H % G == 0; N even; SISO 2S <= N; MIMO rotary_dim_divisor in
// {2, 4} with N % divisor == 0, Psi given, Z and zeta together, fused_norm needs Z, zeta and Phi,
// outproj_norm_weight only with fused_norm; cu_seqlens needs B == 1 and 0 = c_0 <= ... = T (empty
// sequences allowed: their input states pass through); input states all four or none;
// chunk_size >= 1 (any value; T need not be a multiple).
//
// Dtypes: every input and output here is fp64. Feed the values the kernel sees after its own casts
// (SISO wrapper: Q, K, V, Trap, Angles, Z in bf16; ADT, DT, biases, D in fp32. MIMO kernel: Q, K,
// V, Z, Trap in the kernel dtype; biases, Psi, Phi, zeta, D, angles, DT, ADT in fp32).
#pragma once
#include <cstdint>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/core/tensor.h"

namespace assay::mamba3 {

// ---------------------------------------------------------------------------------------------
// SISO: mamba3_siso_combined(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, Input_States,
//                            chunk_size, return_final_states, cu_seqlens)
// ---------------------------------------------------------------------------------------------
struct SisoParams {
  int64_t B = 1;    // batch (1 when cu_seqlens is given)
  int64_t T = 0;    // sequence length (total packed length with cu_seqlens)
  int64_t H = 1;    // value heads (nheads)
  int64_t G = 1;    // q/k heads (nheads_qk); head h reads q/k head h / (H / G)
  int64_t N = 0;    // headdim_qk (d_state), even
  int64_t P = 0;    // headdim_v
  int64_t S = 0;    // headdim_angles, 2 S <= N (adjacent pairs (2i, 2i+1), i < S)
  int64_t chunk_size = 64;           // Q, chunked form and chunk-state intermediates
  std::vector<int64_t> cu_seqlens{};  // empty, or (NS+1,) with B == 1, 0 = c_0 <= ... <= c_NS = T
  DType out_dtype = DType::bf16;     // kernel-facing dtype of `out` (OracleResult only)
  std::vector<int64_t> extra_chunk_sizes{};  // siso_oracle: also run the chunked form at these Q and
                                             // record its agreement with the step form
};

struct SisoInputs {
  std::vector<double> q, k;            // (B, T, G, N)
  std::vector<double> v;               // (B, T, H, P)
  std::vector<double> adt, dt, trap;   // (B, H, T); ADT <= 0 natural-log decay, DT >= 0, Trap raw
  std::vector<double> q_bias, k_bias;  // (H, N)
  std::vector<double> angles;          // (B, T, H, S) raw (before tanh)
  std::vector<double> d;               // (H,) or empty
  std::vector<double> z;               // (B, T, H, P) or empty
  // Input states: all four or none (empty). NS = B, or the number of sequences with cu_seqlens.
  std::vector<double> angle_state;     // (NS, H, S)
  std::vector<double> ssm_state;       // (NS, H, P, N)
  std::vector<double> k_state;         // (NS, H, N)  biased and rotated
  std::vector<double> v_state;         // (NS, H, P)  raw V
};

// ---------------------------------------------------------------------------------------------
// MIMO: mamba3_mimo(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z,
//                   chunk_size, rotary_dim_divisor, dtype, return_state, cu_seqlens,
//                   fuse_pregate_headwise_rms_norm, outproj_norm_weight, outproj_norm_eps)
// ---------------------------------------------------------------------------------------------
struct MimoParams {
  int64_t B = 1, T = 0, H = 1;
  int64_t G = 1;                     // q/k heads; head h reads group h / (H / G)
  int64_t N = 0;                     // d_state (headdim_qk), even
  int64_t P = 0;                     // headdim_v
  int64_t R = 1;                     // MIMO rank
  int rotary_dim_divisor = 4;        // 2 or 4: S = N / divisor angle dims
  bool rotate_pairwise = false;      // false: half-split (kernel); true: adjacent (step reference)
  int64_t chunk_size = 16;           // Q (the kernel recommends 64 / R)
  bool fused_norm = false;           // fuse_pregate_headwise_rms_norm (needs Z and zeta)
  double norm_eps = 1e-5;            // outproj_norm_eps
  std::vector<int64_t> cu_seqlens{};  // as SisoParams
  DType out_dtype = DType::bf16;
  std::vector<int64_t> extra_chunk_sizes{};  // as SisoParams
  int64_t S() const { return N / rotary_dim_divisor; }
};

struct MimoInputs {
  std::vector<double> q, k;            // (B, T, R, G, N)
  std::vector<double> v;               // (B, T, H, P)
  std::vector<double> adt, dt, trap;   // (B, H, T)
  std::vector<double> q_bias, k_bias;  // (H, R, N)
  std::vector<double> psi;             // MIMO_V (H, R, P), required
  std::vector<double> zeta;            // MIMO_Z (H, R, P), required iff z is given
  std::vector<double> phi;             // MIMO_Out (H, R, P) or empty (output keeps R)
  std::vector<double> angles;          // (B, T, H, S) raw
  std::vector<double> d;               // (H,) or empty
  std::vector<double> z;               // (B, T, H, P) or empty
  std::vector<double> norm_weight;     // (H, P) or empty (fused_norm only)
  std::vector<double> angle_state;     // (NS, H, S)      all four or none
  std::vector<double> ssm_state;       // (NS, H, P, N)
  std::vector<double> k_state;         // (NS, R, H, N)   biased and rotated
  std::vector<double> v_state;         // (NS, H, P)      raw V
};

// Result of one form. Shapes with NS = number of sequences and NC = total number of chunks
// (sum over sequences of ceil(len / Q), ordered by sequence then chunk).
struct Result {
  std::vector<double> out;          // (B, T, H, P); MIMO without Phi: (B, T, R, H, P)
  std::vector<double> out_bound;    // same shape, error-bound magnitude
  std::vector<double> out_pregate;  // (B, T, R, H, P): y_{t,r} = H_t q_{t,r} + D v_{t,r}, before the
                                    // gate / norm / Phi (SISO: R = 1, i.e. (B, T, H, P))
  std::vector<double> final_angle;  // (NS, H, S), in [0, 2pi)
  std::vector<double> final_angle_bound;  // |angle_state| + sum_t pi |tanh(Angles_t)| DT_t
  std::vector<double> final_ssm;    // (NS, H, P, N)
  std::vector<double> final_ssm_bound;
  // The rotation-scale magnitude of final_ssm: the same recurrence on magnitudes with each rotated
  // key element replaced by its pair's |u| + |w| (u, w: the biased key before rotation) and 0 for
  // dims outside the pairs; the input K state (given rotated) contributes 0. An angle error delta
  // moves a rotated key element by at most |delta| (|u| + |w|), so an angle stored with error
  // <= eps * 2pi (angles in [0, 2pi)) moves final_ssm by at most eps * 2pi * this (first order).
  std::vector<double> final_ssm_rot_bound;
  std::vector<double> final_k;      // SISO (NS, H, N); MIMO (NS, R, H, N)
  std::vector<double> final_k_bound;  // |u| + |w| for both elements of a rotated pair, |k^| elsewhere
  std::vector<double> final_v;      // (NS, H, P)
  std::vector<double> chunk_states; // (NC, H, P, N) folded start state of every chunk
  std::vector<double> chunk_states_bound;  // same shape: the folded final_ssm_bound at each chunk start
  std::vector<int64_t> chunk_seq, chunk_start;  // (NC,) sequence id and first token (row index)
};

Result siso_step(const SisoParams& p, const SisoInputs& in);
Result siso_chunked(const SisoParams& p, const SisoInputs& in);
Result mimo_step(const MimoParams& p, const MimoInputs& in);
Result mimo_chunked(const MimoParams& p, const MimoInputs& in);

// Both forms, their measured agreement, and the result as golden tensors:
//   outputs: out (dtype p.out_dtype, bound), final_angle (f32, bound), final_ssm (f32, bound),
//            final_k (SISO f32, MIMO p.out_dtype; bound), final_v (p.out_dtype)
//   intermediates: chunk_states (C, H, P, N; dtype SISO bf16, MIMO f32: the kernels' chunk-state
//                  dtype, see above) with its bound in intermediate_bounds["chunk_states"],
//                  chunk_start (C) token index of each chunk
//                  (Result::out_pregate is left out of the goldens for size; its agreement is kept)
//   agreement: out, out_bound, out_pregate, final_*, chunk_states and chunk_states_bound, step vs
//              chunked (angles compared circularly); for every Q in extra_chunk_sizes also out,
//              out_bound and the final states
//              vs "chunked(Q=..)". Values are from the step form (the ground truth).
OracleResult siso_oracle(const SisoParams& p, const SisoInputs& in);
OracleResult mimo_oracle(const MimoParams& p, const MimoInputs& in);

// Agreement threshold the two forms must meet (fp64).
inline constexpr double kFormAgreement = 1e-12;

}  // namespace assay::mamba3
