// Parameter validation, layouts, shapes and the split-KV combine (shared by both forms; no score math).
#include <cmath>
#include <limits>

#include "reference/attention/attention.h"
#include "reference/attention/attention_layout.h"
#include "reference/core/check.h"
#include "reference/core/prefault.h"

namespace assay::attention {

double resolved_scale(const Params& p) {
  return p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.D));
}

namespace detail {

static void check_cu(const std::vector<int32_t>& cu, int64_t B, const char* name) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(cu.size()) == B + 1, "attention: {} has {} entries, want B + 1 = {}",
                    name, cu.size(), B + 1);
  ASSAY_INPUT_CHECK(cu[0] == 0, "attention: {}[0] = {}, want 0", name, cu[0]);
  for (int64_t b = 0; b < B; ++b)
    ASSAY_INPUT_CHECK(cu[b + 1] >= cu[b], "attention: {} decreases at {}", name, b);
}

Layout make_layout(const Params& p) {
  Layout L;
  ASSAY_INPUT_CHECK(p.B >= 0 && p.Hq >= 1 && p.Hkv >= 1 && p.D >= 1 && p.Dv >= 1,
                    "attention: bad dims B={} Hq={} Hkv={} D={} Dv={}", p.B, p.Hq, p.Hkv, p.D, p.Dv);
  ASSAY_INPUT_CHECK(p.Hq % p.Hkv == 0, "attention: Hq = {} is not a multiple of Hkv = {}", p.Hq, p.Hkv);
  ASSAY_INPUT_CHECK(p.tile_m >= 1 && p.tile_n >= 1 && p.num_splits >= 1,
                    "attention: tile_m, tile_n, num_splits must be >= 1");
  ASSAY_INPUT_CHECK(p.softcap >= 0 && std::isfinite(p.softcap), "attention: softcap {} must be >= 0",
                    p.softcap);
  L.B = p.B, L.Hq = p.Hq, L.Hkv = p.Hkv, L.D = p.D, L.Dv = p.Dv, L.G = p.Hq / p.Hkv;
  L.scale = resolved_scale(p);
  ASSAY_INPUT_CHECK(std::isfinite(L.scale), "attention: scale must be finite");
  L.left = p.window_left < 0 ? -1 : p.window_left;
  L.right = p.window_right < 0 ? -1 : p.window_right;
  if (p.causal) L.right = 0;

  // Queries.
  L.q_off.resize(p.B), L.sq.resize(p.B), L.sk.resize(p.B);
  if (!p.cu_seqlens_q.empty()) {
    check_cu(p.cu_seqlens_q, p.B, "cu_seqlens_q");
    L.varlen_q = true;
    L.total_q = p.cu_seqlens_q[p.B];
    for (int64_t b = 0; b < p.B; ++b)
      L.q_off[b] = p.cu_seqlens_q[b], L.sq[b] = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
  } else {
    ASSAY_INPUT_CHECK(p.Sq >= 0, "attention: Sq = {} < 0", p.Sq);
    L.Sq = p.Sq;
    L.total_q = p.B * p.Sq;
    for (int64_t b = 0; b < p.B; ++b) L.q_off[b] = b * p.Sq, L.sq[b] = p.Sq;
  }

  // Keys: storage and capacity per sequence.
  std::vector<int64_t> cap(p.B);
  if (!p.cu_seqlens_k.empty()) check_cu(p.cu_seqlens_k, p.B, "cu_seqlens_k");
  if (p.page_size > 0) {
    L.kmode = KMode::paged;
    L.page_size = p.page_size, L.pages_per_seq = p.pages_per_seq;
    ASSAY_INPUT_CHECK(p.num_pages >= 0 && p.pages_per_seq >= 0, "attention: bad num_pages / pages_per_seq");
    ASSAY_INPUT_CHECK(static_cast<int64_t>(p.block_table.size()) == p.B * p.pages_per_seq,
                      "attention: block_table has {} entries, want B * pages_per_seq = {}",
                      p.block_table.size(), p.B * p.pages_per_seq);
    L.block_table = &p.block_table;
    L.k_rows = p.num_pages * p.page_size;
    for (int64_t b = 0; b < p.B; ++b) cap[b] = p.pages_per_seq * p.page_size;
  } else {
    ASSAY_INPUT_CHECK(p.page_size == 0, "attention: page_size = {} < 0", p.page_size);
    if (!p.cu_seqlens_k.empty()) {
      L.kmode = KMode::packed;
      L.k_off.resize(p.B);
      L.k_rows = p.cu_seqlens_k[p.B];
      for (int64_t b = 0; b < p.B; ++b)
        L.k_off[b] = p.cu_seqlens_k[b], cap[b] = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    } else {
      ASSAY_INPUT_CHECK(p.Sk >= 0, "attention: Sk = {} < 0", p.Sk);
      L.kmode = KMode::dense;
      L.Sk = p.Sk;
      L.k_rows = p.B * p.Sk;
      for (int64_t b = 0; b < p.B; ++b) cap[b] = p.Sk;
    }
  }
  // Key lengths: seqused_k, else cu_seqlens_k diffs, else Sk.
  if (!p.seqused_k.empty()) {
    ASSAY_INPUT_CHECK(static_cast<int64_t>(p.seqused_k.size()) == p.B, "attention: seqused_k has {} entries, want B = {}",
                      p.seqused_k.size(), p.B);
    for (int64_t b = 0; b < p.B; ++b) L.sk[b] = p.seqused_k[b];
  } else if (!p.cu_seqlens_k.empty()) {
    for (int64_t b = 0; b < p.B; ++b) L.sk[b] = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  } else {
    for (int64_t b = 0; b < p.B; ++b) L.sk[b] = p.Sk;
  }
  for (int64_t b = 0; b < p.B; ++b) {
    ASSAY_INPUT_CHECK(L.sk[b] >= 0, "attention: sequence {} has {} keys", b, L.sk[b]);
    if (L.kmode == KMode::paged) {
      const int64_t need = (L.sk[b] + p.page_size - 1) / p.page_size;
      ASSAY_INPUT_CHECK(need <= p.pages_per_seq,
                        "attention: sequence {} needs {} pages of {} keys but block_table rows hold {}",
                        b, need, p.page_size, p.pages_per_seq);
      for (int64_t i = 0; i < need; ++i) {
        const int32_t pg = p.block_table[b * p.pages_per_seq + i];
        ASSAY_INPUT_CHECK(pg >= 0 && pg < p.num_pages,
                          "attention: block_table[{}][{}] = {} outside [0, {})", b, i, pg, p.num_pages);
      }
    } else {
      ASSAY_INPUT_CHECK(L.sk[b] <= cap[b], "attention: sequence {} uses {} keys, capacity {}", b,
                        L.sk[b], cap[b]);
    }
  }
  return L;
}

void check_inputs(const Layout& L, const Params& p, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  const std::vector<double>& sink) {
  ASSAY_INPUT_CHECK(static_cast<int64_t>(q.size()) == L.total_q * L.Hq * L.D,
                    "attention: q has {} values, want {}", q.size(), L.total_q * L.Hq * L.D);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(k.size()) == L.k_rows * L.Hkv * L.D,
                    "attention: k has {} values, want {}", k.size(), L.k_rows * L.Hkv * L.D);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(v.size()) == L.k_rows * L.Hkv * L.Dv,
                    "attention: v has {} values, want {}", v.size(), L.k_rows * L.Hkv * L.Dv);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(sink.size()) == (p.has_sink ? L.Hq : 0),
                    "attention: sink has {} values, want {}", sink.size(), p.has_sink ? L.Hq : 0);
}

Layout checked_layout(const Params& p, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& sink) {
  Layout L = make_layout(p);
  check_inputs(L, p, q, k, v, sink);
  return L;
}

void check_backward_inputs(const Layout& L, const Params& p, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& sink, const std::vector<double>& o,
                           const std::vector<double>& lse, const std::vector<double>& dout,
                           const std::vector<double>& dlse) {
  check_inputs(L, p, q, k, v, sink);
  ASSAY_INPUT_CHECK(static_cast<int64_t>(o.size()) == L.o_size() && static_cast<int64_t>(dout.size()) == L.o_size(),
                    "attention: o / dout sizes do not match");
  ASSAY_INPUT_CHECK(static_cast<int64_t>(lse.size()) == L.lse_size() &&
                        (dlse.empty() || static_cast<int64_t>(dlse.size()) == L.lse_size()),
                    "attention: lse / dlse sizes do not match");
}

}  // namespace detail

void detail::combine_row(const Params& p, const detail::Layout& L, int64_t ns, const double* o_partial,
                         const double* lse_partial, int64_t b, int64_t h, int64_t i, double* o, double* lse) {
  const int64_t osz = L.o_size(), lsz = L.lse_size();
  const int64_t li = L.lse_index(b, h, i);
  const int64_t orow = (L.q_row(b, i) * L.Hq + h) * L.Dv;
  const double ninf = -std::numeric_limits<double>::infinity();
  // lse = logsumexp_s(lse_s) with its own max subtraction.
  double mx = ninf;
  for (int64_t s = 0; s < ns; ++s) mx = std::max(mx, lse_partial[s * lsz + li]);
  if (mx == ninf) return;  // every split empty: O = 0, LSE = -inf
  double sum = 0;
  for (int64_t s = 0; s < ns; ++s) sum += std::exp(lse_partial[s * lsz + li] - mx);
  const double l = mx + std::log(sum);
  lse[li] = l;
  if (p.mutant == Mutant::combine_unweighted) {
    int64_t n = 0;
    for (int64_t s = 0; s < ns; ++s) n += lse_partial[s * lsz + li] != ninf;
    for (int64_t s = 0; s < ns; ++s)
      if (lse_partial[s * lsz + li] != ninf)
        for (int64_t e = 0; e < L.Dv; ++e) o[orow + e] += o_partial[s * osz + orow + e] / n;
    return;
  }
  for (int64_t s = 0; s < ns; ++s) {
    double w = std::exp(lse_partial[s * lsz + li] - l);
    if (!std::isfinite(w)) w = 0;
    if (w == 0) continue;
    for (int64_t e = 0; e < L.Dv; ++e) o[orow + e] += w * o_partial[s * osz + orow + e];
  }
}

Combined combine_splits(const Params& p, int64_t num_splits, const std::vector<double>& o_partial,
                        const std::vector<double>& lse_partial) {
  const auto L = detail::make_layout(p);
  const int64_t osz = L.o_size(), lsz = L.lse_size();
  ASSAY_INPUT_CHECK(num_splits >= 1, "attention: num_splits must be >= 1");
  ASSAY_INPUT_CHECK(static_cast<int64_t>(o_partial.size()) == num_splits * osz &&
                        static_cast<int64_t>(lse_partial.size()) == num_splits * lsz,
                    "attention: combine_splits: partial sizes do not match");
  Combined r;
  r.o = zeros_prefaulted(osz);  // pages faulted in by all threads (prefault.h)
  r.lse.assign(lsz, -std::numeric_limits<double>::infinity());
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < L.B; ++b)
    for (int64_t h = 0; h < L.Hq; ++h)
      for (int64_t i = 0; i < L.sq[b]; ++i)
        detail::combine_row(p, L, num_splits, o_partial.data(), lse_partial.data(), b, h, i, r.o.data(), r.lse.data());
  return r;
}

Shapes shapes(const Params& p) {
  const auto L = detail::make_layout(p);
  Shapes s;
  if (L.varlen_q) {
    s.q = {L.total_q, L.Hq, L.D}, s.q_axes = {"T", "Hq", "D"};
    s.o = {L.total_q, L.Hq, L.Dv}, s.o_axes = {"T", "Hq", "Dv"};
    s.lse = {L.Hq, L.total_q}, s.lse_axes = {"Hq", "T"};
  } else {
    s.q = {L.B, L.Sq, L.Hq, L.D}, s.q_axes = {"B", "Sq", "Hq", "D"};
    s.o = {L.B, L.Sq, L.Hq, L.Dv}, s.o_axes = {"B", "Sq", "Hq", "Dv"};
    s.lse = {L.B, L.Hq, L.Sq}, s.lse_axes = {"B", "Hq", "Sq"};
  }
  switch (L.kmode) {
    case detail::KMode::dense:
      s.k = {L.B, L.Sk, L.Hkv, L.D}, s.k_axes = {"B", "Sk", "Hkv", "D"};
      s.v = {L.B, L.Sk, L.Hkv, L.Dv}, s.v_axes = {"B", "Sk", "Hkv", "Dv"};
      break;
    case detail::KMode::packed:
      s.k = {L.k_rows, L.Hkv, L.D}, s.k_axes = {"S", "Hkv", "D"};
      s.v = {L.k_rows, L.Hkv, L.Dv}, s.v_axes = {"S", "Hkv", "Dv"};
      break;
    case detail::KMode::paged:
      s.k = {p.num_pages, p.page_size, L.Hkv, L.D}, s.k_axes = {"page", "slot", "Hkv", "D"};
      s.v = {p.num_pages, p.page_size, L.Hkv, L.Dv}, s.v_axes = {"page", "slot", "Hkv", "Dv"};
      break;
  }
  s.sink = p.has_sink ? Shape{L.Hq} : Shape{0};
  s.sink_axes = {"Hq"};
  s.o_partial = s.o, s.o_partial.insert(s.o_partial.begin(), p.num_splits);
  s.o_partial_axes = s.o_axes, s.o_partial_axes.insert(s.o_partial_axes.begin(), "split");
  s.lse_partial = s.lse, s.lse_partial.insert(s.lse_partial.begin(), p.num_splits);
  s.lse_partial_axes = s.lse_axes, s.lse_partial_axes.insert(s.lse_partial_axes.begin(), "split");
  return s;
}

}  // namespace assay::attention
