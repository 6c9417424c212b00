// NVFP4 (TransformerEngine arithmetic) and MX (MXFP8 E4M3 / E5M2, MXFP4) quantize + dequantize.
//
// Tensors: x [M, N] bf16 codes in. Out, per direction (rowwise: blocks along N; columnwise: the
// same for x^T, stored transposed [N, M], quantized independently from x, as TE does):
//   q_<dir>       [rows, cols] codes, one per byte (fp4e2m1 / fp8e4m3 / fp8e5m2)
//   packed_<dir>  [rows, ceil(cols/2)] u8, E2M1 only, element 2k in the low nibble
//   scale_<dir>   [rows, ceil(cols/V)] fp8e4m3 (NVFP4, V = 16) or ue8m0 (MX, V = 32)
//   amax_<dir>    [1] f32 (NVFP4: the global amax used for S_enc)
//   xhat_<dir>    [rows, cols] f32 dequantized from packed/q + scale (+ amax)
//
// Variants:
//   quant_nvfp4_v1  1x16 blocks (or 16x16 tiles, block_2d), rowwise and/or columnwise.
//                   (1) amax: grid-stride reduction over 16-byte loads, max of |x| as integer bits
//                   (order independent: deterministic), one atomicMax per warp into the amax
//                   output; a 1-thread kernel applies the overrides; (2) the cast: one CTA per
//                   64x64 tile staged in shared memory through 16-byte loads; one thread per
//                   16-element block in each direction (256 threads: 64 rows x 4 blocks rowwise,
//                   64 columns x 4 blocks columnwise); 16x16 tile amaxes through shared memory;
//                   rowwise block amax on bf16 pairs (HMNMX2), E2M1 codes by integer rounding of
//                   the fp32 bits (the kernel is ALU-bound, not memory-bound, on these);
//                   (3) dequantize: one thread per element.
//   quant_mx_v1     the same tile kernel with 32-element blocks: a block is two threads (rowwise:
//                   adjacent lanes, __shfl_xor; columnwise: a shared-memory exchange); UE8M0
//                   floor (OCP spec, NaN-propagating amax) or RCEIL (TE, fmaxf amax) scales.
// Arithmetic: kernels/quant/quant_math.h (TE quantize_transpose_nvfp4.cuh / core_nvfp4.cuh /
// dequantize_nvfp4.cuh; TE quantize_mxfp8.cuh for RCEIL; the OCP MX reference for floor).
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/quant/quant_kernels.h"
#include "kernels/quant/quant_math.h"

namespace assay::kernels::quant {
namespace {

constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kPad = 72;  // smem row stride in bf16: 144 bytes, conflict-free 16-byte row reads

enum Fmt : int { kNvfp4 = 0, kMx = 1 };

struct TileArgs {
  const uint16_t* x;
  int64_t M, N;
  Elem elem;
  bool rceil, block2d, row, col;
  float max_rcp;  // MX RCEIL: (float)(1.0 / max_elem)
  const float *amax_row, *amax_col;
  uint8_t *q_row, *packed_row, *scale_row, *q_col, *packed_col, *scale_col;
  bool vec_in, vec_row_out, vec_col_out;
};

__device__ __forceinline__ __nv_bfloat162 bits_bf162(uint32_t u) {
  __nv_bfloat162 r;
  memcpy(&r, &u, 4);
  return r;
}

__device__ __forceinline__ void unpack8(uint4 w, float* v) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = u2f(u[k] << 16);
    v[2 * k + 1] = u2f(u[k] & 0xFFFF0000u);
  }
}

// Writes 16 codes (0..15 each) of one block: q[row][col0 .. col0+15] and the 8 packed bytes
// (cols clipped; padding codes are 0, as the packed rows are padded with code 0).
__device__ __forceinline__ void write_block(uint8_t* q, uint8_t* packed, int64_t row, int64_t col0, int64_t ncols,
                                            uint32_t (&c)[16], bool vec) {
  if (col0 + 16 > ncols) {
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (col0 + i >= ncols) c[i] = 0;
  }
  if (q) {
    uint8_t* p = q + row * ncols + col0;
    if (vec) {
      uint4 w;
      w.x = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
      w.y = c[4] | (c[5] << 8) | (c[6] << 16) | (c[7] << 24);
      w.z = c[8] | (c[9] << 8) | (c[10] << 16) | (c[11] << 24);
      w.w = c[12] | (c[13] << 8) | (c[14] << 16) | (c[15] << 24);
      *reinterpret_cast<uint4*>(p) = w;
    } else {
      for (int i = 0; i < 16; ++i)
        if (col0 + i < ncols) p[i] = static_cast<uint8_t>(c[i]);
    }
  }
  if (packed) {
    const int64_t pc = (ncols + 1) / 2;
    // element 2k in the low nibble of byte k
    uint32_t w0 = 0, w1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) w0 |= c[i] << (4 * i);
#pragma unroll
    for (int i = 0; i < 8; ++i) w1 |= c[8 + i] << (4 * i);
    uint8_t* p = packed + row * pc + col0 / 2;
    if (vec) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w0, w1);
    } else {
      for (int j = 0; j < 8; ++j)
        if (col0 / 2 + j < pc) p[j] = static_cast<uint8_t>(((j < 4 ? w0 : w1) >> (8 * (j & 3))) & 0xFFu);
    }
  }
}

template <int FMT>
__device__ __forceinline__ float combine(float a, float b, bool rceil) {
  if (FMT == kMx && !rceil) return qm_max_nan(a, b);  // spec floor: torch.amax, NaN propagates
  return qm_fmax(a, b);                               // TE: fmaxf, NaN dropped
}

// The amax of 16 bf16 values held as 8 words, two at a time: |x| by clearing both sign bits,
// then a bf16x2 max (HMNMX2; bf16 -> fp32 is exact, so this is the fp32 max of the same values).
// __hmax2 drops a NaN operand like fmaxf; __hmax2_nan propagates it like torch.amax (MX floor).
template <int FMT>
__device__ __forceinline__ float block_amax(uint4 w0, uint4 w1, bool rceil) {
  const uint32_t u[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  const bool nanprop = FMT == kMx && !rceil;
  __nv_bfloat162 m = bits_bf162(u[0] & 0x7FFF7FFFu);
#pragma unroll
  for (int k = 1; k < 8; ++k) {
    const __nv_bfloat162 x = bits_bf162(u[k] & 0x7FFF7FFFu);
    m = nanprop ? __hmax2_nan(m, x) : __hmax2(m, x);
  }
  const float lo = __low2float(m), hi = __high2float(m);
  // starting from 0 as the scalar loop did: max(0, |x|...) = max(|x|...) unless all are NaN
  return combine<FMT>(combine<FMT>(0.0f, lo, rceil), hi, rceil);
}

// Quantizes one 16-element block given its (block or tile) amax: codes and the scale code.
template <int FMT>
__device__ __forceinline__ uint8_t quant16(const float* v, float ab, const TileArgs& a, const Nvfp4Global& g,
                                           uint32_t (&c)[16]) {
  if (FMT == kNvfp4) {
    const uint8_t qs = nvfp4_scale_code(ab, g);
    const float r = nvfp4_encode_mult(qs, g);
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] = e2m1_code(qm_mul(v[i], r));
    return qs;
  } else {
    const uint8_t e = a.rceil ? ue8m0_rceil(qm_mul(ab, a.max_rcp)) : ue8m0_floor(ab, mx_emax(a.elem));
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] = mx_encode(v[i], e, a.elem);
    return e;
  }
}

template <int FMT>
__global__ void __launch_bounds__(kThreads) quant_tile_kernel(TileArgs a) {
  __shared__ __align__(16) uint16_t xs[kTile * kPad];
  __shared__ float part[kTile][4];      // 2D: rowwise partial amax per (row, 16-column block)
  __shared__ float tile_amax[4][4];     // 2D: amax per 16x16 tile
  __shared__ float colpart[4][kTile];   // MX columnwise: partial amax per (16-row block, column)
  const int t = threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t M = a.M, N = a.N;

  // ---- stage the 64x64 tile (zeros outside x: they change no amax and encode to code 0)
  if (a.vec_in) {
    for (int k = t; k < kTile * kTile / 8; k += kThreads) {
      const int rr = k >> 3, ch = k & 7;
      const int64_t gr = r0 + rr, gc = c0 + ch * 8;
      uint4 w = make_uint4(0, 0, 0, 0);
      if (gr < M && gc < N) w = __ldg(reinterpret_cast<const uint4*>(a.x + gr * N + gc));
      *reinterpret_cast<uint4*>(&xs[rr * kPad + ch * 8]) = w;
    }
  } else {
    for (int k = t; k < kTile * kTile; k += kThreads) {
      const int rr = k >> 6, cc = k & 63;
      const int64_t gr = r0 + rr, gc = c0 + cc;
      xs[rr * kPad + cc] = (gr < M && gc < N) ? a.x[gr * N + gc] : static_cast<uint16_t>(0);
    }
  }
  __syncthreads();

  Nvfp4Global g_row{}, g_col{};
  if (FMT == kNvfp4) {
    if (a.row) g_row = nvfp4_global(*a.amax_row);
    if (a.col) g_col = nvfp4_global(*a.amax_col);
  }
  const bool two_d = FMT == kNvfp4 && a.block2d;

  // ---- rowwise: thread = (row rr, 16-column block seg)
  if (a.row || two_d) {
    const int rr = t >> 2, seg = t & 3;
    const int64_t gr = r0 + rr, gc = c0 + seg * 16;
    const uint4 w0 = *reinterpret_cast<const uint4*>(&xs[rr * kPad + seg * 16]);
    const uint4 w1 = *reinterpret_cast<const uint4*>(&xs[rr * kPad + seg * 16 + 8]);
    float v[16];
    unpack8(w0, v);
    unpack8(w1, v + 8);
    const float pa = block_amax<FMT>(w0, w1, a.rceil);
    if (two_d) {
      part[rr][seg] = pa;
      __syncthreads();
      if (t < 16) {
        const int i = t >> 2, j = t & 3;
        float m = 0.0f;
        for (int k = 0; k < 16; ++k) m = qm_fmax(m, part[i * 16 + k][j]);
        tile_amax[i][j] = m;
      }
      __syncthreads();
    }
    if (a.row) {
      float ab = pa;
      if (FMT == kMx) ab = combine<FMT>(pa, __shfl_xor_sync(0xffffffffu, pa, 1), a.rceil);
      if (two_d) ab = tile_amax[rr >> 4][seg];
      if (gr < M && gc < N) {
        uint32_t c[16];
        const uint8_t sc = quant16<FMT>(v, ab, a, g_row, c);
        if (FMT == kNvfp4) {
          a.scale_row[gr * ((N + 15) / 16) + gc / 16] = sc;
        } else if ((seg & 1) == 0) {
          a.scale_row[gr * ((N + 31) / 32) + gc / 32] = sc;
        }
        write_block(a.q_row, a.packed_row, gr, gc, N, c, a.vec_row_out);
      }
    }
  }

  // ---- columnwise: thread = (column cc, 16-row block seg); output row = column of x
  if (a.col) {
    const int cc = t & 63, seg = t >> 6;
    const int64_t gcx = c0 + cc, gm = r0 + seg * 16;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = bf16_to_f32(xs[(seg * 16 + i) * kPad + cc]);
    float pa = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) pa = combine<FMT>(pa, qm_abs(v[i]), a.rceil);
    float ab = pa;
    if (FMT == kMx) {
      colpart[seg][cc] = pa;
      __syncthreads();
      ab = combine<FMT>(pa, colpart[seg ^ 1][cc], a.rceil);
    }
    if (two_d) ab = tile_amax[seg][cc >> 4];
    if (gcx < N && gm < M) {
      uint32_t c[16];
      const uint8_t sc = quant16<FMT>(v, ab, a, g_col, c);
      if (FMT == kNvfp4) {
        a.scale_col[gcx * ((M + 15) / 16) + gm / 16] = sc;
      } else if ((seg & 1) == 0) {
        a.scale_col[gcx * ((M + 31) / 32) + gm / 32] = sc;
      }
      write_block(a.q_col, a.packed_col, gcx, gm, M, c, a.vec_col_out);
    }
  }
}

// ---- amax of |x| over the whole tensor (fmaxf semantics: NaN dropped), as fp32 bits.
__global__ void amax_reduce_kernel(const uint16_t* x, int64_t n, bool vec, unsigned* acc) {
  unsigned m = 0;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto take = [&](uint32_t b) {
    b &= 0x7FFFu;
    if (b <= 0x7F80u) m = max(m, b);  // NaN (exponent all ones, mantissa != 0) dropped
  };
  int64_t tail = 0;
  if (vec) {
    const int64_t nv = n / 8;
    for (int64_t i = tid; i < nv; i += stride) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(x) + i);
      take(w.x & 0xFFFFu), take(w.x >> 16), take(w.y & 0xFFFFu), take(w.y >> 16);
      take(w.z & 0xFFFFu), take(w.z >> 16), take(w.w & 0xFFFFu), take(w.w >> 16);
    }
    tail = nv * 8;
  }
  for (int64_t i = tail + tid; i < n; i += stride) take(x[i]);
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(acc, m << 16);
}

__global__ void amax_finalize_kernel(const float* acc, float* amax_row, float* amax_col, bool row_given, float row_v,
                                     bool col_given, float col_v) {
  const float A = acc ? *acc : 0.0f;
  if (amax_row) *amax_row = row_given ? row_v : A;
  if (amax_col) *amax_col = col_given ? col_v : A;
}

// The code of element (r, c) of a [rows, cols] output: from the packed bytes (E2M1, element 2k in
// the low nibble of byte k) when written, else from q.
__device__ __forceinline__ uint8_t stored_code(const uint8_t* q, const uint8_t* packed, int64_t r, int64_t c,
                                               int64_t cols) {
  if (!packed) return q[r * cols + c];
  const uint8_t b = packed[r * ((cols + 1) / 2) + c / 2];
  return (c & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xF);
}

// ---- dequantize: one thread per element; codes from packed (E2M1) or q.
template <int FMT>
__global__ void dequant_kernel(const uint8_t* q, const uint8_t* packed, const uint8_t* scale, const float* amax,
                               int64_t rows, int64_t cols, Elem elem, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const uint8_t code = stored_code(q, packed, r, c, cols);
  if (FMT == kNvfp4) {
    out[i] = nvfp4_dequant(code, scale[r * ((cols + 15) / 16) + c / 16], *amax);
  } else {
    out[i] = mx_dequant(code, scale[r * ((cols + 31) / 32) + c / 32], elem);
  }
}

// ================================================================ quant_nvfp4_recipes_v1
// ---- RHT of the columnwise operand (A3.4): hp [N, M] f32 (bf16-valued), hp[n][m0 + j] =
// RNE_bf16(1/4 sum_i s_i H[i][j] x[m0 + i][n]), the sum exact: a Shewchuk expansion (TwoSum) of
// the 16 exact fp64 terms, a first bf16 guess from its approximate sum, then exact comparisons with
// the neighbouring midpoints (as reference/quant bf16_round_exact_sum).
__device__ int expansion_grow(double* e, int n, double b) {
  double q = b;
  int m = 0;
  for (int i = 0; i < n; ++i) {
    const double ei = e[i];
    const double x = __dadd_rn(q, ei);
    const double bv = __dsub_rn(x, q);
    const double av = __dsub_rn(x, bv);
    const double err = __dadd_rn(__dsub_rn(q, av), __dsub_rn(ei, bv));
    if (err != 0.0) e[m++] = err;  // m <= i: in place
    q = x;
  }
  if (q != 0.0 || m == 0) e[m++] = q;
  return m;
}
__device__ int expansion_sign(const double* e, int n) {
  for (int i = n - 1; i >= 0; --i)
    if (e[i] != 0.0) return e[i] > 0.0 ? 1 : -1;
  return 0;
}
__device__ double bf16_value(uint32_t b) { return static_cast<double>(u2f(b << 16)); }
__device__ int bf16_key(uint32_t b) { return (b & 0x8000u) ? -static_cast<int>(b & 0x7FFFu) : static_cast<int>(b & 0x7FFFu); }
__device__ uint32_t bf16_from_key(int k) { return k < 0 ? (0x8000u | static_cast<uint32_t>(-k)) : static_cast<uint32_t>(k); }
// sign(V - (lo + hi) / 2) for the expansion e of V; the midpoint is exact (9 significant bits).
__device__ int cmp_mid(const double* e, int n, uint32_t lo, uint32_t hi) {
  double t[18];
  for (int i = 0; i < n; ++i) t[i] = e[i];
  const int m = expansion_grow(t, n, -0.5 * (bf16_value(lo) + bf16_value(hi)));
  return expansion_sign(t, m);
}

__global__ void rht_kernel(const uint16_t* x, int64_t M, int64_t N, uint32_t sign_mask, float* hp) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= M * N) return;
  const int64_t n = o / M, m = o % M, m0 = m - m % 16;
  const int j = static_cast<int>(m % 16);
  double e[18];
  int ne = 0;
  for (int i = 0; i < 16; ++i) {
    const bool neg = ((__popc(static_cast<unsigned>(i & j)) & 1) != 0) != (((sign_mask >> i) & 1u) != 0);
    const double v = 0.25 * static_cast<double>(bf16_to_f32(x[(m0 + i) * N + n]));  // exact
    ne = expansion_grow(e, ne, neg ? -v : v);
  }
  double approx = 0.0;
  for (int i = 0; i < ne; ++i) approx += e[i];
  // first guess (through fp32: may be off by one step; the comparisons below correct it)
  uint32_t c = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(approx))));
  if ((c & 0x7F80u) != 0x7F80u) {
    for (int guard = 0; guard < 4; ++guard) {
      const int k = bf16_key(c);
      if (k >= 0x7F7F || k <= -0x7F7F) break;
      const uint32_t up = bf16_from_key(k + 1);
      uint32_t dn = bf16_from_key(k - 1);
      if (k == 0 && (c & 0x8000u) == 0) dn = 0x8001u;
      const int su = cmp_mid(e, ne, c, up);
      if (su > 0 || (su == 0 && (up & 1u) == 0)) {
        c = up;
        continue;
      }
      const int sd = cmp_mid(e, ne, dn, c);
      if (sd < 0 || (sd == 0 && (dn & 1u) == 0)) {
        c = dn;
        continue;
      }
      break;
    }
    if (expansion_sign(e, ne) == 0) c = 0;
  }
  hp[o] = u2f(c << 16);
}

// ---- |x| amax of a bf16 (x16) or f32 (x32) source as orderable fp32 bits: NaN dropped (fmaxf,
// TE) or propagated (its bits exceed Inf's: torch.amax, torchao).
__global__ void amax_any_kernel(const uint16_t* x16, const float* x32, int64_t n, bool nanprop, unsigned* acc) {
  unsigned m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned b = (x16 ? static_cast<unsigned>(x16[i]) << 16 : f2u(x32[i])) & 0x7FFFFFFFu;
    if (nanprop || b <= 0x7F800000u) m = max(m, b);
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(acc, m);
}
__global__ void amax_set_kernel(const unsigned* acc, bool given, float value, float* amax) {
  *amax = given ? value : u2f(*acc);
}

struct RecipeDir {
  const uint16_t* x;  // [M, N] bf16
  const float* hp;    // [rows, cols] f32 source (RHT), else null: read x (transposed when col)
  int64_t M, N, rows, cols;
  bool col, ao, two_level, cuda_div;
  const uint8_t* rbits;  // [rows, cols] (SR) or null
  const float* amax;
  uint8_t *q, *packed, *scale;
};
__device__ __forceinline__ float recipe_load(const RecipeDir& d, int64_t r, int64_t c) {
  if (d.hp) return d.hp[r * d.cols + c];
  return bf16_to_f32(d.col ? d.x[c * d.N + r] : d.x[r * d.N + c]);
}
__device__ __forceinline__ float ao_div_scalar(float a, float b, bool cuda) {
  return cuda ? qm_mul(a, qm_div(1.0f, b)) : qm_div(a, b);  // PyTorch CUDA: tensor / scalar = x * fl(1/b)
}
__device__ __forceinline__ float torch_clamp(float v, float lo, float hi) {
  return qm_isnan(v) ? v : fminf(fmaxf(v, lo), hi);
}
__device__ __forceinline__ float ao_pts(const RecipeDir& d) {
  return d.two_level ? ao_div_scalar(*d.amax, 2688.0f, d.cuda_div) : 1.0f;
}

// One thread per (row, 16-column block) of the direction's matrix.
__global__ void recipe_quant_kernel(RecipeDir d) {
  const int64_t nb = (d.cols + 15) / 16;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.rows * nb) return;
  const int64_t r = i / nb, c0 = (i % nb) * 16;
  const int n = d.cols - c0 < 16 ? static_cast<int>(d.cols - c0) : 16;
  float v[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) v[k] = k < n ? recipe_load(d, r, c0 + k) : 0.0f;
  uint32_t c[16];
  uint8_t qs;
  if (!d.ao) {  // TE (A3.1), RN or SR
    float ab = 0.0f;
    for (int k = 0; k < n; ++k) ab = qm_fmax(ab, qm_abs(v[k]));
    const Nvfp4Global g = nvfp4_global(*d.amax);
    qs = nvfp4_scale_code(ab, g);
    const float rr = nvfp4_encode_mult(qs, g);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const float y = qm_mul(v[k], rr);
      c[k] = d.rbits && k < n ? e2m1_sr_code(y, d.rbits[r * d.cols + c0 + k]) : e2m1_code(y);
    }
  } else {  // torchao nvfp4_quantize (A3.7; reference/quant nvfp4_ao_dir)
    float ab = 0.0f;
    for (int k = 0; k < n; ++k) ab = qm_max_nan(ab, qm_abs(v[k]));
    const float pts = ao_pts(d);
    const float bs = ao_div_scalar(ab, 6.0f, d.cuda_div);
    const float scaled = torch_clamp(d.two_level ? qm_div(bs, pts) : bs, 0.015625f, 448.0f);
    qs = fp8_encode(scaled, Elem::e4m3, true);
    const float qsf = e4m3_decode(qs);
    const float total = d.two_level ? qm_mul(pts, qsf) : qsf;
#pragma unroll
    for (int k = 0; k < 16; ++k) c[k] = e2m1_code(torch_clamp(qm_div(v[k], total), -6.0f, 6.0f));
  }
  d.scale[r * nb + c0 / 16] = qs;
  write_block(d.q, d.packed, r, c0, d.cols, c, false);
}

// torchao dequantize: fl(fl(e2m1 * q_s) * pts), e2m1 * q_s exact (the golden: e2m1 * q_s * pts).
__global__ void recipe_ao_dequant_kernel(RecipeDir d, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= d.rows * d.cols) return;
  const int64_t r = i / d.cols, c = i % d.cols;
  const uint8_t code = stored_code(d.q, d.packed, r, c, d.cols);
  const float qsf = e4m3_decode(d.scale[r * ((d.cols + 15) / 16) + c / 16]);
  out[i] = qm_mul(qm_mul(e2m1_decode(code), qsf), ao_pts(d));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int FMT>
cudaError_t launch_tiles(TileArgs& ta, cudaStream_t s) {
  ta.vec_in = ta.N % 8 == 0 && aligned16(ta.x);
  ta.vec_row_out = ta.N % 16 == 0 && (!ta.q_row || aligned16(ta.q_row)) && (!ta.packed_row || aligned16(ta.packed_row));
  ta.vec_col_out = ta.M % 16 == 0 && (!ta.q_col || aligned16(ta.q_col)) && (!ta.packed_col || aligned16(ta.packed_col));
  const int64_t gy = (ta.M + kTile - 1) / kTile, gx = (ta.N + kTile - 1) / kTile;
  if (gy > 65535 || gx > 2147483647) return cudaErrorInvalidValue;
  quant_tile_kernel<FMT><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0, s>>>(ta);
  return cudaGetLastError();
}

template <int FMT>
cudaError_t launch_dequant(const uint8_t* q, const uint8_t* packed, const uint8_t* scale, const float* amax,
                           int64_t rows, int64_t cols, Elem elem, float* out, cudaStream_t s) {
  const int64_t n = rows * cols;
  const int th = 256;
  dequant_kernel<FMT><<<static_cast<unsigned>((n + th - 1) / th), th, 0, s>>>(q, packed, scale, amax, rows, cols, elem, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t quant_nvfp4_v1(const Nvfp4Args& a, cudaStream_t s) {
  const bool row = a.scale_row != nullptr, col = a.scale_col != nullptr;
  if (a.M < 1 || a.N < 1 || !a.x || (!row && !col) || (row && !a.amax_row) || (col && !a.amax_col))
    return cudaErrorInvalidValue;
  if (a.compute_amax) {
    const bool need = (row && !a.amax_row_given) || (col && !a.amax_col_given);
    float* acc = nullptr;
    if (need) {
      acc = (row && !a.amax_row_given) ? a.amax_row : a.amax_col;
      if (cudaError_t e = cudaMemsetAsync(acc, 0, sizeof(float), s); e != cudaSuccess) return e;
      const int64_t n = a.M * a.N;
      const bool vec = aligned16(a.x);
      int dev = 0, sms = 132;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      const int th = 512;
      int64_t blocks = (n / 8 + th - 1) / th;
      blocks = blocks < 1 ? 1 : (blocks > sms * 4 ? sms * 4 : blocks);
      amax_reduce_kernel<<<static_cast<unsigned>(blocks), th, 0, s>>>(a.x, n, vec, reinterpret_cast<unsigned*>(acc));
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    amax_finalize_kernel<<<1, 1, 0, s>>>(acc, row ? a.amax_row : nullptr, col ? a.amax_col : nullptr, a.amax_row_given,
                                         a.amax_row_value, a.amax_col_given, a.amax_col_value);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  TileArgs ta{};
  ta.x = a.x;
  ta.M = a.M;
  ta.N = a.N;
  ta.elem = Elem::e2m1;
  ta.block2d = a.block_2d;
  ta.row = row;
  ta.col = col;
  ta.amax_row = a.amax_row;
  ta.amax_col = a.amax_col;
  ta.q_row = a.q_row, ta.packed_row = a.packed_row, ta.scale_row = a.scale_row;
  ta.q_col = a.q_col, ta.packed_col = a.packed_col, ta.scale_col = a.scale_col;
  if (cudaError_t e = launch_tiles<kNvfp4>(ta, s); e != cudaSuccess) return e;
  if (row && a.xhat_row && (a.packed_row || a.q_row))
    if (cudaError_t e = launch_dequant<kNvfp4>(a.q_row, a.packed_row, a.scale_row, a.amax_row, a.M, a.N, Elem::e2m1,
                                               a.xhat_row, s);
        e != cudaSuccess)
      return e;
  if (col && a.xhat_col && (a.packed_col || a.q_col))
    if (cudaError_t e = launch_dequant<kNvfp4>(a.q_col, a.packed_col, a.scale_col, a.amax_col, a.N, a.M, Elem::e2m1,
                                               a.xhat_col, s);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

cudaError_t quant_nvfp4_recipes_v1(const Nvfp4Args& a, cudaStream_t s) {
  const bool row = a.scale_row != nullptr, col = a.scale_col != nullptr;
  if (a.M < 1 || a.N < 1 || !a.x || (!row && !col) || (row && !a.amax_row) || (col && !a.amax_col) || a.block_2d ||
      (a.rht && (a.M % 16 != 0 || a.ao)) || (a.ao && (a.rbits_row || a.rbits_col)))
    return cudaErrorInvalidValue;
  const int th = 256;
  auto blocks = [&](int64_t n) { return static_cast<unsigned>((n + th - 1) / th); };
  // Workspace: the amax accumulators and, with RHT, the transformed columnwise operand.
  const size_t hp_bytes = a.rht && col ? static_cast<size_t>(a.M * a.N) * sizeof(float) : 0;
  void* ws = nullptr;
  if (cudaError_t e = cudaMallocAsync(&ws, 256 + hp_bytes, s); e != cudaSuccess) return e;
  unsigned* acc = static_cast<unsigned*>(ws);
  float* hp = hp_bytes ? reinterpret_cast<float*>(static_cast<char*>(ws) + 256) : nullptr;
  cudaError_t err = cudaMemsetAsync(acc, 0, 2 * sizeof(unsigned), s);
  if (err == cudaSuccess && hp) {
    rht_kernel<<<blocks(a.M * a.N), th, 0, s>>>(a.x, a.M, a.N, a.rht_sign_mask, hp);
    err = cudaGetLastError();
  }
  for (int dir = 0; dir < 2 && err == cudaSuccess; ++dir) {
    const bool is_col = dir == 1;
    if (is_col ? !col : !row) continue;
    RecipeDir d{};
    d.x = a.x;
    d.hp = is_col ? hp : nullptr;
    d.M = a.M, d.N = a.N;
    d.rows = is_col ? a.N : a.M;
    d.cols = is_col ? a.M : a.N;
    d.col = is_col;
    d.ao = a.ao, d.two_level = a.ao_two_level, d.cuda_div = a.ao_cuda_div;
    d.rbits = is_col ? a.rbits_col : a.rbits_row;
    float* amax = is_col ? a.amax_col : a.amax_row;
    d.amax = amax;
    d.q = is_col ? a.q_col : a.q_row;
    d.packed = is_col ? a.packed_col : a.packed_row;
    d.scale = is_col ? a.scale_col : a.scale_row;
    const bool given = is_col ? a.amax_col_given : a.amax_row_given;
    if (!given) {
      const unsigned nblk = blocks(std::min<int64_t>(a.M * a.N, int64_t{1} << 20));
      amax_any_kernel<<<nblk, th, 0, s>>>(d.hp ? nullptr : a.x, d.hp, a.M * a.N, a.ao, acc + dir);
      if ((err = cudaGetLastError()) != cudaSuccess) break;
    }
    amax_set_kernel<<<1, 1, 0, s>>>(acc + dir, given, is_col ? a.amax_col_value : a.amax_row_value, amax);
    recipe_quant_kernel<<<blocks(d.rows * ((d.cols + 15) / 16)), th, 0, s>>>(d);
    if ((err = cudaGetLastError()) != cudaSuccess) break;
    float* xhat = is_col ? a.xhat_col : a.xhat_row;
    if (xhat && (d.q || d.packed)) {
      if (a.ao) {
        recipe_ao_dequant_kernel<<<blocks(d.rows * d.cols), th, 0, s>>>(d, xhat);
        err = cudaGetLastError();
      } else {
        err = launch_dequant<kNvfp4>(d.q, d.packed, d.scale, amax, d.rows, d.cols, Elem::e2m1, xhat, s);
      }
    }
  }
  const cudaError_t fe = cudaFreeAsync(ws, s);
  return err != cudaSuccess ? err : fe;
}

cudaError_t quant_mx_v1(const MxArgs& a, cudaStream_t s) {
  const bool row = a.scale_row != nullptr, col = a.scale_col != nullptr;
  if (a.M < 1 || a.N < 1 || !a.x || (!row && !col) || a.elem < 0 || a.elem > 2) return cudaErrorInvalidValue;
  const Elem el = static_cast<Elem>(a.elem);
  const double maxv = el == Elem::e4m3 ? 448.0 : (el == Elem::e5m2 ? 57344.0 : 6.0);
  TileArgs ta{};
  ta.x = a.x;
  ta.M = a.M;
  ta.N = a.N;
  ta.elem = el;
  ta.rceil = a.rceil;
  ta.max_rcp = static_cast<float>(1.0 / maxv);
  ta.row = row;
  ta.col = col;
  const bool fp4 = el == Elem::e2m1;
  ta.q_row = a.q_row, ta.packed_row = fp4 ? a.packed_row : nullptr, ta.scale_row = a.scale_row;
  ta.q_col = a.q_col, ta.packed_col = fp4 ? a.packed_col : nullptr, ta.scale_col = a.scale_col;
  if (cudaError_t e = launch_tiles<kMx>(ta, s); e != cudaSuccess) return e;
  if (row && a.xhat_row && (ta.packed_row || a.q_row))
    if (cudaError_t e = launch_dequant<kMx>(a.q_row, ta.packed_row, a.scale_row, nullptr, a.M, a.N, el, a.xhat_row, s);
        e != cudaSuccess)
      return e;
  if (col && a.xhat_col && (ta.packed_col || a.q_col))
    if (cudaError_t e = launch_dequant<kMx>(a.q_col, ta.packed_col, a.scale_col, nullptr, a.N, a.M, el, a.xhat_col, s);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

}  // namespace assay::kernels::quant
