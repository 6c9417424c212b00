// tile_gemm (tile_gemm.h): one body (tile_gemm.inc) compiled for AVX-512, AVX2 + FMA and plain C++
// (std::fma), picked once at run time. Register tiles: kMR rows x kNP panels of 8 columns
// (AVX-512: 4 x 4 panels = 16 accumulators of 8 lanes; AVX2: 2 x 2 panels = 8 of 4 lanes).
#include "reference/core/tile_gemm.h"

#include <algorithm>
#include <cmath>

#define ASSAY_UNROLL _Pragma("GCC unroll 16")

namespace assay {
namespace {

#ifdef ASSAY_SIMD_X86
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using namespace simd::avx512;
constexpr int kMR = 4, kNP = 4;
#include "reference/core/tile_gemm.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
using namespace simd::avx2;
constexpr int kMR = 2, kNP = 2;
#include "reference/core/tile_gemm.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace portable {
using namespace simd::portable;
constexpr int kMR = 1, kNP = 1;
#include "reference/core/tile_gemm.inc"
}  // namespace portable

}  // namespace

void tile_gemm(int64_t M, int64_t N, int64_t K, const double* a, int64_t ars, int64_t acs, const double* b,
               int64_t ldb, double* c, int64_t ldc, GemmOpts o, SimdIsa isa) {
  if (M <= 0 || N <= 0) return;
  const double sg = o.negate ? -1.0 : 1.0;
  switch (simd_isa_pick(isa)) {
#ifdef ASSAY_SIMD_X86
    case SimdIsa::avx512:
      return avx512::gemm(M, N, K, a, ars, acs, b, ldb, c, ldc, o.accumulate, sg, o.a_lower, o.c_lower);
    case SimdIsa::avx2:
      return avx2::gemm(M, N, K, a, ars, acs, b, ldb, c, ldc, o.accumulate, sg, o.a_lower, o.c_lower);
#endif
    default:
      return portable::gemm(M, N, K, a, ars, acs, b, ldb, c, ldc, o.accumulate, sg, o.a_lower, o.c_lower);
  }
}

}  // namespace assay
