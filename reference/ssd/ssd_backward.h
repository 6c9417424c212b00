// Mamba-2 SSD backward (state-spaces/mamba `mamba_chunk_scan_combined` / ssd_combined,
// `_mamba_chunk_scan_combined_bwd`), fp64 oracle: the definitional reverse-mode adjoint of the
// token-by-token recurrence ssd::recurrence (ssd.h), written by hand (no autodiff).
//
// Convention: exactly the forward's (ssd.h), i.e. the upstream Triton kernels' where they and
// the torch references differ: dt is ALWAYS clamped to (dt_min, dt_max); packed sequences
// (seq_idx) reset the state to 0 at every id change, the virtual id before t = 0 is 0 (so
// initial_states belongs to sequence id 0 only); D is added before the gate,
// out = (y + D x) * silu(z); head h reads group g = h / (H/G).
//
// Tensors (axis letters as in ssd.h: B batch, T sequence, H heads, P head dim, G groups,
// N state, S packed sequences), all dense row-major, all fp64 values and fp64 arithmetic
// (no fast-math, no FMA contraction):
//   inputs (as the forward):  x [B,T,H,P], dt [B,T,H] (raw), A [H], B, C [B,T,G,N],
//                             D [H] or [H,P] (opt.), z [B,T,H,P] (opt.), dt_bias [H] (opt.),
//                             initial_states [B,H,P,N] (opt.), seq_idx [B,T] (int, opt.),
//                             cu_seqlens [S+1] (int, opt.)
//   upstream gradients:       dout [B,T,H,P] (required), dfinal_states [B,H,P,N] (empty = 0),
//                             dvarlen_states [S,H,P,N] (only with cu_seqlens; empty = 0)
//   returned gradients:       dx [B,T,H,P], ddt [B,T,H] (w.r.t. the RAW dt), dA [H],
//                             dB, dC [B,T,G,N] (summed over the H/G heads of each group),
//                             dD (D's shape; empty without D), dz [B,T,H,P] (empty without z),
//                             ddt_bias [H] (empty without dt_bias),
//                             dinitial_states [B,H,P,N] (empty without initial_states)
//
// Per (b, h), g = h / (H/G), S in R^{P x N}, forward (ssd.h):
//   S_{-1} = h0 (or 0);  for t: S_prev = reset_t ? 0 : S_{t-1};
//     S_t = exp(Delta_t A_h) S_prev + Delta_t x_t (x) B_t;   y_t = S_t C_t;
//     out_t = (y_t + D_h (.) x_t) (.) silu(z_t)
// Reverse (dS carries dL/dS_t; starts at dfinal_states, plus dvarlen_states[n] at the last
// token of sequence n):
//   dy = dout (.) silu(z);  dz = dout (.) (y + D x) (.) silu'(z);  dD += dy (.) x;  dx += D dy
//   dS_t += dy (x) C_t;     dC_t += S_t^T dy
//   dx_t += Delta_t dS_t B_t;  dB_t += Delta_t dS_t^T x_t;  dDelta_t = <dS_t, x_t (x) B_t>
//                                                           + <dS_t, S_prev> e A_h
//   dA_h += <dS_t, S_prev> e Delta_t   (e = exp(Delta_t A_h))
//   dS_{t-1} = reset_t ? 0 : e dS_t    (no gradient crosses a packed-sequence boundary);
//   dinitial_states = dS_{-1} (0 if row b starts with an id != 0).
// dt chain (process_dt): v = dt (+ dt_bias); s = softplus(v) if dt_softplus and v <= 20 else v;
//   Delta = clamp(s, dt_min, dt_max).  ddt = dDelta * [dt_min <= s <= dt_max]
//   * (sigmoid(v) if the softplus branch was taken else 1); ddt_bias[h] = sum_{b,t} ddt[b,t,h].
//   The clamp passes the gradient at equality (as torch.clamp); it is zero where s was strictly
//   outside [dt_min, dt_max], i.e. where the clamp changed the value.
// The states are checkpointed every chunk_size tokens and recomputed segment by segment in the
// reverse pass (memory O((T/Q + Q) P N) per (b, h)); the recomputation repeats the forward's
// operations in the same order, so the recomputed states are bit-identical.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/ssd/ssd.h"

namespace assay::ssd {

struct Grads {
  std::vector<double> dx;               // [B,T,H,P]
  std::vector<double> ddt;              // [B,T,H]  (w.r.t. the raw dt input)
  std::vector<double> dA;               // [H]
  std::vector<double> dB;               // [B,T,G,N]
  std::vector<double> dC;               // [B,T,G,N]
  std::vector<double> dD;               // [H] or [H,P] as D; empty without D
  std::vector<double> dz;               // [B,T,H,P]; empty without z
  std::vector<double> ddt_bias;         // [H]; empty without dt_bias
  std::vector<double> dinitial_states;  // [B,H,P,N]; empty without initial_states
  // backward_chunked only (empty from backward_recurrent): dstates [B, NC, H, P, N], the adjoint
  // of the chunk-start state S_start(c) (dL/dS_start(c), the kernels' `dstates` after
  // state_passing_bwd; c = 0 is dinitial_states' value), for bisection to the first bad chunk.
  std::vector<double> dstates;
};

// Deliberate bugs of the backward, for the calibration kill matrix (fixtures/ssd.cpp variants).
// Never used to produce goldens. The first three act on backward_chunked's adjoint carry, the
// last two on the dt chain both forms share.
enum class BwdMutant {
  none,
  adjoint_no_decay,          // dS_start(c) += dS_end(c) without exp(Acum_{Qc-1})
  no_adjoint_carry,          // a chunk boundary drops the carried adjoint (no dS_end term)
  adjoint_crosses_reset,     // the [seq_end == seq_prev] mask ignored: the adjoint of the next
                             // sequence flows into the previous one across a packed reset
  dt_grad_ignores_clamp,     // ddt not zeroed where the clamp changed the value
  dt_grad_ignores_softplus,  // ddt = dDelta without the softplus derivative sigmoid(v)
};
std::string_view bwd_mutant_name(BwdMutant m);
inline constexpr BwdMutant kAllBwdMutants[] = {
    BwdMutant::adjoint_no_decay, BwdMutant::no_adjoint_carry, BwdMutant::adjoint_crosses_reset,
    BwdMutant::dt_grad_ignores_clamp, BwdMutant::dt_grad_ignores_softplus};

// Reverse-mode gradients of L = <dout, out> + <dfinal_states, final_states>
// (+ <dvarlen_states, varlen_states> with cu_seqlens) through ssd::recurrence(p, in).
// Throws InputError on malformed inputs (ssd::validate) or wrongly sized upstream gradients.
Grads backward_recurrent(const Params& p, const Inputs& in, const std::vector<double>& dout,
                         const std::vector<double>& dfinal_states = {},
                         const std::vector<double>& dvarlen_states = {});

// The same gradients by the CHUNKED form (ssd_backward_chunked.cpp), the decomposition of the
// kernels' `_mamba_chunk_scan_combined_bwd` (chunk_scan_bwd_dstates, state_passing_bwd,
// chunk_state_bwd, chunk_scan_bwd_dx / dC / dcb, the dA_cumsum / ddt chain). The forward is
// recomputed by ssd::chunked (SSM part y and the chunk-start states S_start(c)); then per (b, h)
// the chunks c = NC-1 .. 0 of Qc = min(Q, T - cQ) tokens are visited in reverse, with the
// forward's notation (ssd.h, form 2): a_l = Delta_l A_h, Acum_l = sum_{k<=l} a_k (chunk-local),
// seg(l, s) = sum_{k=s+1..l} a_k, seq_prev = the id at the end of chunk c-1 (0 for c = 0),
// seq_end = the id of the chunk's last token.
//   Passed BETWEEN chunks (backwards): dS_end(c) = the adjoint of S_start(c+1) (the state after
//   the chunk), starting at dfinal_states for the last chunk; the chunk produces
//     dS_start(c) = [seq_end == seq_prev] exp(Acum_{Qc-1}) dS_end(c)            (state passing)
//                 + sum_l [seq_l == seq_prev] exp(Acum_l) dy_l (x) C_l            (dstates, C side)
//                 + sum_{n ends in c} [start_n < cQ or n == 0] exp(Acum_{e_n-1}) dvarlen[n]
//   and dS_end(c-1) = dS_start(c), so the mask [seq_end == seq_prev] (and [seq_l == seq_prev])
//   zeroes the adjoint across a packed-sequence reset exactly as the forward's masks drop the
//   carried state; dinitial_states = dS_start(0) (0 when row b starts with an id != 0).
//   Computed PER CHUNK (dy = dout (.) silu(z) from the shared epilogue adjoint):
//   * intra-chunk: y_l = sum_{s<=l, seq_s == seq_l} exp(seg(l,s)) (C_l.B_s) Delta_s x_s:
//       dCB(l,s) = exp(seg) Delta_s (dy_l.x_s) -> dC_l += dCB B_s, dB_s += dCB C_l;
//       dx_s += exp(seg) CB Delta_s dy_l; dDelta_s += exp(seg) CB (dy_l.x_s); dseg(l,s) = the
//       same times Delta_s;
//   * state to output: y_l += [seq_l == seq_prev] exp(Acum_l) S_start(c) C_l:
//       dC_l += exp(Acum_l) S_start^T dy_l; dAcum_l += exp(Acum_l) dy_l.(S_start C_l); dS_start;
//   * chunk state: st = sum_{seq_s == seq_end} exp(seg(Qc-1,s)) Delta_s x_s (x) B_s, adjoint
//       dS_end(c): dx_s, dB_s, dDelta_s, dseg(Qc-1,s); carry: dAcum_{Qc-1} += exp(Acum_{Qc-1})
//       <dS_end, S_start> when seq_end == seq_prev; varlen_states likewise from dvarlen[n]
//       (the chunk-local sum over s in [max(start_n - cQ, 0), e_n) and the carried term);
//   * the decay chain: with cum_l = Acum_l, seg(l,s) = cum_l - cum_s, so
//       dcum_l = sum_s dseg(l,s) - sum_l' dseg(l',l) + dAcum_l, da_k = sum_{l>=k} dcum_l
//       (reverse cumsum), dDelta_k += A_h da_k, dA_h += Delta_k da_k.
// Then D, z and the dt chain (bias, softplus, clamp) as backward_recurrent (shared helpers).
// Agrees with backward_recurrent to ~1e-15 relative (tests: <= kFormTolerance = 1e-12).
//
// Options (calibration only; the defaults are the oracle):
//   mutant  one BwdMutant;
//   io      an emulation of the upstream backward's PRECISION at the level of the tensors its
//           kernels hand each other in x.dtype (`_mamba_chunk_scan_combined_bwd`): the gated
//           upstream gradient dy = dout (.) silu(z) (the dz kernel's `dout` output, only with z),
//           the chunk-start states `states` and the adjoint `dstates` that state_passing_bwd
//           returns in x.dtype for the later GEMMs (dC, dx, dB, ddA), are rounded to `io`; the
//           adjoint carried between chunks stays exact (fp32 there); gradients are returned in
//           fp64 (the caller rounds them to their dtypes). Never a golden.
struct ChunkedBackwardOptions {
  BwdMutant mutant = BwdMutant::none;
  std::optional<DType> io;
};
Grads backward_chunked(const Params& p, const Inputs& in, const std::vector<double>& dout,
                       const std::vector<double>& dfinal_states = {},
                       const std::vector<double>& dvarlen_states = {},
                       const ChunkedBackwardOptions& opt = {});

// Error-bound magnitudes of every gradient (the backward analogue of ssd.h "Bounds"): for each
// gradient element, the sum of the absolute values of the elementary products the exact
// gradient is a sum of. Computed by the recurrent adjoint run on |x|, |B|, |C|, |D|,
// |initial_states|, |dout|, |dfinal_states|, |dvarlen_states| with the decays exp(Delta A) and
// the dt chain factors (sigmoid, clamp mask) unchanged, |A| where A multiplies (dDelta's decay
// term), and |silu(z)|, |silu'(z)| in the gate; so a kernel that keeps O(1) roundings of unit
// roundoff u per product has |err| <= c * u * bound. Same fields and shapes as Grads (dstates
// empty).
Grads backward_bound(const Params& p, const Inputs& in, const std::vector<double>& dout,
                     const std::vector<double>& dfinal_states = {},
                     const std::vector<double>& dvarlen_states = {});

// dx, ddt, dA, dB, dC and, where their input exists, dD, dz, ddt_bias, dinitial_states, by the
// names upstream's backward returns them under.
std::map<std::string, std::vector<double>> grads_by_name(const Inputs& in, const Grads& g);

// Appends the backward's golden to oracle()'s result r (ssd_golden.cpp): the gradients of
// grads_by_name as outputs (expected: backward_recurrent; bound: backward_bound; axes, shape and
// dtype: those of the input of the same name in `inputs`, the case's input tensors), agreement
// entries of backward_chunked at chunk_size and at every Q of cross_check_chunk_sizes, and the
// fp64 intermediate "dstates" [B, chunk, H, P, N] of backward_chunked. No dvarlen_states:
// upstream's backward takes no varlen_states gradient.
void add_backward(const Params& p, const Inputs& in, const std::vector<double>& dout,
                  const std::vector<double>& dfinal_states, const std::vector<Tensor>& inputs,
                  OracleResult& r);

}  // namespace assay::ssd
