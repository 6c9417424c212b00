// Test-only attention mutants (libassay_attention_mutants.so; production runs never load it):
// attention_v1 (kernels/attention/attention_v1.cu) with ONE planted bug each, exported through the
// C++ plugin adapter (kernels/plugin/cxx_plugin.h). The gate must reject every one on the L0
// attention goldens (issue 9; verify/tests/gpu/test_gate_gpu.cpp mutants-attention).
//
//   attention_mutant_kv_tile0         every KV tile loads the keys / values of tile 0 (masks as tile t)
//   attention_mutant_no_o_rescale     O not multiplied by exp(m_old - m_new) when the running max grows
//   attention_mutant_gqa_modulo       query head h reads KV head h % Hkv instead of h / (Hq / Hkv)
//   attention_mutant_fp16_partials    split-KV partials (O and LSE) rounded through fp16 before the
//                                     combine; splits forced (2) on cases with more than one KV tile
//   attention_mutant_causal_top_left  causal / window aligned top-left (the sk - sq offset dropped)
//   attention_mutant_split_restart    attention_v2_split whose split num_splits / 2 (>= 1) computes
//                                     over split 0's keys (its partials replaced by split 0's); it
//                                     hands back LSE_partial / O_partial, so `assay bisect` can
//                                     walk the splits to it (cases with num_splits > 1)
//
// GPU mutants of the Hopper kernel attention_sm90 (kernels/attention/attention_sm90.cu; bf16, padded
// head dim 128 only; their kills on an H200: docs/ops/attention.md), each the same kernel with one
// planted defect of the TMA / mbarrier / wgmma machinery (template flag Sm90Mutation). The
// kernel's KV tiles are 128 keys, its ring 2 stages:
//   attention_mutant_sm90_kv_tile0       the producer's TMA key coordinate is the first tile's for
//                                        every tile (masks still as tile t): needs >= 2 KV tiles
//   attention_mutant_sm90_stage_stuck    the ring's write stage stops at the last slot instead of
//                                        wrapping: no TMA past the second tile (the barriers still
//                                        turn), tiles t >= 2 computed from slot t % 2's stale
//                                        contents (n = 512 gives n = 256's tiles again): >= 3 tiles
//   attention_mutant_sm90_parity_flip    the consumers wait for the full barriers with the phase
//                                        parity flipped on the second round (tiles 2 and 3): if
//                                        the copy has not landed they read the slot at once (stale
//                                        data), if it has they wait for a phase that never starts
//                                        (deadlock, the usual outcome: Hung). Claims only cases
//                                        with >= 8 KV tiles, so a hang costs one timeout
//   attention_mutant_sm90_stale_scores   QK^T's first k-block with wgmma scale-d = 1: S_t
//                                        accumulates onto the previous tile's exp2 arguments
//   attention_mutant_sm90_no_o_rescale   O not multiplied by exp2(m_old - m_new) between tiles
//
// Tensors: those of attention_v1 (attention_v1.h). Each mutant claims only the cases where its bug
// can change the result (the condition is in its can_implement, from shapes and case fields only);
// the others are NotSupported with the reason.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/common/kernel_support.h"
#include "kernels/attention/attention_fwd.h"
#include "kernels/attention/attention_params.h"
#include "kernels/attention/attention_sm90.h"
#include "kernels/attention/attention_v1.h"
#include "kernels/plugin/cxx_plugin.h"
#include "kernels/registry.h"

namespace assay::kernels::attention {
namespace {

// attention_v1's KV staging tile (min(tile_n, 128), smaller only when shared memory is short).
int v1_tile(const CaseDims& d) { return d.tile_n < 128 ? d.tile_n : 128; }

KernelDef make_mutant(const char* name, const char* description, Mutation m,
                      std::function<Support(const CaseDims&)> shows) {
  KernelDef d;
  d.op = "attention";
  d.name = name;
  d.description = description;
  d.deterministic = true;
  d.can_implement = [shows](const KernelCase& g) -> Support {
    if (Support s = attention_v1_supported(g); !s.ok) return s;
    return shows(case_dims(g));
  };
  d.launch = [m, n = std::string(name)](LaunchContext& c) -> std::string {
    AttnParams p;
    if (std::string err = build_params(c, p); !err.empty()) return n + ": " + err;
    const cudaError_t e = attention_v1(p, static_cast<cudaStream_t>(c.stream), m);
    return common::cuda_error(n, e);
  };
  return d;
}

// attention_sm90 with one planted defect: claims bf16 cases of padded head dim 128 that the
// correct kernel claims and that have at least min_tiles KV tiles of 128 keys in some sequence.
KernelDef make_sm90_mutant(const char* name, const char* description, Sm90Mutation m, int min_tiles) {
  KernelDef d;
  d.op = "attention";
  d.name = name;
  d.description = description;
  // The parity race can make repeated runs differ; the others are deterministic.
  d.deterministic = m != Sm90Mutation::parity_flip;
  d.can_implement = [min_tiles](const KernelCase& g) -> Support {
    if (Support s = forward_case_supported(g); !s.ok) return s;
    const CaseDims dm = case_dims(g);
    if (std::string why = sm90_case_limits(dm); !why.empty()) return {false, why};
    if (g.input("q")->dtype != DType::bf16) return {false, "sm90 mutants are built for bf16 only"};
    if (sm90_padded_dim(dm.D, dm.Dv) != 128) return {false, "sm90 mutants are built for padded head dim 128 only"};
    const int tiles = (dm.max_seqlen_k + 127) / 128;
    if (tiles < min_tiles)
      return {false, fmt::format("{} KV tile(s) of 128 keys: the defect needs {} or more", tiles, min_tiles)};
    return {};
  };
  d.launch = [m, n = std::string(name)](LaunchContext& c) -> std::string {
    AttnParams p;
    if (std::string err = build_params(c, p); !err.empty()) return n + ": " + err;
    const DevTensor* k = c.input("k");
    int64_t k_rows = 1;
    for (size_t i = 0; i + 2 < k->shape.size(); ++i) k_rows *= static_cast<int64_t>(k->shape[i]);
    const cudaError_t e = attention_fwd_sm90(p, k_rows, static_cast<cudaStream_t>(c.stream), m);
    return common::cuda_error(n, e);
  };
  return d;
}

std::vector<KernelDef> mutants() {
  std::vector<KernelDef> v;
  v.push_back(make_mutant("attention_mutant_kv_tile0", "attention_v1 with the KV tile index pinned to 0",
                          Mutation::kv_tile0, [](const CaseDims& d) -> Support {
                            if (d.max_seqlen_k > v1_tile(d)) return {};
                            return {false, "one KV tile only: a pinned tile index cannot show"};
                          }));
  v.push_back(make_mutant("attention_mutant_no_o_rescale", "attention_v1 without the O rescale between KV tiles",
                          Mutation::no_o_rescale, [](const CaseDims& d) -> Support {
                            // Keys one CTA walks: a whole split (the case's scheme) or all keys.
                            int64_t keys = d.max_seqlen_k;
                            if (d.num_splits > 1) {
                              const int64_t tiles = (d.max_seqlen_k + d.tile_n - 1) / d.tile_n;
                              const int64_t per = (tiles + d.num_splits - 1) / d.num_splits * d.tile_n;
                              keys = per < keys ? per : keys;
                            }
                            if (keys > v1_tile(d)) return {};
                            return {false, "one KV tile per CTA (or per split): no rescale between tiles"};
                          }));
  v.push_back(make_mutant("attention_mutant_gqa_modulo", "attention_v1 with KV head h % Hkv",
                          Mutation::gqa_modulo, [](const CaseDims& d) -> Support {
                            if (d.Hkv > 1 && d.Hq > d.Hkv) return {};
                            return {false, "h % Hkv == h / (Hq / Hkv) for every head (Hkv = 1 or Hq = Hkv)"};
                          }));
  v.push_back(make_mutant("attention_mutant_fp16_partials", "attention_v1 split-KV with fp16 partial buffers",
                          Mutation::fp16_partials, [](const CaseDims& d) -> Support {
                            if (d.num_splits > 1 || d.max_seqlen_k > d.tile_n) return {};
                            return {false, "no splits and a single KV tile"};
                          }));
  v.push_back(make_mutant("attention_mutant_causal_top_left", "attention_v1 with top-left causal / window alignment",
                          Mutation::causal_top_left, [](const CaseDims& d) -> Support {
                            if (!d.causal && !d.window) return {false, "no causal mask or window"};
                            if (!d.varlen_q && !d.paged && !d.packed_k && d.Sq == d.Sk)
                              return {false, "Sq == Sk: top-left and bottom-right alignment coincide"};
                            return {};
                          }));
  {
    KernelDef d;
    d.op = "attention";
    d.name = "attention_mutant_split_restart";
    d.description = "attention_v2_split whose split num_splits / 2 recomputes split 0 (its partials replaced by split 0's)";
    d.deterministic = true;
    d.intermediates = {"LSE_partial", "O_partial"};
    d.can_implement = [](const KernelCase& g) -> Support {
      if (Support s = forward_case_supported(g); !s.ok) return s;
      const CaseDims dm = case_dims(g);
      if (attention_fwd_padded_dim(dm.D, dm.Dv) == 0) return {false, "head dims above 256"};
      if (static_cast<long long>(dm.B) * dm.Hq > 65535) return {false, "B * Hq > 65535 (grid.y)"};
      if (dm.num_splits < 2 || dm.num_splits > 65535) return {false, "num_splits < 2: no split to corrupt"};
      return {};
    };
    d.launch = [](LaunchContext& c) -> std::string {
      const int ns = static_cast<int>(case_dims(*c.kcase).num_splits);
      return run_split_kernel(c, "attention_mutant_split_restart", ns / 2);
    };
    v.push_back(std::move(d));
  }
  v.push_back(make_sm90_mutant("attention_mutant_sm90_kv_tile0",
                               "attention_sm90 whose TMA key coordinate is the first KV tile's for every tile",
                               Sm90Mutation::kv_tile0, 2));
  v.push_back(make_sm90_mutant("attention_mutant_sm90_stage_stuck",
                               "attention_sm90 whose ring write stage never wraps past the second stage (no TMA past it)",
                               Sm90Mutation::stage_stuck, 3));
  v.push_back(make_sm90_mutant("attention_mutant_sm90_parity_flip",
                               "attention_sm90 whose consumers wait with the full-barrier phase parity flipped on the second round",
                               Sm90Mutation::parity_flip, 8));
  v.push_back(make_sm90_mutant("attention_mutant_sm90_stale_scores",
                               "attention_sm90 whose QK^T first k-block accumulates into the previous tile's registers (scale-d = 1)",
                               Sm90Mutation::stale_scores, 2));
  v.push_back(make_sm90_mutant("attention_mutant_sm90_no_o_rescale",
                               "attention_sm90 without the O rescale between KV tiles", Sm90Mutation::no_o_rescale, 2));
  return v;
}

}  // namespace
}  // namespace assay::kernels::attention

extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) {
  static const assay_plugin* p =
      assay::kernels::export_plugin("assay_attention_mutants", assay::kernels::attention::mutants());
  return p;
}
