// gated_delta_recurrent: the gated delta rule token by token with an fp32 state (fla's
// fused_recurrent_gated_delta_rule), prefill and decode.
//
// Tensors (golden names; gated_delta.h lists shapes and dtypes):
//   q, k [B, T, H, K], v [B, T, HV, V], beta [B, T, HV]     bf16 | fp16 | fp32
//   g [B, T, HV] (log gate, or the raw a of the in-kernel gate; absent with gate = "none")
//   A_log, dt_bias [HV] (in-kernel gate), initial_state [Nseq, HV, K, V] (or [.., V, K]), fp32 usually
//   cu_seqlens [Nseq1] int64 (varlen)
//   o [B, T, HV, V] (the golden's dtype), final_state like initial_state (fp32), chunk_states
//   [NC, HV, K, V] (k's dtype: the state at the start of every chunk_size-token chunk)
//
// Math per (sequence, value head hv), h = hv / (HV / H), in fp32 (reference/gated_delta/gated_delta.h):
//   q, k <- x / sqrt(sum x^2 + 1e-6) (qk_l2norm, in registers: never stored in the input dtype)
//   gate: g | 0 | -exp(A_log[hv]) softplus(a + dt_bias[hv]) (softplus threshold 20, as torch)
//   beta: beta | sigmoid(x) | 2 sigmoid(x)
//   S <- exp(gate) S;  kv_mem = S^T k;  delta = beta (v - kv_mem);  S <- S + k delta^T;  o = scale S^T q
//
// Layout: the K x V state of one (sequence, value head) is cut into blocks of VB = 16 value
// columns (grid.z); in a block, consumer warp w holds columns [4w, 4w + 4) and lane l holds rows
// l, l + 32, .. (KPL = ceil(K / 32) rows per lane): S lives in registers, the sums over K are warp
// shuffles.
//
// Prefill (one launch): a CTA of 1 producer warp + 4 consumer warps per (sequence, hv, block).
// The producer stages tiles of TT = 16 tokens in shared memory, double-buffered: q and k (l2-
// normalised in fp32 when asked), the block's v columns, exp(gate) and beta; tokens past the
// sequence end are padded as no-ops (k = q = v = 0, exp(gate) = 1, beta = 0), so the consumers
// run whole tiles and store o only for real tokens. One __syncthreads per tile: the producer
// fills tile i + 1 while the consumers read tile i. The consumers write chunk_states at every
// chunk start and final_state at the end.
// Decode (mode = "decode"): T launches of the one-token step over (sequence, hv, block), 4 warps,
// no shared memory: each warp loads (and normalises) its own q / k rows; the state is read from
// initial_state at step 0 and from final_state afterwards, and written back to final_state (the
// in-place update of a decode kernel's state pool).
//
// The Mutation argument (gated_delta.h) plants one defect each for kernels/mutants/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/gated_delta/gated_delta.h"

namespace assay::kernels::gated_delta {
namespace {

constexpr int kCPW = 4;                  // value columns per consumer warp
constexpr int kConsumers = 4;            // consumer warps per CTA
constexpr int kVB = kCPW * kConsumers;   // value columns per CTA
constexpr int kTT = static_cast<int>(kTileTokens);
static_assert(kTT <= 32, "one producer lane per token of a tile");

__device__ __forceinline__ float ld(const void* p, Elt t, int64_t i) {
  switch (t) {
    case Elt::f32: return static_cast<const float*>(p)[i];
    case Elt::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return __half2float(static_cast<const __half*>(p)[i]);
  }
}
__device__ __forceinline__ void st(void* p, Elt t, int64_t i, float x) {
  switch (t) {
    case Elt::f32: static_cast<float*>(p)[i] = x; break;
    case Elt::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); break;
    default: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
  }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// exp(gate) and beta of token row `tv` (= token * HV + hv).
__device__ __forceinline__ void gate_beta(const Params& p, int64_t tv, int hv, float& decay, float& beta) {
  float g = 0.f;
  if (p.gate == Gate::log) {
    g = ld(p.g, p.g_t, tv);
  } else if (p.gate == Gate::in_kernel) {
    const float a = ld(p.g, p.g_t, tv) + (p.dt_bias ? ld(p.dt_bias, p.dt_bias_t, hv) : 0.f);
    g = -expf(ld(p.A_log, p.A_log_t, hv)) * softplus(a);
  }
  decay = expf(g);  // exp(-inf) = 0: a clean reset
  const float b = ld(p.beta, p.beta_t, tv);
  beta = p.beta_mode == Beta::given ? b : (p.beta_mode == Beta::sigmoid ? 1.f : 2.f) / (1.f + expf(-b));
}

// Lane's KPL elements of a q or k row (row offset `base`), l2-normalised over the warp when asked.
template <int KPL>
__device__ __forceinline__ void load_row(const Params& p, const void* x, Elt t, int64_t base, int lane, bool valid,
                                         float (&r)[KPL]) {
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < KPL; ++i) {
    const int64_t kk = lane + 32 * i;
    r[i] = valid && kk < p.K ? ld(x, t, base + kk) : 0.f;
    ss += r[i] * r[i];
  }
  if (p.l2norm) {
    const float inv = 1.f / sqrtf(warp_sum(ss) + 1e-6f);
#pragma unroll
    for (int i = 0; i < KPL; ++i) r[i] *= inv;
  }
}

// Element (row kk, column j) of state slice (n, hv) in layout kv ([K, V]) or vk ([V, K]).
__device__ __forceinline__ int64_t state_idx(const Params& p, int64_t n, int hv, int64_t kk, int64_t j) {
  const int64_t slice = (n * p.HV + hv) * p.K * p.V;
  return slice + (p.vk ? j * p.K + kk : kk * p.V + j);
}

// One token on the warp's columns: decay, kv_mem, delta, rank-1 update, o (all lanes get o).
template <int KPL, bool kMissingAlpha, bool kBf16State>
__device__ __forceinline__ void token_step(float (&S)[kCPW][KPL], const float (&kr)[KPL], const float (&qr)[KPL],
                                           float decay, float beta, const float (&vc)[kCPW], float (&o)[kCPW]) {
#pragma unroll
  for (int c = 0; c < kCPW; ++c) {
    float kv = 0.f;
    if constexpr (kMissingAlpha) {  // the defect: kv_mem from the state before its decay
#pragma unroll
      for (int i = 0; i < KPL; ++i) kv = fmaf(S[c][i], kr[i], kv);
#pragma unroll
      for (int i = 0; i < KPL; ++i) S[c][i] *= decay;
    } else {
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        S[c][i] *= decay;
        kv = fmaf(S[c][i], kr[i], kv);
      }
    }
    kv = warp_sum(kv);
    const float delta = beta * (vc[c] - kv);
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      S[c][i] = fmaf(kr[i], delta, S[c][i]);
      if constexpr (kBf16State) S[c][i] = __bfloat162float(__float2bfloat16_rn(S[c][i]));
      acc = fmaf(S[c][i], qr[i], acc);
    }
    o[c] = warp_sum(acc);
  }
}

// The warp's column c's value of lane == c (no dynamic register indexing).
__device__ __forceinline__ float pick(const float (&x)[kCPW], int lane) {
  float r = 0.f;
#pragma unroll
  for (int c = 0; c < kCPW; ++c)
    if (lane == c) r = x[c];
  return r;
}

template <int KPL>
__device__ __forceinline__ void store_state(const Params& p, void* dst, Elt t, int64_t n, int hv, int lane, int64_t j0,
                                            const float (&S)[kCPW][KPL]) {
#pragma unroll
  for (int c = 0; c < kCPW; ++c)
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int64_t kk = lane + 32 * i, j = j0 + c;
      if (kk < p.K && j < p.V) st(dst, t, state_idx(p, n, hv, kk, j), S[c][i]);
    }
}

// Sequence n: first token row (b * T + t0), length, first chunk index.
__device__ __forceinline__ void seq_of(const Params& p, int64_t n, int64_t& bos, int64_t& len, int64_t& chunk0) {
  if (p.cu_seqlens) {
    bos = p.cu_seqlens[n], len = p.cu_seqlens[n + 1] - bos;
    chunk0 = 0;
    for (int64_t m = 0; m < n; ++m) chunk0 += (p.cu_seqlens[m + 1] - p.cu_seqlens[m] + p.chunk - 1) / p.chunk;
  } else {
    bos = n * p.T, len = p.T;
    chunk0 = n * ((p.T + p.chunk - 1) / p.chunk);
  }
}

struct Tile {
  float q[kTT][kMaxK], k[kTT][kMaxK], v[kTT][kVB], decay[kTT], beta[kTT];
};

template <int KPL, Mutation M>
__global__ void __launch_bounds__(32 * (kConsumers + 1)) prefill_kernel(const Params p) {
  __shared__ Tile tiles[2];
  const int64_t n = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y), h = hv / static_cast<int>(p.HV / p.H);
  const int64_t j0 = static_cast<int64_t>(blockIdx.z) * kVB;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  int64_t bos, len, chunk0;
  seq_of(p, n, bos, len, chunk0);
  const int64_t ntiles = (len + kTT - 1) / kTT;
  const int64_t rbos = M == Mutation::varlen_seq0 ? 0 : bos;  // the row the loads start from

  // Producer (warp 0): tile `it` into tiles[it & 1].
  auto produce = [&](int64_t it) {
    Tile& s = tiles[it & 1];
    for (int tt = 0; tt < kTT; ++tt) {
      const int64_t t = it * kTT + tt;
      const bool valid = t < len;
      if (M == Mutation::tail_unpadded && !valid) continue;  // the defect: padding left stale
      float r[KPL];
      load_row<KPL>(p, p.q, p.q_t, ((rbos + t) * p.H + h) * p.K, lane, valid, r);
#pragma unroll
      for (int i = 0; i < KPL; ++i) s.q[tt][lane + 32 * i] = r[i];
      load_row<KPL>(p, p.k, p.k_t, ((rbos + t) * p.H + h) * p.K, lane, valid, r);
#pragma unroll
      for (int i = 0; i < KPL; ++i) s.k[tt][lane + 32 * i] = r[i];
      if (lane < kVB) s.v[tt][lane] = valid && j0 + lane < p.V ? ld(p.v, p.v_t, ((rbos + t) * p.HV + hv) * p.V + j0 + lane) : 0.f;
    }
    if (lane < kTT) {
      const int64_t t = it * kTT + lane;
      if (t < len) {
        gate_beta(p, (rbos + t) * p.HV + hv, hv, s.decay[lane], s.beta[lane]);
      } else if (M != Mutation::tail_unpadded) {
        s.decay[lane] = 1.f, s.beta[lane] = 0.f;  // a no-op token
      }
    }
  };

  // Consumer state: columns j0 + 4 (warp - 1) + c, rows lane + 32 i.
  const int64_t jw = j0 + static_cast<int64_t>(warp - 1) * kCPW;
  float S[kCPW][KPL];
#pragma unroll
  for (int c = 0; c < kCPW; ++c)
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int64_t kk = lane + 32 * i, j = jw + c;
      S[c][i] = warp > 0 && p.h0 && kk < p.K && j < p.V ? ld(p.h0, p.h0_t, state_idx(p, n, hv, kk, j)) : 0.f;
    }

  if (warp == 0 && ntiles > 0) produce(0);
  if constexpr (M != Mutation::no_prologue_barrier) __syncthreads();  // tile 0 written before it is read
  for (int64_t it = 0; it < ntiles; ++it) {
    if (warp == 0) {
      if (it + 1 < ntiles) produce(it + 1);
    } else {
      const Tile& s = tiles[it & 1];
      for (int tt = 0; tt < kTT; ++tt) {
        const int64_t t = it * kTT + tt;
        if (p.chunk_states && t < len && t % p.chunk == 0)
          store_state<KPL>(p, p.chunk_states, p.cs_t, chunk0 + t / p.chunk, hv, lane, jw, S);
        float kr[KPL], qr[KPL], vc[kCPW], o[kCPW];
#pragma unroll
        for (int i = 0; i < KPL; ++i) kr[i] = s.k[tt][lane + 32 * i], qr[i] = s.q[tt][lane + 32 * i];
#pragma unroll
        for (int c = 0; c < kCPW; ++c) vc[c] = s.v[tt][(warp - 1) * kCPW + c];
        token_step<KPL, M == Mutation::prefill_missing_alpha, M == Mutation::bf16_state>(S, kr, qr, s.decay[tt],
                                                                                          s.beta[tt], vc, o);
        const int64_t j = jw + lane;
        if (t < len && lane < kCPW && j < p.V)
          st(p.o, p.o_t, ((bos + t) * p.HV + hv) * p.V + j, p.scale * pick(o, lane));
      }
    }
    __syncthreads();  // tile it + 1 written; tile it read (the producer overwrites it next)
  }
  if (warp > 0) store_state<KPL>(p, p.ht, p.ht_t, n, hv, lane, jw, S);
}

// One decode step (token `t` of every sequence) over (sequence, hv, block of kVB columns).
template <int KPL, Mutation M>
__global__ void __launch_bounds__(32 * kConsumers) decode_kernel(const Params p, int64_t t) {
  const int64_t n = blockIdx.x;
  const int hv = static_cast<int>(blockIdx.y), h = hv / static_cast<int>(p.HV / p.H);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t jw = static_cast<int64_t>(blockIdx.z) * kVB + static_cast<int64_t>(warp) * kCPW;
  const int64_t row = n * p.T + t;
  // The state before the step: initial_state at step 0, then the final_state buffer.
  const void* src = t == 0 ? p.h0 : p.ht;
  const Elt src_t = t == 0 ? p.h0_t : p.ht_t;
  float S[kCPW][KPL];
#pragma unroll
  for (int c = 0; c < kCPW; ++c)
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int64_t kk = lane + 32 * i, j = jw + c;
      S[c][i] = src && kk < p.K && j < p.V ? ld(src, src_t, state_idx(p, n, hv, kk, j)) : 0.f;
    }
  if (p.chunk_states && t % p.chunk == 0)
    store_state<KPL>(p, p.chunk_states, p.cs_t, n * ((p.T + p.chunk - 1) / p.chunk) + t / p.chunk, hv, lane, jw, S);
  float kr[KPL], qr[KPL], vc[kCPW], o[kCPW], decay, beta;
  load_row<KPL>(p, p.q, p.q_t, (row * p.H + h) * p.K, lane, true, qr);
  load_row<KPL>(p, p.k, p.k_t, (row * p.H + h) * p.K, lane, true, kr);
#pragma unroll
  for (int c = 0; c < kCPW; ++c) vc[c] = jw + c < p.V ? ld(p.v, p.v_t, (row * p.HV + hv) * p.V + jw + c) : 0.f;
  gate_beta(p, row * p.HV + hv, hv, decay, beta);
  token_step<KPL, false, M == Mutation::bf16_state>(S, kr, qr, decay, beta, vc, o);  // the decode path keeps the decay
  if (lane < kCPW && jw + lane < p.V) st(p.o, p.o_t, (row * p.HV + hv) * p.V + jw + lane, p.scale * pick(o, lane));
  store_state<KPL>(p, p.ht, p.ht_t, n, hv, lane, jw, S);
}

template <int KPL, Mutation M>
cudaError_t launch(const Params& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.Nseq), static_cast<unsigned>(p.HV), static_cast<unsigned>((p.V + kVB - 1) / kVB));
  if (!p.decode) {
    prefill_kernel<KPL, M><<<grid, 32 * (kConsumers + 1), 0, s>>>(p);
    return cudaGetLastError();
  }
  for (int64_t t = 0; t < p.T; ++t) {
    decode_kernel<KPL, M><<<grid, 32 * kConsumers, 0, s>>>(p, t);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <Mutation M>
cudaError_t launch_k(const Params& p, cudaStream_t s) {
  if (p.K <= 32) return launch<1, M>(p, s);
  if (p.K <= 64) return launch<2, M>(p, s);
  return launch<4, M>(p, s);
}

}  // namespace

cudaError_t gated_delta_recurrent(const Params& p, cudaStream_t s, Mutation m) {
  if (p.K < 1 || p.K > kMaxK || p.V < 1 || p.H < 1 || p.HV % p.H != 0) return cudaErrorInvalidValue;
  if (p.Nseq == 0) return cudaSuccess;
  switch (m) {
    case Mutation::none: return launch_k<Mutation::none>(p, s);
    case Mutation::prefill_missing_alpha: return launch_k<Mutation::prefill_missing_alpha>(p, s);
    case Mutation::bf16_state: return launch_k<Mutation::bf16_state>(p, s);
    case Mutation::varlen_seq0: return launch_k<Mutation::varlen_seq0>(p, s);
    case Mutation::tail_unpadded: return launch_k<Mutation::tail_unpadded>(p, s);
    case Mutation::no_prologue_barrier: return launch_k<Mutation::no_prologue_barrier>(p, s);
    default: break;  // the chunked kernel's mutations
  }
  return cudaErrorInvalidValue;
}

}  // namespace assay::kernels::gated_delta
