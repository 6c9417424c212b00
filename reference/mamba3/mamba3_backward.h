// Mamba-3 backward, SISO and MIMO, fp64 oracles in two forms that agree to 1e-12:
//   (a) backward_{siso,mimo}_recurrent: the definitional reverse-mode adjoint of the token-by-token
//       step recurrence mamba3::siso_step / mimo_step (mamba3.h, mamba3_step.cpp), written by hand
//       (no autodiff); one implementation (mamba3_backward.cpp) in which SISO is the R = 1 case
//       without Psi, zeta, Phi or the norm;
//   (b) backward_{siso,mimo}_chunked: the chunked backward the kernels run (one implementation,
//       mamba3_backward_chunked.cpp).
// Upstream: SISO state-spaces/mamba mamba3_siso_combined's autograd backward; MIMO the TileLang
// mamba3_mimo's (mamba_mimo_bwd_fwd + mamba_mimo_bwd_bwd, combined by mamba_mimo_bwd_combined).
// Tests: tests/test_mamba3_backward.cpp (SISO), tests/test_mamba3_backward_mimo.cpp (MIMO; MIMO at
// R = 1 with Psi = zeta = Phi = 1 and adjacent pairs gives the SISO gradients to rounding).
//
// ================================ SISO ================================
// Convention: exactly the forward's (mamba3.h spec 2.1-2.3, SISO = R 1, adjacent pairs (2i, 2i+1)):
// the forward takes DT and ADT as given tensors (no dt_bias / softplus / clamp / A inside: those
// are upstream of the kernel and their chain rule is the caller's), Trap raw (pre-sigmoid), Angles
// raw (pre-tanh). Head h reads q/k group g = h / (H/G); varlen (cu_seqlens, B == 1): every sequence
// starts from its own input-state row (or zero) and has its own final states and adjoints.
//
// Tensors (axis letters as mamba3.h: B batch, T tokens, H value heads, G q/k heads, N d_state,
// P headdim_v, S angle dims, NS sequences), dense row-major, fp64 values and fp64 arithmetic:
//   inputs (as the forward):  q, k [B,T,G,N]; v [B,T,H,P]; adt, dt, trap [B,H,T];
//                             q_bias, k_bias [H,N]; angles [B,T,H,S]; d [H] or empty;
//                             z [B,T,H,P] or empty; angle_state [NS,H,S], ssm_state [NS,H,P,N],
//                             k_state [NS,H,N] (biased and rotated), v_state [NS,H,P] (raw V):
//                             all four or none.
//   upstream gradients:       d_out [B,T,H,P] (required); FinalGrads: d_angle [NS,H,S],
//                             d_ssm [NS,H,P,N], d_k [NS,H,N], d_v [NS,H,P], each empty = 0.
//                             L = <d_out, out> + <d_angle, final_angle> + <d_ssm, final_ssm>
//                               + <d_k, final_k> + <d_v, final_v>.
//                             final_angle is reduced mod 2pi; its derivative is taken as 1 (the
//                             reduction is piecewise a shift by a constant).
//   returned gradients:       one per input, same shape (dq, dk summed over the H/G heads of each
//                             group); dd / dz empty when d / z are; the four initial-state
//                             gradients empty when the input states are.
//   Not differentiated: cu_seqlens, chunk_size (integers); out_dtype (no effect on fp64 values).
//
// Forward, per (sequence, head h), token t (phi_{-1}, H_{-1}, k_{-1}, V_{-1} = the input states or 0):
//   theta_t = pi tanh(A_t) DT_t;   phi_t = phi_{t-1} + theta_t (mod 2pi)        (S,)
//   qh_t = Q_t + q_bias[h];  kh_t = K_t + k_bias[h];  q_t = Rot(phi_t) qh_t;  k_t = Rot(phi_t) kh_t
//     Rot on pair (a, b) = (2i, 2i+1), i < S: (u, w) -> (u c - w s, u s + w c), c, s = cos, sin(phi_i)
//   lam_t = sigmoid(Trap_t); alpha_t = exp(ADT_t); beta_t = (1 - lam_t) DT_t alpha_t; gamma_t = lam_t DT_t
//   H_t = alpha_t H_{t-1} + beta_t V_{t-1} k_{t-1}^T + gamma_t V_t k_t^T                  (P x N)
//   y_t = H_t q_t + D V_t;   out_t = y_t (.) silu(Z_t)  (no gate without Z)
//   finals: (phi_{T-1}, H_{T-1}, k_{T-1}, V_{T-1}).
// Reverse (per (sequence, head); adjoints dH (of H_t), dkc (of k_t through the carry), dvc (of V_t
// through the carry), dphi (of phi_t through the carry) start at the upstream final-state gradients;
// t = len-1 .. 0):
//   f = silu(Z), sg = sigmoid(Z):  dy = d_out f;  dZ = d_out y sg (1 + Z (1 - sg))
//   dH += dy q_t^T;   dq_t = H_t^T dy;   dD += dy . V_t;   dV_t = dvc + D dy
//   dalpha = <dH, H_{t-1}>;  dbeta = V_{t-1}^T dH k_{t-1};  dgamma = V_t^T dH k_t
//   dV_t += gamma dH k_t;   dk_t = dkc + gamma dH^T V_t
//   dvc <- beta dH k_{t-1};  dkc <- beta dH^T V_{t-1}        (adjoints of V_{t-1}, k_{t-1})
//   dH  <- alpha dH                                          (adjoint of H_{t-1})
//   dADT = dalpha alpha + dbeta beta;   dlam = DT (dgamma - alpha dbeta);   dTrap = dlam lam (1 - lam)
//   rotation, per pair with x in {q, k}: dphi_i += dx_b x_a - dx_a x_b (x the rotated values);
//     dxh_a = dx_a c + dx_b s;  dxh_b = -dx_a s + dx_b c;  unrotated dims pass dx through
//   dQ_t (group g) += dqh;  dq_bias[h] += dqh;  dK_t += dkh;  dk_bias[h] += dkh
//   dtheta = dphi (phi_{t-1} keeps dphi);  dA_t = dtheta pi (1 - tanh^2 A_t) DT_t
//   dDT = dbeta (1 - lam) alpha + dgamma lam + sum_s dtheta_s pi tanh(A_{t,s})
//   at the sequence start: d angle_state = dphi, d ssm_state = dH, d k_state = dkc, d v_state = dvc.
// The adjoint is a per-sequence variable, so nothing crosses a varlen boundary (an empty sequence
// passes the final-state gradients to the initial-state gradients). ADT = -inf (alpha = beta = 0) is a
// clean reset in reverse too: dH_{t-1} = 0, dvc = dkc = 0, dADT = 0.
// States H_t are checkpointed every chunk_size tokens of a sequence and recomputed chunk by chunk in
// the reverse pass with the forward's operations in the same order (memory O((T/Q + Q) P N) per
// (sequence, head)); the angles are recomputed with the forward's compensated sum and reduction.
//
// ================================ MIMO ================================
// Convention: exactly the forward's (mamba3.h spec 2.5, MimoParams / MimoInputs): DT and ADT are
// given tensors (dt_bias / softplus / A are upstream of the kernel, their chain rule is the
// caller's), Trap raw (pre-sigmoid), Angles raw (pre-tanh: the gradient includes the wrapper's
// angle_dt step, as the upstream autograd does through angle_dt_bwd; DT receives both its decay /
// trapezoid share and its angle share). Rotation pairs half_split (i, i + N/2) (kernel default) or
// adjacent (2i, 2i+1) (rotate_pairwise), i < S = N / rotary_dim_divisor. Head h reads q/k group
// g = h / (H/G). Varlen (cu_seqlens, B == 1): every sequence starts from its own input-state row (or
// zero) and has its own final states and adjoints.
//
// Tensors (axis letters as mamba3.h: B batch, T tokens, R rank, H value heads, G q/k heads,
// N d_state, P headdim_v, S angle dims, NS sequences), dense row-major, fp64 values, fp64 math:
//   inputs (as the forward):  Q, K [B,T,R,G,N]; V [B,T,H,P]; ADT, DT, Trap [B,H,T];
//                             Q_bias, K_bias [H,R,N]; MIMO_V (psi) [H,R,P]; MIMO_Z (zeta) [H,R,P]
//                             with Z, else empty; MIMO_Out (phi) [H,R,P] or empty; Angles [B,T,H,S];
//                             D [H] or empty; Z [B,T,H,P] or empty; outproj_norm_weight [H,P] or
//                             empty (fused_norm only); angle_state [NS,H,S], ssm_state [NS,H,P,N],
//                             k_state [NS,R,H,N] (biased and rotated), v_state [NS,H,P] (raw V):
//                             all four or none.
//   upstream gradients:       d_out: [B,T,H,P] with Phi, [B,T,R,H,P] without (required);
//                             FinalGrads: d_angle [NS,H,S], d_ssm [NS,H,P,N], d_k [NS,R,H,N],
//                             d_v [NS,H,P], each empty = 0.
//                             L = <d_out, out> + <d_angle, final_angle> + <d_ssm, final_ssm>
//                               + <d_k, final_k> + <d_v, final_v>.
//                             final_angle is reduced mod 2pi; its derivative is taken as 1.
//   returned gradients:       one per differentiable input, same shape: dq, dk (summed over the H/G
//                             heads of a group), dv, dadt, ddt, dtrap, dq_bias, dk_bias, dpsi
//                             (dMIMO_V), dzeta (dMIMO_Z), dphi (dMIMO_Out), dangles, dd, dz: the
//                             fourteen tensors of mamba_mimo_bwd_combined, in its order; plus
//                             dnorm_weight (outproj_norm_weight) and the four initial-state
//                             gradients. Each is empty when its input is.
//   Not differentiated: cu_seqlens, chunk_size, rotary_dim_divisor, rotate_pairwise (integers /
//   flags); norm_eps (a hyperparameter); out_dtype (no effect on fp64 values).
//
// Forward, per (sequence, head h), token t, ranks r (phi_{-1}, H_{-1}, k_{-1,r}, V_{-1} = the input
// states or 0):
//   theta_t = pi tanh(A_t) DT_t;   phi_t = phi_{t-1} + theta_t (mod 2pi)                    (S,)
//   qh_{t,r} = Q_{t,r} + Q_bias[h,r];  q_{t,r} = Rot(phi_t) qh_{t,r};  k likewise with K, K_bias
//     Rot on pair (a, b): (u, w) -> (u c - w s, u s + w c), c, s = cos, sin(phi_i); other dims pass
//   v_{t,r} = V_t (.) Psi[h,r]
//   lam_t = sigmoid(Trap_t); alpha_t = exp(ADT_t); beta_t = (1 - lam_t) DT_t alpha_t; gamma_t = lam_t DT_t
//   H_t = alpha_t H_{t-1} + beta_t sum_r v_{t-1,r} k_{t-1,r}^T + gamma_t sum_r v_{t,r} k_{t,r}^T  (P x N)
//   y_{t,r} = H_t q_{t,r} + D v_{t,r}
//   fused norm: rs_{t,r} = (mean_P y_{t,r}^2 + eps)^(-1/2);  u_{t,r} = y_{t,r} rs_{t,r};
//               n_{t,r} = u_{t,r} (.) w[h]  (w = 1 without outproj_norm_weight); else n = y
//   gate: o_{t,r} = n_{t,r} (.) silu(Z_t (.) zeta[h,r])   (o = n without Z)
//   out_t = sum_r Phi[h,r] (.) o_{t,r}   (without Phi: out_{t,r} = o_{t,r})
//   finals: (phi_{T-1}, H_{T-1}, k_{T-1,r}, V_{T-1}).
// Reverse (per (sequence, head); adjoints dH (of H_t), dkc_r (of k_{t,r} through the carry), dvc (of
// the raw V_t through the carry), dphi (of phi_t through the carry) start at the upstream final-state
// gradients; t = len-1 .. 0):
//   do_r = d_out_t (.) Phi[h,r];  dPhi[h,r] += d_out_t (.) o_r        (without Phi: do_r = d_out_{t,r})
//   zz = Z_t (.) zeta_r, sg = sigmoid(zz):  dn_r = do_r (.) silu(zz);
//     dzz = do_r (.) n_r (.) sg (1 + zz (1 - sg));  dZ_t += dzz (.) zeta_r;  dzeta_r += dzz (.) Z_t
//   fused norm: dw[h] += dn_r (.) u_r;  du = dn_r (.) w;  dy_r = rs du - rs^3 y_r <du, y_r> / P
//   dH += sum_r dy_r q_r^T;   dq_r = H_t^T dy_r;   dD += sum_r <dy_r, v_r>;   dv_r = D dy_r
//   dalpha = <dH, H_{t-1}>;  dbeta = sum_r v_{t-1,r}^T dH k_{t-1,r};  dgamma = sum_r v_r^T dH k_r
//   dv_r += gamma dH k_r;   dk_r = dkc_r + gamma dH^T v_r
//   dvp_r = beta dH k_{t-1,r};  dkc_r <- beta dH^T v_{t-1,r}           (adjoints of v_{t-1,r}, k_{t-1,r})
//   dV_t = dvc + sum_r dv_r (.) Psi_r;  dPsi_r += dv_r (.) V_t + dvp_r (.) V_{t-1}
//   dvc <- sum_r dvp_r (.) Psi_r                                          (adjoint of the raw V_{t-1})
//   dH  <- alpha dH                                                       (adjoint of H_{t-1})
//   dADT = dalpha alpha + dbeta beta;   dlam = DT (dgamma - alpha dbeta);   dTrap = dlam lam (1 - lam)
//   rotation, per pair (a, b) and x in {q_r, k_r}: dphi_i += dx_b x_a - dx_a x_b (x rotated);
//     dxh_a = dx_a c + dx_b s;  dxh_b = -dx_a s + dx_b c;  unrotated dims pass dx through
//   dQ_{t,r} (group g) += dqh_r;  dQ_bias[h,r] += dqh_r;  dK_{t,r} += dkh_r;  dK_bias[h,r] += dkh_r
//   dtheta = dphi (phi_{t-1} keeps dphi);  dA_t = dtheta pi (1 - tanh^2 A_t) DT_t
//   dDT = dbeta (1 - lam) alpha + dgamma lam + sum_s dtheta_s pi tanh(A_{t,s})
//   at the sequence start: d angle_state = dphi, d ssm_state = dH, d k_state_r = dkc_r,
//   d v_state = dvc (all four are raw: k_state is already biased and rotated, v_state is raw V).
// The adjoint is a per-sequence variable, so nothing crosses a varlen boundary (an empty sequence
// passes the final-state gradients to the initial-state gradients). ADT = -inf (alpha = beta = 0) is
// a clean reset in reverse too: dH_{t-1} = 0, dvc = dkc = 0, dADT = 0.
// States H_t are checkpointed every chunk_size tokens of a sequence and recomputed chunk by chunk in
// the reverse pass with the forward's operations in the same order (memory O((T/Q + Q) P N) per
// (sequence, head)); the angles are recomputed with the forward's compensated sum and reduction.
//
// Upstream convention and where it differs (follow the kernel, written down here):
//   * Names and order of the fourteen gradients: mamba_mimo_bwd_combined (dQ, dK, dV, dADT, dDT,
//     dTrap, dQ_bias, dK_bias, dMIMO_V, dMIMO_Z, dMIMO_Out, dAngles, dD, dZ). dMIMO_* are summed over
//     batch and time (mamba_mimo_bwd_fwd writes per-batch [B,H,R,P] partials of dMIMO_Out / dMIMO_Z,
//     reduced over B afterwards), dD over batch and time, dQ / dK over the heads of a group.
//   * Final states: the upstream wrapper marks them non-differentiable (its backward ignores their
//     gradients). Passing empty FinalGrads reproduces that; non-empty ones are an extension
//     (useful for chunked / stateful callers and for the input-state gradients).
//   * Input states: the TileLang chunked kernel takes none (its backward returns no state
//     gradients); the oracle's forward accepts them (mamba3.h), so their gradients are returned too.
//   * The fused RMSNorm weight gradient (dnorm_weight) is returned when the forward has the weight.
//   * Angle reduction: MIMO reduces the running angle mod 2pi exactly as SISO does in this oracle,
//     and the reduction's derivative is 1, so the R = 1 reduction of MIMO equals SISO's backward.
//
// Preconditions (InputError otherwise): those of mimo_step (mamba3.h), and d_out / the final-state
// gradients sized as above (or empty where allowed) and finite.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "reference/mamba3/mamba3.h"

namespace assay::mamba3 {

// The gradients of either variant: one per differentiable input, same shape, empty when the input
// is (SISO: dpsi, dzeta, dphi, dnorm_weight always empty; R = 1 in the shapes).
struct Grads {
  std::vector<double> dq, dk;                   // [B,T,R,G,N] (SISO [B,T,G,N])
  std::vector<double> dv;                       // [B,T,H,P]
  std::vector<double> dadt, ddt, dtrap;         // [B,H,T]
  std::vector<double> dq_bias, dk_bias;         // [H,R,N] (SISO [H,N])
  std::vector<double> dpsi, dzeta, dphi;        // MIMO [H,R,P] (dMIMO_V, dMIMO_Z, dMIMO_Out) or empty
  std::vector<double> dangles;                  // [B,T,H,S]
  std::vector<double> dd;                       // [H] or empty
  std::vector<double> dz;                       // [B,T,H,P] or empty
  std::vector<double> dnorm_weight;             // MIMO [H,P] or empty
  std::vector<double> dangle_state, dssm_state, dk_state, dv_state;  // like the input states or empty
  // The adjoint of the chunk-start state (both forms; the bound functions: its magnitude), for
  // bisection. [NS,H,NCmax,P,N] with NCmax = dchunk_count = max over sequences of ceil(len/Q);
  // entry c of sequence n is dL/dS_c, S_c the folded state entering chunk c (mamba3.h "Chunk start
  // states"); chunks a sequence does not have (c >= ceil(len_n/Q)) are 0.
  std::vector<double> dchunk_states;
  int64_t dchunk_count = 0;
};

// Upstream gradients of the final states the forward returns (each empty = 0).
struct FinalGrads {
  std::vector<double> d_angle;  // [NS,H,S]
  std::vector<double> d_ssm;    // [NS,H,P,N]
  std::vector<double> d_k;      // [NS,R,H,N] (SISO [NS,H,N])
  std::vector<double> d_v;      // [NS,H,P]
};

// ---- Form (a): the recurrent adjoint ----
// Reverse-mode gradients of L (above) through mamba3::siso_step(p, in). Throws InputError on
// malformed inputs (as the forward) and on wrongly sized or non-finite upstream gradients.
Grads backward_siso_recurrent(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                              const FinalGrads& dfinal = {});

// Error-bound magnitudes of every gradient (the backward analogue of the forward's bounds): the same
// sweep run on magnitudes (mamba3_backward.cpp run_one<true>): every input, state and upstream
// gradient in absolute value (the q / k bias sums as |x| + |bias|, each rotation as |u||c| + |w||s|),
// the decays alpha and the coefficients beta, gamma, lam (all >= 0 for DT >= 0) unchanged, the gate's
// and the angle chain's factors in absolute value, and dlam's difference a sum. Every gradient element
// is then the sum of the absolute values of the elementary products it is made of (>= |gradient|),
// and the decays keep it from growing along a sequence; a kernel that keeps O(1) roundings of unit
// roundoff u per product errs by <= c u bound. Same fields as the gradients.
Grads backward_siso_bound(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                          const FinalGrads& dfinal = {});

// Reverse-mode gradients of L (above) through mamba3::mimo_step(p, in). Throws InputError on
// malformed inputs (as the forward) and on wrongly sized or non-finite upstream gradients.
Grads backward_mimo_recurrent(const MimoParams& p, const MimoInputs& in, const std::vector<double>& d_out,
                              const FinalGrads& dfinal = {});

// Error-bound magnitudes of every gradient: the recurrent sweep run on magnitudes, as
// backward_siso_bound (above) with the MIMO factors: |Psi|, |zeta|, |Phi|, |norm
// weight| and |V| in absolute value; the fused norm's rs = (mean_P y^2 + eps)^(-1/2) taken from the
// true pre-gate y (mimo_step), and its adjoint's difference rs du - rs^3 y_p <du, y> / P a sum
// with y_p the magnitude and the y inside <du, y> the true value: the first-order effect of an error
// of y (~ u |y|mag in a kernel) through the norm. Where y cancels (|y|mag >> |y|) the norm magnifies
// that error, and the bound grows by the ratio (tests: ~2.7e3 x the gradient at T = 30 against
// <= 100 x without the norm). Every gradient element is then the sum of the absolute values of
// the elementary products it is made of (>= |gradient|). Same fields as the gradients.
Grads backward_mimo_bound(const MimoParams& p, const MimoInputs& in, const std::vector<double>& d_out,
                          const FinalGrads& dfinal = {});

// ---- Form (b): the chunked backward (the kernels' algorithm), backward_siso_chunked ----
// Same contract, inputs, upstream gradients and returned gradients as backward_siso_recurrent, plus
// dchunk_states. The forward is recomputed by the chunked form (mamba3::siso_chunked: the folded
// chunk-start states S_c and the pre-gate y); no step recurrence and no per-token state adjoint.
// Per (sequence, head), chunk c of L tokens (local i, j; Q the chunk size), as siso_chunked:
//   w_t = (1 - lam_t) DT_t (the shifted weight, applied to V_{t-1} k_{t-1}^T), gam_t = lam_t DT_t,
//   sc_j = gam_j + w_{j+1} (w_{j+1} = 0 at the sequence end; it crosses chunk ends),
//   seg(i, j) = sum_{m=j+1..i} ADT_m (summed directly), a_i = sum_{m<=i} ADT_m, E_i = exp(a_i),
//   M_ij = exp(seg(i, j)) sc_j for i > j (else 0), A_ij = q_i . k_j (rotated),
//   y_i = E_i S_c q_i + sum_j M_ij A_ij V_j + gam_i (qh_i . kh_i) V_i + D V_i   (diagonal unrotated)
//   S_{c+1} = E_{L-1} S_c + sum_j W_j V_j k_j^T,  W_j = exp(seg(L-1, j)) sc_j
//   S_0 = H_init + w_0 V_init k_init^T;   final_ssm = S_{nchunks}.
// Reverse, chunks last first, dS = d_ssm (the adjoint of S_{c+1}) on entry to chunk c:
//   dy = d_out silu(Z) (gate as form (a));  DV_ij = dy_i . V_j
//   inter:  dq_i += E_i S_c^T dy_i;  dE_i = dy_i . (S_c q_i);  dS_c = sum_i E_i dy_i q_i^T
//   intra:  dV_j += sum_i M_ij A_ij dy_i;  dA = M (.) DV;  dq += dA k;  dk += dA^T q;
//           dM_ij = A_ij DV_ij -> dsc_j += dM_ij exp(seg(i, j)),  dseg(i, j) = dM_ij M_ij
//   diag:   dgam_i += (qh_i . kh_i) DV_ii;  dqh_i += gam_i DV_ii kh_i;  dkh_i += gam_i DV_ii qh_i;
//           dV_i += (gam_i qh_i . kh_i + D) dy_i;  dD += DV_ii
//   state:  dS_c += E_{L-1} dS;  dE_{L-1} += <dS, S_c>;  dV_j += W_j dS k_j;  dk_j += W_j dS^T V_j;
//           dW_j = V_j^T dS k_j -> dsc_j += dW_j exp(seg(L-1, j)),  dseg(L-1, j) += dW_j W_j
//   decay:  dADT_m = sum_{i >= m} (dE_i E_i + sum_{j < m} dseg(i, j))   (every segment holding m)
//   trap:   dgam_j += dsc_j;  dw_{j+1} += dsc_j   (for the last token of chunk c: token 0 of chunk
//           c + 1, the shifted term's coefficient adjoint crossing the chunk boundary)
//   carry:  dS <- dS_c (= dchunk_states[c]); it holds E_{L-1} dS: the chunk-total decay.
// In the folded convention the shifted term's K/V carry (V_{t0-1} k_{t0-1}^T with the weight w_{t0}
// of the next chunk's first token) is part of S_c, so its K/V adjoints are the state term's dV_j,
// dk_j of the previous chunk's last token; only dS and dw_{t0} cross a chunk boundary. At the
// sequence start: d ssm_state = dS_0, d v_state = w_0 dS_0 k_init, d k_state = w_0 dS_0^T V_init,
// dw_0 += V_init^T dS_0 k_init; d_k / d_v seed dk / dV of the last token. A varlen sequence is its
// own chunk grid, so nothing crosses its boundary; ADT = -inf gives exp(seg) = 0 on every segment
// holding it (no -inf - -inf), so dS_c = 0 before it and its dADT = 0.
// Per token: dlam = DT (dgam - dw), dTrap = dlam lam (1 - lam), dDT = lam dgam + (1 - lam) dw +
// sum_s dtheta_s pi tanh(A_s); rotation adjoint of dq, dk as form (a), plus the diagonal's dqh, dkh
// (unrotated, no angle term); dtheta_t = d_angle + sum_{t' >= t} dphi_{t'} summed chunk-locally
// (suffix within the chunk plus the carried angle-state adjoint of the later chunks), which is
// d angle_state at the sequence start. Work is parallel over (sequence, q/k group); dq / dk, the
// biases and dD are summed in a fixed order (deterministic).
// ---- Form (b): the chunked backward (the kernels' algorithm), backward_mimo_chunked ----
// Same contract as backward_mimo_recurrent, plus dchunk_states. The forward is recomputed by the
// chunked form (mamba3::mimo_chunked: folded chunk-start states S_c and the pre-gate y); no step
// recurrence and no per-token state adjoint. Rows are the fused (token, rank) pairs i = (t_i, r_i)
// of a chunk (L R rows, as mimo_chunked), q_i, k_i rotated, v_i = V_{t_i} (.) Psi_{r_i}; with the
// scalars of backward_siso_chunked (w, gam, sc, seg, E, M on the TOKEN index):
//   y_i = E_{t_i} S_c q_i + sum_{j: t_j < t_i} M(t_i, t_j) (q_i . k_j) v_j
//         + gam_{t_i} sum_{r'} (qh_i . kh_{(t_i, r')}) v_{(t_i, r')} + D v_i     (diagonal unrotated)
//   S_{c+1} = E_{L-1} S_c + sum_j W_{t_j} v_j k_j^T,   S_0 = H_init + w_0 sum_r v_init,r k_init,r^T.
// The reverse per chunk is backward_siso_chunked's on rows (inter, intra, state, decay, trap; the
// mask and the decays read the token of each row), plus the MIMO pieces:
//   gate:   d_out -> dy per row (down-projection Phi, gate silu(Z zeta), fused norm) as form (a),
//           from the chunked forward's pre-gate y; dPhi, dzeta, dZ, dnorm_weight on the way
//   diag:   with DV_ab = dy_a . v_b over the R x R rows of one token: dgam_t += sum (qh_a . kh_b) DV_ab,
//           dqh_a += gam sum_b DV_ab kh_b, dkh_b += gam sum_a DV_ab qh_a, dv_b += gam sum_a (qh_a . kh_b) dy_a
//   up:     dV_t = sum_r dv_(t,r) (.) Psi_r (+ d_v at the last token), dPsi_r += dv_(t,r) (.) V_t
//   start:  d ssm_state = dS_0; dv_init,r = w_0 dS_0 k_init,r, d k_state_r = w_0 dS_0^T v_init,r,
//           dw_0 += v_init,r^T dS_0 k_init,r; d v_state = sum_r dv_init,r (.) Psi_r, dPsi_r += dv_init,r (.) V_init.
// Rotation adjoint per row with the case's pairing; each token's angle adjoint sums its R rows of q
// and k. Work is parallel over (sequence, q/k group); the per-head sums over sequences (biases, Psi,
// zeta, Phi, D, norm weight) are added in a fixed order (deterministic).
// Deliberate bugs of the chunked backward, for the calibration kill matrix (never a golden):
//   adjoint_no_decay       dS_c += dS without the chunk-total decay E_{L-1}
//   no_adjoint_carry       a chunk boundary drops the carried adjoint
//   no_shifted_term_grad   the adjoint of the shifted trapezoid weight w_{t+1} is dropped (dTrap and dDT
//                          lose their (1 - lam) terms)
//   diag_same_rank_only    the same-step diagonal's gradients only from pairs r' == r (the backward
//                          of the forward's diag_same_rank_only bug; dy of the cross-rank pairs lost)
// SISO has the first three (diag_same_rank_only is a no-op at R = 1).
enum class BwdMutant { none, adjoint_no_decay, no_adjoint_carry, no_shifted_term_grad, diag_same_rank_only };
std::string_view bwd_mutant_name(BwdMutant m);
inline constexpr BwdMutant kAllSisoBwdMutants[] = {BwdMutant::adjoint_no_decay, BwdMutant::no_adjoint_carry,
                                                   BwdMutant::no_shifted_term_grad};
inline constexpr BwdMutant kAllMimoBwdMutants[] = {BwdMutant::adjoint_no_decay, BwdMutant::no_adjoint_carry,
                                                   BwdMutant::no_shifted_term_grad, BwdMutant::diag_same_rank_only};

// Options of the chunked backwards (calibration only; the defaults are the oracle): one mutant, and
// io: an emulation of a kernel's hand-offs: the chunk-start states S_c and each chunk's incoming
// state adjoint dS, as the chunk's gradient terms read them, rounded to io (fp32 for a kernel whose
// hand-offs stay fp32); the carry itself stays exact; gradients are returned in fp64.
struct ChunkedBackwardOptions {
  BwdMutant mutant = BwdMutant::none;
  std::optional<DType> io;
};
Grads backward_siso_chunked(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                            const FinalGrads& dfinal = {}, const ChunkedBackwardOptions& opt = {});
Grads backward_mimo_chunked(const MimoParams& p, const MimoInputs& in, const std::vector<double>& d_out,
                            const FinalGrads& dfinal = {}, const ChunkedBackwardOptions& opt = {});

}  // namespace assay::mamba3
