// Internal: one normalized problem description shared by the SISO and MIMO entry points. SISO is
// the R = 1 case with Psi = zeta = 1, no Phi and adjacent pairing. The two forms (mamba3_step.cpp,
// mamba3_chunked.cpp) are written independently against this description.
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "reference/mamba3/mamba3.h"

namespace assay::mamba3::detail {

inline constexpr double kPi = std::numbers::pi;
inline constexpr double kTwoPi = 2.0 * std::numbers::pi;

// Angles mod 2pi to ~1e-15 rad whatever their magnitude: 2pi as the double-double C1 + C2 and a
// Cody-Waite reduction (std::fma for the exact-ish hi - k*C1) of a value given as hi + lo.
inline constexpr double kTwoPiHi = 6.283185307179586;       // nearest double to 2pi
inline constexpr double kTwoPiLo = 2.4492935982947064e-16;  // 2pi - kTwoPiHi
inline double reduce_2pi(double hi, double lo) {
  const double k = std::floor((hi + lo) / kTwoPiHi);
  double r = std::fma(-k, kTwoPiHi, hi);
  r = (r + lo) - k * kTwoPiLo;
  if (r < 0) r += kTwoPiHi;
  if (r >= kTwoPiHi) r -= kTwoPiHi;
  return r;
}
// Error-free sum: s + e == a + b exactly (a, b by value: s may alias the caller's a).
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

enum class Pairing { adjacent, half_split };

// Deliberate bugs for the CPU mutant tests (tests/test_mamba3_chunk_states.cpp) and calibration;
// honoured by the chunked form only. `bf16_kernel` is not a bug: it rounds at the bf16 kernels'
// rounding points (rotated q/k, Psi*V, scores, the carried state, the trap-scaled k, the output) to
// Problem::kernel_dtype, to emulate a correct bf16 (or fp16) kernel that a tolerance must accept.
enum class Variant {
  exact,
  bf16_kernel,
  no_intra,                // chunked without the intra-chunk term
  no_diag,                 // same-step gamma term dropped
  diag_same_rank_only,     // MIMO: same-step pairs only r' == r
  shifted_reset_at_chunk,  // shifted trapezoid term zeroed at every chunk end
  no_state_passing,        // state not carried between chunks (chunk c > 0 starts from 0)
  no_chunk_decay,          // state carried without the chunk-total decay exp(Acum_last)
  wrong_pairing,           // adjacent <-> half-split rotation pairs swapped
  double_sigmoid,          // sigmoid applied twice to Trap
  row_mask,                // causal mask on the fused (time, rank) row instead of on time
};

struct Problem {
  int64_t B = 1, T = 0, H = 1, G = 1, N = 0, P = 0, R = 1, S = 0;
  Pairing pairing = Pairing::adjacent;
  int64_t chunk = 64;
  bool fused_norm = false;
  double norm_eps = 1e-5;
  Variant variant = Variant::exact;
  // no_chunk_decay only: -1 at every chunk boundary; k >= 1 only for the state carried into chunk
  // k of each sequence (a mutant first wrong at a chosen chunk: the tests of assay bisect).
  int64_t variant_chunk = -1;
  // Calibration knob (chunked form only, independent of `variant`): emulate the Triton SISO angle
  // path, which stores every token's cumulative angle and the final angle state in bf16 (the dtype
  // of Angles) after an fp32 cumsum; the rotations then use the stored bf16 angles.
  bool bf16_angles = false;
  // The dtype of Variant::bf16_kernel's rounding points (the kernel's activation dtype: bf16, or
  // fp16 for an fp16 run).
  DType kernel_dtype = DType::bf16;
  bool mimo = false;  // final_k layout (NS, R, H, N) vs (NS, H, N): same memory for R = 1

  // Inputs (nullptr = absent). Layouts as in mamba3.h (SISO with R = 1).
  const double *q = nullptr, *k = nullptr, *v = nullptr;
  const double *adt = nullptr, *dt = nullptr, *trap = nullptr;
  const double *q_bias = nullptr, *k_bias = nullptr, *angles = nullptr;
  const double *d = nullptr, *z = nullptr;
  const double *psi = nullptr, *zeta = nullptr, *phi = nullptr, *norm_w = nullptr;
  const double *init_angle = nullptr, *init_ssm = nullptr, *init_k = nullptr, *init_v = nullptr;

  // Sequences: batch row, first token and length of each; chunk_off[n] = index of the first chunk
  // of sequence n in the flat chunk list (size NS + 1).
  std::vector<int64_t> seq_row, seq_start, seq_len, chunk_off;

  int64_t NS() const { return static_cast<int64_t>(seq_len.size()); }
  int64_t NC() const { return chunk_off.back(); }

  // Flat indices.
  int64_t iqk(int64_t b, int64_t t, int64_t r, int64_t g) const {  // start of the N vector
    return (((b * T + t) * R + r) * G + g) * N;
  }
  int64_t iv(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * P; }
  int64_t ibht(int64_t b, int64_t h, int64_t t) const { return (b * H + h) * T + t; }
  int64_t iang(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * S; }
  int64_t ihr(int64_t h, int64_t r) const { return (h * R + r); }  // * N or * P by the caller
  int64_t iout(int64_t b, int64_t t, int64_t r, int64_t h) const {  // start of the P vector
    return phi ? ((b * T + t) * H + h) * P : ((((b * T + t) * R + r) * H + h) * P);
  }
  int64_t ipre(int64_t b, int64_t t, int64_t r, int64_t h) const {  // pre-gate (B, T, R, H, P)
    return (((b * T + t) * R + r) * H + h) * P;
  }
  int64_t out_size() const { return phi ? B * T * H * P : B * T * R * H * P; }
  // States.
  int64_t ist_angle(int64_t n, int64_t h) const { return (n * H + h) * S; }
  int64_t ist_ssm(int64_t n, int64_t h) const { return (n * H + h) * P * N; }
  int64_t ist_k(int64_t n, int64_t r, int64_t h) const { return ((n * R + r) * H + h) * N; }
  int64_t ist_v(int64_t n, int64_t h) const { return (n * H + h) * P; }
  int64_t ichunk(int64_t c, int64_t h) const { return (c * H + h) * P * N; }
};

// The two dims of rotation pair i (adjacent (2i, 2i+1) or half-split (i, i + N/2)).
inline void pair_of(const Problem& pb, int64_t i, int64_t& a, int64_t& b) {
  if (pb.pairing == Pairing::adjacent) {
    a = 2 * i;
    b = 2 * i + 1;
  } else {
    a = i;
    b = i + pb.N / 2;
  }
}

// x <- Rot(phi) x (length N) on the problem's S pairs: (u, w) -> (u cos - w sin, u sin + w cos);
// dims outside the pairs pass through. The one rotation of the step form and the recurrent backward.
inline void rotate(const Problem& pb, const double* phi, double* x) {
  for (int64_t i = 0; i < pb.S; ++i) {
    int64_t a, b;
    pair_of(pb, i, a, b);
    const double c = std::cos(phi[i]), s = std::sin(phi[i]);
    const double u = x[a], w = x[b];
    x[a] = u * c - w * s;
    x[b] = u * s + w * c;
  }
}

// The normalized problems of the public entry points (validated; pointers into `in`).
Problem make_problem(const SisoParams& p, const SisoInputs& in);
Problem make_problem(const MimoParams& p, const MimoInputs& in);

// Sets the chunk size q (InputError unless q >= 1) and the chunk offsets of every sequence.
void set_chunk(Problem& pb, int64_t q);

// Allocates every field of a Result for problem `pb` (zeros) and fills chunk_seq / chunk_start.
Result make_result(const Problem& pb);

Result run_step(const Problem& pb);
Result run_chunked(const Problem& pb);

// A form's driver: one(n, h, res) for every (sequence, head), in parallel, into a fresh Result.
template <class One>
Result run_per_head(const Problem& pb, One one) {
  Result res = make_result(pb);
  const int64_t work = pb.NS() * pb.H;
#pragma omp parallel for schedule(dynamic)
  for (int64_t w = 0; w < work; ++w) one(pb, w / pb.H, w % pb.H, res);
  return res;
}

}  // namespace assay::mamba3::detail
