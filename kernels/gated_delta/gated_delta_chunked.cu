// gated_delta_chunked: the chunked WY / UT forward of the gated delta rule (fla's
// chunk_gated_delta_rule forward) with every matrix product on tensor cores (mma.sync m16n8k16,
// bf16 operands, fp32 accumulation), one CTA per (sequence, value head hv, block of 16 value
// columns) walking the sequence's chunks in order.
//
// Tensors (golden names; gated_delta.h lists shapes and dtypes):
//   q, k [B, T, H, K], v [B, T, HV, V] bf16; beta [B, T, HV] bf16 | fp16 | fp32
//   g [B, T, HV] (log gate, or the raw a of the in-kernel gate; absent with gate = "none"),
//   A_log, dt_bias [HV], initial_state [Nseq, HV, K, V] (or [.., V, K]), cu_seqlens [Nseq1] int64
//   o [B, T, HV, V] bf16, final_state (fp32), chunk_states [NC, HV, K, V] (bf16: the state at the
//   start of every chunk)
//
// Per chunk of C = chunk_size tokens (16, 32 or 64; the last chunk of a sequence padded with no-op
// rows k = q = v = 0, beta = 0, g = 0), in fp32 shared memory, with G the gate's cumulative sum
// from the chunk start and D(i, j) = exp(G_i - G_j) for j <= i (0 for j > i, and 0 across a -inf
// gate: the -inf positions are tracked apart and left out of G, so a reset is clean):
//   A   = strict_lower(beta_i k_i . k_j D(i, j))          (k k^T on tensor cores)
//   T   = (I + A)^-1                                      (fp32 forward substitution)
//   u   = T (beta v),  w = T (beta e^G k)                 (tensor cores)
//   v_new = u - w S                                       (tensor cores; S the chunk-start state)
//   o   = scale [e^G (q S) + (lower(q k^T) . D) v_new]    (tensor cores)
//   S  <- e^{G_last} S + k^T (D(last, .) v_new)           (tensor cores; S fp32 in shared memory)
// Every product's operands are rounded to bf16 as they enter the tensor cores (q and k after their
// fp32 l2norm, T, beta v, beta e^G k, w, the chunk-start state S, v_new, the masked q k^T and
// D(last, .) v_new): the roundings of fla's chunk path, or fewer (its beta k kkt operand is not
// rounded here). Hence profile bf16-states; the carried state and final_state stay fp32.
// The Mutation argument (gated_delta.h) plants one defect each for kernels/mutants/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/gated_delta/gated_delta.h"

namespace assay::kernels::gated_delta {
namespace {

constexpr int kBV = 16;       // value columns per CTA
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ float ldx(const void* p, Elt t, int64_t i) {
  switch (t) {
    case Elt::f32: return static_cast<const float*>(p)[i];
    case Elt::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return __half2float(static_cast<const __half*>(p)[i]);
  }
}
__device__ __forceinline__ void stx(void* p, Elt t, int64_t i, float x) {
  switch (t) {
    case Elt::f32: static_cast<float*>(p)[i] = x; break;
    case Elt::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); break;
    default: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
  }
}
__device__ __forceinline__ float wsum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// C[M x N] = A[M x Kd] B[Kd x N] over the CTA's warps, 16 x 8 output tiles round-robin; operands
// read through a(i, kk) and b(kk, j) (fp32, rounded to bf16 here), each result handed to
// store(i, j, value). M % 16 == 0, N % 8 == 0, Kd % 16 == 0.
template <class FA, class FB, class FS>
__device__ __forceinline__ void gemm(int M, int N, int Kd, FA a, FB b, FS store) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane >> 2, t = lane & 3;
  const int tiles_n = N / 8, tiles = (M / 16) * tiles_n;
  for (int tile = warp; tile < tiles; tile += kWarps) {
    const int m0 = (tile / tiles_n) * 16, n0 = (tile % tiles_n) * 8;
    float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
    for (int k0 = 0; k0 < Kd; k0 += 16) {
      const int ka = k0 + 2 * t;
      const uint32_t a0 = pack(a(m0 + g, ka), a(m0 + g, ka + 1));
      const uint32_t a1 = pack(a(m0 + g + 8, ka), a(m0 + g + 8, ka + 1));
      const uint32_t a2 = pack(a(m0 + g, ka + 8), a(m0 + g, ka + 9));
      const uint32_t a3 = pack(a(m0 + g + 8, ka + 8), a(m0 + g + 8, ka + 9));
      const uint32_t b0 = pack(b(ka, n0 + g), b(ka + 1, n0 + g));
      const uint32_t b1 = pack(b(ka + 8, n0 + g), b(ka + 9, n0 + g));
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    store(m0 + g, n0 + 2 * t, c0);
    store(m0 + g, n0 + 2 * t + 1, c1);
    store(m0 + g + 8, n0 + 2 * t, c2);
    store(m0 + g + 8, n0 + 2 * t + 1, c3);
  }
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__device__ __forceinline__ int64_t sidx(const Params& p, int64_t n, int hv, int64_t kk, int64_t j) {
  return (n * p.HV + hv) * p.K * p.V + (p.vk ? j * p.K + kk : kk * p.V + j);
}

// Shared memory (floats): q, k, beta e^G k, w [C][K]; A, T [C][C]; beta v, u / v_new, o [C][kBV];
// S [K][kBV]; G, beta, e^G, D(last, .) [C]; the last -inf gate at or before each row [C] (int).
__host__ __device__ constexpr int64_t smem_floats(int C, int K) {
  return 4LL * C * K + 2LL * C * C + 3LL * C * kBV + static_cast<int64_t>(K) * kBV + 5LL * C;
}

template <int C, Mutation M>
__global__ void __launch_bounds__(kThreads) chunked_kernel(const Params p) {
  extern __shared__ float smem[];
  const int K = static_cast<int>(p.K);
  float* sq = smem;
  float* sk = sq + C * K;
  float* sbk = sk + C * K;
  float* sw = sbk + C * K;
  float* sA = sw + C * K;
  float* sT = sA + C * C;
  float* sbv = sT + C * C;
  float* su = sbv + C * kBV;
  float* so = su + C * kBV;
  float* sS = so + C * kBV;
  float* sG = sS + K * kBV;
  float* sbeta = sG + C;
  float* seg = sbeta + C;
  float* sdl = seg + C;
  int* sR = reinterpret_cast<int*>(sdl + C);

  const int64_t n = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y), h = hv / static_cast<int>(p.HV / p.H);
  const int64_t j0 = static_cast<int64_t>(blockIdx.z) * kBV;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  int64_t bos, len, chunk0;
  if (p.cu_seqlens) {
    bos = p.cu_seqlens[n], len = p.cu_seqlens[n + 1] - bos, chunk0 = 0;
    for (int64_t m = 0; m < n; ++m) chunk0 += (p.cu_seqlens[m + 1] - p.cu_seqlens[m] + C - 1) / C;
  } else {
    bos = n * p.T, len = p.T, chunk0 = n * ((p.T + C - 1) / C);
  }
  const int64_t rbos = M == Mutation::varlen_seq0 ? 0 : bos;  // the row the loads start from

  for (int x = tid; x < K * kBV; x += kThreads) {
    const int kk = x / kBV, j = x % kBV;
    sS[x] = p.h0 && j0 + j < p.V ? ldx(p.h0, p.h0_t, sidx(p, n, hv, kk, j0 + j)) : 0.f;
  }
  __syncthreads();

  const int64_t nchunks = (len + C - 1) / C;
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t c0 = c * C;
    const int L = static_cast<int>(len - c0 < C ? len - c0 : C);
    // The chunk-start state (chunk_states), and the chunk's rows: q, k (l2-normalised in fp32),
    // the block's v columns, g and beta; rows >= L are no-ops.
    if (p.chunk_states)
      for (int x = tid; x < K * kBV; x += kThreads) {
        const int kk = x / kBV, j = x % kBV;
        if (j0 + j < p.V) stx(p.chunk_states, p.cs_t, sidx(p, chunk0 + c, hv, kk, j0 + j), sS[x]);
      }
    for (int i = warp; i < C; i += kWarps) {
      const bool valid = i < L;
      const int64_t row = rbos + c0 + i;
      float ssq = 0.f, ssk = 0.f;
      for (int kk = lane; kk < K; kk += 32) {
        const float qv = valid ? ldx(p.q, p.q_t, (row * p.H + h) * p.K + kk) : 0.f;
        const float kv = valid ? ldx(p.k, p.k_t, (row * p.H + h) * p.K + kk) : 0.f;
        sq[i * K + kk] = qv, sk[i * K + kk] = kv;
        ssq += qv * qv, ssk += kv * kv;
      }
      if (p.l2norm) {
        const float iq = 1.f / sqrtf(wsum(ssq) + 1e-6f), ik = 1.f / sqrtf(wsum(ssk) + 1e-6f);
        for (int kk = lane; kk < K; kk += 32) sq[i * K + kk] *= iq, sk[i * K + kk] *= ik;
      }
      if (lane < kBV)
        sbv[i * kBV + lane] = valid && j0 + lane < p.V ? ldx(p.v, p.v_t, (row * p.HV + hv) * p.V + j0 + lane) : 0.f;
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
        sG[i] = gv, sbeta[i] = bv;
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
      sdl[i] = D(L - 1, i);
    }
    __syncthreads();
    for (int x = tid; x < C * K; x += kThreads) {
      const int i = x / K;
      sbk[x] = sbeta[i] * (M == Mutation::w_without_decay ? 1.f : seg[i]) * sk[x];
    }
    for (int x = tid; x < C * kBV; x += kThreads) sbv[x] *= sbeta[x / kBV];
    // A = strict_lower(beta_i (k_i . k_j) D(i, j)).
    gemm(C, C, K, [&](int i, int kk) { return sk[i * K + kk]; }, [&](int kk, int j) { return sk[j * K + kk]; },
         [&](int i, int j, float x) { sA[i * C + j] = j < i ? sbeta[i] * x * D(i, j) : 0.f; });
    __syncthreads();
    // T = (I + A)^-1 by forward substitution, T_i = e_i - sum_{j < i} A_ij T_j: thread m owns
    // column m (C <= kThreads), which reads only its own column's earlier rows.
    for (int m = tid; m < C; m += kThreads)
      for (int i = 0; i < C; ++i) {
        float x = m == i ? 1.f : 0.f;
        for (int j = m; j < i; ++j) x = fmaf(-sA[i * C + j], sT[j * C + m], x);
        sT[i * C + m] = m <= i ? x : 0.f;
      }
    __syncthreads();
    // u = T (beta v), w = T (beta e^G k).
    gemm(C, kBV, C, [&](int i, int j) { return sT[i * C + j]; }, [&](int j, int col) { return sbv[j * kBV + col]; },
         [&](int i, int col, float x) { su[i * kBV + col] = x; });
    gemm(C, K, C, [&](int i, int j) { return sT[i * C + j]; }, [&](int j, int kk) { return sbk[j * K + kk]; },
         [&](int i, int kk, float x) { sw[i * K + kk] = x; });
    __syncthreads();
    // v_new = u - w S; P = lower(q k^T) . D (into A's space); o = e^G (q S).
    gemm(C, kBV, K, [&](int i, int kk) { return sw[i * K + kk]; }, [&](int kk, int col) { return sS[kk * kBV + col]; },
         [&](int i, int col, float x) { su[i * kBV + col] -= x; });
    gemm(C, C, K, [&](int i, int kk) { return sq[i * K + kk]; }, [&](int kk, int j) { return sk[j * K + kk]; },
         [&](int i, int j, float x) { sA[i * C + j] = x * D(i, j); });
    gemm(C, kBV, K, [&](int i, int kk) { return sq[i * K + kk]; }, [&](int kk, int col) { return sS[kk * kBV + col]; },
         [&](int i, int col, float x) { so[i * kBV + col] = seg[i] * x; });
    __syncthreads();  // v_new, P and e^G q S written before they are read
    // o = scale (e^G q S + P v_new) for the chunk's real rows; S <- e^{G_last} S + k^T (D(last, .) v_new).
    gemm(C, kBV, C, [&](int i, int j) { return sA[i * C + j]; }, [&](int j, int col) { return su[j * kBV + col]; },
         [&](int i, int col, float x) {
           if (i < L && j0 + col < p.V)
             stx(p.o, p.o_t, ((bos + c0 + i) * p.HV + hv) * p.V + j0 + col, p.scale * (so[i * kBV + col] + x));
         });
    const float egl = seg[L - 1];
    gemm(K, kBV, C, [&](int kk, int j) { return sk[j * K + kk]; }, [&](int j, int col) { return sdl[j] * su[j * kBV + col]; },
         [&](int kk, int col, float x) { sS[kk * kBV + col] = egl * sS[kk * kBV + col] + x; });
    __syncthreads();
  }
  for (int x = tid; x < K * kBV; x += kThreads) {
    const int kk = x / kBV, j = x % kBV;
    if (j0 + j < p.V) stx(p.ht, p.ht_t, sidx(p, n, hv, kk, j0 + j), sS[x]);
  }
}

template <int C, Mutation M>
cudaError_t launch_c(const Params& p, cudaStream_t s) {
  const size_t bytes = static_cast<size_t>(smem_floats(C, static_cast<int>(p.K))) * sizeof(float);
  if (const cudaError_t e = cudaFuncSetAttribute(chunked_kernel<C, M>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(bytes));
      e != cudaSuccess)
    return e;
  const dim3 grid(static_cast<unsigned>(p.Nseq), static_cast<unsigned>(p.HV), static_cast<unsigned>((p.V + kBV - 1) / kBV));
  chunked_kernel<C, M><<<grid, kThreads, bytes, s>>>(p);
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
  return smem_floats(static_cast<int>(chunk), static_cast<int>(K)) * static_cast<int64_t>(sizeof(float));
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
