// Test-only SSD mutants (libassay_ssd_mutants.so; production runs never load it): ssd_chunked_mma
// (kernels/ssd/ssd_fwd.cu) with ONE planted defect each, the classes kernel engineers have shipped
// in scan kernels. The gate must reject every one on the L0 ssd goldens
// (verify/tests/gpu/test_gate_gpu.cpp mutants-ssd; the kill matrix is in docs/ops/ssd.md).
//
//   ssd_mutant_tile0                  chunk_scan loads the keys of tile 0 for every 64-key tile (a copy
//                                     whose tile coordinate stayed 0: right with one tile, wrong with two)
//   ssd_mutant_cumsum_bf16            the chunk cumsum of Delta * A kept in bf16 (an intermediate held in
//                                     bf16 by a kernel that claims fp32 for it)
//   ssd_mutant_tail_unguarded         the tail chunk (T not a multiple of Q) read as a whole chunk: tokens
//                                     past T enter its state (the next batch row's, or past the end)
//   ssd_mutant_no_sync                no barrier between the key tile's shared-memory stores and their
//                                     reads in chunk_scan (racecheck)
//   ssd_mutant_init_dropped_b1        initial_states ignored when the batch holds one sequence
//   ssd_mutant_state_from_chunk_start a chunk's state summed from the chunk start instead of the start
//                                     of its last sequence, where a sequence boundary falls inside it
// Relation-only mutants (issue 40 item 3): no L0 golden shows them (every ssd golden has B = 1 or 2,
// and none is a seeded call of 2..Q-1 tokens); `assay verify --relations` does
// (verify/tests/gpu/test_gate_gpu.cpp relations-ssd):
//   ssd_mutant_init_neighbour_odd_b   with B odd and > 1, sequence b starts from the initial states of
//                                     sequence (b + 1) % B (a batch index off by one that an even batch
//                                     hides): caught by batch.extended (B = 2 + 1)
//   ssd_mutant_seeded_short_no_decay  a seeded call of 2..Q-1 tokens, the piece of a chunked prefill,
//                                     hands on its initial states in final_states without their decay
//                                     over the call: caught by continuation (t65_q64_init: 32 + 33 tokens)
//
//   ssd_mutant_offsets_i32            x / z / out element offsets computed in 32 bits: wrong once a
//                                     tensor passes 2^31 elements. No L0 golden is that large; it claims
//                                     only such goldens, and kernels/ssd/test_ssd_large.cu rejects it on a
//                                     dedicated 2.4e9-element case (gpu.ssd.large_2e31_offsets_i32_rejected)
//
// Tensors: those of ssd_chunked_mma (kernels/ssd/ssd_fwd.h). Each mutant claims only the cases
// where its defect can change the result (from shapes and case fields only); the others are
// NotSupported with the reason.
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/kernel_support.h"
#include "kernels/plugin/cxx_plugin.h"
#include "kernels/registry.h"
#include "kernels/ssd/ssd_launch.h"

namespace assay::kernels::ssd {
namespace {

KernelDef make_mutant(const char* name, const char* description, Mutation m,
                      std::function<Support(const KernelCase&, const SsdDims&)> shows) {
  KernelDef d = common::kernel_def("ssd", name, description);
  d.intermediates = {"chunk_states"};
  d.can_implement = [shows](const KernelCase& g) -> Support {
    if (Support s = ssd_supported(g); !s.ok) return s;
    return shows(g, ssd_dims(g));
  };
  d.launch = [m, n = std::string(name)](LaunchContext& c) { return ssd_launch(c, n, m); };
  return d;
}

// A packed-sequence boundary strictly inside a chunk (seqlens from the case fields).
bool boundary_inside_chunk(const KernelCase& g, const SsdDims& d) {
  if (!d.seq_idx || !g.fields.has_list("seqlens")) return false;
  long long at = 0;
  for (double len : g.fields.get_list("seqlens")) {
    at += static_cast<long long>(len);
    if (at % d.Q != 0 && at < d.T) return true;
  }
  return false;
}

std::vector<KernelDef> mutants() {
  std::vector<KernelDef> v;
  v.push_back(make_mutant("ssd_mutant_tile0", "ssd_chunked_mma with chunk_scan's key-tile coordinate pinned to 0",
                          Mutation::tile0, [](const KernelCase&, const SsdDims& d) -> Support {
                            if (d.Q > 64 && d.T > 64) return {};
                            return {false, "chunks of at most one 64-key tile: a pinned tile cannot show"};
                          }));
  v.push_back(make_mutant("ssd_mutant_cumsum_bf16", "ssd_chunked_mma with the chunk cumsum of Delta * A kept in bf16",
                          Mutation::cumsum_bf16, [](const KernelCase&, const SsdDims&) -> Support { return {}; }));
  v.push_back(make_mutant("ssd_mutant_tail_unguarded", "ssd_chunked_mma whose chunk_state reads the tail chunk as a whole chunk",
                          Mutation::tail_unguarded, [](const KernelCase&, const SsdDims& d) -> Support {
                            if (d.T % d.Q) return {};
                            return {false, "T is a multiple of the chunk size: no tail chunk"};
                          }));
  v.push_back(make_mutant("ssd_mutant_no_sync", "ssd_chunked_mma without the barrier after chunk_scan's key-tile stores",
                          Mutation::no_sync, [](const KernelCase&, const SsdDims&) -> Support { return {}; }));
  v.push_back(make_mutant("ssd_mutant_init_dropped_b1", "ssd_chunked_mma that drops initial_states when B = 1",
                          Mutation::init_dropped_b1, [](const KernelCase&, const SsdDims& d) -> Support {
                            if (d.init && d.B == 1) return {};
                            return {false, "no initial_states, or more than one batch row"};
                          }));
  v.push_back(make_mutant("ssd_mutant_state_from_chunk_start",
                          "ssd_chunked_mma whose chunk state sums from the chunk start, not its last sequence's start",
                          Mutation::state_from_chunk_start, [](const KernelCase& g, const SsdDims& d) -> Support {
                            if (boundary_inside_chunk(g, d)) return {};
                            return {false, "no packed-sequence boundary inside a chunk"};
                          }));
  v.push_back(make_mutant("ssd_mutant_offsets_i32", "ssd_chunked_mma with x / z / out element offsets in 32 bits",
                          Mutation::offsets_i32, [](const KernelCase& g, const SsdDims&) -> Support {
                            for (const auto* set : {&g.inputs, &g.outputs})
                              for (const auto& t : *set)
                                if (t.numel() > 2147483647) return {};
                            return {false, "every tensor below 2^31 elements: 32-bit offsets cannot show"};
                          }));
  // Relation-only: they claim every case the real kernel takes (the related cases included) and
  // declare the real kernel's relations.
  for (auto [name, desc, m] : {std::tuple{"ssd_mutant_init_neighbour_odd_b",
                                          "ssd_chunked_mma whose sequence b reads the initial states of (b + 1) % B on odd B > 1",
                                          Mutation::init_neighbour_odd_b},
                               std::tuple{"ssd_mutant_seeded_short_no_decay",
                                          "ssd_chunked_mma whose seeded call of 2..Q-1 tokens hands on its initial states undecayed",
                                          Mutation::seeded_short_no_decay}}) {
    KernelDef d = make_mutant(name, desc, m, [](const KernelCase&, const SsdDims&) -> Support { return {}; });
    d.relations = {"batch", "continuation", "varlen"};
    d.batch_invariant = true;
    v.push_back(std::move(d));
  }
  return v;
}

}  // namespace
}  // namespace assay::kernels::ssd

extern "C" __attribute__((visibility("default"))) const assay_plugin* assay_plugin_entry(void) {
  static const assay_plugin* p = assay::kernels::export_plugin("assay_ssd_mutants", assay::kernels::ssd::mutants());
  return p;
}
