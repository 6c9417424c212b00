// Private to reference/gated_delta/: the input preparation that the recurrent form
// (gated_delta_recurrent.cpp), the chunked form (gated_delta_chunked.cpp) and the decode step
// (gated_delta.cpp) share: shape and finiteness checks, the elementwise transforms (l2norm, gate,
// beta) and the sequence / chunk grid. Not part of the oracle's interface (gated_delta.h).
#pragma once
#include <cstdint>
#include <vector>

#include "reference/gated_delta/gated_delta.h"

// One clone per ISA of the hot loops that GCC vectorises (the recurrence's sweeps, the chunked
// form's forward substitution); each clone gives the same bits (see where they are used).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ASSAY_GD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ASSAY_GD_CLONES
#endif

namespace assay::gated_delta::detail {

// Loops over fewer elements than this stay on the calling thread (a parallel region costs more
// than they do). Only the speed depends on it: every element is computed the same way either way.
constexpr int64_t kParallelMin = int64_t{1} << 16;

// Every value finite (one pass, parallel above kParallelMin).
bool all_finite(const std::vector<double>& x);

// One sequence: batch row b, tokens [t0, t0 + len) of that row, state slot n.
struct Seq {
  int64_t b, t0, len, n;
};

// Inputs after the elementwise preprocessing that both forms share (l2norm, gate, beta).
struct Prep {
  int64_t B, T, H, HV, K, V, Nseq, C, NC;
  double scale;
  const std::vector<double>* q_in;  // [B, T, H, K] as given
  const std::vector<double>* k_in;
  std::vector<double> q_n, k_n;  // their l2-normalised copies (qk_l2norm, materialised)
  std::vector<double> q_s, k_s;  // or only the rows' l2norm_scale factors [B, T, H] (not materialised)
  const std::vector<double>& q() const { return q_n.empty() ? *q_in : q_n; }  // l2-normalised if materialised
  const std::vector<double>& k() const { return k_n.empty() ? *k_in : k_n; }
  const std::vector<double>* v;  // [B, T, HV, V]
  std::vector<double> g, beta;  // [B, T, HV] effective log decay and beta
  std::vector<Seq> seqs;
  std::vector<int64_t> chunk_off;  // [Nseq + 1]
  const std::vector<double>* h0;   // may be empty
};

// Checks the shapes and values (InputError) and applies the elementwise preprocessing.
// materialise_qk = false: with qk_l2norm, only the row scales q_s / k_s are computed and the caller
// applies them where it reads rows (the same products x * scale).
Prep prepare(const Params& p, const Inputs& in, bool materialise_qk = true);

// The result with its small fields set and o / chunk_states only reserved, their pages faulted in
// by all threads (reserve_prefaulted): the forms zero-fill them (resize) where it suits them.
Result alloc_result(const Prep& P);

}  // namespace assay::gated_delta::detail
