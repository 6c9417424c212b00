// Test-only gated delta rule mutants (libassay_gated_delta_mutants.so; production runs never load
// it): gated_delta_recurrent (kernels/gated_delta/gated_delta_recurrent.cu) with ONE planted defect
// each (the Mutation template argument of its kernels: the same code path), exported through the
// C++ plugin adapter (kernels/plugin/cxx_plugin.h). The gate must reject every one on the L0
// gated_delta goldens (issue 37; verify/tests/gpu/test_gate_gpu.cpp mutants-gated_delta).
//
//   gated_delta_mutant_prefill_missing_alpha  prefill path: kv_mem = S^T k read from the state
//                                             before its decay exp(g) (the decode path keeps it)
//   gated_delta_mutant_bf16_state             the fp32 state rounded to bf16 after every token's
//                                             update, while the kernel claims profile strict
//   gated_delta_mutant_varlen_seq0            prefill loads ignore cu_seqlens' offset: every
//                                             sequence reads its tokens from token 0 (o is still
//                                             written at the sequence's own rows)
//   gated_delta_mutant_tail_unpadded          the producer warp does not pad a sequence's last
//                                             (partial) 16-token tile; the consumers run the whole
//                                             tile and fold stale / uninitialised shared memory into
//                                             the state (o of real tokens unaffected, final_state wrong)
//   gated_delta_mutant_no_prologue_barrier    the __syncthreads between the producer's first tile
//                                             and its first read is gone (racecheck: RAW hazard on
//                                             shared memory; the consumers read the tile unwritten)
//
// gated_delta_chunked (kernels/gated_delta/gated_delta_chunked.cu, profile bf16-states) with:
//   gated_delta_mutant_chunked_w_without_decay  w = T (beta k) in the WY phase (chunk_prep): the chunk's
//                                             cumulative decay e^G left out of w (the chunked form's
//                                             missing decay in the delta term: the state pass's
//                                             v_new = u - w S reads an undecayed state)
//   gated_delta_mutant_chunked_varlen_seq0      as gated_delta_mutant_varlen_seq0: the WY phase's k, v,
//                                             g, beta loads and the output phase's q loads start at
//                                             token 0 (scratch and o keep the sequence's own rows)
//   gated_delta_mutant_chunked_no_barrier       no __syncthreads after thread 0's gate prefix sum in the
//                                             WY phase: the threads of warp 1 (rows 32-63) read the raw
//                                             gates into e^G, D(last, .) and the scratch G, R
//                                             (racecheck: RAW)
//
// Tensors: those of gated_delta_recurrent (kernels/gated_delta/gated_delta.h). Each mutant claims
// only the cases where its defect can change the result (the condition is in its can_implement,
// from case fields and shapes only); the others are NotSupported with the reason.
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/common/kernel_support.h"
#include "kernels/gated_delta/gated_delta.h"
#include "kernels/plugin/cxx_plugin.h"
#include "kernels/registry.h"

namespace assay::kernels::gated_delta {
namespace {

KernelDef make_mutant(const char* name, const char* description, Mutation m, std::function<Support(const CaseInfo&)> shows,
                      bool chunked = false) {
  KernelDef d = common::kernel_def("gated_delta", name, description);
  d.profile = chunked ? "bf16-states" : "strict";  // what the kernel it is planted in declares
  d.intermediates = {"chunk_states"};
  d.can_implement = [shows, chunked](const KernelCase& g) -> Support {
    if (Support s = chunked ? chunked_supported(g) : recurrent_supported(g); !s.ok) return s;
    return shows(case_info(g));
  };
  d.launch = [m, chunked, n = std::string(name)](LaunchContext& c) -> std::string {
    Params p;
    if (std::string err = build_params(c, p); !err.empty()) return n + ": " + err;
    const auto s = static_cast<cudaStream_t>(c.stream);
    return common::cuda_error(n, chunked ? gated_delta_chunked(p, s, m) : gated_delta_recurrent(p, s, m));
  };
  return d;
}

Support varlen_offset_shows(const CaseInfo& c) {
  if (!c.varlen) return {false, "not varlen: each sequence's offset is b * T, unaffected"};
  for (size_t i = 0; i < c.seq_starts.size(); ++i)
    if (c.seq_starts[i] > 0 && c.seq_lens[i] > 0) return {};
  return {false, "every non-empty sequence starts at token 0"};
}

std::vector<KernelDef> mutants() {
  std::vector<KernelDef> v;
  v.push_back(make_mutant("gated_delta_mutant_prefill_missing_alpha",
                          "gated_delta_recurrent whose prefill path reads kv_mem = S^T k before the decay (decode keeps it)",
                          Mutation::prefill_missing_alpha, [](const CaseInfo& c) -> Support {
                            if (c.decode) return {false, "decode path: it keeps the decay (the defect is in the prefill path)"};
                            if (c.gate == Gate::none) return {false, "gate = none: exp(g) = 1, nothing to drop"};
                            if (!c.has_h0 && c.max_len < 2) return {false, "a zero state until the last token: kv_mem = 0 either way"};
                            return {};
                          }));
  v.push_back(make_mutant("gated_delta_mutant_bf16_state",
                          "gated_delta_recurrent with the state rounded to bf16 after every token (claims strict)",
                          Mutation::bf16_state, [](const CaseInfo& c) -> Support {
                            if (c.max_len < 1) return {false, "no token: the state is never updated"};
                            return {};
                          }));
  v.push_back(make_mutant("gated_delta_mutant_varlen_seq0",
                          "gated_delta_recurrent whose prefill loads ignore the sequence offset (every sequence reads from token 0)",
                          Mutation::varlen_seq0, varlen_offset_shows));
  v.push_back(make_mutant("gated_delta_mutant_tail_unpadded",
                          "gated_delta_recurrent whose producer leaves the last partial tile unpadded (stale tokens reach the state)",
                          Mutation::tail_unpadded, [](const CaseInfo& c) -> Support {
                            if (c.decode) return {false, "decode path: no shared-memory tiles"};
                            for (int64_t l : c.seq_lens)
                              if (l % kTileTokens != 0) return {};
                            return {false, "every sequence is a whole number of 16-token tiles: no padding"};
                          }));
  v.push_back(make_mutant("gated_delta_mutant_no_prologue_barrier",
                          "gated_delta_recurrent without the __syncthreads between the first tile's writes and its reads",
                          Mutation::no_prologue_barrier, [](const CaseInfo& c) -> Support {
                            if (c.decode) return {false, "decode path: no shared-memory tiles"};
                            if (c.max_len < 1) return {false, "no tile is read"};
                            return {};
                          }));
  // gated_delta_chunked's.
  v.push_back(make_mutant("gated_delta_mutant_chunked_w_without_decay",
                          "gated_delta_chunked with w = T (beta k), the e^G of the chunk's cumulative gate left out",
                          Mutation::w_without_decay, [](const CaseInfo& c) -> Support {
                            if (c.gate == Gate::none) return {false, "gate = none: e^G = 1"};
                            if (!c.has_h0 && c.max_len <= c.chunk) return {false, "one chunk from a zero state: w S = 0 either way"};
                            return {};
                          }, true));
  v.push_back(make_mutant("gated_delta_mutant_chunked_varlen_seq0",
                          "gated_delta_chunked whose loads ignore the sequence offset (every sequence reads from token 0)",
                          Mutation::varlen_seq0, varlen_offset_shows, true));
  v.push_back(make_mutant("gated_delta_mutant_chunked_no_barrier",
                          "gated_delta_chunked without the __syncthreads after thread 0's gate prefix sum",
                          Mutation::chunk_no_barrier, [](const CaseInfo& c) -> Support {
                            if (c.chunk != 64) return {false, "chunk < 64: the prefix's readers are warp 0 itself, which waits for thread 0"};
                            if (c.max_len <= 32) return {false, "no chunk has a row past 31 (warp 0's rows)"};
                            return {};
                          }, true));
  return v;
}

}  // namespace
}  // namespace assay::kernels::gated_delta

extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) {
  static const assay_plugin* p =
      assay::kernels::export_plugin("assay_gated_delta_mutants", assay::kernels::gated_delta::mutants());
  return p;
}
