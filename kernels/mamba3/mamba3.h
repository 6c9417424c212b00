// kernels/mamba3: launch parameters and launcher of the Mamba-3 forward kernels (mamba3_fwd.cu,
// block body in mamba3_body.h), shared by the registration (mamba3.cpp) and the test-only mutant
// plugin (kernels/mutants/mamba3_mutants.cpp). No device code here.
//
// Tensors (golden names, docs/ops/mamba3.md; storage codes, dense row-major; NS = B, or the
// number of cu_seqlens sequences; C = chunks over all sequences, sequence by sequence):
//   Q, K            SISO [B, T, G, N], MIMO [B, T, R, G, N]   activation dtype (bf16 | fp16 | fp32)
//   V               [B, T, H, P]                              activation dtype
//   ADT, DT         [B, H, T]                                 fp32 (ADT <= 0, DT >= 0)
//   Trap            [B, H, T]                                 activation dtype (raw, pre-sigmoid)
//   Q_bias, K_bias  SISO [H, N], MIMO [H, R, N]               fp32
//   Angles          [B, T, H, A]                              SISO activation dtype, MIMO fp32
//   D               [H]                                       fp32, optional
//   Z               [B, T, H, P]                              activation dtype, optional
//   MIMO_V, MIMO_Z, MIMO_Out  [H, R, P]                       fp32 (MIMO; MIMO_Z with Z, MIMO_Out optional)
//   outproj_norm_weight [H, P]                                fp32 (MIMO fused norm, optional)
//   Angle_State [NS, H, A] fp32, SSM_State [NS, H, P, N] fp32, K_State SISO [NS, H, N] fp32 /
//   MIMO [NS, R, H, N] activation, V_State [NS, H, P] activation   (all four or none)
//   cu_seqlens      [NS + 1]                                  int32 (B = 1)
//   out             [B, T, H, P]; MIMO without MIMO_Out [B, T, R, H, P]   out dtype
//   final_angle [NS, H, A] fp32, final_ssm [NS, H, P, N] fp32, final_k SISO [NS, H, N] fp32 /
//   MIMO [NS, R, H, N] out dtype, final_v [NS, H, P] out dtype
//   chunk_states    [C, H, P, N] intermediate (SISO bf16, MIMO fp32): the folded state entering
//                   every chunk (reference/mamba3/mamba3.h, "Chunk start states")
// A = S angle dims (SISO adjacent pairs (2i, 2i+1); MIMO half-split (i, i + N/2), or adjacent with
// rotate_pairwise). Head h reads q/k group h / (H / G).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/registry.h"

namespace assay::kernels::mamba3 {

// Element types of the tensors the kernel reads or writes.
enum class Elt : int { f32 = 0, bf16 = 1, f16 = 2 };

// One planted defect each (kernels/mutants/mamba3_mutants.cpp); none = the real kernel. A runtime
// flag of the one kernel: the defect sits on the same code path.
enum class Mutation : int {
  none = 0,
  flat_view_swapped,   // Q/K staged at row r * chunk + t of the [chunk*rank, N] view, read as t * R + r
  angle_bf16,          // the per-token fp32 angle cumsum stored in bf16 (rotations and final angle use it)
  varlen_empty_prev,   // an empty varlen sequence's final V taken from the previous sequence's last token
  no_chunk_decay,      // the state handed to the next chunk is not decayed by the chunk's total decay
  first_chunk_state,   // every chunk reads the first chunk's start state (no state passing until the last chunk)
};

// A tensor the kernel touches: device (or, in the CPU transcription, host) pointer and element type.
struct Ten {
  const void* p = nullptr;
  Elt t = Elt::f32;
};

struct Params {
  Ten q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, psi, zeta, phi, norm_w;
  Ten angle_state, ssm_state, k_state, v_state;
  const int32_t* cu = nullptr;  // cu_seqlens or null
  Ten out, final_angle, final_ssm, final_k, final_v, chunk_states;  // outputs (p cast to non-const to write)
  int B = 1, T = 0, H = 1, G = 1, N = 0, P = 0, R = 1, S = 0, NS = 1, L = 64;
  bool mimo = false;
  bool half_split = false;  // MIMO half-split pairs (i, i + N/2); else adjacent (2i, 2i+1)
  bool fused_norm = false;
  float eps = 1e-5f;
  int mut = 0;  // Mutation
};

// Floats of dynamic shared memory one CTA needs (mamba3_body.h lays them out).
inline int64_t smem_floats(int64_t N, int64_t P, int64_t L, int64_t R, int64_t S) {
  const int64_t M = L * R;
  return P * N + 2 * M * N + L * P + M * M + M * P + L * L + 6 * L + 1 + L * S + S + M;
}
inline constexpr int64_t kMaxSmemBytes = 227 * 1024;  // sm_90 opt-in maximum per CTA
inline constexpr int kThreads = 256;

// The chunked forward: one CTA per (sequence, head), all of P and N (fp32 state in shared memory).
cudaError_t mamba3_fwd(const Params& p, cudaStream_t s);

// Host side (mamba3_launch.cpp).
Support fwd_supported(const KernelCase& g, bool mimo);  // can_implement of mamba3_{siso,mimo}_chunked
std::string build_params(const LaunchContext& c, Params& p);

// What the mutants' can_implement needs of a case (fields and shapes only).
struct CaseInfo {
  bool mimo = false, varlen = false, has_states = false;
  int64_t R = 1, L = 64, max_len = 0, max_chunks = 0;
  bool empty_after_nonempty_row = false;  // an empty sequence whose start row is > 0
};
CaseInfo case_info(const KernelCase& g);

}  // namespace assay::kernels::mamba3
