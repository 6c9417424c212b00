// gated_delta_chunked: the chunked WY / UT forward of the gated delta rule (fla's
// chunk_gated_delta_rule forward) with every matrix product on tensor cores (mma.sync m16n8k16,
// bf16 operands from ldmatrix, fp32 accumulation), in fla's three phases:
//   1. chunk_prep   (grid: chunks x value heads; chunk-parallel) the chunk's k rows l2-normalised
//      in fp32, the gate prefix G, A = strict_lower(beta k k^T . D), T = (I + A)^-1,
//      w = T (beta e^G k), u = T (beta v), written to scratch;
//   2. chunk_state  (grid: sequences x value heads x 32 value columns; the only phase that walks
//      the chunks) per chunk: the chunk-start state S (chunk_states), v_new = u - w S,
//      S <- e^{G_last} S + k^T (D(last, .) v_new); v_new to scratch, final_state;
//   3. chunk_output (grid: chunks x value heads; chunk-parallel) q l2-normalised in fp32,
//      o = scale [e^G (q S) + (lower(q k^T) . D) v_new].
//
// Tensors (golden names; gated_delta.h lists shapes and dtypes):
//   q, k [B, T, H, K], v [B, T, HV, V] bf16; beta [B, T, HV] bf16 | fp16 | fp32
//   g [B, T, HV] (log gate, or the raw a of the in-kernel gate; absent with gate = "none"),
//   A_log, dt_bias [HV], initial_state [Nseq, HV, K, V] (or [.., V, K]), cu_seqlens [Nseq1] int64
//   o [B, T, HV, V] bf16, final_state (fp32), chunk_states [NC, HV, K, V] (the state at the start
//   of every chunk, in the intermediate's dtype)
// Scratch (common::DevScratch, freed when the launch returns; rows = tokens, Vp = V rounded up to
// 64, NCb = an upper bound of the chunk count):
//   kn [B*T, H, K] bf16 (k after its l2norm), w [B*T, HV, K] bf16, u [B*T, HV, Vp] fp32,
//   v_new [B*T, HV, Vp] bf16, G, D(last, .) [B*T, HV] fp32, R [B*T, HV] int32 (the last -inf gate
//   row of the chunk at or before the row, -1: none), e^{G_last} [NCb, HV] fp32,
//   S_c [NCb, HV, K, Vp] bf16 (the chunk-start state as the output phase's operand),
//   chunk offsets [Nseq + 1] int64 (varlen).
//
// Per chunk of C = chunk_size tokens (16, 32 or 64; the last chunk of a sequence padded with no-op
// rows k = q = v = 0, beta = 0, g = 0), with G the gate's cumulative sum from the chunk start and
// D(i, j) = exp(G_i - G_j) for j <= i (0 for j > i, and 0 across a -inf gate: the -inf positions
// are tracked apart and left out of G, so a reset is clean):
//   A   = strict_lower(beta_i k_i . k_j D(i, j))          (k k^T on tensor cores)
//   T   = (I + A)^-1                                      (fp32 forward substitution)
//   u   = T (beta v),  w = T (beta e^G k)                 (tensor cores)
//   v_new = u - w S                                       (tensor cores; S the chunk-start state)
//   o   = scale [e^G (q S) + (lower(q k^T) . D) v_new]    (tensor cores)
//   S  <- e^{G_last} S + k^T (D(last, .) v_new)           (tensor cores; S fp32 in registers)
// Every product's operands are rounded to bf16 as they enter the tensor cores (q and k after their
// fp32 l2norm, T, beta v, beta e^G k, w, the chunk-start state S, v_new, the masked q k^T and
// D(last, .) v_new), and nowhere else: u, G, D and the carried state stay fp32 between the
// phases, and what goes to scratch in bf16 (k, w, v_new, S_c) is read back only as such an
// operand. The roundings of fla's chunk path, or fewer (its beta k kkt operand and its u are not
// rounded here). Hence profile bf16-states; the carried state and final_state stay fp32.
// The Mutation argument (gated_delta.h) plants one defect each for kernels/mutants/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/kernel_support.h"
#include "kernels/common/mma_sync.cuh"
#include "kernels/gated_delta/gated_delta.h"

namespace assay::kernels::gated_delta {
namespace {

using bf16 = __nv_bfloat16;
using mma::cp_async16;
using mma::ldsm_x4;
using mma::ldsm_x4_t;
using Tb = mma::Ty<bf16>;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kVT = 64;  // value columns per tile of phases 1 and 3 (scratch rows padded to a multiple)
constexpr int kBV = 32;  // value columns per CTA of the state pass
constexpr int kPad = 8;  // bf16 elements of padding per shared-memory row (ldmatrix without bank conflicts)

__device__ __forceinline__ float ldx(const void* p, Elt t, int64_t i) {
  switch (t) {
    case Elt::f32: return static_cast<const float*>(p)[i];
    case Elt::bf16: return __bfloat162float(static_cast<const bf16*>(p)[i]);
    default: return __half2float(static_cast<const __half*>(p)[i]);
  }
}
__device__ __forceinline__ void stx(void* p, Elt t, int64_t i, float x) {
  switch (t) {
    case Elt::f32: static_cast<float*>(p)[i] = x; break;
    case Elt::bf16: static_cast<bf16*>(p)[i] = __float2bfloat16_rn(x); break;
    default: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
  }
}
__device__ __forceinline__ float wsum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ void st_pair(bf16* p, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(lo, hi);
}
// 4-byte cp.async (zero-filled when bytes == 0).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(mma::smem_u32(dst)), "l"(src), "r"(bytes));
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__device__ __forceinline__ int64_t sidx(const Params& p, int64_t n, int hv, int64_t kk, int64_t j) {
  return (n * p.HV + hv) * p.K * p.V + (p.vk ? j * p.K + kk : kk * p.V + j);
}

// One warp's 16 x 16 output tile acc (two 16 x 8 halves) += A[m0.., :Kd] B[:Kd, n0..] on bf16
// shared-memory operands. A is stored row-major [m][k] (AT = false) or as A^T [k][m] (AT = true);
// B as B^T [n][k] (BT = false) or row-major [k][n] (BT = true); lda / ldb in elements. The result's
// element acc[h][e] is row m0 + lane / 4 + 8 (e / 2), column n0 + 8 h + 2 (lane % 4) + e % 2.
template <bool AT, bool BT>
__device__ __forceinline__ void mma_tile(float (&acc)[2][4], const bf16* A, int lda, const bf16* B, int ldb, int m0,
                                         int n0, int Kd) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int k0 = 0; k0 < Kd; k0 += 16) {
    uint32_t a[4], b[4];
    if constexpr (AT)
      ldsm_x4_t(a, A + (k0 + lane % 8 + (lane / 16) * 8) * lda + m0 + ((lane / 8) % 2) * 8);
    else
      ldsm_x4(a, A + (m0 + lane % 16) * lda + k0 + (lane / 16) * 8);
    if constexpr (BT)
      ldsm_x4_t(b, B + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * ldb + n0 + (lane / 16) * 8);
    else
      ldsm_x4(b, B + (n0 + lane % 8 + (lane / 16) * 8) * ldb + k0 + ((lane / 8) % 2) * 8);
    Tb::mma(acc[0], a, b[0], b[1]);
    Tb::mma(acc[1], a, b[2], b[3]);
  }
}

// The scratch buffers (file comment) and their padded sizes.
struct Scratch {
  bf16 *kn = nullptr, *w = nullptr, *vn = nullptr, *sc = nullptr;
  float *u = nullptr, *G = nullptr, *dl = nullptr, *egl = nullptr;
  int* R = nullptr;
  int64_t* coff = nullptr;  // chunk offsets per sequence (varlen), else null
  int64_t Vp = 0;
};

// Where flat chunk x lies: sequence n, its chunk c, the sequence's first token bos, length len and
// first chunk chunk0; false past the last chunk.
struct ChunkPos {
  int64_t n, c, bos, len, chunk0;
};
__device__ __forceinline__ bool locate(const Params& p, const Scratch& s, int C, int64_t x, ChunkPos& r) {
  if (!s.coff) {
    const int64_t ncs = (p.T + C - 1) / C;
    if (ncs == 0 || x >= p.Nseq * ncs) return false;
    r.n = x / ncs, r.c = x % ncs, r.bos = r.n * p.T, r.len = p.T, r.chunk0 = r.n * ncs;
    return true;
  }
  if (x >= s.coff[p.Nseq]) return false;
  int64_t lo = 0, hi = p.Nseq - 1;  // the last n with coff[n] <= x (empty sequences skipped)
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (s.coff[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  r.n = lo, r.chunk0 = s.coff[lo], r.c = x - r.chunk0, r.bos = p.cu_seqlens[lo], r.len = p.cu_seqlens[lo + 1] - r.bos;
  return true;
}

__global__ void chunk_offsets(const Params p, int64_t* coff, int C) {
  int64_t acc = 0;
  coff[0] = 0;
  for (int64_t m = 0; m < p.Nseq; ++m) coff[m + 1] = acc += (p.cu_seqlens[m + 1] - p.cu_seqlens[m] + C - 1) / C;
}

// ---------------------------------------------------------------------------------------------
// Phase 1. Shared memory: kb, bk [C][K + 8] bf16 (k normalised; the raw k, then beta e^G k),
// A [C][C] fp32 (then T as bf16 [C][C + 8]), T [C][C] fp32, beta v [C][kVT + 8] bf16,
// G, beta, e^G, 1 / |k| [C] fp32, R [C] int.
__host__ __device__ constexpr int64_t prep_smem(int C, int K) {
  return 2LL * C * (K + kPad) * 2 + 2LL * C * C * 4 + 1LL * C * (kVT + kPad) * 2 + 5LL * C * 4;
}

// T = (I + A)^-1 by forward substitution, T_i = e_i - sum_{j < i} A_ij T_j, in fp32: thread m owns
// column m (in registers), which reads only its own column's earlier rows, j ascending from m.
template <int C>
__device__ __noinline__ void solve(const float* sA, float* sT, int m) {
  float t[C];
#pragma unroll
  for (int i = 0; i < C; ++i) {
    float x = m == i ? 1.f : 0.f;
#pragma unroll
    for (int j = 0; j < i; ++j) {
      const float a = sA[i * C + j];
      if (j >= m) x = fmaf(-a, t[j], x);
    }
    t[i] = m <= i ? x : 0.f;
    sT[i * C + m] = t[i];
  }
}

template <int C, Mutation M>
__global__ void __launch_bounds__(kThreads) chunk_prep(const Params p, const Scratch s) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int K = static_cast<int>(p.K), LK = K + kPad;
  bf16* skb = reinterpret_cast<bf16*>(smem_raw);
  bf16* sbk = skb + C * LK;
  float* sA = reinterpret_cast<float*>(sbk + C * LK);
  float* sT = sA + C * C;
  bf16* sTb = reinterpret_cast<bf16*>(sA);  // T in bf16 over A, once the solve is done
  bf16* sbv = reinterpret_cast<bf16*>(sT + C * C);
  float* sG = reinterpret_cast<float*>(sbv + C * (kVT + kPad));
  float* sbeta = sG + C;
  float* seg = sbeta + C;
  float* sik = seg + C;
  int* sR = reinterpret_cast<int*>(sik + C);

  ChunkPos cp;
  if (!locate(p, s, C, blockIdx.x, cp)) return;
  const int hv = static_cast<int>(blockIdx.y), h = hv / static_cast<int>(p.HV / p.H);
  const bool kwriter = hv % static_cast<int>(p.HV / p.H) == 0;  // one value head per k head writes kn
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t c0 = cp.c * C, rbos = M == Mutation::varlen_seq0 ? 0 : cp.bos;  // the row the loads start from
  const int L = static_cast<int>(cp.len - c0 < C ? cp.len - c0 : C);

  // The chunk's rows: k (l2-normalised in fp32; the raw values kept for beta e^G k), g and beta;
  // rows >= L are no-ops.
  for (int i = warp; i < C; i += kWarps) {
    const bool valid = i < L;
    const int64_t row = rbos + c0 + i;
    float kr[4] = {0.f, 0.f, 0.f, 0.f}, ssk = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int kk = lane + 32 * r;
      if (kk < K) {
        const float kv = valid ? ldx(p.k, p.k_t, (row * p.H + h) * p.K + kk) : 0.f;
        kr[r] = kv;
        ssk += kv * kv;
      }
    }
    const float ik = p.l2norm ? 1.f / sqrtf(wsum(ssk) + 1e-6f) : 1.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int kk = lane + 32 * r;
      if (kk < K) {
        const float kn = p.l2norm ? kr[r] * ik : kr[r];
        skb[i * LK + kk] = __float2bfloat16_rn(kn);
        sbk[i * LK + kk] = __float2bfloat16_rn(kr[r]);  // k is bf16: exact
        if (valid && kwriter) s.kn[((cp.bos + c0 + i) * p.H + h) * p.K + kk] = __float2bfloat16_rn(kn);
      }
    }
    if (lane == 0) {
      float gv = 0.f, bv = 0.f;
      if (valid) {
        const int64_t tv = row * p.HV + hv;
        if (p.gate == Gate::log) {
          gv = ldx(p.g, p.g_t, tv);
        } else if (p.gate == Gate::in_kernel) {
          const float a = ldx(p.g, p.g_t, tv) + (p.dt_bias ? ldx(p.dt_bias, p.dt_bias_t, hv) : 0.f);
          gv = -expf(ldx(p.A_log, p.A_log_t, hv)) * softplus_f(a);
        }
        const float b = ldx(p.beta, p.beta_t, tv);
        bv = p.beta_mode == Beta::given ? b : (p.beta_mode == Beta::sigmoid ? 1.f : 2.f) / (1.f + expf(-b));
      }
      sG[i] = gv, sbeta[i] = bv, sik[i] = ik;
    }
  }
  __syncthreads();
  // Gate prefix (one thread: C adds): G without the -inf gates, R = the last -inf row (-1: none).
  if (tid == 0) {
    float acc = 0.f;
    int r = -1;
    for (int i = 0; i < C; ++i) {
      const float gv = sG[i];
      if (isinf(gv) && gv < 0.f) r = i;
      else acc += gv;
      sG[i] = acc, sR[i] = r;
    }
  }
  if constexpr (M != Mutation::chunk_no_barrier) __syncthreads();  // the prefix written before any thread reads it
  // D(i, j) for j <= i: 0 across a -inf gate in (j, i], else exp(G_i - G_j).
  auto D = [&](int i, int j) -> float { return j > i || sR[i] > j ? 0.f : expf(sG[i] - sG[j]); };
  for (int i = tid; i < C; i += kThreads) {
    seg[i] = sR[i] >= 0 ? 0.f : expf(sG[i]);
    if (i < L) {
      const int64_t tv = (cp.bos + c0 + i) * p.HV + hv;
      s.G[tv] = sG[i], s.R[tv] = sR[i], s.dl[tv] = D(L - 1, i);
    }
    if (i == L - 1) s.egl[(cp.chunk0 + cp.c) * p.HV + hv] = sR[i] >= 0 ? 0.f : expf(sG[i]);
  }
  __syncthreads();
  // beta e^G k (from the fp32 normalised k), bf16.
  for (int x = tid; x < C * K; x += kThreads) {
    const int i = x / K, kk = x % K;
    const float kn = p.l2norm ? __bfloat162float(sbk[i * LK + kk]) * sik[i] : __bfloat162float(sbk[i * LK + kk]);
    sbk[i * LK + kk] = __float2bfloat16_rn(sbeta[i] * (M == Mutation::w_without_decay ? 1.f : seg[i]) * kn);
  }
  // A = strict_lower(beta_i (k_i . k_j) D(i, j)).
  const int g4 = lane / 4, t4 = lane % 4;
  for (int tile = warp; tile < (C / 16) * (C / 16); tile += kWarps) {
    const int m0 = (tile / (C / 16)) * 16, n0 = (tile % (C / 16)) * 16;
    float acc[2][4] = {};
    mma_tile<false, false>(acc, skb, LK, skb, LK, m0, n0, K);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4 + e % 2;
        sA[i * C + j] = j < i ? sbeta[i] * acc[hh][e] * D(i, j) : 0.f;
      }
  }
  __syncthreads();
  if (tid < C) solve<C>(sA, sT, tid);
  __syncthreads();
  for (int x = tid; x < C * C; x += kThreads) sTb[(x / C) * (C + kPad) + x % C] = __float2bfloat16_rn(sT[x]);
  __syncthreads();
  // w = T (beta e^G k) -> scratch (bf16: it is read only as the operand of w S).
  for (int tile = warp; tile < (C / 16) * (K / 16); tile += kWarps) {
    const int m0 = (tile / (K / 16)) * 16, n0 = (tile % (K / 16)) * 16;
    float acc[2][4] = {};
    mma_tile<false, true>(acc, sTb, C + kPad, sbk, LK, m0, n0, C);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int i = m0 + g4 + 8 * (e / 2), kk = n0 + 8 * hh + 2 * t4;
        if (i < L) st_pair(s.w + ((cp.bos + c0 + i) * p.HV + hv) * p.K + kk, acc[hh][e], acc[hh][e + 1]);
      }
  }
  // u = T (beta v) -> scratch (fp32), kVT columns at a time (columns >= V: v = 0, u = 0).
  for (int64_t v0 = 0; v0 < s.Vp; v0 += kVT) {
    for (int x = tid; x < C * kVT; x += kThreads) {
      const int i = x / kVT, j = x % kVT;
      const float vv = i < L && v0 + j < p.V ? ldx(p.v, p.v_t, ((rbos + c0 + i) * p.HV + hv) * p.V + v0 + j) : 0.f;
      sbv[i * (kVT + kPad) + j] = __float2bfloat16_rn(vv * sbeta[i]);
    }
    __syncthreads();
    for (int tile = warp; tile < (C / 16) * (kVT / 16); tile += kWarps) {
      const int m0 = (tile / (kVT / 16)) * 16, n0 = (tile % (kVT / 16)) * 16;
      float acc[2][4] = {};
      mma_tile<false, true>(acc, sTb, C + kPad, sbv, kVT + kPad, m0, n0, C);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int i = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4;
          if (i < L)
            *reinterpret_cast<float2*>(s.u + ((cp.bos + c0 + i) * p.HV + hv) * s.Vp + v0 + j) =
                make_float2(acc[hh][e], acc[hh][e + 1]);
        }
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------
// Phase 2. Shared memory: w, k [2][C][K + 8] bf16 (double-buffered, cp.async), u [2][C][kBV] fp32,
// D(last, .) [2][C] and e^{G_last} [2][4] fp32, S [K][kBV + 8] bf16, D(last, .) v_new [C][kBV + 8] bf16.
__host__ __device__ constexpr int64_t state_smem(int C, int K) {
  return 4LL * C * (K + kPad) * 2 + 2LL * C * kBV * 4 + 2LL * C * 4 + 2LL * 4 * 4 + 1LL * K * (kBV + kPad) * 2 +
         1LL * C * (kBV + kPad) * 2;
}

template <int C>
__global__ void __launch_bounds__(kThreads) chunk_state(const Params p, const Scratch s) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int K = static_cast<int>(p.K), LK = K + kPad, LB = kBV + kPad;
  bf16* sw = reinterpret_cast<bf16*>(smem_raw);  // [2][C][LK]
  bf16* sk = sw + 2 * C * LK;                    // [2][C][LK]
  float* su = reinterpret_cast<float*>(sk + 2 * C * LK);  // [2][C][kBV]
  float* sdl = su + 2 * C * kBV;                          // [2][C]
  float* segl = sdl + 2 * C;                              // [2][4]
  bf16* sS = reinterpret_cast<bf16*>(segl + 8);           // [K][LB]
  bf16* sV = sS + K * LB;                                 // [C][LB]

  const int64_t n = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y), h = hv / static_cast<int>(p.HV / p.H);
  const int64_t j0 = static_cast<int64_t>(blockIdx.z) * kBV;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g4 = lane / 4, t4 = lane % 4;
  int64_t bos, len, chunk0;
  if (p.cu_seqlens) bos = p.cu_seqlens[n], len = p.cu_seqlens[n + 1] - bos, chunk0 = s.coff[n];
  else bos = n * p.T, len = p.T, chunk0 = n * ((p.T + C - 1) / C);
  const int64_t nchunks = (len + C - 1) / C;

  // The state's 16 x 16 tiles owned by this warp: tile warp + 4 r (row block, column block).
  constexpr int kTiles = kBV / 16, kMaxR = (kMaxK / 16) * kTiles / kWarps;
  const int ntiles = (K / 16) * kTiles;
  float S[kMaxR][2][4];
#pragma unroll
  for (int r = 0; r < kMaxR; ++r) {
    const int tile = warp + kWarps * r, m0 = (tile / kTiles) * 16, n0 = (tile % kTiles) * 16;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kk = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4 + e % 2;
        S[r][hh][e] = tile < ntiles && p.h0 && j0 + j < p.V ? ldx(p.h0, p.h0_t, sidx(p, n, hv, kk, j0 + j)) : 0.f;
      }
  }
  auto load = [&](int64_t c, int buf) {
    const int64_t r0 = bos + c * C;
    const int L = static_cast<int>(len - c * C < C ? len - c * C : C);
    for (int x = tid; x < C * (K / 8); x += kThreads) {
      const int i = x / (K / 8), k8 = (x % (K / 8)) * 8, ok = i < L ? 16 : 0;
      cp_async16(sw + (buf * C + i) * LK + k8, i < L ? s.w + ((r0 + i) * p.HV + hv) * p.K + k8 : s.w, ok);
      cp_async16(sk + (buf * C + i) * LK + k8, i < L ? s.kn + ((r0 + i) * p.H + h) * p.K + k8 : s.kn, ok);
    }
    for (int x = tid; x < C * (kBV / 4); x += kThreads) {
      const int i = x / (kBV / 4), j4 = (x % (kBV / 4)) * 4;
      cp_async16(su + (buf * C + i) * kBV + j4, i < L ? s.u + ((r0 + i) * p.HV + hv) * s.Vp + j0 + j4 : s.u, i < L ? 16 : 0);
    }
    if (tid < C) cp_async4(sdl + buf * C + tid, tid < L ? s.dl + (r0 + tid) * p.HV + hv : s.dl, tid < L ? 4 : 0);
    if (tid == 0) cp_async4(segl + buf * 4, s.egl + (chunk0 + c) * p.HV + hv, 4);
    mma::cp_async_commit();
  };
  if (nchunks > 0) load(0, 0);

  for (int64_t c = 0; c < nchunks; ++c) {
    const int buf = static_cast<int>(c & 1);
    const int L = static_cast<int>(len - c * C < C ? len - c * C : C);
    // The chunk-start state: bf16 into shared memory (the operand of w S, and S_c for the output
    // phase), the chunk_states intermediate in its dtype.
#pragma unroll
    for (int r = 0; r < kMaxR; ++r) {
      const int tile = warp + kWarps * r, m0 = (tile / kTiles) * 16, n0 = (tile % kTiles) * 16;
      if (tile < ntiles) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int e = 0; e < 4; e += 2) {
            const int kk = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4;
            st_pair(sS + kk * LB + j, S[r][hh][e], S[r][hh][e + 1]);
            if (p.chunk_states)
              for (int d = 0; d < 2; ++d)
                if (j0 + j + d < p.V) stx(p.chunk_states, p.cs_t, sidx(p, chunk0 + c, hv, kk, j0 + j + d), S[r][hh][e + d]);
          }
      }
    }
    mma::cp_async_wait<0>();
    __syncthreads();
    if (c + 1 < nchunks) load(c + 1, buf ^ 1);
    for (int x = tid; x < K * (kBV / 8); x += kThreads) {
      const int kk = x / (kBV / 8), j8 = (x % (kBV / 8)) * 8;
      *reinterpret_cast<uint4*>(s.sc + (((chunk0 + c) * p.HV + hv) * p.K + kk) * s.Vp + j0 + j8) =
          *reinterpret_cast<const uint4*>(sS + kk * LB + j8);
    }
    // v_new = u - w S -> scratch (bf16: read only as an operand), and D(last, .) v_new (bf16).
    const bf16* w = sw + buf * C * LK;
    for (int tile = warp; tile < (C / 16) * kTiles; tile += kWarps) {
      const int m0 = (tile / kTiles) * 16, n0 = (tile % kTiles) * 16;
      float acc[2][4] = {};
      mma_tile<false, true>(acc, w, LK, sS, LB, m0, n0, K);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int i = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4;
          const float* ur = su + (buf * C + i) * kBV + j;
          const float v0 = ur[0] - acc[hh][e], v1 = ur[1] - acc[hh][e + 1];
          if (i < L) st_pair(s.vn + ((bos + c * C + i) * p.HV + hv) * s.Vp + j0 + j, v0, v1);
          const float d = sdl[buf * C + i];
          st_pair(sV + i * LB + j, d * v0, d * v1);
        }
    }
    __syncthreads();
    // S <- e^{G_last} S + k^T (D(last, .) v_new).
    const float egl = segl[buf * 4];
    const bf16* kc = sk + buf * C * LK;
#pragma unroll
    for (int r = 0; r < kMaxR; ++r) {
      const int tile = warp + kWarps * r, m0 = (tile / kTiles) * 16, n0 = (tile % kTiles) * 16;
      if (tile < ntiles) {
        float acc[2][4] = {};
        mma_tile<true, true>(acc, kc, LK, sV, LB, m0, n0, C);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int e = 0; e < 4; ++e) S[r][hh][e] = egl * S[r][hh][e] + acc[hh][e];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMaxR; ++r) {
    const int tile = warp + kWarps * r, m0 = (tile / kTiles) * 16, n0 = (tile % kTiles) * 16;
    if (tile < ntiles)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4 + e % 2;
          if (j0 + j < p.V) stx(p.ht, p.ht_t, sidx(p, n, hv, kk, j0 + j), S[r][hh][e]);
        }
  }
}

// ---------------------------------------------------------------------------------------------
// Phase 3. Shared memory: q, k [C][K + 8] bf16, P [C][C + 8] bf16, S_c [K][kVT + 8] bf16,
// v_new [C][kVT + 8] bf16, G, e^G [C] fp32, R [C] int.
__host__ __device__ constexpr int64_t out_smem(int C, int K) {
  return 2LL * C * (K + kPad) * 2 + 1LL * C * (C + kPad) * 2 + 1LL * K * (kVT + kPad) * 2 + 1LL * C * (kVT + kPad) * 2 +
         3LL * C * 4;
}

template <int C, Mutation M>
__global__ void __launch_bounds__(kThreads) chunk_output(const Params p, const Scratch s) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int K = static_cast<int>(p.K), LK = K + kPad, LV = kVT + kPad, LP = C + kPad;
  bf16* sq = reinterpret_cast<bf16*>(smem_raw);
  bf16* sk = sq + C * LK;
  bf16* sP = sk + C * LK;
  bf16* sS = sP + C * LP;
  bf16* sv = sS + K * LV;
  float* sG = reinterpret_cast<float*>(sv + C * LV);
  float* seg = sG + C;
  int* sR = reinterpret_cast<int*>(seg + C);

  ChunkPos cp;
  if (!locate(p, s, C, blockIdx.x, cp)) return;
  const int hv = static_cast<int>(blockIdx.y), h = hv / static_cast<int>(p.HV / p.H);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g4 = lane / 4, t4 = lane % 4;
  const int64_t c0 = cp.c * C, rbos = M == Mutation::varlen_seq0 ? 0 : cp.bos, r0 = cp.bos + c0;
  const int L = static_cast<int>(cp.len - c0 < C ? cp.len - c0 : C);
  const int64_t chunk = cp.chunk0 + cp.c;

  // k (normalised, from scratch), G and R of the chunk; rows >= L are no-ops.
  for (int x = tid; x < C * (K / 8); x += kThreads) {
    const int i = x / (K / 8), k8 = (x % (K / 8)) * 8;
    cp_async16(sk + i * LK + k8, i < L ? s.kn + ((r0 + i) * p.H + h) * p.K + k8 : s.kn, i < L ? 16 : 0);
  }
  mma::cp_async_commit();
  // q, l2-normalised in fp32.
  for (int i = warp; i < C; i += kWarps) {
    const bool valid = i < L;
    const int64_t row = rbos + c0 + i;
    float qr[4] = {0.f, 0.f, 0.f, 0.f}, ssq = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int kk = lane + 32 * r;
      if (kk < K) {
        const float qv = valid ? ldx(p.q, p.q_t, (row * p.H + h) * p.K + kk) : 0.f;
        qr[r] = qv;
        ssq += qv * qv;
      }
    }
    const float iq = p.l2norm ? 1.f / sqrtf(wsum(ssq) + 1e-6f) : 1.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int kk = lane + 32 * r;
      if (kk < K) sq[i * LK + kk] = __float2bfloat16_rn(p.l2norm ? qr[r] * iq : qr[r]);
    }
  }
  for (int i = tid; i < C; i += kThreads) {
    const int64_t tv = (r0 + i) * p.HV + hv;
    sG[i] = i < L ? s.G[tv] : 0.f;
    sR[i] = i < L ? s.R[tv] : -1;
    seg[i] = i < L ? (s.R[tv] >= 0 ? 0.f : expf(s.G[tv])) : 0.f;
  }
  mma::cp_async_wait<0>();
  __syncthreads();
  auto D = [&](int i, int j) -> float { return j > i || sR[i] > j ? 0.f : expf(sG[i] - sG[j]); };
  // P = lower(q k^T) . D (bf16: the operand of P v_new); rows >= L zero.
  for (int tile = warp; tile < (C / 16) * (C / 16); tile += kWarps) {
    const int m0 = (tile / (C / 16)) * 16, n0 = (tile % (C / 16)) * 16;
    float acc[2][4] = {};
    mma_tile<false, false>(acc, sq, LK, sk, LK, m0, n0, K);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int i = m0 + g4 + 8 * (e / 2), j = n0 + 8 * hh + 2 * t4;
        st_pair(sP + i * LP + j, i < L ? acc[hh][e] * D(i, j) : 0.f, i < L ? acc[hh][e + 1] * D(i, j + 1) : 0.f);
      }
  }
  // o = scale (e^G q S_c + P v_new), kVT columns at a time.
  for (int64_t v0 = 0; v0 < s.Vp; v0 += kVT) {
    for (int x = tid; x < K * (kVT / 8); x += kThreads) {
      const int kk = x / (kVT / 8), j8 = (x % (kVT / 8)) * 8;
      cp_async16(sS + kk * LV + j8, s.sc + ((chunk * p.HV + hv) * p.K + kk) * s.Vp + v0 + j8, 16);
    }
    for (int x = tid; x < C * (kVT / 8); x += kThreads) {
      const int i = x / (kVT / 8), j8 = (x % (kVT / 8)) * 8;
      cp_async16(sv + i * LV + j8, i < L ? s.vn + ((r0 + i) * p.HV + hv) * s.Vp + v0 + j8 : s.vn, i < L ? 16 : 0);
    }
    mma::cp_async_commit();
    mma::cp_async_wait<0>();
    __syncthreads();
    for (int tile = warp; tile < (C / 16) * (kVT / 16); tile += kWarps) {
      const int m0 = (tile / (kVT / 16)) * 16, n0 = (tile % (kVT / 16)) * 16;
      float qs[2][4] = {}, pv[2][4] = {};
      mma_tile<false, true>(qs, sq, LK, sS, LV, m0, n0, K);
      mma_tile<false, true>(pv, sP, LP, sv, LV, m0, n0, C);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = m0 + g4 + 8 * (e / 2);
          const int64_t j = v0 + n0 + 8 * hh + 2 * t4 + e % 2;
          if (i < L && j < p.V)
            stx(p.o, p.o_t, ((r0 + i) * p.HV + hv) * p.V + j, p.scale * (__fmul_rn(seg[i], qs[hh][e]) + pv[hh][e]));
        }
    }
    __syncthreads();
  }
}

// Freed scratch stays in the stream-ordered pool (the default release threshold 0 would hand it
// back to the driver at every synchronisation and make each call map fresh memory).
void keep_pool_memory() {
  static const bool done = [] {
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      uint64_t thr = 1ull << 30;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr);
    }
    cudaGetLastError();
    return true;
  }();
  (void)done;
}

template <class F>
cudaError_t set_smem(F* f, int64_t bytes) {
  return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

template <int C, Mutation M>
cudaError_t launch_c(const Params& p, cudaStream_t st) {
  keep_pool_memory();
  const int K = static_cast<int>(p.K);
  const int64_t rows = p.B * p.T, ncs = (p.T + C - 1) / C;
  const int64_t ncb = p.cu_seqlens ? ncs + p.Nseq : p.Nseq * ncs;  // chunks (varlen: an upper bound)
  Scratch s;
  s.Vp = (p.V + kVT - 1) / kVT * kVT;
  common::DevScratch scr(st);
  cudaError_t e = cudaSuccess;
  s.kn = scr.get<bf16>(static_cast<size_t>(rows * p.H * p.K), e);
  s.w = scr.get<bf16>(static_cast<size_t>(rows * p.HV * p.K), e);
  s.u = scr.get<float>(static_cast<size_t>(rows * p.HV * s.Vp), e);
  s.vn = scr.get<bf16>(static_cast<size_t>(rows * p.HV * s.Vp), e);
  s.G = scr.get<float>(static_cast<size_t>(rows * p.HV), e);
  s.dl = scr.get<float>(static_cast<size_t>(rows * p.HV), e);
  s.R = scr.get<int>(static_cast<size_t>(rows * p.HV), e);
  s.egl = scr.get<float>(static_cast<size_t>(ncb * p.HV), e);
  s.sc = scr.get<bf16>(static_cast<size_t>(ncb * p.HV * p.K * s.Vp), e);
  if (p.cu_seqlens) s.coff = scr.get<int64_t>(static_cast<size_t>(p.Nseq + 1), e);
  const int64_t b1 = prep_smem(C, K), b2 = state_smem(C, K), b3 = out_smem(C, K);
  if (e == cudaSuccess) e = set_smem(chunk_prep<C, M>, b1);
  if (e == cudaSuccess) e = set_smem(chunk_state<C>, b2);
  if (e == cudaSuccess) e = set_smem(chunk_output<C, M>, b3);
  if (e != cudaSuccess) return e;
  if (p.cu_seqlens) chunk_offsets<<<1, 1, 0, st>>>(p, s.coff, C);
  const unsigned hvs = static_cast<unsigned>(p.HV);
  if (ncb > 0) chunk_prep<C, M><<<dim3(static_cast<unsigned>(ncb), hvs), kThreads, b1, st>>>(p, s);
  chunk_state<C><<<dim3(static_cast<unsigned>(p.Nseq), hvs, static_cast<unsigned>(s.Vp / kBV)), kThreads, b2, st>>>(p, s);
  if (ncb > 0) chunk_output<C, M><<<dim3(static_cast<unsigned>(ncb), hvs), kThreads, b3, st>>>(p, s);
  return cudaGetLastError();
}

template <Mutation M>
cudaError_t launch_m(const Params& p, cudaStream_t s) {
  switch (p.chunk) {
    case 16: return launch_c<16, M>(p, s);
    case 32: return launch_c<32, M>(p, s);
    case 64: return launch_c<64, M>(p, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int64_t chunked_smem_bytes(int64_t chunk, int64_t K) {
  const int C = static_cast<int>(chunk), k = static_cast<int>(K);
  const int64_t a = prep_smem(C, k), b = state_smem(C, k), c = out_smem(C, k);
  return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

cudaError_t gated_delta_chunked(const Params& p, cudaStream_t s, Mutation m) {
  if (p.K < 16 || p.K % 16 != 0 || p.K > kMaxK || p.V < 1 || p.H < 1 || p.HV % p.H != 0) return cudaErrorInvalidValue;
  if (p.Nseq == 0) return cudaSuccess;
  switch (m) {
    case Mutation::none: return launch_m<Mutation::none>(p, s);
    case Mutation::varlen_seq0: return launch_m<Mutation::varlen_seq0>(p, s);
    case Mutation::w_without_decay: return launch_m<Mutation::w_without_decay>(p, s);
    case Mutation::chunk_no_barrier: return launch_m<Mutation::chunk_no_barrier>(p, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace assay::kernels::gated_delta
