// Test-only Mamba-3 mutants (libassay_mamba3_mutants.so; production runs never load it): the
// chunked forward (kernels/mamba3/mamba3_fwd.cu, block body mamba3_body.h) with ONE planted defect
// each, a runtime flag of the same kernel on the same code path (Params::mut), exported through the
// C++ plugin adapter (kernels/plugin/cxx_plugin.h). The gate must reject every one on the L0 mamba3
// goldens (issue 38; verify/tests/gpu/test_gate_gpu.cpp mutants-mamba3).
//
//   mamba3_mutant_flat_view_swapped   the rotated q / k tiles [chunk, rank, N] are written into the
//                                     flattened [chunk*rank, N] shared-memory view at row r * chunk + t
//                                     (rank and chunk swapped) while every reader takes row t * R + r
//   mamba3_mutant_angle_bf16          the fp32 angle cumsum stored in bf16 per token (the rotations
//                                     and the final angle use it) while the kernel claims fp32 angles
//                                     (profile strict)
//   mamba3_mutant_varlen_empty_prev   an empty varlen sequence's final V is the previous sequence's
//                                     last V (upstream Triton SISO's defect) instead of its V state
//   mamba3_mutant_no_chunk_decay      the state handed to the next chunk is not decayed by the
//                                     chunk's total decay exp(sum ADT)
//   mamba3_mutant_first_chunk_state   every chunk reads the first chunk's start state: the state is
//                                     not passed on until the sequence's last chunk
//
// Tensors: those of the chunked forward (kernels/mamba3/mamba3.h). Each mutant claims only the
// cases where its defect can change the result (the condition is in its can_implement, from case
// fields and shapes only); the others are NotSupported with the reason.
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/common/kernel_support.h"
#include "kernels/mamba3/mamba3.h"
#include "kernels/plugin/cxx_plugin.h"
#include "kernels/registry.h"

namespace assay::kernels::mamba3 {
namespace {

KernelDef make_mutant(const char* name, const char* description, Mutation m,
                      std::function<Support(const KernelCase&, const CaseInfo&)> shows) {
  KernelDef d = common::kernel_def("mamba3", name, description);
  d.profile = "strict";  // what the kernel it is planted in declares
  d.intermediates = {"chunk_states"};
  d.can_implement = [shows](const KernelCase& g) -> Support {
    const CaseInfo ci = case_info(g);
    if (Support s = fwd_supported(g, ci.mimo); !s.ok) return s;
    return shows(g, ci);
  };
  d.launch = [m, n = std::string(name)](LaunchContext& c) -> std::string {
    Params p;
    if (std::string err = build_params(c, p); !err.empty()) return n + ": " + err;
    p.mut = static_cast<int>(m);
    return common::cuda_error(n, mamba3_fwd(p, static_cast<cudaStream_t>(c.stream)));
  };
  return d;
}

// A case whose decays are all ~1 (ADT ~ 0) cannot show a missing decay.
bool near_zero_decay(const KernelCase& g) { return g.fields.get_double("decay_hi", 1.5) < 1e-3; }

std::vector<KernelDef> mutants() {
  std::vector<KernelDef> v;
  v.push_back(make_mutant(
      "mamba3_mutant_flat_view_swapped",
      "mamba3 chunked forward staging q / k into the flattened [chunk*rank, N] view at row r * chunk + t (read as t * R + r)",
      Mutation::flat_view_swapped, [](const KernelCase&, const CaseInfo& c) -> Support {
        if (c.R < 2) return {false, "rank 1: rows r * chunk + t and t * R + r coincide"};
        if (c.max_len < 1) return {false, "no token"};
        return {};
      }));
  v.push_back(make_mutant(
      "mamba3_mutant_angle_bf16",
      "mamba3 chunked forward with the fp32 angle cumsum stored in bf16 per token (claims fp32 angles, profile strict)",
      Mutation::angle_bf16, [](const KernelCase&, const CaseInfo& c) -> Support {
        if (c.max_len < 1) return {false, "no token: no angle is stored"};
        return {};
      }));
  v.push_back(make_mutant(
      "mamba3_mutant_varlen_empty_prev",
      "mamba3 chunked forward returning the previous sequence's last V as an empty varlen sequence's final V",
      Mutation::varlen_empty_prev, [](const KernelCase&, const CaseInfo& c) -> Support {
        if (!c.varlen) return {false, "not varlen: no empty sequence"};
        if (!c.empty_after_nonempty_row) return {false, "no empty sequence after a token (only leading ones, if any)"};
        return {};
      }));
  v.push_back(make_mutant(
      "mamba3_mutant_no_chunk_decay",
      "mamba3 chunked forward whose state passing drops the chunk's total decay exp(sum ADT)",
      Mutation::no_chunk_decay, [](const KernelCase& g, const CaseInfo& c) -> Support {
        if (near_zero_decay(g)) return {false, "near-zero decay (decay_hi < 1e-3): the chunk decay is ~1, nothing to drop"};
        if (c.max_chunks < 2 && !c.has_states) return {false, "one chunk from a zero state: the decayed state is 0 either way"};
        return {};
      }));
  v.push_back(make_mutant(
      "mamba3_mutant_first_chunk_state",
      "mamba3 chunked forward where every chunk reads the first chunk's start state (no state passing before the last chunk)",
      Mutation::first_chunk_state, [](const KernelCase&, const CaseInfo& c) -> Support {
        if (c.max_chunks < 2) return {false, "every sequence is one chunk: there is no later chunk"};
        return {};
      }));
  return v;
}

}  // namespace
}  // namespace assay::kernels::mamba3

extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) {
  static const assay_plugin* p = assay::kernels::export_plugin("assay_mamba3_mutants", assay::kernels::mamba3::mutants());
  return p;
}
