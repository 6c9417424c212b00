// The Mamba-2 SSD chunked forward on tensor cores: device code and launcher (ssd_fwd.h lists the
// tensors, shapes and dtypes, and the four stages). Convention: mamba_ssm's Triton kernels
// (`_chunk_cumsum_fwd`, `_chunk_state_fwd`, `_state_passing_fwd`, `_chunk_scan_fwd`,
// `chunk_state_varlen`): fp32 dt / cumsum / exp, dot operands in the element type T with fp32
// accumulation, B * scale and cb * decay * dt rounded to T before their dot, chunk-start states
// stored in T, the carried state and final_states in fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/mma_sync.cuh"
#include "kernels/ssd/ssd_fwd.h"

namespace assay::kernels::ssd {
namespace {

using namespace assay::kernels::mma;

constexpr int kThreads = 128;  // 4 warps
constexpr int kTile = 64;      // tokens per shared-memory tile (rows of a chunk_scan CTA, keys per step)

template <typename T>
__device__ __forceinline__ float ld(const void* p, int64_t i) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  else
    return __half2float(static_cast<const __half*>(p)[i]);
}
template <typename T>
__device__ __forceinline__ T to_t(float v) {
  T h;
  cvt_rn(v, h);
  return h;
}

// An element offset as the kernel computes it: 64-bit, or (Mutation::offsets_i32) wrapped to 32 bits.
__device__ __forceinline__ int64_t off(int64_t i, int mut) {
  return mut == int(Mutation::offsets_i32) ? static_cast<int64_t>(static_cast<int32_t>(i)) : i;
}

// Rows [0, nrows) of a shared tile with row stride LD elements and NCOLS columns from global rows
// g[row0 + r * stride + col]; rows past valid_rows and columns past valid_cols are zero-filled so
// every MMA reads defined values. vec: 16-byte copies (valid_cols and stride multiples of 8).
template <typename T, int NCOLS>
__device__ __forceinline__ void load_rows(T* s, int LD, const void* g, int64_t row0, int64_t stride, int nrows,
                                          int valid_rows, int valid_cols, bool vec, int tid) {
  const T* gp = static_cast<const T*>(g);
  if (vec) {
    constexpr int CPR = NCOLS / 8;
    for (int i = tid; i < nrows * CPR; i += kThreads) {
      const int r = i / CPR, col = (i % CPR) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < valid_rows && col < valid_cols) v = *reinterpret_cast<const uint4*>(gp + row0 + r * stride + col);
      *reinterpret_cast<uint4*>(s + r * LD + col) = v;
    }
  } else {
    for (int i = tid; i < nrows * NCOLS; i += kThreads) {
      const int r = i / NCOLS, col = i % NCOLS;
      s[r * LD + col] = r < valid_rows && col < valid_cols ? gp[row0 + r * stride + col] : to_t<T>(0.f);
    }
  }
}

// Stage 1: dt processing, the chunk-local cumsum, each chunk's own state.
// grid (nchunks, B * H, ceil(P / 64)); warp w owns state rows p0 + 16 w .. + 16.
template <typename T, int NN>
__global__ void __launch_bounds__(kThreads) chunk_state_kernel(SsdParams p, int mut) {
  constexpr int LDX = 64 + 8, LDB = NN + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / p.H, h = bh % p.H, p0 = blockIdx.z * 64;
  const int g = h / (p.H / p.G), tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int t0 = c * p.Q, Qv = min(p.Q, p.T - t0);
  const int Qr = mut == int(Mutation::tail_unguarded) ? p.Q : Qv;  // tokens read
  float* sAcum = reinterpret_cast<float*>(smem);
  float* sDelta = sAcum + p.Q;
  int* sSeq = reinterpret_cast<int*>(sDelta + p.Q);
  T* sX = reinterpret_cast<T*>(sSeq + p.Q);
  T* sBs = sX + kTile * LDX;
  const float A = p.A[h];
  for (int l = tid; l < p.Q; l += kThreads) {
    float d = 0.f;
    int sq = 0;
    if (l < Qr) {
      const int64_t i = (static_cast<int64_t>(b) * p.T + t0 + l) * p.H + h;
      d = p.dt[i];
      if (p.dt_bias) d += p.dt_bias[h];
      if (p.softplus && d <= 20.f) d = log1pf(expf(d));
      d = fminf(fmaxf(d, p.dt_min), p.dt_max);
      if (l < Qv && blockIdx.z == 0) p.delta[i] = d;
      if (p.seq_idx) sq = p.seq_idx[static_cast<int64_t>(b) * p.T + t0 + l];
    }
    sDelta[l] = d;
    sAcum[l] = d * A;
    sSeq[l] = sq;
  }
  __syncthreads();
  if (w == 0) {  // inclusive scan: each lane a run of consecutive tokens, then across lanes
    const int per = (p.Q + 31) / 32, a = lane * per, e = min(a + per, p.Q);
    float run = 0.f;
    for (int l = a; l < e; ++l) run += sAcum[l];
    float incl = run;
    for (int o = 1; o < 32; o <<= 1) {
      const float v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    float acc = incl - run;
    for (int l = a; l < e; ++l) {
      acc += sAcum[l];
      sAcum[l] = mut == int(Mutation::cumsum_bf16) ? __bfloat162float(__float2bfloat16_rn(acc)) : acc;
    }
  }
  __syncthreads();
  if (blockIdx.z == 0)
    for (int l = tid; l < p.Q; l += kThreads)
      p.acum[((static_cast<int64_t>(b) * p.H + h) * p.nchunks + c) * p.Q + l] = sAcum[l];
  const float a_last = sAcum[Qr - 1];
  const int seq_last = sSeq[Qr - 1];
  const bool all_tokens = mut == int(Mutation::state_from_chunk_start);
  const bool vec = p.P % 8 == 0 && p.N % 8 == 0;
  float acc[NN / 8][4] = {};
  for (int tt = 0; tt < Qr; tt += kTile) {
    load_rows<T, 64>(sX, LDX, p.x, off(((static_cast<int64_t>(b) * p.T + t0 + tt) * p.H + h) * p.P + p0, mut),
                     static_cast<int64_t>(p.H) * p.P, kTile, Qr - tt, min(64, p.P - p0), vec, tid);
    // B * exp(Acum_last - Acum_l) * Delta_l, rounded to T (upstream's cast before the dot with x)
    constexpr int CPR = NN / 8;
    for (int i = tid; i < kTile * CPR; i += kThreads) {
      const int r = i / CPR, n0 = (i % CPR) * 8, l = tt + r;
      float v[8] = {};
      if (l < Qr && n0 < p.N && (all_tokens || sSeq[l] == seq_last)) {
        const float scale = expf(fminf(a_last - sAcum[l], 0.f)) * sDelta[l];
        const int64_t off = ((static_cast<int64_t>(b) * p.T + t0 + l) * p.G + g) * p.N + n0;
        if (vec) {
          const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.Bm) + off);
          const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
          for (int k = 0; k < 8; ++k) v[k] = static_cast<float>(e[k]) * scale;
        } else {
          for (int k = 0; k < 8 && n0 + k < p.N; ++k) v[k] = ld<T>(p.Bm, off + k) * scale;
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) sBs[r * LDB + n0 + k] = to_t<T>(v[k]);
    }
    __syncthreads();
    if (p0 + 16 * w < p.P) {
      for (int kk = 0; kk < kTile && tt + kk < Qr; kk += 16) {
        uint32_t a[4];
        ldsm_x4_t(a, &sX[(kk + lane % 8 + (lane / 16) * 8) * LDX + 16 * w + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int nt = 0; nt < NN / 16; ++nt) {
          uint32_t bb[4];
          ldsm_x4_t(bb, &sBs[(kk + lane % 8 + ((lane / 8) % 2) * 8) * LDB + nt * 16 + (lane / 16) * 8]);
          Ty<T>::mma(acc[2 * nt], a, bb[0], bb[1]);
          Ty<T>::mma(acc[2 * nt + 1], a, bb[2], bb[3]);
        }
      }
    }
    __syncthreads();
  }
  const int64_t base = ((static_cast<int64_t>(b) * p.nchunks + c) * p.H + h) * p.P * p.N;
#pragma unroll
  for (int nt = 0; nt < NN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pp = p0 + 16 * w + lane / 4 + (e >= 2 ? 8 : 0), n = nt * 8 + 2 * (lane % 4) + (e & 1);
      if (pp < p.P && n < p.N) p.states[base + static_cast<int64_t>(pp) * p.N + n] = acc[nt][e];
    }
}

// Stage 2: the carried state over chunks (fp32), one thread per state element.
// grid (ceil(P N / 256), B * H).
template <typename T>
__global__ void __launch_bounds__(256) state_passing_kernel(SsdParams p, int mut) {
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int64_t PN = static_cast<int64_t>(p.P) * p.N, i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= PN) return;
  const bool drop_init = mut == int(Mutation::init_dropped_b1) && p.B == 1;
  // init_neighbour_odd_b: the initial states of the next batch row, on odd batches of more than one.
  const int b_init = mut == int(Mutation::init_neighbour_odd_b) && p.B > 1 && p.B % 2 == 1 ? (b + 1) % p.B : b;
  float s = p.init && !drop_init ? p.init[(static_cast<int64_t>(b_init) * p.H + h) * PN + i] : 0.f;
  // seeded_short_no_decay: a seeded call inside one partial chunk carries its initial states undecayed.
  const bool short_no_decay = mut == int(Mutation::seeded_short_no_decay) && p.init && p.T > 1 && p.T < p.Q;
  int seq_prev = 0;
  T* cs = static_cast<T*>(p.chunk_states);
  for (int c = 0; c < p.nchunks; ++c) {
    const int64_t k = ((static_cast<int64_t>(b) * p.nchunks + c) * p.H + h) * PN + i;
    cs[k] = to_t<T>(s);
    const int Qv = min(p.Q, p.T - c * p.Q);
    const int seq_end = p.seq_idx ? p.seq_idx[static_cast<int64_t>(b) * p.T + c * p.Q + Qv - 1] : 0;
    const float a_last = p.acum[((static_cast<int64_t>(b) * p.H + h) * p.nchunks + c) * p.Q + Qv - 1];
    const float carry = seq_end == seq_prev ? (short_no_decay ? 1.f : expf(fminf(a_last, 0.f))) : 0.f;
    s = carry * s + p.states[k];
    seq_prev = seq_end;
  }
  p.final_states[static_cast<int64_t>(bh) * PN + i] = s;
}

// Stage 3: the output. grid (nchunks * ceil(Q / 64), B * H); warp w owns rows l0 + 16 w .. + 16 of
// the chunk, every P column.
template <typename T, int NN, int NP>
__global__ void __launch_bounds__(kThreads) chunk_scan_kernel(SsdParams p, int mut) {
  constexpr int LDN = NN + 8, LDP = NP + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  const int nrb = (p.Q + kTile - 1) / kTile, c = blockIdx.x / nrb, rb = blockIdx.x % nrb;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H, g = h / (p.H / p.G);
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
  const int t0 = c * p.Q, Qv = min(p.Q, p.T - t0), l0 = rb * kTile;
  if (l0 >= Qv) return;  // the whole CTA: this row block lies past the sequence's end
  float* sAcum = reinterpret_cast<float*>(smem);
  float* sDelta = sAcum + p.Q;
  int* sSeq = reinterpret_cast<int*>(sDelta + p.Q);
  T* sC = reinterpret_cast<T*>(sSeq + p.Q);
  T* sB = sC + kTile * LDN;
  T* sS = sB + kTile * LDN;
  T* sX = sS + NP * LDN;
  const int64_t row0 = static_cast<int64_t>(b) * p.T + t0;  // (b, chunk start) token
  for (int l = tid; l < p.Q; l += kThreads) {
    const bool ok = l < Qv;
    sAcum[l] = p.acum[((static_cast<int64_t>(b) * p.H + h) * p.nchunks + c) * p.Q + l];
    sDelta[l] = ok ? p.delta[(row0 + l) * p.H + h] : 0.f;
    sSeq[l] = ok && p.seq_idx ? p.seq_idx[row0 + l] : 0;
  }
  const int seq_prev = c > 0 && p.seq_idx ? p.seq_idx[row0 - 1] : 0;
  const bool vec = p.P % 8 == 0 && p.N % 8 == 0;
  const int64_t bstride = static_cast<int64_t>(p.G) * p.N, xstride = static_cast<int64_t>(p.H) * p.P;
  load_rows<T, NN>(sC, LDN, p.Cm, ((row0 + l0) * p.G + g) * p.N, bstride, kTile, Qv - l0, p.N, vec, tid);
  const int64_t sbase = ((static_cast<int64_t>(b) * p.nchunks + c) * p.H + h) * p.P * p.N;
  load_rows<T, NN>(sS, LDN, p.chunk_states, sbase, p.N, NP, p.P, p.N, vec, tid);
  __syncthreads();
  const int lw = l0 + 16 * w;  // the warp's first row
  const bool active = lw < Qv;
  const int r0 = lw + lane / 4, r1 = r0 + 8;
  float acc[NP / 8][4] = {};
  if (active) {  // inter-chunk: C . S_start^T, scaled by exp(Acum_l) within the carried sequence
#pragma unroll
    for (int kk = 0; kk < NN; kk += 16) {
      uint32_t a[4];
      ldsm_x4(a, &sC[(16 * w + lane % 16) * LDN + kk + (lane / 16) * 8]);
#pragma unroll
      for (int nt = 0; nt < NP / 16; ++nt) {
        uint32_t bb[4];
        ldsm_x4(bb, &sS[(nt * 16 + lane % 8 + (lane / 16) * 8) * LDN + kk + ((lane / 8) % 2) * 8]);
        Ty<T>::mma(acc[2 * nt], a, bb[0], bb[1]);
        Ty<T>::mma(acc[2 * nt + 1], a, bb[2], bb[3]);
      }
    }
    const float s0 = r0 < Qv && sSeq[r0] == seq_prev ? expf(fminf(sAcum[r0], 0.f)) : 0.f;
    const float s1 = r1 < Qv && sSeq[r1] == seq_prev ? expf(fminf(sAcum[r1], 0.f)) : 0.f;
#pragma unroll
    for (int nt = 0; nt < NP / 8; ++nt) acc[nt][0] *= s0, acc[nt][1] *= s0, acc[nt][2] *= s1, acc[nt][3] *= s1;
  }
  // intra-chunk: key tiles j = 0 .. rb (the last one holds the diagonal)
  for (int j = 0; j <= rb; ++j) {
    const int s0k = (mut == int(Mutation::tile0) ? 0 : j) * kTile;  // the tile whose keys are loaded
    __syncthreads();  // the previous tile's reads are done
    load_rows<T, NN>(sB, LDN, p.Bm, ((row0 + s0k) * p.G + g) * p.N, bstride, kTile, Qv - s0k, p.N, vec, tid);
    load_rows<T, NP>(sX, LDP, p.x, off(((row0 + s0k) * p.H + h) * p.P, mut), xstride, kTile, Qv - s0k, p.P, vec, tid);
    if (mut != int(Mutation::no_sync)) __syncthreads();
    if (!active) continue;
    float sc[kTile / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < NN; kk += 16) {
      uint32_t a[4];
      ldsm_x4(a, &sC[(16 * w + lane % 16) * LDN + kk + (lane / 16) * 8]);
#pragma unroll
      for (int nt = 0; nt < kTile / 16; ++nt) {
        uint32_t bb[4];
        ldsm_x4(bb, &sB[(nt * 16 + lane % 8 + (lane / 16) * 8) * LDN + kk + ((lane / 8) % 2) * 8]);
        Ty<T>::mma(sc[2 * nt], a, bb[0], bb[1]);
        Ty<T>::mma(sc[2 * nt + 1], a, bb[2], bb[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int l = e >= 2 ? r1 : r0, s = j * kTile + nt * 8 + 2 * (lane % 4) + (e & 1);
        float v = 0.f;
        if (s <= l && l < Qv && sSeq[l] == sSeq[s]) v = sc[nt][e] * expf(fminf(sAcum[l] - sAcum[s], 0.f)) * sDelta[s];
        sc[nt][e] = v;
      }
#pragma unroll
    for (int k2 = 0; k2 < kTile / 16; ++k2) {
      uint32_t a[4];
      a[0] = Ty<T>::pack(sc[2 * k2][0], sc[2 * k2][1]);
      a[1] = Ty<T>::pack(sc[2 * k2][2], sc[2 * k2][3]);
      a[2] = Ty<T>::pack(sc[2 * k2 + 1][0], sc[2 * k2 + 1][1]);
      a[3] = Ty<T>::pack(sc[2 * k2 + 1][2], sc[2 * k2 + 1][3]);
#pragma unroll
      for (int nt = 0; nt < NP / 16; ++nt) {
        uint32_t bb[4];
        ldsm_x4_t(bb, &sX[(k2 * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LDP + nt * 16 + (lane / 16) * 8]);
        Ty<T>::mma(acc[2 * nt], a, bb[0], bb[1]);
        Ty<T>::mma(acc[2 * nt + 1], a, bb[2], bb[3]);
      }
    }
  }
  if (!active) return;
  // epilogue: + D x, * silu(z), store
#pragma unroll
  for (int nt = 0; nt < NP / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int l = e >= 2 ? r1 : r0, pp = nt * 8 + 2 * (lane % 4) + (e & 1);
      if (l >= Qv || pp >= p.P) continue;
      const int64_t i = off(((row0 + l) * p.H + h) * p.P + pp, mut);
      float y = acc[nt][e];
      if (p.D) y += ld<T>(p.x, i) * p.D[p.D_per_p ? h * p.P + pp : h];
      if (p.z) {
        const float zz = ld<T>(p.z, i);
        y *= zz / (1.f + expf(-zz));
      }
      if (p.out_type == OutType::f32)
        static_cast<float*>(p.out)[i] = y;
      else
        static_cast<T*>(p.out)[i] = to_t<T>(y);
    }
}

// Stage 4: the state at the end of every packed sequence (chunk_state_varlen). grid (seq, H).
template <typename T>
__global__ void __launch_bounds__(256) varlen_states_kernel(SsdParams p) {
  const int n = blockIdx.x, h = blockIdx.y, g = h / (p.H / p.G);
  const int st = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  const int64_t PN = static_cast<int64_t>(p.P) * p.N;
  const T* cs = static_cast<const T*>(p.chunk_states);
  for (int64_t i = threadIdx.x; i < PN; i += 256) {
    const int pp = static_cast<int>(i / p.N), nn = static_cast<int>(i % p.N);
    float v = 0.f;
    if (e > st) {
      const int c = (e - 1) / p.Q, t0 = c * p.Q;
      const float* acum = p.acum + (static_cast<int64_t>(h) * p.nchunks + c) * p.Q;
      const float last = acum[e - 1 - t0];
      for (int t = max(st, t0); t < e; ++t) {
        const float scale = expf(fminf(last - acum[t - t0], 0.f)) * p.delta[static_cast<int64_t>(t) * p.H + h];
        const float bs = ld<T>(p.Bm, (static_cast<int64_t>(t) * p.G + g) * p.N + nn) * scale;
        v += ld<T>(p.x, (static_cast<int64_t>(t) * p.H + h) * p.P + pp) * static_cast<float>(to_t<T>(bs));
      }
      // The carried start state of chunk c belongs to this sequence when it began before the
      // chunk, and the initial state to sequence 0 (the golden's math; see docs/ops/ssd.md).
      if (st < t0 || (n == 0 && st == 0 && p.init))
        v += expf(fminf(last, 0.f)) * static_cast<float>(cs[(static_cast<int64_t>(c) * p.H + h) * PN + i]);
    }
    p.varlen_states[static_cast<int64_t>(n) * p.H * PN + static_cast<int64_t>(h) * PN + i] = v;
  }
}

template <typename T, int NN, int NP>
cudaError_t launch_scan(const SsdParams& p, cudaStream_t s, int mut) {
  const size_t smem = 3 * p.Q * 4 + (2 * kTile + NP) * (NN + 8) * 2 + kTile * (NP + 8) * 2;
  auto k = chunk_scan_kernel<T, NN, NP>;
  if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)))
    return e;
  const dim3 grid(p.nchunks * ((p.Q + kTile - 1) / kTile), p.B * p.H);
  k<<<grid, kThreads, smem, s>>>(p, mut);
  return cudaGetLastError();
}

template <typename T, int NN>
cudaError_t launch_all(const SsdParams& p, cudaStream_t s, int mut) {
  {
    const size_t smem = 3 * p.Q * 4 + kTile * (64 + 8) * 2 + kTile * (NN + 8) * 2;
    auto k = chunk_state_kernel<T, NN>;
    if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)))
      return e;
    k<<<dim3(p.nchunks, p.B * p.H, (p.P + 63) / 64), kThreads, smem, s>>>(p, mut);
    if (cudaError_t e = cudaGetLastError()) return e;
  }
  const int64_t PN = static_cast<int64_t>(p.P) * p.N;
  state_passing_kernel<T><<<dim3(static_cast<unsigned>((PN + 255) / 256), p.B * p.H), 256, 0, s>>>(p, mut);
  if (cudaError_t e = cudaGetLastError()) return e;
  cudaError_t e = cudaErrorInvalidValue;
  switch (ssd_padded_p(p.P)) {
    case 32: e = launch_scan<T, NN, 32>(p, s, mut); break;
    case 64: e = launch_scan<T, NN, 64>(p, s, mut); break;
    case 128: e = launch_scan<T, NN, 128>(p, s, mut); break;
    default: break;
  }
  if (e != cudaSuccess) return e;
  if (p.varlen_states && p.nseq > 0) {
    varlen_states_kernel<T><<<dim3(p.nseq, p.H), 256, 0, s>>>(p);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t dispatch_n(const SsdParams& p, cudaStream_t s, int mut) {
  switch (ssd_padded_n(p.N)) {
    case 32: return launch_all<T, 32>(p, s, mut);
    case 64: return launch_all<T, 64>(p, s, mut);
    case 128: return launch_all<T, 128>(p, s, mut);
    case 256: return launch_all<T, 256>(p, s, mut);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int ssd_padded_n(int N) {
  for (int v : {32, 64, 128, 256})
    if (N <= v) return v;
  return 0;
}
int ssd_padded_p(int P) {
  for (int v : {32, 64, 128})
    if (P <= v) return v;
  return 0;
}

cudaError_t ssd_fwd(const SsdParams& p, cudaStream_t s, Mutation m) {
  if (p.Q % 16 || p.Q < 16 || p.Q > 256 || p.G < 1 || p.H % p.G || p.T < 1) return cudaErrorInvalidValue;
  return p.bf16 ? dispatch_n<__nv_bfloat16>(p, s, int(m)) : dispatch_n<__half>(p, s, int(m));
}

}  // namespace assay::kernels::ssd
