// The online form's tile kernels (attention_tiles.h): one body (attention_tiles.inc) compiled for
// AVX-512, AVX2 + FMA and plain C++ (std::fma), picked once at run time. Register tiles: kMR query
// rows x kNP panels of 8 columns (AVX-512: 4 x 4 panels = 16 accumulators of 8 lanes).
#include "reference/attention/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>

#define ASSAY_UNROLL _Pragma("GCC unroll 16")

// exp of arguments <= 0 (the online softmax's x - m), the same IEEE operations on every ISA:
// z = max(z, -746) (NaN stays NaN; below -746 the result rounds to +0, so -inf gives exactly 0);
// Cody-Waite reduction z = k ln2 + r with k = rint(z / ln2) from one fused multiply-add against
// the 1.5 * 2^52 shifter, r = (z - k ln2hi) - k ln2lo as two fused multiply-adds (ln2 split as in
// fdlibm, k ln2hi exact, |r| <= ln2 / 2 + 2^-40); Taylor polynomial of degree 13 by Horner with
// fused multiply-adds (truncation < 6e-18 relative); then p 2^k with one rounding (AVX-512's
// scalef; AVX2 multiplies by two exact powers of two; the portable body uses ldexp): a subnormal
// result rounds once. Within 1 ulp of glibc's exp on [-746, 0] (test_attention checks 2^20
// points and the bits of every body).
namespace assay::attention::detail::expc {
constexpr double kLog2e = 1.4426950408889634, kShift = 0x1.8p52, kLo = -746.0;
constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
constexpr double kC[14] = {1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0,
                           1.0 / 40320.0, 1.0 / 362880.0, 1.0 / 3628800.0, 1.0 / 39916800.0,
                           1.0 / 479001600.0, 1.0 / 6227020800.0};
}  // namespace assay::attention::detail::expc

namespace assay::attention::detail {
namespace {

#ifdef ASSAY_SIMD_X86
#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's masked-intrinsic false positive
namespace avx512 {
using namespace simd::avx512;
constexpr int kMR = 4, kNP = 4;
// exp's ISA parts (vexp in attention_tiles_exp.inc): max(kLo, z) keeping a NaN z, fused -a b + c,
// p 2^k with one rounding (scalef).
inline Vd vmax_lo(Vd z) { return _mm512_max_pd(vset1(expc::kLo), z); }
inline Vd vfnma(Vd a, Vd b, Vd c) { return _mm512_fnmadd_pd(a, b, c); }
inline Vd vpow2(Vd p, Vd kd, Vd) { return _mm512_scalef_pd(p, kd); }
#include "reference/attention/attention_tiles_exp.inc"
#include "reference/attention/attention_tiles.inc"
}  // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
using namespace simd::avx2;
constexpr int kMR = 2, kNP = 2;
// exp's ISA parts (vexp in attention_tiles_exp.inc): max(kLo, z) keeping a NaN z, fused -a b + c,
// p 2^k with one rounding: two exact factors 2^k1 2^k2, k1 = floor(k / 2), k from the shifted t.
inline Vd vmax_lo(Vd z) { return _mm256_max_pd(vset1(expc::kLo), z); }
inline Vd vfnma(Vd a, Vd b, Vd c) { return _mm256_fnmadd_pd(a, b, c); }
inline Vd vpow2(Vd p, Vd, Vd t) {
  using namespace expc;
  const __m256i ki = _mm256_sub_epi64(_mm256_castpd_si256(t), _mm256_castpd_si256(vset1(kShift)));
  const __m256i k1 = _mm256_sub_epi64(_mm256_srli_epi64(_mm256_add_epi64(ki, _mm256_set1_epi64x(2048)), 1),
                                      _mm256_set1_epi64x(1024));
  const __m256i k2 = _mm256_sub_epi64(ki, k1);
  const __m256i bias = _mm256_set1_epi64x(1023);
  const Vd f1 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(k1, bias), 52));
  const Vd f2 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(k2, bias), 52));
  return _mm256_mul_pd(_mm256_mul_pd(p, f1), f2);
}
#include "reference/attention/attention_tiles_exp.inc"
#include "reference/attention/attention_tiles.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace portable {
using namespace simd::portable;
constexpr int kMR = 1, kNP = 1;
inline Vd vexp(Vd z) {
  using namespace expc;
  if (std::isnan(z)) return z;
  z = std::max(kLo, z);
  const double kd = std::fma(z, kLog2e, kShift) - kShift;
  const double r = std::fma(-kd, kLn2Lo, std::fma(-kd, kLn2Hi, z));
  double p = kC[13];
  for (int i = 12; i >= 0; --i) p = std::fma(p, r, kC[i]);
  return std::ldexp(p, static_cast<int>(kd));
}
#include "reference/attention/attention_tiles.inc"
}  // namespace portable

}  // namespace

void tile_scores(const double* q, int64_t ldq, int64_t tm, int64_t D, const double* kpan, int64_t npan,
                 int64_t ps, double scale, double* s, int64_t lds, SimdIsa isa) {
  switch (simd_isa_pick(isa)) {
#ifdef ASSAY_SIMD_X86
    case SimdIsa::avx512: return avx512::tile_scores(q, ldq, tm, D, kpan, npan, ps, scale, s, lds);
    case SimdIsa::avx2: return avx2::tile_scores(q, ldq, tm, D, kpan, npan, ps, scale, s, lds);
#endif
    default: return portable::tile_scores(q, ldq, tm, D, kpan, npan, ps, scale, s, lds);
  }
}

void tile_pv(const double* p, int64_t ldp, int64_t tm, int64_t jn, const double* vrows, int64_t ldv,
             int64_t nvec, double* acc, int64_t lda, const double* alpha, SimdIsa isa) {
  switch (simd_isa_pick(isa)) {
#ifdef ASSAY_SIMD_X86
    case SimdIsa::avx512: return avx512::tile_pv(p, ldp, tm, jn, vrows, ldv, nvec, acc, lda, alpha);
    case SimdIsa::avx2: return avx2::tile_pv(p, ldp, tm, jn, vrows, ldv, nvec, acc, lda, alpha);
#endif
    default: return portable::tile_pv(p, ldp, tm, jn, vrows, ldv, nvec, acc, lda, alpha);
  }
}

double tile_exp_row_sum(const double* x, double m, double* y, int64_t n, SimdIsa isa) {
  switch (simd_isa_pick(isa)) {
#ifdef ASSAY_SIMD_X86
    case SimdIsa::avx512: return avx512::exp_row_sum(x, m, y, n);
    case SimdIsa::avx2: return avx2::exp_row_sum(x, m, y, n);
#endif
    default: return portable::exp_row_sum(x, m, y, n);
  }
}

}  // namespace assay::attention::detail
