// Internal to reference/attention: parameter validation and tensor addressing shared by both forms
// (layouts only, no math). Paging / varlen addressing is cross-checked in the tests against layouts
// the tests build themselves (paged == dense gather, varlen == per-sequence dense).
#pragma once
#include <cstdint>
#include <vector>

#include "reference/attention/attention.h"

namespace assay::attention::detail {

enum class KMode { dense, packed, paged };

struct Layout {
  int64_t B = 0, Hq = 0, Hkv = 0, D = 0, Dv = 0, G = 1;  // G = Hq / Hkv
  double scale = 0;
  int64_t left = -1, right = -1;  // effective window (causal forces right = 0); -1 unbounded
  bool varlen_q = false;
  int64_t total_q = 0;     // rows of q / o storage
  int64_t Sq = 0;          // dense Sq (lse stride)
  std::vector<int64_t> q_off, sq, sk;  // per sequence: first q row, query length, key length
  KMode kmode = KMode::dense;
  int64_t k_rows = 0;      // rows of k / v storage (tokens)
  int64_t Sk = 0, page_size = 0, pages_per_seq = 0;
  std::vector<int64_t> k_off;  // packed: first row per sequence
  const std::vector<int32_t>* block_table = nullptr;

  // Storage row (token index into [k_rows, Hkv, D]) of key j of sequence b.
  int64_t key_row(int64_t b, int64_t j) const {
    switch (kmode) {
      case KMode::dense: return b * Sk + j;
      case KMode::packed: return k_off[b] + j;
      case KMode::paged:
        return static_cast<int64_t>((*block_table)[b * pages_per_seq + j / page_size]) * page_size +
               j % page_size;
    }
    return -1;
  }
  int64_t q_row(int64_t b, int64_t i) const { return q_off[b] + i; }
  // Flat index of LSE (b, h, i): dense [B, Hq, Sq], varlen [Hq, total_q].
  int64_t lse_index(int64_t b, int64_t h, int64_t i) const {
    return varlen_q ? h * total_q + q_off[b] + i : (b * Hq + h) * Sq + i;
  }
  int64_t o_size() const { return total_q * Hq * Dv; }
  int64_t lse_size() const { return total_q * Hq; }
};

// Validates p (InputError on a bad parameter) and resolves the layout.
Layout make_layout(const Params& p);
// Checks the sizes of the input arrays against the layout (InputError on mismatch).
void check_inputs(const Layout& L, const Params& p, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  const std::vector<double>& sink);
// make_layout, then check_inputs: how every forward starts.
Layout checked_layout(const Params& p, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& sink);

// The operands of one call and their addressing: the first element of a row of q (sequence b,
// query head h, row i), of k or v (KV head hk, key j) in the storage layouts. Addressing only: the
// forms and the kernel emulations each build their own arithmetic on it.
struct Operands {
  const Params& p;
  const Layout& L;
  const std::vector<double>& q;
  const std::vector<double>& k;
  const std::vector<double>& v;
  const std::vector<double>& sink;

  const double* qptr(int64_t b, int64_t h, int64_t i) const { return q.data() + (L.q_row(b, i) * L.Hq + h) * L.D; }
  const double* kptr(int64_t b, int64_t hk, int64_t j) const {
    return k.data() + (L.key_row(b, j) * L.Hkv + hk) * L.D;
  }
  const double* vptr(int64_t b, int64_t hk, int64_t j) const {
    return v.data() + (L.key_row(b, j) * L.Hkv + hk) * L.Dv;
  }
};
// The same, plus the backward's forward results and cotangents (o, lse, dout; dlse may be empty).
void check_backward_inputs(const Layout& L, const Params& p, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& sink, const std::vector<double>& o,
                           const std::vector<double>& lse, const std::vector<double>& dout,
                           const std::vector<double>& dlse);

// Row (b, h, i) of combine_splits (attention.h): lse[li] and o[orow .. orow + Dv) from the ns
// splits of o_partial / lse_partial (osz / lsz values per split); o's row holds zeros on entry and
// lse[li] -inf, which a row whose splits are all empty keeps.
void combine_row(const Params& p, const Layout& L, int64_t ns, const double* o_partial, const double* lse_partial,
                 int64_t b, int64_t h, int64_t i, double* o, double* lse);

}  // namespace assay::attention::detail
