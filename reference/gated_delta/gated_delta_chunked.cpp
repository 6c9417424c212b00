// Gated delta rule, the chunked WY / UT form (gated_delta.h chunked(), spec 3.3), with the
// calibration roundings (Params::emulate_*) and the chunked-form mutants.
//
// Derivation (spec 3.3), chunk of L tokens, local index i, start state S0, G_i = sum_{r<=i} g_r,
// D_ij = sum_{r=j+1..i} g_r (so exp(D_ij) = exp(G_i - G_j), computed without subtraction):
//   S_i = e^{G_i} S0 + sum_{j<=i} exp(D_ij) k_j vn_j^T, and the delta step of token i reads the decayed
//   S_{i-1}, so vn_i = beta_i v_i - beta_i e^{G_i} S0^T k_i - sum_{j<i} beta_i exp(D_ij) (k_i.k_j) vn_j,
//   i.e. (I + A) vn = beta V - (beta e^G K) S0  ->  vn = u - w S0.
// The missing-alpha mutant reads the undecayed S_{i-1} = e^{G_{i-1}} S0 + sum_{j<i} exp(D_{i-1,j}) k_j vn_j^T:
//   the same algebra with G_{i-1} (exclusive cumsum) in w and D_{i-1,j} in A; outputs and state update
//   are unchanged. recurrent() implements the same mutant token by token; the tests check that the two
//   agree, which confirms this derivation.
//
// Decomposition (fla's chunk kernels), in two passes over each window of consecutive chunks (the
// windows one after the other, so that the passes' products for pass 2 stay small and in cache);
// each work item writes only its own slice and every reduction has one fixed order, so the result
// depends neither on the thread count nor on the window size. The products are tile_gemm's
// (reference/core/tile_gemm.h), not BLAS: each element one fused multiply-add chain in ascending
// order (from u for v_new, from the decayed h for h_{c+1}, from e^G (Q h) for the output), the
// same bits on every ISA and with or without OpenBLAS; the triangular operands (T, M) skip their
// zero terms, and only the lower triangles of k k^T and q k^T are computed:
//   1. per chunk, parallel over (chunk, hv) (chunk_scaled_dot_kkt, solve_tril, recompute_w_u, and
//      chunk_fwd_o's intra-chunk matrix): A, T = (I + A)^-1, w = T (beta e^G K), u = T (beta V),
//      M = (Q K^T) o exp(G_i - G_j) (diagonal included), the decays;
//   2. state pass and output, parallel over (sequence, hv, block of kVBlock value columns),
//      sequential over the sequence's chunks in the window (chunk_gated_delta_rule_fwd_h, whose
//      grid is also (V blocks, heads), then chunk_fwd_o on the same columns), the block of the
//      state carried from window to window: store h_c, v_new = u - w h_c,
//      o = scale [e^G (Q h_c) + M v_new], h_{c+1} = e^{G_last} h_c + K^T (exp(G_last - G) v_new).
//      Column j of h, v_new and o depends only on column j of h and u, so the column blocks are
//      independent, and the block of h stays in cache for both products.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include <Eigen/Dense>
#include <omp.h>

#include "reference/core/dtype.h"
#include "reference/core/prefault.h"
#include "reference/core/tile_gemm.h"
#include "reference/gated_delta/gated_delta.h"
#include "reference/gated_delta/gated_delta_internal.h"

namespace assay::gated_delta {

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;
using detail::alloc_result;
using detail::prepare;
using detail::Prep;
using detail::Seq;

constexpr int64_t kVBlock = 64;  // value columns per state-pass work item (fixed: see above)
using CMapS = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;  // rows of a [.., H, K]-style tensor
using MMapS = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;

// Segment sums D(i, j) = sum_{r=j+1..i} g_r for j <= i, by accumulation (never -inf - -inf), and the
// inclusive / exclusive chunk-local cumsums.
void chunk_decays(const Vec& g, Mat& D, Vec& Gin, Vec& Gex) {
  const int64_t L = g.size();
  D = Mat::Zero(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = i - 1; j >= 0; --j) D(i, j) = D(i, j + 1) + g(j + 1);
  Gin.resize(L);
  Gex.resize(L);
  for (int64_t i = 0; i < L; ++i) {
    Gin(i) = (i ? Gin(i - 1) : 0.0) + g(i);
    Gex(i) = i ? Gin(i - 1) : 0.0;
  }
}

// T = (I + A)^-1 for a strictly lower A (L x L, row-major; T comes in as the identity), by forward
// substitution: row i of (T - I) = (-A)(i, :i) T(:i, :i), i.e. T(i, j) = sgn sum_{m=j..i-1} A(i, m)
// T(m, j), accumulated in ascending m (T(m, j) = 0 for j > m). One clone per ISA: the inner loop
// runs across j, each T(i, j) its own sum, so the vector width does not change the result.
ASSAY_GD_CLONES
void forward_substitution(const double* __restrict A, double* __restrict T, int64_t L, double sgn,
                          double* __restrict acc) {
  for (int64_t i = 1; i < L; ++i) {
    for (int64_t j = 0; j < i; ++j) acc[j] = 0.0;
    for (int64_t m = 0; m < i; ++m) {
      const double aim = A[i * L + m];
      const double* tm = T + m * L;
#pragma omp simd
      for (int64_t j = 0; j <= m; ++j) acc[j] += aim * tm[j];
    }
    for (int64_t j = 0; j < i; ++j) T[i * L + j] = sgn * acc[j];
  }
}

// Calibration roundings (emulate_*: see gated_delta.h); no-ops for goldens.
template <class M>
void rnd(M& m, const std::optional<DType>& t) {
  if (t)
    for (int64_t i = 0; i < m.rows(); ++i)
      for (int64_t j = 0; j < m.cols(); ++j) m(i, j) = round_to(*t, m(i, j));
}

}  // namespace

Result chunked(const Params& p, const Inputs& in) {
  const Prep P = prepare(p, in, false);
  Result r = alloc_result(P);  // (o and chunk_states are zero-filled window by window: see below)
  const int64_t nth = omp_get_max_threads();
  const int64_t K = P.K, V = P.V, KV = K * V, H = P.H, HV = P.HV, G = P.HV / P.H, BT = P.B * P.T, C = P.C;
  const Mutant mu = p.mutant;
  const bool excl = mu == Mutant::missing_alpha;
  const auto& inter = p.emulate_intermediate_dtype;
  // The chunk list: sequence, first token inside the sequence, length, first token's row in [B*T].
  struct Chunk {
    int64_t n, c0, L, tok0;
  };
  std::vector<Chunk> chunks(P.NC);
  for (int64_t n = 0; n < P.Nseq; ++n) {
    const Seq& s = P.seqs[n];
    for (int64_t c0 = 0; c0 < s.len; c0 += C)
      chunks[P.chunk_off[n] + c0 / C] = {n, c0, std::min(C, s.len - c0), s.b * P.T + s.t0 + c0};
  }
  // Windows of nw consecutive chunks (only the speed depends on nw: every chunk is computed the
  // same way in any window). nw gives pass 1 about eight work items per thread (fewer, longer
  // steps: at 16 threads, HV = 8, 16 chunks per window took 47 ms against 52 ms with 8); at one
  // thread it is one chunk, and the scratch of two windows (about 5 MB at K = V = 128, HV = 8)
  // stays in cache from pass 1 to pass 2.
  const int64_t nw = std::clamp<int64_t>((8 * nth + HV - 1) / HV, 1, std::max<int64_t>(P.NC, 1));
  const int64_t nwin = (P.NC + nw - 1) / nw;
  // Pass 1's products for pass 2, for two windows (window w in slots [(w % 2) nw, (w % 2 + 1) nw):
  // pass 1 on window w runs next to pass 2 on window w - 1), in scratch kept between calls
  // (ReusedScratch: pass 1 writes every row before pass 2 reads it); lc is the slot of a chunk:
  //   Kw, Qw [2 nw, H, C, K]: the k and q rows as the passes read them (l2-normalised when asked);
  //   U, W [2 nw, HV, C, V / K]: u and w rows;  Mq [2 nw, HV, C, C]: the masked, gated q k^T;
  //   eG, dlast [2 nw, HV, C]: exp(G_i) and exp(G_last - G_i);  eglast [2 nw, HV]: exp(G_last).
  // S [Nseq, HV, nvb, K, kVBlock]: the running state of each column block, from window to window.
  const int64_t nvb = (V + kVBlock - 1) / kVBlock, ns = 2 * nw;
  const int64_t per_chunk = 2 * H * C * K + HV * (C * (V + K + C + 2) + 1);
  thread_local ReusedScratch ws;
  double* const wbase = ws.get(static_cast<size_t>(ns * per_chunk));
  double* const Kw = wbase;
  double* const Qw = Kw + ns * H * C * K;
  double* const U = Qw + ns * H * C * K;
  double* const W = U + ns * HV * C * V;
  double* const Mq = W + ns * HV * C * K;
  double* const eG = Mq + ns * HV * C * C;
  double* const dlast = eG + ns * HV * C;
  double* const eglast = dlast + ns * HV * C;
  double* const o_all = r.o.data();  // (reserved: the fills never reallocate)
  double* const cs_all = r.chunk_states.data();
  const Scratch S_all = scratch(std::max<int64_t>(P.Nseq * HV * KV, 1));
  // Rows [tok0, tok0 + L) of q or k (head h), l2-normalised when asked, into m (L x K).
  auto qk_rows = [&](int64_t tok0, int64_t L, int64_t h, bool is_q, Eigen::Map<Mat> m) {
    const CMapS x(&(is_q ? P.q() : P.k())[(tok0 * P.H + h) * K], L, K, Eigen::OuterStride<>(P.H * K));
    const std::vector<double>& sc = is_q ? P.q_s : P.k_s;
    if (sc.empty())
      m = x;
    else
      for (int64_t i = 0; i < L; ++i) m.row(i) = x.row(i) * sc[(tok0 + i) * P.H + h];
  };
  auto gates = [&](const Chunk& ch, int64_t hv, Vec& g, Vec* b) {
    g.resize(ch.L);
    if (b) b->resize(ch.L);
    for (int64_t i = 0; i < ch.L; ++i) {
      g(i) = P.g[(ch.tok0 + i) * HV + hv];
      if (b) (*b)(i) = P.beta[(ch.tok0 + i) * HV + hv];
    }
  };

  // 1. Per chunk of the window, (chunk, hv): A, T, w, u; the intra-chunk output matrix M and the decays.
  auto pass1 = [&](int64_t ci, int64_t lc, int64_t hv) {
    const Chunk& ch = chunks[ci];
    const int64_t h = hv / G, L = ch.L, slot = lc * HV + hv;
    // One value head per q/k head writes the window's k and q rows; the others make their own copies.
    Mat Kown, Qown;
    double *kp = &Kw[(lc * H + h) * C * K], *qp = &Qw[(lc * H + h) * C * K];
    if (hv % G != 0) {
      Kown.resize(L, K), Qown.resize(L, K);
      kp = Kown.data(), qp = Qown.data();
    }
    const Eigen::Map<Mat> Kc(kp, L, K), Qc(qp, L, K);
    qk_rows(ch.tok0, L, h, false, Kc);
    qk_rows(ch.tok0, L, h, true, Qc);
    const CMapS Vc(&(*P.v)[(ch.tok0 * HV + hv) * V], L, V, Eigen::OuterStride<>(HV * V));
    Vec g, b, Gin, Gex;
    gates(ch, hv, g, &b);
    Mat D;
    chunk_decays(g, D, Gin, Gex);
    // E = exp(D) on and below the diagonal, read by A (except the missing_alpha mutant's, which
    // decays by D(i - 1, j)), by M and by the state update.
    Mat E(L, L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j) E(i, j) = std::exp(D(i, j));
    // k^T (K x L), the right operand of both k k^T and q k^T.
    Mat Kt = Kc.transpose();
    // KKt (only j < i is read); with emulation, chunk_scaled_dot_kkt's operand beta k cast to
    // k.dtype (beta then inside).
    Mat KKt(L, L), Kb;
    if (inter) {
      Kb = Kc;
      for (int64_t i = 0; i < L; ++i) Kb.row(i) *= b(i);
      rnd(Kb, inter);
    }
    tile_gemm(L, L, K, inter ? Kb.data() : Kc.data(), K, 1, Kt.data(), L, KKt.data(), L, {.c_lower = true});
    // A, strictly lower.
    Mat A = Mat::Zero(L, L);
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const double decay = mu == Mutant::kkt_without_decay ? 1.0 : excl ? std::exp(D(i - 1, j)) : E(i, j);
        A(i, j) = (inter ? 1.0 : b(i)) * KKt(i, j) * decay;
      }
    // T = (I + A)^-1.
    Mat Tm = Mat::Identity(L, L);
    std::vector<double> acc(L);
    forward_substitution(A.data(), Tm.data(), L, mu == Mutant::i_minus_a ? 1.0 : -1.0, acc.data());
    rnd(Tm, inter);  // solve_tril's output stored in k.dtype
    Mat bV(L, V), bK(L, K);
    for (int64_t i = 0; i < L; ++i) {
      const double eg = std::exp(excl ? Gex(i) : Gin(i));
      bV.row(i) = Vc.row(i) * (mu == Mutant::u_with_decay ? b(i) * eg : b(i));
      bK.row(i) = Kc.row(i) * (mu == Mutant::w_without_decay ? b(i) : b(i) * eg);
    }
    rnd(bV, inter);  // recompute_w_u casts beta v and beta e^G k to v/k.dtype before the dots with T
    rnd(bK, inter);
    Eigen::Map<Mat> u(&U[slot * C * V], L, V), w(&W[slot * C * K], L, K);
    // (straight into the window's rows; T is lower triangular)
    tile_gemm(L, V, L, Tm.data(), L, 1, bV.data(), V, u.data(), V, {.a_lower = true});
    tile_gemm(L, K, L, Tm.data(), L, 1, bK.data(), K, w.data(), K, {.a_lower = true});
    rnd(u, inter);
    rnd(w, inter);
    for (int64_t j = 0; j < L; ++j) {
      dlast[slot * C + j] = E(L - 1, j);
      eG[slot * C + j] = std::exp(Gin(j));
    }
    eglast[slot] = std::exp(Gin(L - 1));
    // The intra-chunk output matrix: q k^T with the decay mask, diagonal included.
    Eigen::Map<Mat> M(&Mq[slot * C * C], L, L);
    tile_gemm(L, L, K, Qc.data(), K, 1, Kt.data(), L, M.data(), L, {.c_lower = true});  // (j > i: zeroed below)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t jmax = mu == Mutant::strict_output_mask ? i - 1 : i;
      for (int64_t j = 0; j <= jmax; ++j) M(i, j) *= E(i, j);
      for (int64_t j = std::max<int64_t>(jmax + 1, 0); j < L; ++j) M(i, j) = 0.0;
    }
    rnd(M, inter);  // chunk_fwd_o casts the masked, gated q k^T to v.dtype before its dot with v_new
  };

  // 2. State pass and output of (sequence n, hv, column block vb) over the window's chunks
  // [cb, ce) of that sequence, in order; the window's first chunk wc0 is in slot lc0.
  const bool kv = p.state_layout == StateLayout::kv;
  auto at = [&](double* base, int64_t i, int64_t j) -> double& { return kv ? base[i * V + j] : base[j * K + i]; };
  auto pass2 = [&](int64_t n, int64_t hv, int64_t vb, int64_t cb, int64_t ce, int64_t wc0, int64_t lc0) {
    if (cb >= ce) return;  // (an empty sequence inside the window: see below)
    const int64_t h = hv / G, j0 = vb * kVBlock, nb = std::min(kVBlock, V - j0);
    Eigen::Map<Mat> S(&S_all[(n * HV + hv) * KV + j0 * K], K, nb);  // columns [j0, j0 + nb), [K][V] orientation
    if (cb == P.chunk_off[n]) {  // the sequence's first chunk: the initial state
      S.setZero();
      if (!P.h0->empty()) {
        const double* h0 = P.h0->data() + (n * HV + hv) * KV;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < nb; ++j) S(i, j) = kv ? h0[i * V + j0 + j] : h0[(j0 + j) * K + i];
      }
    }
    Mat Sr;
    for (int64_t ci = cb; ci < ce; ++ci) {
      const Chunk& ch = chunks[ci];
      const int64_t L = ch.L, lc = lc0 + ci - wc0, slot = lc * HV + hv;
      // The chunk-start state as stored (h), read by v_new and by the output (a rounded copy only
      // when emulating h's dtype).
      if (p.emulate_h_dtype) {
        Sr = S;
        rnd(Sr, p.emulate_h_dtype);
      }
      const Eigen::Map<const Mat> Sh(p.emulate_h_dtype ? Sr.data() : S.data(), K, nb);
      double* cs = cs_all + (ci * HV + hv) * KV;
      if (kv)
        MMapS(cs + j0, K, nb, Eigen::OuterStride<>(V)) = Sh;
      else
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < nb; ++j) cs[(j0 + j) * K + i] = Sh(i, j);
      const Eigen::Map<const Mat> Wc(&W[slot * C * K], L, K), M(&Mq[slot * C * C], L, L);
      const Eigen::Map<const Mat> Kc(&Kw[(lc * H + h) * C * K], L, K), Qc(&Qw[(lc * H + h) * C * K], L, K);
      // v_new = u - w h, in place of this block's columns of u (fp32 in the kernel; the state
      // update reads this one): each element one chain from u.
      MMapS vnew_acc(&U[slot * C * V + j0], L, nb, Eigen::OuterStride<>(V));
      tile_gemm(L, nb, K, Wc.data(), K, 1, Sh.data(), nb, vnew_acc.data(), V, {.accumulate = true, .negate = true});
      // Output (chunk_fwd_o): o = scale [e^G (Q h) + M v_new], v_new as stored: the chain of M v_new
      // starts from the scaled e^G (Q h) (M is lower triangular).
      Mat QS(L, nb);
      tile_gemm(L, nb, K, Qc.data(), K, 1, Sh.data(), nb, QS.data(), nb);
      for (int64_t i = 0; i < L; ++i) QS.row(i) *= eG[slot * C + i];
      MMapS o(&o_all[(ch.tok0 * HV + hv) * V + j0], L, nb, Eigen::OuterStride<>(HV * V));
      Mat vr;  // (v_new rounded, when emulating)
      if (inter) {
        vr = vnew_acc;
        rnd(vr, inter);
      }
      tile_gemm(L, nb, L, M.data(), L, 1, inter ? vr.data() : vnew_acc.data(), inter ? nb : V, QS.data(), nb,
                {.accumulate = true, .a_lower = true});
      o = P.scale * QS;
      // State update: S <- e^{G_last} S0 + K^T (exp(D(L-1, j)) vn_j), both in place (each element
      // of S one chain from its decayed value).
      MMapS& dV = vnew_acc;
      for (int64_t j = 0; j < L; ++j) dV.row(j) *= dlast[slot * C + j];
      rnd(dV, inter);
      const bool no_decay = p.mutant == Mutant::carry_without_decay &&
                            (p.mutant_chunk < 0 || ci + 1 - P.chunk_off[n] == p.mutant_chunk);
      S *= no_decay ? 1.0 : eglast[slot];
      tile_gemm(K, nb, L, Kc.data(), 1, K, dV.data(), V, S.data(), nb, {.accumulate = true});
    }
    if (ce == P.chunk_off[n + 1]) {  // the sequence's last chunk: the final state
      double* fs = r.final_state.data() + (n * HV + hv) * KV;
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < nb; ++j) at(fs, i, j0 + j) = S(i, j);
    }
  };

  // Step w (w = 0 .. nwin): pass 2 on window w - 1, the zero fills of o and chunk_states up to the
  // end of window w (std::vector's serial fill, in pieces: one thread per vector) and pass 1 on
  // window w, as one list of work items (the longest first; on one thread, pass 2 on a window
  // then follows pass 1 on it).
  const size_t no = BT * HV * V, ncs = P.NC * HV * KV;
  auto window = [&](int64_t w, int64_t& c0, int64_t& c1) { c0 = w * nw, c1 = std::min(P.NC, c0 + nw); };
#pragma omp parallel
  for (int64_t w = 0; w <= nwin; ++w) {
    int64_t c0, c1, p0 = 0, p1 = 0, n0 = 0;
    window(w, c0, c1);
    const int64_t nfill = w < nwin ? 2 : 0, n1 = w < nwin ? (c1 - c0) * HV : 0;
    int64_t n2 = 0;
    if (w > 0) {
      window(w - 1, p0, p1);
      n0 = chunks[p0].n;
      n2 = (chunks[p1 - 1].n + 1 - n0) * HV * nvb;
    }
#pragma omp for schedule(dynamic)
    for (int64_t job = 0; job < n2 + nfill + n1; ++job) {
      if (job < n2) {
        const int64_t n = n0 + job / (HV * nvb);
        pass2(n, job / nvb % HV, job % nvb, std::max(p0, P.chunk_off[n]), std::min(p1, P.chunk_off[n + 1]), p0,
              (w - 1) % 2 * nw);
      } else if (job == n2) {
        r.o.resize((chunks[c1 - 1].tok0 + chunks[c1 - 1].L) * HV * V);
      } else if (job == n2 + 1) {
        r.chunk_states.resize(c1 * HV * KV);
      } else {
        const int64_t j = job - n2 - nfill;
        pass1(c0 + j / HV, w % 2 * nw + j / HV, j % HV);
      }
    }
  }
  r.o.resize(no);  // (no-ops unless there are no chunks)
  r.chunk_states.resize(ncs);
  // Empty sequences (no chunk): the final state is the initial state.
  for (int64_t n = 0; n < P.Nseq; ++n)
    if (P.chunk_off[n] == P.chunk_off[n + 1]) {
      if (!P.h0->empty())
        std::copy_n(P.h0->data() + n * HV * KV, HV * KV, r.final_state.data() + n * HV * KV);
    }
  return r;
}

}  // namespace assay::gated_delta
