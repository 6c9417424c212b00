// Mamba-3 SISO backward (state-spaces/mamba mamba3_siso_combined's autograd backward), fp64 oracle:
// the definitional reverse-mode adjoint of the token-by-token step recurrence mamba3::siso_step
// (mamba3.h, mamba3_step.cpp), written by hand (no autodiff). MIMO is out of scope.
//
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
//   upstream gradients:       d_out [B,T,H,P] (required); SisoFinalGrads: d_angle [NS,H,S],
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
#pragma once
#include <vector>

#include "reference/mamba3/mamba3.h"

namespace assay::mamba3 {

struct SisoGrads {
  std::vector<double> dq, dk;                   // [B,T,G,N]
  std::vector<double> dv;                       // [B,T,H,P]
  std::vector<double> dadt, ddt, dtrap;         // [B,H,T]
  std::vector<double> dq_bias, dk_bias;         // [H,N]
  std::vector<double> dangles;                  // [B,T,H,S]
  std::vector<double> dd;                       // [H] or empty
  std::vector<double> dz;                       // [B,T,H,P] or empty
  std::vector<double> dangle_state, dssm_state, dk_state, dv_state;  // like the input states or empty
};

// Upstream gradients of the final states the forward returns (each empty = 0).
struct SisoFinalGrads {
  std::vector<double> d_angle;  // [NS,H,S]
  std::vector<double> d_ssm;    // [NS,H,P,N]
  std::vector<double> d_k;      // [NS,H,N]
  std::vector<double> d_v;      // [NS,H,P]
};

// Reverse-mode gradients of L (above) through mamba3::siso_step(p, in). Throws InputError on
// malformed inputs (as the forward) and on wrongly sized or non-finite upstream gradients.
SisoGrads backward_siso_recurrent(const SisoParams& p, const SisoInputs& in, const std::vector<double>& d_out,
                                  const SisoFinalGrads& dfinal = {});

}  // namespace assay::mamba3
