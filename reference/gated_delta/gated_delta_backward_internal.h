// Internal helpers shared by the two gated delta backward forms (gated_delta_backward.cpp:
// backward_recurrent, gated_delta_backward_chunked.cpp: backward_chunked). Not part of the oracle's
// interface. Both forms: prepare_backward (mutant refusal, the forward for validation and the
// chunk-start checkpoints, the upstream checks, the elementwise input transforms), then their own
// scan writing RawGrads (gradients w.r.t. the TRANSFORMED inputs: hat-q / hat-k summed over the
// HV/H value heads of a group, the effective log decay, the effective beta), then finish_backward
// (the l2norm, in-kernel gate and beta chains back to the raw inputs).
// GVA reduction: the recurrent scan runs one job per (sequence, q/k head); the chunked form's
// gradient pass runs one job per (chunk, q/k head); both visit the value heads of the group in
// turn, so dq / dk of a group accumulate without races and in a fixed order.
#pragma once
#include <cstdint>
#include <vector>

#include "reference/gated_delta/gated_delta_backward.h"

namespace assay::gated_delta::detail {

struct BwdSeq {
  int64_t b, t0, len;  // batch row, first token, length (slot = index in BwdPrep::seqs)
};

struct BwdPrep {
  int64_t B, T, H, HV, K, V, KV, G, C, Nseq;
  double scale;
  Result fw;                             // the forward (chunk_states: the chunk-start checkpoints)
  std::vector<double> qh, kh, rq, rk;    // (normalised) q / k [B,T,H,K], their l2norm scales [B,T,H]
  std::vector<double> ge, be;            // effective log decay and beta [B,T,HV]
  std::vector<BwdSeq> seqs;
};

// Refuses mutants, runs `forward` (recurrent or chunked: validates every input), checks do and
// dfinal_state (sizes, finiteness) and applies the elementwise transforms as the forward does.
BwdPrep prepare_backward(const Params& p, const Inputs& in, const std::vector<double>& d_o,
                         const std::vector<double>& dfinal_state,
                         Result (*forward)(const Params&, const Inputs&));

// Gradients w.r.t. the transformed inputs, written by a scan.
struct RawGrads {
  std::vector<double> dqh, dkh;          // [B,T,H,K] w.r.t. hat-q / hat-k
  std::vector<double> dv;                // [B,T,HV,V]
  std::vector<double> dge, dbe;          // [B,T,HV] w.r.t. the effective log decay / beta
  std::vector<double> dinitial_state;    // like initial_state; empty without it
  std::vector<double> dh;                // [NC, HV, K, V] (stored layout): the chunk-start adjoints
};
RawGrads zero_raw_grads(const BwdPrep& P, const Inputs& in);

// The elementwise chains (l2norm, gate mode, beta mode) to the Grads of the raw inputs. magnitude:
// the chains of backward_bound (r holds magnitudes; every term taken in absolute value).
Grads finish_backward(const Params& p, const Inputs& in, const BwdPrep& P, RawGrads&& r, bool magnitude = false);

}  // namespace assay::gated_delta::detail
