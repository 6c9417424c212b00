// Mamba-2 SSD (state-spaces/mamba `mamba_chunk_scan_combined`, forward only), fp64 oracles.
//
// Two independently built forms over one shared dt preprocessing:
//   ssd::recurrence  the definitional token-by-token recurrence (the ground truth), and
//   ssd::chunked     the chunked dual form (segsum decay mask, chunk states, state passing,
//                    state-to-output), GEMM-shaped with Eigen, in the kernels' decomposition.
// ssd::oracle runs both, measures their agreement and packages goldens (reference/core/tensor.h);
// it lives in ssd_golden.cpp, with the backward's golden (ssd_backward.h add_backward).
//
// Semantics: written out below (section tags 1.1-1.7), from state-spaces/mamba @ e9594ce.
// Where the torch references and the Triton kernels differ, the kernels (the component under
// test) are followed: (1) dt is ALWAYS clamped to dt_limit, default (0, inf), as in
// `_chunk_cumsum_fwd_kernel` (the torch refs never clamp by default); (2) packed sequences reset
// exactly as the kernels' masks do (recurrence() explains); one deliberate departure from
// upstream, varlen_states of a sequence 0 ending inside chunk 0 with initial_states, is described
// at recurrence(). Inputs the kernels mishandle silently (A >= 0, negative or non-contiguous
// seq_idx) are refused with InputError instead of being reproduced.
//
// Dtypes: every tensor is handed over as fp64 values that are exactly the storage values a
// kernel reads (typically x, B, C, z in bf16 / fp16 / fp32; dt, A, D, dt_bias, initial_states
// in fp32; seq_idx, cu_seqlens int32). All arithmetic is fp64. Kernel-facing output dtypes
// (Params::out_dtype, state_dtype) are only recorded.
#pragma once
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/core/tensor.h"

namespace assay::ssd {

// Shapes (Mamba-2 convention; B batch, T sequence, H heads, P head dim, G groups, N state,
// Q chunk size; every array dense row-major, fp64 values = the storage-dtype values the kernel
// reads, i.e. already rounded by the fixture):
//   x               [B, T, H, P]   required
//   dt              [B, T, H]      required, raw (before bias / softplus / clamp)
//   A               [H]            required, finite and < 0 (the module passes -exp(A_log))
//   B, C            [B, T, G, N]   required; head h reads group h / (H / G)
//   D               [H] or [H, P]  optional (empty = no skip)
//   z               [B, T, H, P]   optional (empty = no gate)
//   dt_bias         [H]            optional
//   initial_states  [B, H, P, N]   optional (empty = zeros); state layout (P, N)
//   seq_idx         [B, T]         optional (empty = one sequence per row); int ids >= 0,
//                                  non-decreasing along T (contiguous packed sequences, as
//                                  built from cu_seqlens)
//   cu_seqlens      [S+1]          optional; upstream reads it ONLY for return_varlen_states
//                                  (spec 1.5): giving it requests the varlen_states output.
//                                  Needs B == 1 and seq_idx consistent with it (seq_idx[t] = n
//                                  for t in [cu[n], cu[n+1])); cu[0] = 0, cu[S] = T, empty
//                                  sequences allowed.
struct Inputs {
  int64_t batch = 0, seqlen = 0, nheads = 0, headdim = 0, ngroups = 0, dstate = 0;
  std::vector<double> x, dt, A, B, C;
  std::vector<double> D, z, dt_bias, initial_states;
  std::vector<int64_t> seq_idx;
  std::vector<int64_t> cu_seqlens;
};

struct Params {
  int64_t chunk_size = 64;  // Q: chunk of the chunked form and of the chunk_states intermediate
  bool dt_softplus = false;
  double dt_min = 0.0;  // dt_limit = (dt_min, dt_max); the kernel ALWAYS clamps (spec 1.2 step 4)
  double dt_max = std::numeric_limits<double>::infinity();
  // Kernel-facing dtypes recorded in the goldens: out in x.dtype, final_states fp32 (spec 1.1).
  DType out_dtype = DType::f32;
  DType state_dtype = DType::f32;
  bool compute_bounds = true;  // false: the *_bound vectors stay empty (half the work)
  // chunked() with Mutant::state_passing_no_decay only: >= 1 plants that bug at one chunk boundary,
  // the state carried INTO chunk mutant_chunk (a mutant first wrong at a chosen chunk: the tests of
  // assay bisect); -1: at every boundary.
  int64_t mutant_chunk = -1;
  // oracle() only: further chunk sizes whose chunked form is also checked against the
  // recurrence (out and final_states), recorded as agreement entries "chunked(Q=..)".
  std::vector<int64_t> cross_check_chunk_sizes;
};

// Deliberate bugs of the chunked form, for tests and the CPU mutant kill matrix. Never used to
// produce goldens.
enum class Mutant {
  none,
  no_intra_chunk,        // Y_diag dropped: tokens only see the chunk-start state
  strict_intra_mask,     // intra-chunk mask s < l (diagonal C_l.B_l dt_l x_l missing)
  no_state_passing,      // the carried state is dropped between chunks (start = chunk-local st)
  state_passing_no_decay,  // carried without exp(Acum_last)
  off_exclusive_decay,   // Y_off uses exp(Acum_l - a_l): own step's decay excluded (off-by-one)
  group_mod,             // head h reads group h % G instead of h / (H/G)
  no_seq_reset,          // seq_idx ignored: state leaks across packed sequences
  d_after_gate,          // out = y*silu(z) + D x
  no_dt_clamp,           // dt_limit not applied (torch-reference behaviour, not the kernel's)
};
std::string_view mutant_name(Mutant m);
inline constexpr Mutant kAllMutants[] = {
    Mutant::no_intra_chunk,         Mutant::strict_intra_mask,   Mutant::no_state_passing,
    Mutant::state_passing_no_decay, Mutant::off_exclusive_decay, Mutant::group_mod,
    Mutant::no_seq_reset,           Mutant::d_after_gate,        Mutant::no_dt_clamp};

struct Result {
  int64_t nchunks = 0;                     // ceil(T / Q)
  std::vector<double> out;                 // [B, T, H, P]
  std::vector<double> final_states;        // [B, H, P, N]
  std::vector<double> chunk_states;        // [B, nchunks, H, P, N] state at the START of chunk c
                                           // (c = 0: initial_states or 0), the kernel's `states`
                                           // after state passing
  std::vector<double> varlen_states;       // [S, H, P, N] (only with cu_seqlens): the state at
                                           // the last token of each packed sequence (0 if empty)
  std::vector<double> dt_processed;        // [B, T, H] the processed step Delta (shared)
  // Error-bound magnitudes (see "Bounds" below), same shapes as the tensors they bound.
  std::vector<double> out_bound;           // [B, T, H, P]
  std::vector<double> final_states_bound;  // [B, H, P, N]
  std::vector<double> chunk_states_bound;  // [B, nchunks, H, P, N]
  std::vector<double> varlen_states_bound;  // [S, H, P, N]
};

// Shared dt preprocessing (spec 1.2, kernel `_chunk_cumsum_fwd_kernel` order), fp64:
//   d = dt[b,t,h] (+ dt_bias[h]);  d = softplus(d) = log1p(exp(d)) if dt_softplus and d <= 20;
//   Delta = min(max(d, dt_min), dt_max).
// Returns Delta [B, T, H]. `clamp = false` only for the no_dt_clamp mutant.
std::vector<double> process_dt(const Params& p, const Inputs& in, bool clamp = true);

// Throws InputError on a malformed input (sizes, H % G, A >= 0, non-finite values, seq_idx not
// non-decreasing or negative, chunk_size < 1, T < 1).
void validate(const Params& p, const Inputs& in);

// Form 1, the ground truth (spec 1.3), per (b, h) with g = h / (H/G), S in R^{P x N}:
//   S = initial_states[b,h] (or 0); prev = 0
//   for t: if seq_idx[b,t] != prev: S = 0, prev = seq_idx[b,t]      (packed-sequence reset)
//          S = exp(Delta_t A_h) S + (Delta_t x_t) (x) B_t
//          y_t = S C_t + D_h (.) x_t ;  out_t = y_t (.) silu(z_t)
//   final_states = S after t = T-1; chunk_states[c] = S after t = cQ-1 (c >= 1);
//   varlen_states[n] = S after t = cu[n+1]-1.
// varlen_states: this is the math (and what `out` of sequence n continues from). Upstream's
// `chunk_state_varlen` adds the carried chunk-start state only when the sequence started before
// the chunk holding its last token, so for sequence 0 ending inside chunk 0 it omits
// initial_states; with initial_states = 0 (how the module calls it) both agree. Fixtures that
// combine initial_states with varlen_states should avoid a first sequence shorter than Q.
//   The chunked form computes varlen_states the upstream way (chunk-local sum from
//   max(start, cQ) plus exp(Acum_{e-1}) S_start_c when start < cQ), except that it also adds
//   initial_states for sequence 0 when it ends inside chunk 0 (the math above).
// Reset semantics = the kernels' (spec 1.5): the virtual id before t = 0 is 0, so
// initial_states is the initial state of sequence id 0 only (dropped if row b starts with another
// id), the state restarts from 0 at every id change (also mid-chunk), and final_states belongs to
// the last sequence of the row. For contiguous non-decreasing ids this equals the kernels' CB
// mask + chunk-state mask + state-passing reset + Y_off mask exactly (derivation in ssd.cpp).
Result recurrence(const Params& p, const Inputs& in);

// Form 2, the chunked dual form (spec 1.4), per (b, h, chunk c of Qc = min(Q, T - cQ) tokens):
//   a_l = Delta_l A_h;  seg[l][s] = sum_{k=s+1..l} a_k (stable masked sum, diagonal 0);
//   Acum_l = sum_{k<=l} a_k
//   Y_diag = (exp(seg) o CB o mask_{s<=l, same seq} o Delta_s) X        (diagonal included)
//   Y_off[l] = exp(Acum_l) (C_l . S_start_c)   if seq[l] == seq at the end of chunk c-1 (c=0: 0)
//   st_c = sum_s exp(seg[Qc-1][s]) Delta_s x_s (x) B_s  over s with seq[s] == seq[Qc-1]
//   S_start_{c+1} = [seq_end_c == seq_end_{c-1}] exp(Acum_{Qc-1}) S_start_c + st_c
//   final_states = S_start_nchunks; then + D x, then the z gate.
// The last partial chunk is simply shorter (equivalent to the kernels' Delta = 0 padding).
Result chunked(const Params& p, const Inputs& in, Mutant m = Mutant::none);

// Bounds (per element, both forms compute them identically from |.| inputs):
//   out_bound[b,t,h,p] = ( sum_{s in seq(t), s<=t} sum_n exp(sum_{r=s+1..t} a_r) Delta_s
//                            |x_s,p| |B_s,n| |C_t,n|
//                        + [t in sequence id 0, which began at t = 0] sum_n exp(sum_{r<=t} a_r) |h0_p,n| |C_t,n|
//                        + |D_h,p x_t,p| ) * |silu(z_t,p)|        (the factor omitted without z)
//   i.e. the sum of the absolute values of every elementary product the exact output is a sum
//   of; computed as the SSM applied to |x|, |B|, |C|, |h0|. A kernel that accumulates in a
//   format with unit roundoff u and keeps O(1) rounding steps per product has
//   |err| <= c * u * bound. final_states_bound / chunk_states_bound likewise
//   (sum over s, n-free: exp(..) Delta_s |x_s,p| |B_s,n| + decayed |h0_p,n|).
//
// ssd::oracle runs both forms, measures agreement_rel (recurrence as reference) on out,
// final_states and chunk_states (and varlen_states) WITHOUT enforcing it: the caller gates on
// kFormTolerance (fixtures/gen refuses to write a golden above its agreement_limit, 1e-12).
// It returns:
//   outputs:        "out" [B,T,H,P] (dtype out_dtype, bound), "final_states" [B,H,P,N]
//                   (dtype state_dtype, bound), with cu_seqlens "varlen_states" [seq,H,P,N]
//                   (dtype state_dtype, bound); expected values from the recurrence
//   intermediates:  "chunk_states" [B,chunk,H,P,N] (the state at the start of each chunk, for
//                   bisection to the first bad chunk; chunk 0 = initial_states; dtype out_dtype,
//                   the x.dtype upstream's _state_passing_fwd stores them in for chunk_scan, with
//                   intermediate_bounds["chunk_states"] = Result::chunk_states_bound), "dt_processed"
//                   [B,T,H], "dA_cumsum" [B,H,chunk,Q] (see ssd::dA_cumsum), both fp64.
//   agreement:      recurrence vs chunked on out, final_states, chunk_states (varlen_states);
//                   plus out and final_states for every Q in cross_check_chunk_sizes.
// oracle() always computes the bounds (compute_bounds is ignored there).
inline constexpr double kFormTolerance = 1e-12;
OracleResult oracle(const Params& p, const Inputs& in);

// CPU emulation of the upstream Triton kernels' PRECISION (spec 1.7), for calibrating tolerances
// (how far a correct low-precision kernel lands from the fp64 golden). Never a golden. Follows
// `_chunk_cumsum_fwd_kernel`, `_bmm_chunk_fwd`, `_chunk_state_fwd_kernel`,
// `_state_passing_fwd_kernel`, `_chunk_scan_fwd_kernel` at the level of roundings:
//   fp32: dt processing, dA = Delta*A, the chunk cumsum, CB (fp32 accumulate), every decay
//         exp(min(., 0)), the state-passing accumulator, D*x, the z gate, all accumulators;
//   `io` (x.dtype): cb*decay*Delta before the dot with x; B*decay*Delta before the dot with x in
//         chunk_state; C and the start states before their dot in chunk_scan; the output;
//   `state` (state_dtype, default C.dtype): the per-chunk start states handed to chunk_scan;
//   `tf32_dots` (Triton tl.dot with allow_tf32 on fp32 operands): every operand of the four dot
//         products (C.B in _bmm_chunk_fwd; (cb*decay*Delta).x and C.state in chunk_scan;
//         x^T (B*scale) in chunk_state / chunk_state_varlen) is rounded to TF32 (10 explicit
//         mantissa bits, RNE; round_tf32) after its io / state cast; the products of two TF32
//         values are exact in fp32 and accumulate in fp32.
// Accumulation order is sequential (a GPU's tensor-core order differs; same error scale).
// The inputs should already be representable in their storage dtypes. Returns out, final_states
// (fp32 values), chunk_states (as stored, in `state`) and, with cu_seqlens, varlen_states (fp32,
// computed the chunk_state_varlen way from the stored chunk states, plus initial_states for a
// sequence 0 that ends inside chunk 0: the math, as the golden); no bounds.
struct KernelPrecision {
  DType io = DType::bf16;
  DType state = DType::bf16;
  bool tf32_dots = false;
};
// x rounded to TF32 (fp32 exponent range, 10 explicit mantissa bits), round-to-nearest-even.
double round_tf32(double x);
Result chunked_kernel_precision(const Params& p, const Inputs& in, const KernelPrecision& kp);

// The kernels' dA_cumsum intermediate [B, H, nchunks, Q]: chunk-local inclusive cumsum of
// Delta*A; positions past T repeat the last valid value (Delta = 0 there).
std::vector<double> dA_cumsum(const Params& p, const Inputs& in, const std::vector<double>& delta);

}  // namespace assay::ssd
