// tile_gemm (tile_gemm.h): one body (tile_gemm.inc) compiled for AVX-512, AVX2 + FMA and plain C++
// (std::fma), picked once at run time. Register tiles: kMR rows x kNP panels of 8 columns
// (AVX-512: 4 x 4 panels = 16 accumulators of 8 lanes; AVX2: 2 x 2 panels = 8 of 4 lanes).
#include "reference/core/tile_gemm.h"

#include <algorithm>
#include <cmath>

#if defined(__GNUC__) && defined(__x86_64__)
#define ASSAY_GEMM_X86 1
#include <immintrin.h>
#endif

#define ASSAY_UNROLL _Pragma("GCC unroll 16")

namespace assay {
namespace {

#ifdef ASSAY_GEMM_X86
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
constexpr int kW = 8, kMR = 4, kNP = 4;
using Vd = __m512d;
inline Vd vzero() { return _mm512_setzero_pd(); }
inline Vd vset1(double x) { return _mm512_set1_pd(x); }
inline Vd vload(const double* p) { return _mm512_loadu_pd(p); }
inline void vstore(double* p, Vd v) { _mm512_storeu_pd(p, v); }
inline Vd vfma(Vd a, Vd b, Vd c) { return _mm512_fmadd_pd(a, b, c); }
#include "reference/core/tile_gemm.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int kW = 4, kMR = 2, kNP = 2;
using Vd = __m256d;
inline Vd vzero() { return _mm256_setzero_pd(); }
inline Vd vset1(double x) { return _mm256_set1_pd(x); }
inline Vd vload(const double* p) { return _mm256_loadu_pd(p); }
inline void vstore(double* p, Vd v) { _mm256_storeu_pd(p, v); }
inline Vd vfma(Vd a, Vd b, Vd c) { return _mm256_fmadd_pd(a, b, c); }
#include "reference/core/tile_gemm.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace portable {  // one lane, std::fma: the same roundings, slowly
constexpr int kW = 1, kMR = 1, kNP = 1;
using Vd = double;
inline Vd vzero() { return 0.0; }
inline Vd vset1(double x) { return x; }
inline Vd vload(const double* p) { return *p; }
inline void vstore(double* p, Vd v) { *p = v; }
inline Vd vfma(Vd a, Vd b, Vd c) { return std::fma(a, b, c); }
#include "reference/core/tile_gemm.inc"
}  // namespace portable

bool has(GemmIsa isa) {
#ifdef ASSAY_GEMM_X86
  switch (isa) {
    case GemmIsa::avx512: return __builtin_cpu_supports("avx512f");
    case GemmIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
#else
  return isa == GemmIsa::portable || isa == GemmIsa::best;
#endif
}

GemmIsa pick(GemmIsa isa) {
  static const GemmIsa best = has(GemmIsa::avx512) ? GemmIsa::avx512
                              : has(GemmIsa::avx2) ? GemmIsa::avx2
                                                   : GemmIsa::portable;
  return isa == GemmIsa::best ? best : isa;
}

}  // namespace

bool gemm_isa_available(GemmIsa isa) { return has(isa); }

void tile_gemm(int64_t M, int64_t N, int64_t K, const double* a, int64_t ars, int64_t acs, const double* b,
               int64_t ldb, double* c, int64_t ldc, GemmOpts o, GemmIsa isa) {
  if (M <= 0 || N <= 0) return;
  const double sg = o.negate ? -1.0 : 1.0;
  switch (pick(isa)) {
#ifdef ASSAY_GEMM_X86
    case GemmIsa::avx512:
      return avx512::gemm(M, N, K, a, ars, acs, b, ldb, c, ldc, o.accumulate, sg, o.a_lower, o.c_lower);
    case GemmIsa::avx2:
      return avx2::gemm(M, N, K, a, ars, acs, b, ldb, c, ldc, o.accumulate, sg, o.a_lower, o.c_lower);
#endif
    default:
      return portable::gemm(M, N, K, a, ars, acs, b, ldb, c, ldc, o.accumulate, sg, o.a_lower, o.c_lower);
  }
}

}  // namespace assay
