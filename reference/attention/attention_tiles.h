// Internal to reference/attention: the two products of the online form's KV-tile step, as FMA
// register-tile kernels that read pre-packed K and V tiles (no per-call packing, unlike a BLAS
// call on a 64 x 64 tile, where packing was a fifth of the form's time).
//
//   q      [tm, D]       fp64, rows ldq apart (the query tile, read in place)
//   kpan   [npan, D, 8]  fp64, the KV tile's keys as panels of 8, panels ps >= 8 D apart:
//                        kpan[(c / 8) ps + d 8 + c % 8] = K[c][d]; keys past the tile's end zero
//   s      [tm, 8 npan]  fp64, rows lds apart (out)
//   p      [tm, jn]      fp64, rows ldp apart
//   vrows  [jn, 8 nvec]  fp64, rows ldv apart (the tile's values, columns past Dv zero)
//   acc    [tm, 8 nvec]  fp64, rows lda apart (in / out)
//
// Rounding, the same on every ISA (AVX-512, AVX2 + FMA, and a scalar std::fma fallback, chosen at
// run time): each score is one fused multiply-add chain over d = 0 .. D-1 starting from 0, then
// times scale; each tile's P V element is a chain over c = 0 .. jn-1 from 0, then added to acc
// (the order a BLAS kernel with beta = 1 uses).
#pragma once
#include <cstdint>

#include "reference/core/simd_isa.h"

namespace assay::attention::detail {

// Which compiled body runs (reference/core/simd_isa.h): best = the widest the CPU has.
using assay::SimdIsa;

// s[r][c] = scale * sum_d q[r][d] kpan(c, d), r < tm, c < 8 npan.
void tile_scores(const double* q, int64_t ldq, int64_t tm, int64_t D, const double* kpan, int64_t npan,
                 int64_t ps, double scale, double* s, int64_t lds, SimdIsa isa = SimdIsa::best);

// acc[r][e] = acc[r][e] alpha[r] + sum_{c < jn} p[r][c] vrows[c][e], r < tm, e < 8 nvec: the sum
// one fma chain from 0 in ascending c, then the product and the add rounded each (the online
// softmax's rescale of O by alpha, then its P V); alpha = nullptr: no rescale (alpha 1, exact).
void tile_pv(const double* p, int64_t ldp, int64_t tm, int64_t jn, const double* vrows, int64_t ldv,
             int64_t nvec, double* acc, int64_t lda, const double* alpha, SimdIsa isa = SimdIsa::best);

// y[c] = exp(x[c] - m) for c < n (x[c] - m <= 0, or -inf), returns their sum in a fixed order
// (eight lanes of every eighth element, combined pairwise). The exp is the form's own (no libm):
// see attention_tiles.cpp.
double tile_exp_row_sum(const double* x, double m, double* y, int64_t n, SimdIsa isa = SimdIsa::best);

}  // namespace assay::attention::detail
