// quant_nvfp4_recipes_v1: NVFP4 quantize with one thread per 16-element block straight from global
// memory, for every NVFP4 recipe of the oracle but 2D blocks: TE round-to-nearest or stochastic
// rounding (given random bytes), the RHT of the columnwise operand, torchao's two-level /
// single-level recipe; the amax per direction and the dequantize.
//
// Tensors: x [M, N] bf16 codes; rbits_row [M, N] / rbits_col [N, M] u8 (SR); out per direction
// (rowwise: blocks along N; columnwise: x^T [N, M]): q_<dir> e2m1 codes, packed_<dir>
// [rows, ceil(cols/2)] u8, scale_<dir> [rows, ceil(cols/16)] e4m3, amax_<dir> [1] f32, xhat_<dir>
// [rows, cols] f32. Arithmetic: kernels/quant/quant_math.h.
#include <algorithm>

#include <cuda_runtime.h>

#include "kernels/quant/quant_block_store.cuh"
#include "kernels/quant/quant_kernels.h"
#include "kernels/quant/quant_math.h"

namespace assay::kernels::quant {
namespace {

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

}  // namespace

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

}  // namespace assay::kernels::quant
