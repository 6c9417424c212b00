// Mamba-2 SSD backward, chunked form: see ssd_backward.h (backward_chunked) for the decomposition.
#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "reference/core/check.h"
#include "reference/ssd/ssd_backward.h"
#include "reference/ssd/ssd_backward_internal.h"
#include "reference/ssd/ssd_chunk_math.h"

namespace assay::ssd {

namespace {

using detail::CMap;
using detail::MMap;
using detail::RowMat;

}  // namespace

Grads backward_chunked(const Params& p, const Inputs& in, const std::vector<double>& dout,
                       const std::vector<double>& dfinal_states,
                       const std::vector<double>& dvarlen_states,
                       const ChunkedBackwardOptions& opt) {
  validate(p, in);
  detail::check_upstream(in, dout, dfinal_states, dvarlen_states);
  const int64_t Bn = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, G = in.ngroups,
                N = in.dstate, Q = p.chunk_size;
  const int64_t NC = (T + Q - 1) / Q, PN = P * N, hpg = H / G;
  const int64_t S = in.cu_seqlens.empty() ? 0 : static_cast<int64_t>(in.cu_seqlens.size()) - 1;
  const bool has_D = !in.D.empty(), has_h0 = !in.initial_states.empty();
  const bool use_seq = !in.seq_idx.empty();

  // Forward recomputation by the chunked form: y = the SSM part (no D, no gate) and the
  // chunk-start states S_start(c) [B, NC, H, P, N] (the kernels recompute `states` likewise).
  Result fwd;
  {
    Inputs core = in;
    core.D.clear();
    core.z.clear();
    Params pc = p;
    pc.compute_bounds = false;
    fwd = chunked(pc, core);
  }
  const std::vector<double>& delta = fwd.dt_processed;

  Grads gr = detail::zero_grads(in);
  std::vector<double> ddelta(Bn * T * H, 0.0);
  gr.dstates.assign(Bn * NC * H * PN, 0.0);
  const BwdMutant mut = opt.mutant;
  // The emulation's roundings (opt.io): a copy of a tensor as the next kernel reads it.
  auto io_copy = [&](const RowMat& m) {
    RowMat r = m;
    if (opt.io)
      for (int64_t i = 0; i < r.size(); ++i) r.data()[i] = round_to(*opt.io, r.data()[i]);
    return r;
  };
  auto seq_at = [&](int64_t b, int64_t t) { return use_seq ? in.seq_idx[b * T + t] : int64_t{0}; };
  // Everything a chunk needs that depends only on the chunk: its ids, steps and decays.
  struct Chunk {
    int64_t t0, Qc, seq_prev, seq_end;
    std::vector<int64_t> sq;
    std::vector<double> dl, acum;
    RowMat seg;  // seg(l, s) = sum_{k=s+1..l} a_k, Acum_l = sum_{k<=l} a_k (as the forward sums them)
  };
  auto chunk_of = [&](int64_t b, int64_t h, int64_t c) {
    Chunk k;
    k.t0 = c * Q, k.Qc = std::min(Q, T - k.t0);
    k.seq_prev = c == 0 ? 0 : seq_at(b, k.t0 - 1);
    k.seq_end = seq_at(b, k.t0 + k.Qc - 1);
    k.sq.resize(k.Qc), k.dl.resize(k.Qc);
    std::vector<double> a(k.Qc);
    for (int64_t l = 0; l < k.Qc; ++l) {
      k.sq[l] = seq_at(b, k.t0 + l);
      k.dl[l] = delta[(b * T + k.t0 + l) * H + h];
      a[l] = k.dl[l] * in.A[h];
    }
    detail::segment_sums(a, k.seg, k.acum);
    return k;
  };
  // Passes 1 and 3: one task per (b, g, chunk), visiting the group's heads in turn;
  // body(b, g, h, c, chunk) for each.
  auto for_each_chunk = [&](auto&& body) {
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t bg = 0; bg < Bn * G; ++bg)
      for (int64_t c = 0; c < NC; ++c) {
        const int64_t b = bg / G, g = bg % G;
        for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) body(b, g, h, c, chunk_of(b, h, c));
      }
  };
  auto bhc = [&](int64_t b, int64_t h, int64_t c) { return (b * H + h) * NC + c; };
  auto dstates_at = [&](int64_t b, int64_t h, int64_t c) {
    return MMap(&gr.dstates[((b * NC + c) * H + h) * PN], P, N, Eigen::OuterStride<>(N));
  };

  // Three passes; only pass 2, the adjoint carried between chunks, is sequential (per (b, h)).
  // Pass 1, per (b, g, chunk): the epilogue adjoint dY = dout (.) silu(z) (+ dz, dD, D dy into dx)
  //   and the chunk's own terms of dS_start(c): the C side sum_l [seq_l == seq_prev] exp(Acum_l)
  //   dy_l (x) C_l (into dstates) and the varlen_states terms (into vterm).
  // Pass 2, per (b, h), c = NC-1 .. 0: dS_start(c) = C side + [seq_end == seq_prev]
  //   exp(Acum_{Qc-1}) dS_end(c) + varlen terms, with dS_end(c) = dS_start(c+1) (dfinal_states
  //   for the last chunk): dstates.
  // Pass 3, per (b, g, chunk): the gradients of the chunk given dS_end(c) and S_start(c).
  // Tasks (b, g, chunk) own disjoint rows of dx / dz / dB / dC / ddelta; the per-(b, h, chunk)
  // partials of dA and dD are reduced afterwards in a fixed order.
  std::vector<double> dY_all(Bn * T * H * P, 0.0);
  std::vector<double> vterm(dvarlen_states.empty() ? 0 : Bn * NC * H * PN, 0.0);
  std::vector<double> e_last(Bn * H * NC, 0.0);
  std::vector<char> carried(Bn * H * NC, 0);
  std::vector<double> dA_chunk(Bn * H * NC, 0.0);
  std::vector<double> dD_chunk(has_D ? Bn * H * NC * P : 0, 0.0);

  for_each_chunk([&](int64_t b, int64_t g, int64_t h, int64_t c, const Chunk& k) {
    const int64_t t0 = k.t0, Qc = k.Qc;
    e_last[bhc(b, h, c)] = std::exp(k.acum[Qc - 1]);
    carried[bhc(b, h, c)] = k.seq_end == k.seq_prev;
    const CMap Cc(&in.C[((b * T + t0) * G + g) * N], Qc, N, Eigen::OuterStride<>(G * N));
    MMap dY(&dY_all[((b * T + t0) * H + h) * P], Qc, P, Eigen::OuterStride<>(H * P));
    for (int64_t l = 0; l < Qc; ++l) {
      const int64_t ip = ((b * T + t0 + l) * H + h) * P;
      detail::epilogue_token(in, h, ip, dout, &fwd.out[ip], &dY(l, 0), gr,
                             has_D ? &dD_chunk[bhc(b, h, c) * P] : nullptr);
    }
    if (!in.z.empty()) dY = io_copy(dY);  // the dz kernel hands dy on in dout's dtype
    MMap dS = dstates_at(b, h, c);
    for (int64_t l = 0; l < Qc; ++l)
      if (k.sq[l] == k.seq_prev) dS += std::exp(k.acum[l]) * (dY.row(l).transpose() * Cc.row(l));
    if (!dvarlen_states.empty())
      for (int64_t n = 0; n < S; ++n) {
        const int64_t start = in.cu_seqlens[n], end = in.cu_seqlens[n + 1];
        if (end == start || (end - 1) / Q != c || !(start < t0 || n == 0)) continue;
        const CMap dV(&dvarlen_states[(n * H + h) * PN], P, N, Eigen::OuterStride<>(N));
        MMap(&vterm[((b * NC + c) * H + h) * PN], P, N, Eigen::OuterStride<>(N)) +=
            std::exp(k.acum[end - t0 - 1]) * dV;
      }
  });

#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < Bn * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    RowMat dSE = RowMat::Zero(P, N);  // the adjoint of S_start(c+1)
    if (!dfinal_states.empty()) dSE = CMap(&dfinal_states[bh * PN], P, N, Eigen::OuterStride<>(N));
    for (int64_t c = NC - 1; c >= 0; --c) {
      MMap dS = dstates_at(b, h, c);
      if (carried[bhc(b, h, c)] || mut == BwdMutant::adjoint_crosses_reset) {
        if (mut == BwdMutant::adjoint_no_decay)
          dS += dSE;
        else if (mut != BwdMutant::no_adjoint_carry)
          dS += e_last[bhc(b, h, c)] * dSE;
      }
      if (!vterm.empty()) dS += CMap(&vterm[((b * NC + c) * H + h) * PN], P, N, Eigen::OuterStride<>(N));
      dSE = dS;
    }
    if (has_h0) Eigen::Map<RowMat>(&gr.dinitial_states[bh * PN], P, N) = dSE;
  }

  for_each_chunk([&](int64_t b, int64_t g, int64_t h, int64_t c, const Chunk& k) {
    const int64_t t0 = k.t0, Qc = k.Qc;
    const auto& sq = k.sq;
    const auto& dl = k.dl;
    const auto& acum = k.acum;
    const RowMat& seg = k.seg;
    const double A = in.A[h];
    const CMap X(&in.x[((b * T + t0) * H + h) * P], Qc, P, Eigen::OuterStride<>(H * P));
    const CMap Bc(&in.B[((b * T + t0) * G + g) * N], Qc, N, Eigen::OuterStride<>(G * N));
    const CMap Cc(&in.C[((b * T + t0) * G + g) * N], Qc, N, Eigen::OuterStride<>(G * N));
    const CMap Sst_exact(&fwd.chunk_states[((b * NC + c) * H + h) * PN], P, N,
                         Eigen::OuterStride<>(N));
    const RowMat Sst = io_copy(Sst_exact);  // `states` in x.dtype (emulation) or exact
    const CMap dY(&dY_all[((b * T + t0) * H + h) * P], Qc, P, Eigen::OuterStride<>(H * P));
    // dS_end(c): the adjoint of the state after this chunk.
    const RowMat dSE = c + 1 < NC ? RowMat(dstates_at(b, h, c + 1))
                       : !dfinal_states.empty()
                           ? RowMat(CMap(&dfinal_states[(b * H + h) * PN], P, N, Eigen::OuterStride<>(N)))
                           : RowMat(RowMat::Zero(P, N));
    MMap dX(&gr.dx[((b * T + t0) * H + h) * P], Qc, P, Eigen::OuterStride<>(H * P));
    MMap dBm(&gr.dB[((b * T + t0) * G + g) * N], Qc, N, Eigen::OuterStride<>(G * N));
    MMap dCm(&gr.dC[((b * T + t0) * G + g) * N], Qc, N, Eigen::OuterStride<>(G * N));

    std::vector<double> ddl(Qc, 0.0), dcum(Qc, 0.0);
    auto add_dseg = [&](int64_t l, int64_t s, double v) {  // seg(l,s) = cum_l - cum_s
      dcum[l] += v;
      dcum[s] -= v;
    };

    // 1. Intra-chunk (chunk_scan_bwd_dx / dcb / dC, B side).
    {
      const RowMat CB = Cc * Bc.transpose();  // (Qc, Qc)
      const RowMat M = dY * X.transpose();    // M(l, s) = dy_l . x_s
      RowMat K = RowMat::Zero(Qc, Qc);        // dCB (masked)
      RowMat L = RowMat::Zero(Qc, Qc);        // the forward's mixing matrix
      for (int64_t l = 0; l < Qc; ++l)
        for (int64_t s = 0; s <= l; ++s) {
          if (sq[l] != sq[s]) continue;
          const double W = std::exp(seg(l, s));
          K(l, s) = W * dl[s] * M(l, s);
          L(l, s) = W * CB(l, s) * dl[s];
          ddl[s] += W * CB(l, s) * M(l, s);
          add_dseg(l, s, L(l, s) * M(l, s));
        }
      dCm += K * Bc;
      dBm += K.transpose() * Cc;
      dX += L.transpose() * dY;
    }
    // 2. Chunk-start state to output (chunk_scan_bwd_dC, dA_cumsum; its dstates term is pass 1's).
    for (int64_t l = 0; l < Qc; ++l) {
      if (sq[l] != k.seq_prev) continue;
      const double e = std::exp(acum[l]);
      const Eigen::RowVectorXd dyS = dY.row(l) * Sst;  // (N)
      dCm.row(l) += e * dyS;
      dcum[l] += e * dyS.dot(Cc.row(l));
    }
    // 3. Chunk-local state sums (chunk_state_bwd): weight exp(seg(le, s)) Delta_s over
    //    s in [s0, le] into a state with adjoint dV.
    auto state_sum_bwd = [&](int64_t le, int64_t s0, const RowMat& dV) {
      for (int64_t s = s0; s <= le; ++s) {
        const double E = std::exp(seg(le, s)), w = E * dl[s];
        const Eigen::VectorXd dVB = dV * Bc.row(s).transpose();  // (P)
        dX.row(s) += w * dVB.transpose();
        dBm.row(s) += w * (X.row(s) * dV);
        const double q = X.row(s).dot(dVB.transpose());
        ddl[s] += E * q;
        add_dseg(le, s, w * q);
      }
    };
    {
      int64_t s0 = Qc - 1;  // the chunk's last sequence starts at s0
      while (s0 > 0 && sq[s0 - 1] == k.seq_end) --s0;
      state_sum_bwd(Qc - 1, s0, io_copy(dSE));  // `dstates` in x.dtype (emulation)
    }
    // 4. State passing backward (state_passing_bwd): the carried term's decay gradient.
    if (k.seq_end == k.seq_prev || mut == BwdMutant::adjoint_crosses_reset)
      dcum[Qc - 1] += std::exp(acum[Qc - 1]) * (dSE.cwiseProduct(Sst_exact)).sum();
    // 5. varlen_states of the sequences ending in this chunk (chunk_state_varlen).
    if (!dvarlen_states.empty())
      for (int64_t n = 0; n < S; ++n) {
        const int64_t start = in.cu_seqlens[n], end = in.cu_seqlens[n + 1];
        if (end == start || (end - 1) / Q != c) continue;
        const int64_t e = end - t0, s0 = std::max(start - t0, int64_t{0});
        const RowMat dV = CMap(&dvarlen_states[(n * H + h) * PN], P, N,
                               Eigen::OuterStride<>(N));
        state_sum_bwd(e - 1, s0, dV);
        if (start < t0 || n == 0)
          dcum[e - 1] += std::exp(acum[e - 1]) * (dV.cwiseProduct(Sst)).sum();
      }
    // 6. The dA_cumsum chain: da_k = sum_{l>=k} dcum_l; a_k = Delta_k A.
    double da = 0, dA_acc = 0;
    for (int64_t kk = Qc - 1; kk >= 0; --kk) {
      da += dcum[kk];
      ddl[kk] += da * A;
      dA_acc += da * dl[kk];
    }
    dA_chunk[bhc(b, h, c)] = dA_acc;
    for (int64_t l = 0; l < Qc; ++l) ddelta[(b * T + t0 + l) * H + h] = ddl[l];
  });

  // Fixed-order reductions of the per-chunk partials (last chunk first, as the adjoint runs).
  std::vector<double> dA_part(Bn * H, 0.0);
  std::vector<double> dD_part(has_D ? Bn * H * P : 0, 0.0);
  for (int64_t bh = 0; bh < Bn * H; ++bh)
    for (int64_t c = NC - 1; c >= 0; --c) {
      dA_part[bh] += dA_chunk[bh * NC + c];
      if (has_D)
        for (int64_t pp = 0; pp < P; ++pp) dD_part[bh * P + pp] += dD_chunk[(bh * NC + c) * P + pp];
    }

  detail::finish(p, in, ddelta, dA_part, dD_part, gr, mut);
  return gr;
}

}  // namespace assay::ssd
