// kernels/gated_delta: launch parameters and launchers of the gated delta rule kernels
// (gated_delta_recurrent.cu, gated_delta_chunked.cu), shared by the registration (gated_delta.cpp) and the test-only
// mutant plugin (kernels/mutants/gated_delta_mutants.cpp). No device code here.
//
// Tensors (golden names, docs/ops/gated_delta.md; storage codes, dense row-major):
//   q, k           [B, T, H, K]      bf16 | fp16 | fp32 (dtype.in)
//   v              [B, T, HV, V]     bf16 | fp16 | fp32
//   g              [B, T, HV]        log-space gate (gate = "log"), the raw a (gate = "in_kernel"),
//                                    absent (gate = "none"); fp32 (bf16 / fp16 read too)
//   beta           [B, T, HV]        beta, or its logits (beta_mode sigmoid / two_sigmoid)
//   A_log, dt_bias [HV]              gate = "in_kernel" only (dt_bias may be absent = 0)
//   initial_state  [Nseq, HV, K, V]  ([Nseq, HV, V, K] with state_layout = "vk"); absent = zeros
//   cu_seqlens     [Nseq1]           int64, varlen (B = 1, prefill only)
//   o              [B, T, HV, V]     output, the golden's dtype (bf16 | fp16 | fp32)
//   final_state    like initial_state, output (fp32 unless dtype.final_state says otherwise)
//   chunk_states   [NC, HV, K, V]    intermediate (k's dtype): the state at the start of every
//                                    chunk_size-token chunk, chunks numbered sequence by sequence
// Nseq = B (or cu_seqlens' size - 1 with varlen); value head hv reads q/k head hv / (HV / H).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace assay::kernels::gated_delta {

// Element types of the tensors a kernel reads or writes (anything else is refused).
enum class Elt : int { f32 = 0, bf16 = 1, f16 = 2 };

enum class Gate : int { none = 0, log = 1, in_kernel = 2 };
enum class Beta : int { given = 0, sigmoid = 1, two_sigmoid = 2 };

// One planted defect each (kernels/mutants/gated_delta_mutants.cpp); none = the real kernel.
enum class Mutation : int {
  none = 0,
  prefill_missing_alpha,  // prefill path: kv_mem = S^T k read before the decay (decode path keeps it)
  bf16_state,             // the fp32 state rounded to bf16 after every token's update
  varlen_seq0,            // prefill loads ignore the sequence offset: every sequence reads from token 0
  tail_unpadded,          // the producer does not pad the tail tile; consumers still run the whole tile
  no_prologue_barrier,    // no __syncthreads between the first tile's shared-memory writes and its reads
  // gated_delta_chunked only (varlen_seq0 applies to it too):
  w_without_decay,        // w = T (beta k) without e^G (the chunked form's missing decay in the delta term)
  chunk_no_barrier,       // no __syncthreads after one thread's gate prefix sum, before every thread reads it
};

struct Params {
  // Tensors (device pointers; null where the golden has none).
  const void *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  const void *A_log = nullptr, *dt_bias = nullptr, *h0 = nullptr;
  const int64_t* cu_seqlens = nullptr;
  void *o = nullptr, *ht = nullptr, *chunk_states = nullptr;
  Elt q_t = Elt::bf16, k_t = Elt::bf16, v_t = Elt::bf16, g_t = Elt::f32, beta_t = Elt::bf16;
  Elt A_log_t = Elt::f32, dt_bias_t = Elt::f32, h0_t = Elt::f32;
  Elt o_t = Elt::bf16, ht_t = Elt::f32, cs_t = Elt::bf16;
  // Shape and options.
  int64_t B = 1, T = 0, H = 1, HV = 1, K = 0, V = 0, Nseq = 1, chunk = 64;
  float scale = 1.f;
  Gate gate = Gate::log;
  Beta beta_mode = Beta::given;
  bool l2norm = false, vk = false, decode = false;
};

// The kernel's dimension limits (K rows live in the 32 lanes of a warp, at most 4 per lane).
inline constexpr int64_t kMaxK = 128;

// gated_delta_recurrent (fla fused_recurrent_gated_delta_rule; see gated_delta_recurrent.cu).
// Prefill: one launch over (sequence, value head, block of 16 value columns); decode: one
// launch per step, the state carried in the final_state buffer.
cudaError_t gated_delta_recurrent(const Params& p, cudaStream_t s, Mutation m = Mutation::none);

// gated_delta_chunked (gated_delta_chunked.cu): the chunked WY / UT forward on tensor cores
// (mma.sync bf16 -> fp32) in three launches (chunk-parallel WY prep, the sequential state pass,
// chunk-parallel output) over stream-ordered scratch, chunk = chunk_size in {16, 32, 64},
// K % 16 == 0; the most bytes of dynamic shared memory one of its CTAs needs.
cudaError_t gated_delta_chunked(const Params& p, cudaStream_t s, Mutation m = Mutation::none);
int64_t chunked_smem_bytes(int64_t chunk, int64_t K);

// Host side (gated_delta_params.cpp). Whether the recurrent kernel can run a case (reasons name
// what it does not implement), and its launch parameters from a LaunchContext.
Support recurrent_supported(const KernelCase& g);
Support chunked_supported(const KernelCase& g);  // recurrent_supported and the chunked kernel's limits
std::string build_params(const LaunchContext& c, Params& p);

// What the mutants' can_implement needs of a case (from fields and shapes only).
struct CaseInfo {
  bool decode = false, varlen = false, has_h0 = false;
  Gate gate = Gate::log;
  int64_t T = 0, max_len = 0, chunk = 64;
  std::vector<int64_t> seq_starts, seq_lens;  // per sequence
};
CaseInfo case_info(const KernelCase& g);
inline constexpr int64_t kTileTokens = 16;  // tokens per shared-memory tile of the prefill kernel

}  // namespace assay::kernels::gated_delta
