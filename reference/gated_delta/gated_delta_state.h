// Private to reference/gated_delta/: state slices are [K][V] row-major inside the oracles and stored
// in the requested layout (StateLayout kv: [K, V]; vk: [V, K]). Shared by the forward forms and
// the backward.
#pragma once
#include <cstdint>

#include "reference/gated_delta/gated_delta.h"

namespace assay::gated_delta::detail {

inline void load_state(const double* src, StateLayout L, int64_t K, int64_t V, double* S) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] = L == StateLayout::kv ? src[i * V + j] : src[j * K + i];
}
inline void store_state(const double* S, StateLayout L, int64_t K, int64_t V, double* dst) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) (L == StateLayout::kv ? dst[i * V + j] : dst[j * K + i]) = S[i * V + j];
}

}  // namespace assay::gated_delta::detail
