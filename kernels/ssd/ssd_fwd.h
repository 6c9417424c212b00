// kernels/ssd: the Mamba-2 SSD chunked forward on tensor cores (mma.sync m16n8k16, bf16 / fp16
// operands, fp32 accumulators), in mamba_ssm's decomposition (`mamba_chunk_scan_combined`):
//   1. chunk_state   dt processing (bias, softplus, clamp), the chunk-local cumsum of Delta * A,
//                    and each chunk's own state x^T (B * exp(Acum_last - Acum) * Delta)
//                    with B * scale rounded to the element type before the product;
//   2. state_passing the carried state, sequentially over chunks in fp32 (reset where the
//                    packed sequence changes); chunk-start states stored in the element type,
//                    final_states in fp32;
//   3. chunk_scan    per 64-row block of a chunk: C . S_start^T * exp(Acum) (inter-chunk), plus
//                    (C B^T * exp(Acum_l - Acum_s) * Delta_s, masked causal and by sequence,
//                    rounded to the element type) . x (intra-chunk), + D x, * silu(z);
//   4. varlen_states chunk_state_varlen: the state at the end of every packed sequence.
//
// Tensors (the ssd golden's, docs/ops/ssd.md; dense row-major):
//   x               [B, T, H, P]      bf16 | fp16 (the element type T)
//   dt              [B, T, H]         fp32, raw
//   A               [H]               fp32 (< 0)
//   B, C            [B, T, G, N]      T
//   D               [H] or [H, P]     fp32, optional
//   z               [B, T, H, P]      T, optional
//   dt_bias         [H]               fp32, optional
//   initial_states  [B, H, P, N]      fp32, optional
//   seq_idx         [B, T]            int32, optional (packed sequences)
//   cu_seqlens      [seq + 1]         int32, optional (requests varlen_states; B = 1)
//   out             [B, T, H, P]      T or fp32
//   final_states    [B, H, P, N]      fp32
//   varlen_states   [seq, H, P, N]    fp32
//   chunk_states    [B, chunk, H, P, N]  T (intermediate: the state at the start of every chunk)
// Limits: chunk size Q a multiple of 16 up to 256, P <= 128, N <= 256 (padded in shared memory to
// 32 / 64 / 128 and 32 / 64 / 128 / 256).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace assay::kernels::ssd {

// One planted defect (kernels/mutants/ssd_mutants.cpp); none for the real kernel.
enum class Mutation : int {
  none = 0,
  tile0,                   // chunk_scan: every 64-key tile loads the keys of tile 0 (masks as its own)
  cumsum_bf16,             // the chunk cumsum of Delta * A kept in bf16
  tail_unguarded,          // chunk_state: the tail chunk read as a full Q tokens, past T
  no_sync,                 // chunk_scan: no barrier between the key-tile stores and their reads
  init_dropped_b1,         // initial_states ignored when the batch holds one sequence (B = 1)
  state_from_chunk_start,  // chunk_state sums from the chunk start, not the last sequence's start
  offsets_i32,             // x / z / out element offsets computed in 32 bits (wrong past 2^31 elements)
  // Relation-only (no L0 golden shows them; `assay verify --relations` does):
  init_neighbour_odd_b,    // B odd and > 1: sequence b starts from the initial states of (b + 1) % B
  seeded_short_no_decay,   // a seeded call of 2..Q-1 tokens (one partial chunk) hands on its initial
                           // states in final_states without their decay over the call
};

enum class OutType : int { same, f32 };

struct SsdParams {
  int B = 0, T = 0, H = 0, P = 0, N = 0, G = 1, Q = 64, nchunks = 0, nseq = 0;
  bool bf16 = true;  // element type of x, B, C, z: bf16, else fp16
  const void *x = nullptr, *Bm = nullptr, *Cm = nullptr, *z = nullptr;
  const float *dt = nullptr, *A = nullptr, *D = nullptr, *dt_bias = nullptr, *init = nullptr;
  const int32_t *seq_idx = nullptr, *cu_seqlens = nullptr;
  bool D_per_p = false, softplus = true;
  float dt_min = 0.f, dt_max = 0.f;
  void* out = nullptr;
  OutType out_type = OutType::same;
  float* final_states = nullptr;
  float* varlen_states = nullptr;  // with cu_seqlens
  void* chunk_states = nullptr;    // [B, nchunks, H, P, N] element type
  float* delta = nullptr;          // scratch [B, T, H]
  float* acum = nullptr;           // scratch [B, H, nchunks, Q]
  float* states = nullptr;         // scratch [B, nchunks, H, P, N]: each chunk's own state
};

// The padded state / head dims the kernels are instantiated for (0: too large).
int ssd_padded_n(int N);
int ssd_padded_p(int P);

cudaError_t ssd_fwd(const SsdParams& p, cudaStream_t s, Mutation m = Mutation::none);

}  // namespace assay::kernels::ssd
