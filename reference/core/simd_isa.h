// The instruction sets of the oracle forms' register-tile kernels (reference/core/tile_gemm,
// reference/attention/attention_tiles): which body runs, and the few vector operations every body
// is written in. Each kernel file includes its body (.inc) once per namespace below, inside a
// matching `#pragma GCC target`, with `using namespace simd::<isa>`; all bodies use the same IEEE
// operations (vfma: one rounding), so they give the same bits.
#pragma once
#include <cmath>

// GCC only: clang ignores `#pragma GCC target`, so under clang (the fuzz build, scripts/fuzz) only
// the portable body is compiled, which gives the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ASSAY_SIMD_X86 1
#include <immintrin.h>
#endif

namespace assay {

// best = the widest the CPU has; the others exist for the tests that compare every body's bits.
enum class SimdIsa { best, avx512, avx2, portable };

inline bool simd_isa_available(SimdIsa isa) {
#ifdef ASSAY_SIMD_X86
  switch (isa) {
    case SimdIsa::avx512: return __builtin_cpu_supports("avx512f");
    case SimdIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
#else
  return isa == SimdIsa::portable || isa == SimdIsa::best;
#endif
}

// The body that runs for isa (best resolved once).
inline SimdIsa simd_isa_pick(SimdIsa isa) {
  static const SimdIsa best = simd_isa_available(SimdIsa::avx512) ? SimdIsa::avx512
                              : simd_isa_available(SimdIsa::avx2) ? SimdIsa::avx2
                                                                  : SimdIsa::portable;
  return isa == SimdIsa::best ? best : isa;
}

namespace simd {

#ifdef ASSAY_SIMD_X86
// The x86 bodies' operations: W lanes of type VD, the intrinsics of prefix P (_mm512, _mm256).
#define ASSAY_SIMD_X86_OPS(W, VD, P)                                  \
  constexpr int kW = W; /* lanes */                                   \
  using Vd = VD;                                                      \
  inline Vd vzero() { return P##_setzero_pd(); }                     \
  inline Vd vset1(double x) { return P##_set1_pd(x); }               \
  inline Vd vload(const double* p) { return P##_loadu_pd(p); }       \
  inline void vstore(double* p, Vd v) { P##_storeu_pd(p, v); }       \
  inline Vd vfma(Vd a, Vd b, Vd c) { return P##_fmadd_pd(a, b, c); } \
  inline Vd vmul(Vd a, Vd b) { return P##_mul_pd(a, b); }            \
  inline Vd vadd(Vd a, Vd b) { return P##_add_pd(a, b); }            \
  inline Vd vsub(Vd a, Vd b) { return P##_sub_pd(a, b); }

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
ASSAY_SIMD_X86_OPS(8, __m512d, _mm512)
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
ASSAY_SIMD_X86_OPS(4, __m256d, _mm256)
}  // namespace avx2
#pragma GCC pop_options
#undef ASSAY_SIMD_X86_OPS
#endif

namespace portable {  // one lane, std::fma: the same roundings, slowly
constexpr int kW = 1;
using Vd = double;
inline Vd vzero() { return 0.0; }
inline Vd vset1(double x) { return x; }
inline Vd vload(const double* p) { return *p; }
inline void vstore(double* p, Vd v) { *p = v; }
inline Vd vfma(Vd a, Vd b, Vd c) { return std::fma(a, b, c); }
inline Vd vmul(Vd a, Vd b) { return a * b; }
inline Vd vadd(Vd a, Vd b) { return a + b; }
inline Vd vsub(Vd a, Vd b) { return a - b; }
}  // namespace portable

}  // namespace simd
}  // namespace assay
