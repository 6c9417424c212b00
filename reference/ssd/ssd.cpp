// Mamba-2 SSD oracles, the two forms and their shared dt preprocessing: see ssd.h for the contract
// (the golden assembly, oracle(), is in ssd_golden.cpp).
//
// Why the reset recurrence equals the kernels' varlen handling (spec 1.5), for ids that are >= 0
// and non-decreasing along T (each sequence one contiguous run):
//  * Y_diag with the CB mask seq_l == seq_s sums exactly the earlier tokens of the same sequence
//    inside the chunk, and every decay factor between them spans only that sequence's tokens.
//  * Y_off is kept iff seq_l == seq at the end of chunk c-1 (0 for c = 0): then every token of
//    chunk c before l belongs to that sequence too, so exp(Acum_l) S_start_c is its carried part.
//  * st_c keeps the tokens of the chunk's last sequence; state passing keeps exp(Acum_last)
//    S_start_c iff the chunk-end ids of c and c-1 agree (then the whole chunk is one sequence),
//    otherwise the last sequence started inside chunk c and st_c is its whole state.
//  So S_start_c is the reset recurrence's state after token cQ-1, and the virtual id 0 before
//  t = 0 makes initial_states the initial state of sequence 0 only.
// Negative ids (the kernels' "seq_idx_last >= 0" guard in _chunk_state_fwd_kernel) and
// non-contiguous ids give kernel results that are no recurrence; validate() refuses them.
#include "reference/ssd/ssd.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>
#include <fmt/format.h>
#include <omp.h>

#include "reference/core/check.h"
#include "reference/ssd/ssd_chunk_math.h"

namespace assay::ssd {

namespace {

using detail::CMap;
using detail::RowMat;

double silu(double v) { return v / (1.0 + std::exp(-v)); }

struct Dims {
  int64_t B, T, H, P, G, N, Q, NC;
  explicit Dims(const Params& p, const Inputs& in)
      : B(in.batch), T(in.seqlen), H(in.nheads), P(in.headdim), G(in.ngroups), N(in.dstate),
        Q(p.chunk_size), NC((in.seqlen + p.chunk_size - 1) / p.chunk_size) {}
};

// Loops over fewer elements than this stay on the calling thread (a parallel region costs more
// than they do). Only the speed depends on it: every element is computed the same way either way.
constexpr int64_t kParallelMin = int64_t{1} << 16;

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> r = zeros_prefaulted(v.size());
  const auto n = static_cast<int64_t>(v.size());
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) r[i] = std::fabs(v[i]);
  return r;
}

// One form's outputs on one set of (x, B, C, h0) arrays: y without the D skip and z gate from the
// recurrence, with them from the chunked form (which gates each chunk's rows once they are final).
struct Core {
  std::vector<double> y;   // [B,T,H,P]
  std::vector<double> fin; // [B,H,P,N]
  std::vector<double> cs;  // [B,NC,H,P,N]
  std::vector<double> vs;  // [S,H,P,N] (cu_seqlens only)
};

int64_t num_seqs(const Inputs& in) {
  return in.cu_seqlens.empty() ? 0 : static_cast<int64_t>(in.cu_seqlens.size()) - 1;
}

// D skip and z gate on the P elements of row `row` (= (b, t, h) flattened) of y and, when given,
// of its bound yb (in place); `gate_first` only for the d_after_gate mutant. The chunked form calls
// it as soon as a chunk's rows are final, the recurrence on its finished output (same operations).
inline void gate_row(const Inputs& in, const Dims& d, int64_t row, double* y, double* yb,
                     bool gate_first) {
  const int64_t h = row % d.H;
  const bool d_per_p = static_cast<int64_t>(in.D.size()) == d.H * d.P;
  for (int64_t p = 0; p < d.P; ++p) {
    const int64_t i = row * d.P + p;
    double skip = 0;
    if (!in.D.empty()) skip = (d_per_p ? in.D[h * d.P + p] : in.D[h]) * in.x[i];
    double gate = 1.0;
    if (!in.z.empty()) gate = silu(in.z[i]);
    const double v = y[p];
    y[p] = gate_first ? v * gate + skip : (v + skip) * gate;
    if (yb) yb[p] = (yb[p] + std::fabs(skip)) * std::fabs(gate);
  }
}

// Moves the cores' tensors into r; `gate` runs gate_row over every row first (the recurrence;
// the chunked form has gated its rows already).
void finish(const Inputs& in, const Dims& d, Core& c, Core& cabs, bool gate, Result& r) {
  const int64_t n = d.B * d.T * d.H * d.P;
  const bool bounds = !cabs.y.empty();
  r.out = std::move(c.y);  // y -> out in place
  if (bounds) r.out_bound = std::move(cabs.y);
  if (gate) {
    const int64_t rows = n / d.P;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t row = 0; row < rows; ++row)
      gate_row(in, d, row, &r.out[row * d.P], bounds ? &r.out_bound[row * d.P] : nullptr, false);
  }
  r.final_states = std::move(c.fin);
  r.final_states_bound = std::move(cabs.fin);
  r.chunk_states = std::move(c.cs);
  r.chunk_states_bound = std::move(cabs.cs);
  r.varlen_states = std::move(c.vs);
  r.varlen_states_bound = std::move(cabs.vs);
}

// ---------------------------------------------------------------- form 1: recurrence
Core recurrence_core(const Inputs& in, const Dims& d, const std::vector<double>& delta,
                     const std::vector<double>& x, const std::vector<double>& Bm,
                     const std::vector<double>& Cm, const std::vector<double>& h0) {
  Core r;
  r.y.assign(d.B * d.T * d.H * d.P, 0.0);
  r.fin.assign(d.B * d.H * d.P * d.N, 0.0);
  r.cs.assign(d.B * d.NC * d.H * d.P * d.N, 0.0);
  r.vs.assign(num_seqs(in) * d.H * d.P * d.N, 0.0);
  const int64_t PN = d.P * d.N, hpg = d.H / d.G;
  std::vector<int64_t> seq_ending_at(d.T, -1);  // t -> the non-empty sequence whose last token t is
  for (int64_t n = 0; n < num_seqs(in); ++n)
    if (in.cu_seqlens[n + 1] > in.cu_seqlens[n]) seq_ending_at[in.cu_seqlens[n + 1] - 1] = n;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t b = bh / d.H, h = bh % d.H, g = h / hpg;
    std::vector<double> S(PN, 0.0);
    if (!h0.empty()) std::copy_n(h0.begin() + bh * PN, PN, S.begin());
    std::copy(S.begin(), S.end(), r.cs.begin() + ((b * d.NC + 0) * d.H + h) * PN);
    int64_t prev = 0;
    for (int64_t t = 0; t < d.T; ++t) {
      if (!in.seq_idx.empty() && in.seq_idx[b * d.T + t] != prev) {
        std::fill(S.begin(), S.end(), 0.0);
        prev = in.seq_idx[b * d.T + t];
      }
      const double dl = delta[(b * d.T + t) * d.H + h];
      const double decay = std::exp(dl * in.A[h]);
      const double* xt = &x[((b * d.T + t) * d.H + h) * d.P];
      const double* Bt = &Bm[((b * d.T + t) * d.G + g) * d.N];
      const double* Ct = &Cm[((b * d.T + t) * d.G + g) * d.N];
      double* yt = &r.y[((b * d.T + t) * d.H + h) * d.P];
      for (int64_t p = 0; p < d.P; ++p) {
        const double u = dl * xt[p];
        double* Sp = &S[p * d.N];
        double acc = 0;
        for (int64_t n = 0; n < d.N; ++n) {
          Sp[n] = decay * Sp[n] + u * Bt[n];
          acc += Sp[n] * Ct[n];
        }
        yt[p] = acc;
      }
      if (seq_ending_at[t] >= 0)
        std::copy(S.begin(), S.end(), r.vs.begin() + (seq_ending_at[t] * d.H + h) * PN);
      if ((t + 1) % d.Q == 0 && (t + 1) / d.Q < d.NC)
        std::copy(S.begin(), S.end(), r.cs.begin() + ((b * d.NC + (t + 1) / d.Q) * d.H + h) * PN);
    }
    std::copy(S.begin(), S.end(), r.fin.begin() + bh * PN);
  }
  return r;
}

// ---------------------------------------------------------------- form 2: chunked dual form
// One set of SSM operands (x, B, C, h0) and the Core it produces. chunked() runs the values and
// their absolute values (the bounds) as two sets through ONE pass structure, so the decays
// (exp(seg), the state weights, the carries, the state-to-output scales) are computed once.
struct ChunkSet {
  const std::vector<double>* x;
  const std::vector<double>* Bm;
  const std::vector<double>* Cm;
  const std::vector<double>* h0;
  Core* r;
};

// The kernels' decomposition, in passes; every reduction has one fixed order, whatever the
// number of threads or the window size (each work item writes only its own slice). The chunks
// g = b NC + c are taken in windows of nw consecutive ones, so that the passes' products for the
// later passes stay small and in cache:
//   1. chunk (parallel over (chunk, h), _bmm_chunk_fwd + the diagonal block of _chunk_scan_fwd +
//      _chunk_state_fwd): CB (once per group, see below), Y_diag = (exp(seg) o CB o mask o
//      Delta_s) X, the chunk-local end state st_c = X^T diag(w) B (in scratch for the window), the
//      carry factor of chunk c and the state-to-output scale of every token;
//   2. + 3. per (b, h), sequential over the window's chunks of batch row b: state to output (the
//      off-diagonal part of _chunk_scan_fwd), Y[l] += sc_l (C_l . S_start_c), and state passing
//      (_state_passing_fwd), S_start_{c+1} = carry_c S_start_c + st_c (slot c+1, or fin for the
//      last chunk), elementwise;
//   4. per chunk, once its rows of y are final: the D skip and z gate (gate_row);
//   5. varlen_states (parallel over (sequence, h), chunk_state_varlen).
// Pass 1 on window w runs next to passes 2 + 3 on window w - 1, pass 4 on window w - 2 and to the
// zero fills of y and cs (std::vector's serial fill, in pieces, each just ahead of the passes that
// write it).
void chunked_core(const Inputs& in, const Dims& d, const std::vector<double>& delta,
                  const std::vector<ChunkSet>& sets, Mutant m, int64_t mutant_chunk) {
  const int64_t PN = d.P * d.N, hpg = d.H / d.G, NG = d.B * d.NC;
  const auto nsets = static_cast<int64_t>(sets.size());
  const bool use_seq = !in.seq_idx.empty() && m != Mutant::no_seq_reset;
  // Every pass runs inside a parallel region, however small: there OpenBLAS runs each GEMM on the
  // calling thread, whose result then cannot depend on the thread count (outside a region a large
  // GEMM is split over the OpenMP pool, and its tiles' summation order with it).
  const size_t ny = d.B * d.T * d.H * d.P, ncs = d.B * d.NC * d.H * PN;
  for (const ChunkSet& s : sets) {
    Core& r = *s.r;
    reserve_prefaulted(r.y, ny);
    reserve_prefaulted(r.cs, ncs);
    r.fin.assign(d.B * d.H * PN, 0.0);
    r.vs.assign(num_seqs(in) * d.H * PN, 0.0);
  }
  // Windows of nw chunks (only the speed depends on nw): a few pass-1 items per thread.
  const int64_t nth = omp_get_max_threads();
  const int64_t nw = std::clamp<int64_t>((4 * nth + d.H - 1) / d.H, 1, std::max<int64_t>(NG, 1));
  const int64_t nwin = (NG + nw - 1) / nw;
  // st_c of two windows' chunks (window w in slots [(w % 2) nw, (w % 2 + 1) nw)), [2 nw, sets, H,
  // P, N], kept between calls (pass 1 writes every st_c before passes 2 + 3 read it).
  thread_local ReusedScratch st_ws;
  double* const st = st_ws.get(2 * nw * nsets * d.H * PN);
  auto st_at = [&](int64_t slot, int64_t si, int64_t h) { return st + ((slot * nsets + si) * d.H + h) * PN; };
  auto group = [&](int64_t h) { return m == Mutant::group_mod ? h % d.G : h / hpg; };
  auto seq = [&](int64_t b, int64_t t) { return use_seq ? in.seq_idx[b * d.T + t] : int64_t{0}; };
  // The kernels' running id before chunk c: the id of the last token of chunk c-1 (0 for c = 0).
  auto seq_before = [&](int64_t b, int64_t c) { return c == 0 ? int64_t{0} : seq(b, c * d.Q - 1); };
  // Chunk-start state slot c of (b, h), and where S_start_{c+1} goes (raw pointers: the vectors
  // are reserved, and the fills below never reallocate).
  std::vector<double*> y_of(nsets), cs_of(nsets);
  for (int64_t si = 0; si < nsets; ++si) y_of[si] = sets[si].r->y.data(), cs_of[si] = sets[si].r->cs.data();
  auto cs_at = [&](int64_t si, int64_t b, int64_t c, int64_t h) {
    return cs_of[si] + ((b * d.NC + c) * d.H + h) * PN;
  };
  auto next_at = [&](int64_t si, int64_t b, int64_t c, int64_t h) {
    return c + 1 < d.NC ? cs_at(si, b, c + 1, h) : &sets[si].r->fin[(b * d.H + h) * PN];
  };
  std::vector<double> carry(d.B * d.H * d.NC);  // [B, H, NC]: S_start_{c+1} = carry S_start_c + st_c
  std::vector<double> off_scale(d.B * d.T * d.H);  // [B, T, H]: the Y_off factor of each token
  // The fills' ends: y through window w's last token, cs through the slot after its last chunk.
  auto y_end = [&](int64_t w) -> size_t {
    const int64_t g = std::min(NG, (w + 1) * nw) - 1;
    return (g / d.NC * d.T + std::min(d.T, (g % d.NC + 1) * d.Q)) * d.H * d.P;
  };
  auto cs_end = [&](int64_t w) -> size_t { return std::min(NG, (w + 1) * nw + 1) * d.H * PN; };

  // CB = C B^T of a chunk depends on the group only: with several heads per group it is computed
  // once per (set, b, chunk, group), before pass 1, into CBs [sets, B, NC, G, Q, Q].
  const bool share_cb = hpg > 1 && m != Mutant::no_intra_chunk;
  thread_local ReusedScratch cb_ws;
  double* const CBs = share_cb ? cb_ws.get(nsets * d.B * d.NC * d.G * d.Q * d.Q) : nullptr;
  auto cb_at = [&](int64_t si, int64_t b, int64_t c, int64_t g) {
    return CBs + (((si * d.B + b) * d.NC + c) * d.G + g) * d.Q * d.Q;
  };

  // 1. Chunk g, head h: Y_diag, st_c (into slot), carry_c, off_scale.
  auto pass1 = [&](int64_t gc, int64_t h, int64_t slot) {
    const int64_t b = gc / d.NC, c = gc % d.NC, bh = b * d.H + h, g = group(h);
    const int64_t t0 = c * d.Q, Qc = std::min(d.Q, d.T - t0);
    const double A = in.A[h];
    std::vector<double> a(Qc), dl(Qc), acum(Qc);
    for (int64_t l = 0; l < Qc; ++l) {
      dl[l] = delta[(b * d.T + t0 + l) * d.H + h];
      a[l] = dl[l] * A;
    }
    // seg(l, s) = sum_{k=s+1..l} a_k and acum_l (ssd_chunk_math.h).
    RowMat seg;
    detail::segment_sums(a, seg, acum);
    // The decay mask exp(seg) o mask_{s<=l, same seq}, shared by both sets.
    RowMat E = RowMat::Zero(Qc, Qc);
    if (m != Mutant::no_intra_chunk)
      for (int64_t l = 0; l < Qc; ++l)
        for (int64_t s = 0; s < (m == Mutant::strict_intra_mask ? l : l + 1); ++s)
          if (seq(b, t0 + l) == seq(b, t0 + s)) E(l, s) = std::exp(seg(l, s));
    // Weights of the chunk-local end state of the chunk's last sequence.
    const int64_t seq_end = seq(b, t0 + Qc - 1), seq_end_prev = seq_before(b, c);
    Eigen::VectorXd w(Qc);
    for (int64_t s = 0; s < Qc; ++s)
      w[s] = seq(b, t0 + s) == seq_end ? std::exp(seg(Qc - 1, s)) * dl[s] : 0.0;
    for (int64_t si = 0; si < nsets; ++si) {
      const ChunkSet& cs = sets[si];
      const CMap X(&(*cs.x)[((b * d.T + t0) * d.H + h) * d.P], Qc, d.P, Eigen::OuterStride<>(d.H * d.P));
      const CMap Bc(&(*cs.Bm)[((b * d.T + t0) * d.G + g) * d.N], Qc, d.N, Eigen::OuterStride<>(d.G * d.N));
      detail::MMap Y(&y_of[si][((b * d.T + t0) * d.H + h) * d.P], Qc, d.P, Eigen::OuterStride<>(d.H * d.P));
      // Intra-chunk (diagonal block), causal with the diagonal.
      if (m != Mutant::no_intra_chunk) {
        RowMat CBown;
        if (!share_cb) {
          const CMap Cc(&(*cs.Cm)[((b * d.T + t0) * d.G + g) * d.N], Qc, d.N, Eigen::OuterStride<>(d.G * d.N));
          CBown = Cc * Bc.transpose();
        }
        const Eigen::Map<const RowMat> CB(share_cb ? cb_at(si, b, c, g) : CBown.data(), Qc, Qc);
        RowMat L = RowMat::Zero(Qc, Qc);
        for (int64_t l = 0; l < Qc; ++l)
          for (int64_t s = 0; s <= l; ++s)
            if (E(l, s) != 0.0) L(l, s) = E(l, s) * CB(l, s) * dl[s];
        Y.noalias() = L * X;
      }  // else Y stays 0 (no_intra_chunk)
      // Chunk-local end state st_c = X^T diag(w) B, (P, N).
      const RowMat Xw = w.asDiagonal() * X;
      Eigen::Map<RowMat>(st_at(slot, si, h), d.P, d.N).noalias() = Xw.transpose() * Bc;
    }
    // State passing factor of this chunk.
    double cf = seq_end == seq_end_prev ? std::exp(acum[Qc - 1]) : 0.0;
    if (m == Mutant::state_passing_no_decay && (mutant_chunk < 0 || c + 1 == mutant_chunk))
      cf = seq_end == seq_end_prev ? 1.0 : 0.0;
    if (m == Mutant::no_state_passing) cf = 0.0;
    carry[bh * d.NC + c] = cf;
    // State-to-output scale, own step's decay included (Acum inclusive).
    for (int64_t l = 0; l < Qc; ++l)
      off_scale[(b * d.T + t0 + l) * d.H + h] =
          seq(b, t0 + l) == seq_end_prev
              ? std::exp(m == Mutant::off_exclusive_decay ? acum[l] - a[l] : acum[l])
              : 0.0;
  };

  // 2. + 3. Batch row b, head h, chunks [cb, ce) of row b (chunk cb in slot slot0), in order.
  auto pass23 = [&](int64_t b, int64_t h, int64_t cb, int64_t ce, int64_t slot0) {
    const int64_t bh = b * d.H + h, g = group(h);
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t t0 = c * d.Q, Qc = std::min(d.Q, d.T - t0), slot = slot0 + c - cb;
      for (int64_t si = 0; si < nsets; ++si) {
        const ChunkSet& cs = sets[si];
        if (c == 0 && !cs.h0->empty()) std::copy_n(&(*cs.h0)[bh * PN], PN, cs_at(si, b, 0, h));
        const double* S = cs_at(si, b, c, h);
        // State to output.
        const CMap Cc(&(*cs.Cm)[((b * d.T + t0) * d.G + g) * d.N], Qc, d.N, Eigen::OuterStride<>(d.G * d.N));
        detail::MMap Y(&y_of[si][((b * d.T + t0) * d.H + h) * d.P], Qc, d.P, Eigen::OuterStride<>(d.H * d.P));
        const RowMat off = Cc * CMap(S, d.P, d.N, Eigen::OuterStride<>(d.N)).transpose();  // (Qc, P)
        for (int64_t l = 0; l < Qc; ++l) Y.row(l) += off_scale[(b * d.T + t0 + l) * d.H + h] * off.row(l);
        // State passing, elementwise (each element of the state is its own scan).
        const double* stc = st_at(slot, si, h);
        double* next = next_at(si, b, c, h);
        const double cf = carry[bh * d.NC + c];
        for (int64_t x = 0; x < PN; ++x) next[x] = cf * S[x] + stc[x];
      }
    }
  };

  // 4. Chunk g after pass 3 (its rows of y are final, all heads): D skip and z gate, in H pieces of
  // consecutive tokens, each one contiguous block of [tokens, H, P] (a head's rows alone are H P
  // apart, too far for the hardware prefetchers).
  const int64_t gate_len = (d.Q + d.H - 1) / d.H;
  auto gate = [&](int64_t gc, int64_t piece) {
    const int64_t b = gc / d.NC, t0 = gc % d.NC * d.Q, Qc = std::min(d.Q, d.T - t0);
    const int64_t l0 = std::min(Qc, piece * gate_len), l1 = std::min(Qc, l0 + gate_len);
    for (int64_t row = (b * d.T + t0 + l0) * d.H; row < (b * d.T + t0 + l1) * d.H; ++row)
      gate_row(in, d, row, &y_of[0][row * d.P], nsets > 1 ? &y_of[1][row * d.P] : nullptr,
               m == Mutant::d_after_gate);
  };

  for (const ChunkSet& s : sets) s.r->y.resize(nwin ? y_end(0) : 0);  // (pass 1 on window 0 writes it)
#pragma omp parallel
  {
    if (share_cb) {
      const int64_t ncb = nsets * d.B * d.NC * d.G;
#pragma omp for schedule(dynamic)
      for (int64_t it = 0; it < ncb; ++it) {
        const int64_t g = it % d.G, c = it / d.G % d.NC, b = it / (d.G * d.NC) % d.B, si = it / (d.G * d.NC * d.B);
        const int64_t t0 = c * d.Q, Qc = std::min(d.Q, d.T - t0);
        const ChunkSet& cs = sets[si];
        const CMap Bc(&(*cs.Bm)[((b * d.T + t0) * d.G + g) * d.N], Qc, d.N, Eigen::OuterStride<>(d.G * d.N));
        const CMap Cc(&(*cs.Cm)[((b * d.T + t0) * d.G + g) * d.N], Qc, d.N, Eigen::OuterStride<>(d.G * d.N));
        Eigen::Map<RowMat>(cb_at(si, b, c, g), Qc, Qc).noalias() = Cc * Bc.transpose();
      }
    }
    // Step w (w = 0 .. nwin + 1): pass 4 on window w - 2, passes 2 + 3 on window w - 1, the fills
    // (y through window w + 1, cs through window w) and pass 1 on window w, as one list of work
    // items (passes 2 + 3 have only B H items a step; pass 4's many small ones fill the gaps).
    for (int64_t w = 0; w <= nwin + 1; ++w) {
      const int64_t g0 = w * nw, g1 = std::min(NG, g0 + nw), n1 = w < nwin ? (g1 - g0) * d.H : 0;
      const int64_t p0 = (w - 1) * nw, p1 = std::min(NG, p0 + nw);
      const int64_t b0 = w > 0 ? p0 / d.NC : 0;
      const int64_t n23 = w > 0 && w <= nwin ? ((p1 - 1) / d.NC + 1 - b0) * d.H : 0;
      const int64_t q0 = (w - 2) * nw, n4 = w >= 2 ? (std::min(NG, q0 + nw) - q0) * d.H : 0;
      const int64_t nfill = w < nwin ? 2 * nsets : 0;
#pragma omp for schedule(dynamic)
      for (int64_t job = 0; job < n23 + nfill + n1 + n4; ++job) {
        if (job < n23) {
          const int64_t b = b0 + job / d.H, cb = std::max(p0, b * d.NC) - b * d.NC;
          const int64_t ce = std::min(p1, (b + 1) * d.NC) - b * d.NC;
          pass23(b, job % d.H, cb, ce, (w - 1) % 2 * nw + b * d.NC + cb - p0);
        } else if (job < n23 + nfill) {
          const int64_t f = job - n23;
          Core& r = *sets[f / 2].r;
          if (f % 2 == 0)
            r.y.resize(y_end(std::min(w + 1, nwin - 1)));
          else
            r.cs.resize(cs_end(w));
        } else if (job < n23 + nfill + n1) {
          const int64_t j = job - n23 - nfill;
          pass1(g0 + j / d.H, j % d.H, w % 2 * nw + j / d.H);
        } else {
          const int64_t j = job - n23 - nfill - n1;
          gate(q0 + j / d.H, j % d.H);
        }
      }
    }
  }
  for (const ChunkSet& s : sets) s.r->y.resize(ny), s.r->cs.resize(ncs);  // (no-ops but for T = 0)

  // 5. Per-sequence final states (B == 1), the chunk_state_varlen way: a chunk-local sum over the
  // sequence's tokens in the chunk c holding its last token, plus the decayed start state of
  // chunk c when the sequence began before it (or it is sequence 0: initial_states).
  const int64_t nseq = num_seqs(in);
#pragma omp parallel for schedule(dynamic)
  for (int64_t it = 0; it < nseq * d.H; ++it) {
    const int64_t n = it / d.H, h = it % d.H, b = 0, g = group(h);
    const int64_t start = in.cu_seqlens[n], end = in.cu_seqlens[n + 1];
    if (end == start) continue;  // empty sequence: state 0
    const int64_t c = (end - 1) / d.Q, t0 = c * d.Q, s0 = std::max(start - t0, int64_t{0});
    const int64_t e = end - t0;
    for (int64_t si = 0; si < nsets; ++si) {
      const ChunkSet& cs = sets[si];
      Core& r = *cs.r;
      Eigen::Map<RowMat> V(&r.vs[(n * d.H + h) * PN], d.P, d.N);
      double acc = 0;  // sum_{k=s+1..e-1} a_k
      for (int64_t s = e - 1; s >= 0; --s) {
        const double dls = delta[(b * d.T + t0 + s) * d.H + h];
        if (s >= s0) {
          const CMap xs(&(*cs.x)[((b * d.T + t0 + s) * d.H + h) * d.P], d.P, 1, Eigen::OuterStride<>(1));
          const CMap Bs(&(*cs.Bm)[((b * d.T + t0 + s) * d.G + g) * d.N], 1, d.N, Eigen::OuterStride<>(d.N));
          V += (std::exp(acc) * dls) * (xs * Bs);
        }
        acc += dls * in.A[h];
      }
      if (start < t0 || n == 0)
        V += std::exp(acc) * CMap(cs_at(si, b, c, h), d.P, d.N, Eigen::OuterStride<>(d.N));
    }
  }
}

}  // namespace

std::string_view mutant_name(Mutant m) {
  switch (m) {
    case Mutant::none: return "none";
    case Mutant::no_intra_chunk: return "no_intra_chunk";
    case Mutant::strict_intra_mask: return "strict_intra_mask";
    case Mutant::no_state_passing: return "no_state_passing";
    case Mutant::state_passing_no_decay: return "state_passing_no_decay";
    case Mutant::off_exclusive_decay: return "off_exclusive_decay";
    case Mutant::group_mod: return "group_mod";
    case Mutant::no_seq_reset: return "no_seq_reset";
    case Mutant::d_after_gate: return "d_after_gate";
    case Mutant::no_dt_clamp: return "no_dt_clamp";
  }
  return "?";
}

void validate(const Params& p, const Inputs& in) {
  const int64_t B = in.batch, T = in.seqlen, H = in.nheads, P = in.headdim, G = in.ngroups,
                N = in.dstate;
  ASSAY_INPUT_CHECK(B >= 1 && T >= 1 && H >= 1 && P >= 1 && G >= 1 && N >= 1,
                    "ssd: dims must be >= 1 (B={} T={} H={} P={} G={} N={})", B, T, H, P, G, N);
  ASSAY_INPUT_CHECK(H % G == 0, "ssd: nheads {} not a multiple of ngroups {}", H, G);
  ASSAY_INPUT_CHECK(p.chunk_size >= 1, "ssd: chunk_size {} < 1", p.chunk_size);
  ASSAY_INPUT_CHECK(!(p.dt_min > p.dt_max), "ssd: dt_limit ({}, {}) empty", p.dt_min, p.dt_max);
  auto need = [](const std::vector<double>& v, int64_t n, const char* what, bool optional) {
    ASSAY_INPUT_CHECK(static_cast<int64_t>(v.size()) == n || (optional && v.empty()),
                      "ssd: {} has {} values, expected {}{}", what, v.size(), n,
                      optional ? " or none" : "");
    bool finite = true;
    const auto nv = static_cast<int64_t>(v.size());
#pragma omp parallel for simd schedule(static) reduction(&& : finite) if (nv >= kParallelMin)
    for (int64_t i = 0; i < nv; ++i) finite = finite & std::isfinite(v[i]);  // (no short cut: vectorises)
    ASSAY_INPUT_CHECK(finite, "ssd: {} holds a non-finite value", what);
  };
  need(in.x, B * T * H * P, "x", false);
  need(in.dt, B * T * H, "dt", false);
  need(in.A, H, "A", false);
  need(in.B, B * T * G * N, "B", false);
  need(in.C, B * T * G * N, "C", false);
  need(in.z, B * T * H * P, "z", true);
  need(in.dt_bias, H, "dt_bias", true);
  need(in.initial_states, B * H * P * N, "initial_states", true);
  ASSAY_INPUT_CHECK(in.D.empty() || static_cast<int64_t>(in.D.size()) == H ||
                        static_cast<int64_t>(in.D.size()) == H * P,
                    "ssd: D has {} values, expected H={} or H*P={} or none", in.D.size(), H, H * P);
  for (double e : in.D) ASSAY_INPUT_CHECK(std::isfinite(e), "ssd: D holds a non-finite value");
  for (int64_t h = 0; h < H; ++h)
    ASSAY_INPUT_CHECK(in.A[h] < 0, "ssd: A[{}] = {} must be < 0 (kernels clamp exponents to <= 0)",
                      h, in.A[h]);
  if (!in.seq_idx.empty()) {
    ASSAY_INPUT_CHECK(static_cast<int64_t>(in.seq_idx.size()) == B * T,
                      "ssd: seq_idx has {} values, expected B*T={}", in.seq_idx.size(), B * T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s = in.seq_idx[b * T + t];
        ASSAY_INPUT_CHECK(s >= 0, "ssd: seq_idx[{}, {}] = {} < 0", b, t, s);
        ASSAY_INPUT_CHECK(t == 0 || s >= in.seq_idx[b * T + t - 1],
                          "ssd: seq_idx[{}, :] decreases at t={} (sequences must be contiguous)",
                          b, t);
      }
  }
  if (!in.cu_seqlens.empty()) {
    const auto& cu = in.cu_seqlens;
    const int64_t S = static_cast<int64_t>(cu.size()) - 1;
    ASSAY_INPUT_CHECK(B == 1, "ssd: cu_seqlens needs batch 1 (got {})", B);
    ASSAY_INPUT_CHECK(S >= 1 && cu[0] == 0 && cu[S] == T,
                      "ssd: cu_seqlens must run from 0 to T={} with >= 2 entries", T);
    ASSAY_INPUT_CHECK(!in.seq_idx.empty(), "ssd: cu_seqlens given without seq_idx");
    for (int64_t n = 0; n < S; ++n) {
      ASSAY_INPUT_CHECK(cu[n + 1] >= cu[n], "ssd: cu_seqlens decreases at {}", n + 1);
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t)
        ASSAY_INPUT_CHECK(in.seq_idx[t] == n, "ssd: seq_idx[0, {}] = {} but cu_seqlens puts it in "
                          "sequence {}", t, in.seq_idx[t], n);
    }
  }
}

std::vector<double> process_dt(const Params& p, const Inputs& in, bool clamp) {
  std::vector<double> out(in.dt.size());
  const auto n = static_cast<int64_t>(in.dt.size());
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 16)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t h = i % in.nheads;
    double v = in.dt[i];
    if (!in.dt_bias.empty()) v += in.dt_bias[h];
    if (p.dt_softplus && v <= 20.0) v = std::log1p(std::exp(v));
    if (clamp) v = std::min(std::max(v, p.dt_min), p.dt_max);
    out[i] = v;
  }
  return out;
}

std::vector<double> dA_cumsum(const Params& p, const Inputs& in, const std::vector<double>& delta) {
  const Dims d(p, in);
  std::vector<double> r(d.B * d.H * d.NC * d.Q);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t c = 0; c < d.NC; ++c) {
        double acc = 0;
        for (int64_t l = 0; l < d.Q; ++l) {
          const int64_t t = c * d.Q + l;
          if (t < d.T) acc += delta[(b * d.T + t) * d.H + h] * in.A[h];
          r[((b * d.H + h) * d.NC + c) * d.Q + l] = acc;
        }
      }
  return r;
}

Result recurrence(const Params& p, const Inputs& in) {
  validate(p, in);
  const Dims d(p, in);
  Result r;
  r.nchunks = d.NC;
  r.dt_processed = process_dt(p, in);
  Core c = recurrence_core(in, d, r.dt_processed, in.x, in.B, in.C, in.initial_states);
  Core ca = p.compute_bounds
                      ? recurrence_core(in, d, r.dt_processed, abs_of(in.x), abs_of(in.B),
                                        abs_of(in.C), abs_of(in.initial_states))
                      : Core{};
  finish(in, d, c, ca, true, r);
  return r;
}

Result chunked(const Params& p, const Inputs& in, Mutant m) {
  validate(p, in);
  const Dims d(p, in);
  Result r;
  r.nchunks = d.NC;
  r.dt_processed = process_dt(p, in, m != Mutant::no_dt_clamp);
  Core c, ca;
  std::vector<ChunkSet> sets{{&in.x, &in.B, &in.C, &in.initial_states, &c}};
  std::vector<double> ax, aB, aC, ah0;  // the bounds' set: absolute values
  if (p.compute_bounds) {
    ax = abs_of(in.x), aB = abs_of(in.B), aC = abs_of(in.C), ah0 = abs_of(in.initial_states);
    sets.push_back({&ax, &aB, &aC, &ah0, &ca});
  }
  chunked_core(in, d, r.dt_processed, sets, m, p.mutant_chunk);  // (D skip and z gate included)
  finish(in, d, c, ca, false, r);
  return r;
}

}  // namespace assay::ssd
