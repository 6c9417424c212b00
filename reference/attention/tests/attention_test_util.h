// Helpers of the attention oracle tests (test_attention*.cpp): a deterministic generator, random
// inputs and cotangents for given Params (tensors and layouts as reference/attention/attention.h:
// q [B, Sq, Hq, D] | [total_q, Hq, D], k / v dense, packed or paged, sink [Hq], all fp64), the
// feature-covering case sweep, and gradient comparisons.
#pragma once
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include <omp.h>

#include "catch_compat.h"
#include "tests/common.h"
#include "reference/attention/attention.h"
#include "reference/attention/attention_emulation.h"
#include "reference/attention/attention_tiles.h"
#include "reference/core/check.h"
#include "reference/core/dtype.h"
#include "reference/core/tensor.h"

using namespace assay::attention;
using assay::agreement_rel;

namespace attention_test {

using namespace assay::attention;
using assay::agreement_rel;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// SplitMix64 -> uniform [lo, hi): test inputs only (fixtures use fixtures/gen).
struct Rng : assay_test::SplitMix64 {
  explicit Rng(uint64_t seed) : SplitMix64{seed * 0x9E3779B97F4A7C15ull + 1} {}
  double uni(double lo = -1, double hi = 1) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  std::vector<double> vec(size_t n, double lo = -1, double hi = 1) {
    std::vector<double> v(n);
    for (auto& x : v) x = uni(lo, hi);
    return v;
  }
};

struct Inputs {
  std::vector<double> q, k, v, sink;
};

// Random cotangents of a forward result f (Rng(seed): dout, then dlse), dlse 0 at rows whose LSE
// is -inf (the LSE is constant there).
struct Cotangents {
  std::vector<double> dout, dlse;
};
inline Cotangents cotangents(const ForwardResult& f, uint64_t seed) {
  Rng r(seed);
  Cotangents c{r.vec(f.o.size()), {}};
  c.dlse = r.vec(f.lse.size());
  for (size_t i = 0; i < c.dlse.size(); ++i)
    if (f.lse[i] == kNegInf) c.dlse[i] = 0;
  return c;
}

inline Inputs make_inputs(const Params& p, uint64_t seed, double qscale = 1.0) {
  const auto s = shapes(p);
  Rng r(seed);
  Inputs in;
  in.q = r.vec(assay::numel(s.q));
  for (auto& x : in.q) x *= qscale;
  in.k = r.vec(assay::numel(s.k));
  in.v = r.vec(assay::numel(s.v));
  if (p.has_sink) in.sink = r.vec(p.Hq, -1, 2);
  return in;
}

// A named configuration for the agreement sweep.
struct Case {
  std::string name;
  Params p;
  double qscale = 1.0;
  bool backward = true;
};

inline Params dense(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv) {
  Params p;
  p.B = B, p.Sq = Sq, p.Sk = Sk, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.Dv = Dv;
  return p;
}

// Shuffled paged layout for p's key lengths (3x the needed pages, random permutation, as FA's
// _generate_block_kvcache), and the dense K/V scattered into it. Returns the paged params.
inline Params to_paged(const Params& pd, int64_t page_size, const std::vector<int32_t>& seqlens, Inputs& in,
                uint64_t seed) {
  Params p = pd;
  const int64_t B = p.B;
  int64_t maxlen = 0;
  for (auto s : seqlens) maxlen = std::max<int64_t>(maxlen, s);
  p.pages_per_seq = (maxlen + page_size - 1) / page_size;
  p.num_pages = 3 * B * std::max<int64_t>(p.pages_per_seq, 1);
  p.page_size = page_size;
  p.seqused_k = seqlens;
  std::vector<int32_t> perm(p.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  Rng r(seed);
  for (int64_t i = p.num_pages - 1; i > 0; --i) std::swap(perm[i], perm[r.next() % (i + 1)]);
  p.block_table.assign(B * p.pages_per_seq, -1);
  for (int64_t i = 0; i < B * p.pages_per_seq; ++i) p.block_table[i] = perm[i];
  // Pool filled with noise (never read), then the dense rows scattered in.
  std::vector<double> kp = r.vec(p.num_pages * page_size * p.Hkv * p.D, 50, 60);
  std::vector<double> vp = r.vec(p.num_pages * page_size * p.Hkv * p.Dv, 50, 60);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < seqlens[b]; ++j) {
      const int64_t row = int64_t(p.block_table[b * p.pages_per_seq + j / page_size]) * page_size + j % page_size;
      for (int64_t x = 0; x < p.Hkv * p.D; ++x) kp[row * p.Hkv * p.D + x] = in.k[(b * pd.Sk + j) * p.Hkv * p.D + x];
      for (int64_t x = 0; x < p.Hkv * p.Dv; ++x) vp[row * p.Hkv * p.Dv + x] = in.v[(b * pd.Sk + j) * p.Hkv * p.Dv + x];
    }
  in.k = std::move(kp), in.v = std::move(vp);
  return p;
}

inline std::vector<Case> sweep_cases() {
  std::vector<Case> cs;
  {  // 3 KV tiles at tile 64 plus a remainder; B = 2
    Case c{"mha_sq130_sk193_t64", dense(2, 130, 193, 2, 2, 64, 64)};
    c.p.tile_n = 64, c.p.num_splits = 3;
    cs.push_back(c);
  }
  {  // Sq < Sk causal, tile 128, odd D
    Case c{"causal_sq65_sk239_d59", dense(1, 65, 239, 2, 1, 59, 59)};
    c.p.causal = true, c.p.tile_n = 128, c.p.tile_m = 32, c.p.num_splits = 2;
    cs.push_back(c);
  }
  {  // Sq > Sk causal: the first sq - sk rows fully masked
    Case c{"causal_sq239_sk65_dv48", dense(1, 239, 65, 2, 2, 80, 48)};
    c.p.causal = true, c.p.tile_n = 16, c.p.num_splits = 3;
    cs.push_back(c);
  }
  {  // single-token decode, GQA 4:1, D 128, Sk 1023
    Case c{"decode_sq1_sk1023_gqa4", dense(2, 1, 1023, 8, 2, 128, 128)};
    c.p.causal = true, c.p.tile_n = 128, c.p.num_splits = 5;
    c.backward = false;
    cs.push_back(c);
  }
  {  // multi-token decode, GQA 8:1, Sk 512
    Case c{"decode_sq16_sk512_gqa8", dense(1, 16, 512, 16, 2, 128, 128)};
    c.p.causal = true, c.p.tile_n = 64, c.p.num_splits = 3;
    cs.push_back(c);
  }
  {  // sliding window + softcap + sink, scores driven into saturation (qscale = softcap)
    Case c{"window_softcap_sink_saturating", dense(2, 100, 150, 4, 2, 32, 40)};
    c.p.window_left = 20, c.p.window_right = 5, c.p.softcap = 15, c.p.has_sink = true;
    c.p.tile_n = 32, c.p.tile_m = 16, c.p.num_splits = 4;
    c.qscale = 15;
    cs.push_back(c);
  }
  {  // causal + window + sink: rows of sq > sk with a sink (LSE = sink)
    Case c{"causal_window_sink_sq_gt_sk", dense(1, 40, 17, 2, 1, 16, 24)};
    c.p.causal = true, c.p.window_left = 4, c.p.has_sink = true, c.p.tile_n = 5, c.p.num_splits = 2;
    cs.push_back(c);
  }
  {  // window lying entirely outside [0, sk) for some rows; one-sided windows
    Case c{"window_outside_keys", dense(1, 30, 30, 1, 1, 8, 8)};
    c.p.window_left = -1, c.p.window_right = 3, c.p.tile_n = 7;
    cs.push_back(c);
    Case d{"window_left_only", dense(1, 30, 45, 1, 1, 8, 8)};
    d.p.window_left = 6, d.p.window_right = -1, d.p.tile_n = 7, d.p.num_splits = 9;
    cs.push_back(d);
  }
  {  // large scores: without max subtraction exp overflows (scores ~ +-700)
    Case c{"large_scores", dense(1, 33, 70, 2, 2, 16, 16)};
    c.qscale = 170, c.p.tile_n = 16, c.p.num_splits = 2;
    cs.push_back(c);
  }
  {  // L0-sized: Sk = 1024 (8 tiles of 128), D = 256, scores ~ +-300 (fp32 exp would overflow)
    Case c{"sk1024_d256_large_scores", dense(1, 65, 1024, 2, 1, 256, 256)};
    c.qscale = 200, c.p.tile_n = 128, c.p.num_splits = 3;
    c.backward = false;
    cs.push_back(c);
  }
  {  // more splits than KV tiles, MQA
    Case c{"splits_gt_tiles_mqa", dense(2, 9, 130, 4, 1, 24, 24)};
    c.p.tile_n = 64, c.p.num_splits = 7, c.p.has_sink = true;
    cs.push_back(c);
  }
  {  // varlen with an empty query sequence and an empty key sequence, causal + window
    Case c{"varlen_empty", dense(4, 0, 0, 4, 2, 16, 12)};
    c.p.cu_seqlens_q = {0, 7, 7, 40, 41};
    c.p.cu_seqlens_k = {0, 19, 24, 24, 90};
    c.p.causal = true, c.p.window_left = 9, c.p.tile_n = 8, c.p.num_splits = 3, c.p.has_sink = true;
    cs.push_back(c);
  }
  {  // paged (shuffled pages via seqused_k) built in the sweep below; sizes here
    Case c{"paged_ps3", dense(3, 11, 0, 2, 1, 16, 8)};
    c.p.page_size = 3, c.p.causal = true, c.p.tile_n = 8, c.p.num_splits = 2;
    cs.push_back(c);
    Case d{"paged_ps1", dense(2, 5, 0, 2, 2, 8, 8)};
    d.p.page_size = 1, d.p.tile_n = 4, d.p.has_sink = true, d.p.num_splits = 3;
    cs.push_back(d);
  }
  {  // sk = 0 for every sequence (dense), with a sink: LSE = sink, O = 0
    Case c{"sk0_sink", dense(1, 3, 0, 2, 1, 4, 4)};
    c.p.has_sink = true, c.p.num_splits = 2;
    cs.push_back(c);
  }
  return cs;
}

// Builds concrete params + inputs for a sweep case (paged cases get a shuffled block table).
inline std::pair<Params, Inputs> realize(const Case& c, uint64_t seed) {
  if (c.p.page_size > 0) {
    const std::vector<int32_t> lens = c.p.page_size == 1 ? std::vector<int32_t>{9, 0}
                                                         : std::vector<int32_t>{25, 1, 17};
    Params pd = c.p;
    pd.page_size = 0;
    pd.Sk = *std::max_element(lens.begin(), lens.end());
    Inputs in = make_inputs(pd, seed, c.qscale);
    Params pp = to_paged(pd, c.p.page_size, lens, in, seed + 1);
    return {pp, in};
  }
  return {c.p, make_inputs(c.p, seed, c.qscale)};
}

inline double worst(double a, double b) { return std::max(a, b); }

// dQ, dK, dV and dSink of `x` agree with the reference `ref` to 1e-12; returns the worst agreement.
inline double check_grads_agree(const BackwardResult& x, const BackwardResult& ref, const std::string& name) {
  const double dq = agreement_rel(x.dq, ref.dq), dk = agreement_rel(x.dk, ref.dk), dv = agreement_rel(x.dv, ref.dv),
               ds = agreement_rel(x.dsink, ref.dsink);
  INFO(name << ": dQ " << dq << " dK " << dk << " dV " << dv << " dSink " << ds);
  CHECK(dq <= 1e-12);
  CHECK(dk <= 1e-12);
  CHECK(dv <= 1e-12);
  CHECK(ds <= 1e-12);
  return worst(worst(dq, dk), worst(dv, ds));
}

// Central finite-difference gradient of L = <dout, O> + <dlse, LSE> (form (a)) w.r.t. x.
inline std::vector<double> fd_grad(const Params& p, Inputs in, std::vector<double> Inputs::*field,
                            const std::vector<double>& dout, const std::vector<double>& dlse) {
  auto loss = [&](const Inputs& x) {
    auto f = forward_definitional(p, x.q, x.k, x.v, x.sink);
    double L = 0;
    for (size_t i = 0; i < f.o.size(); ++i) L += dout[i] * f.o[i];
    for (size_t i = 0; i < f.lse.size(); ++i)
      if (dlse.size() && dlse[i] != 0) L += dlse[i] * f.lse[i];
    return L;
  };
  std::vector<double>& x = in.*field;
  std::vector<double> g(x.size());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss(in);
    x[i] = x0 - h;
    const double lm = loss(in);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// max |a - b| / max(max|b|, 1e-3)
inline double grad_err(const std::vector<double>& a, const std::vector<double>& b) {
  double mx = 1e-3, d = 0;
  for (double x : b) mx = std::max(mx, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d / mx;
}

}  // namespace attention_test
