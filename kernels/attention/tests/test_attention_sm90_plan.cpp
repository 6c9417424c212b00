// The host-computable parts of the Hopper attention kernel (kernels/attention/attention_sm90.h,
// kernels/common/sm90_desc.h), checked on the CPU against values derived from the PTX ISA: the
// wgmma matrix descriptor bit fields, the agreement of every shared-memory element the kernel's
// wgmma descriptors read with where its TMA boxes put it (128-byte swizzle, K-major Q / K and
// MN-major V), the shared-memory plan, the key-tile walk (against a brute-force visibility scan),
// the mbarrier ring protocol (a phase-accurate model, with the stage_stuck and parity_flip
// defects), the TMA tensor-map parameters and the case limits. None of this runs the kernel.
#include <cstdint>
#include <algorithm>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "kernels/attention/attention_params.h"
#include "kernels/attention/attention_sm90.h"
#include "kernels/common/sm90_desc.h"

using namespace assay::kernels::attention;
using namespace assay::kernels::sm90;

TEST_CASE("sm90 wgmma descriptor bit fields follow the PTX matrix-descriptor format", "[cpu][L0]") {
  // start 0x400 >> 4 = 0x40 (bits 0-13), LBO 16 >> 4 = 1 (bits 16-29), SBO 1024 >> 4 = 64
  // (bits 32-45), swizzle 128B = 1 (bits 62-63), base offset 0.
  const uint64_t d = gmma_desc(0x400, 16, 1024, kSwizzle128B);
  CHECK(d == (0x40ull | (1ull << 16) | (64ull << 32) | (1ull << 62)));
  CHECK(gmma_desc_start(d) == 0x400);
  CHECK(gmma_desc_lbo(d) == 16);
  CHECK(gmma_desc_sbo(d) == 1024);
  CHECK(gmma_desc_swizzle(d) == 1);
  // The shared window is 18 bits wide; the 4 low bits are dropped, so the fields are exact for
  // 16-byte multiples below 256 KiB.
  const uint64_t e = gmma_desc(0x3FFF0, 16384, 1024, kSwizzle128B);
  CHECK(gmma_desc_start(e) == 0x3FFF0);
  CHECK(gmma_desc_lbo(e) == 16384);
  CHECK(((e >> 46) & 0x7) == 0);  // bits 46-48 and the base offset stay 0
}

TEST_CASE("sm90 128-byte swizzle permutes the 16-byte chunks of each 128-byte row by row index mod 8", "[cpu][L0]") {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      const uint32_t a = tma_sw128_addr(2048, r, c * 8);
      CHECK(a == 2048u + static_cast<uint32_t>(r) * 128u + static_cast<uint32_t>(c ^ (r % 8)) * 16u);
    }
}

TEST_CASE("sm90 shared-memory plan: sizes, 1024-byte alignment, under the 227 KiB limit", "[cpu][L0]") {
  for (int dp : {64, 128, 256}) {
    const Sm90Shape s = sm90_shape(dp);
    INFO("DP = " << dp);
    CHECK(s.BM == 128);
    CHECK(s.BN == (dp == 256 ? 64 : 128));
    CHECK(s.stages == 2);
    CHECK(s.chunks == dp / 64);
    CHECK(s.q_bytes == s.BM * dp * 2);
    CHECK(s.kv_stage_bytes == s.BN * dp * 2);
    CHECK(s.off_k % 1024 == 0);
    CHECK(s.off_v % 1024 == 0);
    CHECK(s.off_bar % 8 == 0);
    CHECK(s.off_v == s.off_k + 2 * s.kv_stage_bytes);
    CHECK(s.off_bar == s.off_v + 2 * s.kv_stage_bytes);
    CHECK(s.smem_bytes <= kSm90MaxSmem);
    // Every TMA box destination is 1024-byte aligned (SW128 atoms).
    for (int c = 0; c < s.chunks; ++c) {
      CHECK(sm90_q_box_off(s, c) % 1024 == 0);
      for (int st = 0; st < 2; ++st) {
        CHECK(sm90_k_box_off(s, st, c) % 1024 == 0);
        CHECK(sm90_v_box_off(s, st, c) % 1024 == 0);
      }
    }
  }
  CHECK(sm90_shape(128).smem_bytes == 32768 + 4 * 32768 + 9 * 8 + 1024);
  // Registers: producer 128 x 40 + consumers 256 x 232 within the 64 Ki register file.
  CHECK(128 * kSm90ProducerRegs + 256 * kSm90ConsumerRegs <= 65536);
  CHECK(kSm90ProducerRegs % 8 == 0);
  CHECK(kSm90ConsumerRegs % 8 == 0);
}

// Element (row, col) of a tile written by the producer's TMA boxes (64 columns each).
static uint32_t tma_elem(uint32_t base, int row, int col, int box_rows, uint32_t box_stride) {
  (void)box_rows;
  return tma_sw128_addr(base + static_cast<uint32_t>(col / 64) * box_stride, row, col % 64);
}

TEST_CASE("sm90 Q and K descriptors read exactly the elements the TMA boxes wrote (K-major SW128)", "[cpu][L0]") {
  const uint32_t base = 0;  // the aligned base; the swizzle depends on offsets inside 1024-byte atoms
  for (int dp : {64, 128, 256}) {
    const Sm90Shape s = sm90_shape(dp);
    INFO("DP = " << dp);
    int bad = 0;
    for (int kk = 0; kk < dp / 16; ++kk) {
      // A = Q: m64 x k16 of consumer warp group cg, element (m, k) = Q row 64 cg + m, column 16 kk + k.
      for (int cg = 0; cg < 2; ++cg) {
        const uint64_t da = gmma_desc(base + sm90_q_desc_off(s, cg, kk), kSm90KmajorLBO, kSm90SBO, kSwizzle128B);
        for (int m = 0; m < 64; ++m)
          for (int k = 0; k < 16; ++k) {
            const uint32_t rd = gmma_kmajor_sw128_addr(gmma_desc_start(da), gmma_desc_sbo(da), m, k);
            const uint32_t wr = tma_elem(base + sm90_q_box_off(s, 0), 64 * cg + m, 16 * kk + k, s.BM,
                                         static_cast<uint32_t>(s.BM * 128));
            bad += rd != wr;
          }
      }
      // B = K: n = key row 0 .. BN - 1, k = column 16 kk + k, slot st.
      for (int st = 0; st < 2; ++st) {
        const uint64_t db = gmma_desc(base + sm90_k_desc_off(s, st, kk), kSm90KmajorLBO, kSm90SBO, kSwizzle128B);
        for (int n = 0; n < s.BN; ++n)
          for (int k = 0; k < 16; ++k) {
            const uint32_t rd = gmma_kmajor_sw128_addr(gmma_desc_start(db), gmma_desc_sbo(db), n, k);
            const uint32_t wr = tma_elem(base + sm90_k_box_off(s, st, 0), n, 16 * kk + k, s.BN,
                                         static_cast<uint32_t>(s.BN * 128));
            bad += rd != wr;
          }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("sm90 V descriptor (MN-major SW128) reads exactly the elements the TMA boxes wrote", "[cpu][L0]") {
  for (int dp : {64, 128, 256}) {
    const Sm90Shape s = sm90_shape(dp);
    INFO("DP = " << dp);
    int bad = 0;
    std::set<uint32_t> seen;
    for (int st = 0; st < 2; ++st)
      for (int kk = 0; kk < s.BN / 16; ++kk) {
        const uint64_t db = gmma_desc(sm90_v_desc_off(s, st, kk), sm90_v_lbo(s), kSm90SBO, kSwizzle128B);
        CHECK(gmma_desc_lbo(db) == sm90_v_lbo(s));  // fits the 14-bit field
        // B of O += P V: element (n, k) = V key row 16 kk + k, column n (n < DP).
        for (int n = 0; n < dp; ++n)
          for (int k = 0; k < 16; ++k) {
            const uint32_t rd = gmma_mnmajor_sw128_addr(gmma_desc_start(db), gmma_desc_lbo(db), gmma_desc_sbo(db), n, k);
            const uint32_t wr = tma_elem(sm90_v_box_off(s, st, 0), 16 * kk + k, n, s.BN, static_cast<uint32_t>(s.BN * 128));
            bad += rd != wr;
            seen.insert(rd);
          }
      }
    CHECK(bad == 0);
    // Together the k-blocks of both slots read every element of both V slots exactly once.
    CHECK(seen.size() == static_cast<size_t>(2 * s.BN * dp));
  }
}

namespace {
AttnParams mask_params(bool causal, int left, int right) {
  AttnParams p;
  p.causal = causal;
  p.window_left = left;
  p.window_right = right;
  return p;
}
bool visible(const AttnParams& p, int i, int j, int sq, int sk) {
  const KeyRange r = visible_keys(p, i, sq, sk);
  return j >= r.lo && j <= r.hi && j >= 0 && j < sk;
}
}  // namespace

TEST_CASE("sm90 key-tile walk covers every visible key, masks every tile that needs it", "[cpu][L0]") {
  struct M {
    bool causal;
    int left, right;
  };
  const M masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 32, 8}, {true, 8, -1}, {false, -1, 0}, {false, 0, 200}};
  const int sqs[] = {1, 5, 63, 128, 129, 130, 239, 300};
  const int sks[] = {0, 1, 40, 127, 128, 129, 239, 300, 384, 512, 1000};
  int64_t checked = 0;
  for (const M& m : masks)
    for (int BN : {64, 128})
      for (int sq : sqs)
        for (int sk : sks) {
          const AttnParams p = mask_params(m.causal, m.left, m.right);
          for (int row0 = 0; row0 < sq; row0 += 128) {
            const int row_last = std::min(row0 + 128, sq) - 1;
            const Sm90KvPlan kp = sm90_kv_plan(p, BN, row0, row_last, sq, sk);
            INFO("causal " << m.causal << " window " << m.left << "," << m.right << " BN " << BN << " sq " << sq << " sk "
                           << sk << " row0 " << row0);
            bool any = false;
            int first = -1, last = -1;
            for (int i = row0; i <= row_last; ++i)
              for (int j = 0; j < sk; ++j)
                if (visible(p, i, j, sq, sk)) {
                  any = true;
                  if (first < 0 || j < first) first = j;
                  last = std::max(last, j);
                  // Covered by the walk.
                  REQUIRE(j >= kp.kbase);
                  REQUIRE(j < kp.kbase + kp.ntiles * BN);
                }
            REQUIRE((kp.ntiles > 0) == any);
            if (!any) continue;
            // Minimal: the first and the last tile hold a visible key; kbase tile-aligned.
            REQUIRE(kp.kbase % BN == 0);
            REQUIRE(first - kp.kbase < BN);
            REQUIRE(kp.kbase + (kp.ntiles - 1) * BN <= last);
            // A tile without a mask: every key of it is visible to every row of the CTA.
            for (int t = 0; t < kp.ntiles; ++t) {
              if (sm90_tile_needs_mask(kp, BN, t)) continue;
              for (int i = row0; i <= row_last; ++i)
                for (int j = kp.kbase + t * BN; j < kp.kbase + (t + 1) * BN; ++j) REQUIRE(visible(p, i, j, sq, sk));
            }
            ++checked;
          }
        }
  CHECK(checked > 500);
}

TEST_CASE("sm90 causal walk of the benchmark shape: tile counts and unmasked interior", "[cpu][L0]") {
  const AttnParams p = mask_params(true, -1, -1);
  // S = 4096, 128-row query tiles, 128-key tiles: query tile m walks m + 1 tiles, only the last masked.
  for (int m = 0; m < 32; ++m) {
    const Sm90KvPlan kp = sm90_kv_plan(p, 128, 128 * m, 128 * m + 127, 4096, 4096);
    CHECK(kp.kbase == 0);
    CHECK(kp.ntiles == m + 1);
    for (int t = 0; t < kp.ntiles; ++t) CHECK(sm90_tile_needs_mask(kp, 128, t) == (t == m));
  }
  // Sq = 128 < Sk = 384 (q128_t128_d128_causal_sk384): 3 tiles, the diagonal one (2) masked.
  const Sm90KvPlan kp = sm90_kv_plan(p, 128, 0, 127, 128, 384);
  CHECK(kp.ntiles == 3);
  CHECK(!sm90_tile_needs_mask(kp, 128, 0));
  CHECK(!sm90_tile_needs_mask(kp, 128, 1));
  CHECK(sm90_tile_needs_mask(kp, 128, 2));
  // Non-causal Sk = 300: 3 tiles, the partial last one masked.
  const Sm90KvPlan kn = sm90_kv_plan(mask_params(false, -1, -1), 128, 0, 127, 128, 300);
  CHECK(kn.ntiles == 3);
  CHECK(sm90_tile_needs_mask(kn, 128, 2));
  CHECK(!sm90_tile_needs_mask(kn, 128, 1));
}

// ---- the mbarrier ring, modelled phase by phase ----
// A barrier: expected arrivals per phase, pending arrivals and transaction bytes of the current
// phase, the current phase number. try_wait.parity(P) succeeds iff the current phase's parity
// differs from P (the phase of parity P, the latest one, has completed).
namespace {
struct Bar {
  int expected = 1, pending = 1, tx = 0, phase = 0;
  void arrive() {
    --pending;
    complete();
  }
  void expect_tx(int bytes) { tx += bytes; }
  void land(int bytes) {
    tx -= bytes;
    complete();
  }
  void complete() {
    if (pending == 0 && tx == 0) ++phase, pending = expected;
  }
  bool passed(uint32_t parity) const { return static_cast<uint32_t>(phase & 1) != parity; }
};

struct RingResult {
  bool deadlock = false;
  std::vector<int> consumed;  // the tile whose data the consumer read at each step
};

// One producer, one consumer (standing for the 8 consumer warps), S slots, n tiles; TMA copies land
// `delay` scheduler steps after issue. The scheduler alternates producer and consumer steps,
// pseudo-randomly skipping some (seed), so both sides run ahead of the other at times.
// prompt_producer: the producer steps whenever it can (the kernel's dedicated producer thread).
RingResult run_ring(int n, int S, Sm90Mutation mut, int delay, uint32_t seed, bool prompt_producer = false) {
  std::vector<Bar> full(S), empty(S);
  std::vector<int> slot(S, -1);
  struct Copy {
    int at, s, tile;
  };
  std::deque<Copy> inflight;
  int pt = 0, ct = 0, clock = 0, idle = 0;
  RingResult res;
  uint32_t x = seed * 2654435761u + 12345u;
  auto rnd = [&]() {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    return x;
  };
  while (ct < n) {
    ++clock;
    bool progressed = false;
    while (!inflight.empty() && inflight.front().at <= clock) {
      const Copy c = inflight.front();
      inflight.pop_front();
      slot[c.s] = c.tile;
      full[c.s].land(1);
      progressed = true;
    }
    if (pt < n && (prompt_producer || rnd() % 3 != 0)) {
      const int s = sm90_stage(pt, S);
      const bool prev_landed = pt < S || full[s].passed(sm90_full_parity(pt - S, S));
      if (prev_landed && empty[s].passed(sm90_empty_parity(pt, S))) {
        const bool load = !(mut == Sm90Mutation::stage_stuck && pt >= S);
        if (load) {
          full[s].expect_tx(1);
          full[s].arrive();
          inflight.push_back({clock + delay, s, pt});
        } else {
          full[s].arrive();
        }
        ++pt;
        progressed = true;
      }
    }
    if (rnd() % 3 != 0) {
      const int s = sm90_stage(ct, S);
      uint32_t par = sm90_full_parity(ct, S);
      if (mut == Sm90Mutation::parity_flip && ct / S == 1) par ^= 1u;
      if (full[s].passed(par)) {
        res.consumed.push_back(slot[s]);
        empty[s].arrive();
        ++ct;
        progressed = true;
      }
    }
    idle = progressed ? 0 : idle + 1;
    if (idle > 100 + delay) {
      res.deadlock = true;
      return res;
    }
  }
  return res;
}
}  // namespace

TEST_CASE("sm90 ring protocol: every tile read after its copy landed, never overwritten early, no deadlock", "[cpu][L0]") {
  // Parities of the first tiles of a 2-slot ring.
  const int st[] = {0, 1, 0, 1, 0, 1};
  const uint32_t fp[] = {0, 0, 1, 1, 0, 0}, ep[] = {1, 1, 0, 0, 1, 1};
  for (int t = 0; t < 6; ++t) {
    CHECK(sm90_stage(t, 2) == st[t]);
    CHECK(sm90_full_parity(t, 2) == fp[t]);
    CHECK(sm90_empty_parity(t, 2) == ep[t]);
  }
  for (int n = 1; n <= 9; ++n)
    for (int delay : {0, 1, 5, 20})
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        const RingResult r = run_ring(n, 2, Sm90Mutation::none, delay, seed);
        INFO("n " << n << " delay " << delay << " seed " << seed);
        REQUIRE(!r.deadlock);
        REQUIRE(static_cast<int>(r.consumed.size()) == n);
        for (int t = 0; t < n; ++t) REQUIRE(r.consumed[t] == t);
      }
}

TEST_CASE("sm90 ring model: the stage_stuck defect re-reads tiles 0 and 1, the parity flip reads stale slots or deadlocks", "[cpu][L0]") {
  // stage_stuck: deterministic, tiles t >= 2 come from slot t % 2 = tile t % 2.
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const RingResult r = run_ring(8, 2, Sm90Mutation::stage_stuck, 3, seed);
    REQUIRE(!r.deadlock);
    for (int t = 0; t < 8; ++t) REQUIRE(r.consumed[t] == t % 2);
  }
  // parity_flip: waiting for the wrong phase either passes at once (the consumer reads a slot
  // whose second-round copy has not landed: stale data) or, once that copy has landed, waits for
  // a phase that only the consumer's own release could start: a deadlock. Never a clean run. The
  // kernel's consumer spends a whole tile between releasing a slot and its next wait on it, so on
  // a GPU the copy has usually landed: the mutant mostly hangs (the gate's Hung verdict).
  int stale_runs = 0, deadlocks = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed)
    for (int delay : {0, 1, 5, 20})
      for (bool prompt : {false, true}) {
        const RingResult r = run_ring(8, 2, Sm90Mutation::parity_flip, delay, seed, prompt);
        bool stale = false;
        for (size_t t = 0; t < r.consumed.size(); ++t) stale = stale || r.consumed[t] != static_cast<int>(t);
        INFO("seed " << seed << " delay " << delay << " prompt " << prompt);
        REQUIRE((r.deadlock || stale));
        stale_runs += stale;
        deadlocks += r.deadlock;
      }
  CHECK(stale_runs > 0);
  CHECK(deadlocks > 0);
}

TEST_CASE("sm90 TMA tensor-map parameters and the encoder's documented constraints", "[cpu][L0]") {
  // Q of the benchmark shape: [B * S, Hq, D] = [8192, 16, 128] bf16, 128-row boxes of 64 columns.
  const Sm90TmaParams q = sm90_tma_params(128, 16, 8192, 128);
  CHECK(q.dims[0] == 128);
  CHECK(q.dims[1] == 16);
  CHECK(q.dims[2] == 8192);
  CHECK(q.strides[0] == 256);
  CHECK(q.strides[1] == 4096);
  CHECK(q.box[0] == 64);
  CHECK(q.box[1] == 1);
  CHECK(q.box[2] == 128);
  CHECK(q.elem_strides[0] == 1);
  CHECK(sm90_tma_params_problem(q) == nullptr);
  // GQA K of decode_sq16_gqa8_sk512: [512, 8, 128]; D = 80 (padded to 128) and Dv = 72: fine.
  CHECK(sm90_tma_params_problem(sm90_tma_params(128, 8, 512, 128)) == nullptr);
  CHECK(sm90_tma_params_problem(sm90_tma_params(80, 1, 193, 128)) == nullptr);
  CHECK(sm90_tma_params_problem(sm90_tma_params(72, 3, 65, 64)) == nullptr);
  // D = 59: a 118-byte row stride is not a multiple of 16.
  CHECK(sm90_tma_params_problem(sm90_tma_params(59, 1, 65, 128)) != nullptr);
  // Box rows above 256, empty tensors.
  CHECK(sm90_tma_params_problem(sm90_tma_params(128, 1, 1000, 257)) != nullptr);
  CHECK(sm90_tma_params_problem(sm90_tma_params(128, 1, 0, 128)) != nullptr);
}

TEST_CASE("sm90 case limits: paged, head dims, grid", "[cpu][L0]") {
  CaseDims d;
  d.B = 2, d.Hq = 16, d.Hkv = 16, d.D = 128, d.Dv = 128, d.Sq = 4096, d.Sk = 4096, d.total_q = 8192;
  CHECK(sm90_case_limits(d).empty());
  CaseDims g = d;
  g.paged = true;
  CHECK(sm90_case_limits(g).find("paged") != std::string::npos);
  g = d;
  g.D = 59, g.Dv = 72;
  CHECK(sm90_case_limits(g).find("multiples of 8") != std::string::npos);
  g = d;
  g.D = 264, g.Dv = 264;
  CHECK(sm90_case_limits(g).find("256") != std::string::npos);
  g = d;
  g.B = 5000;
  CHECK(sm90_case_limits(g).find("grid") != std::string::npos);
  // Padded dims.
  CHECK(sm90_padded_dim(32, 32) == 64);
  CHECK(sm90_padded_dim(64, 64) == 64);
  CHECK(sm90_padded_dim(80, 72) == 128);
  CHECK(sm90_padded_dim(96, 96) == 128);
  CHECK(sm90_padded_dim(128, 128) == 128);
  CHECK(sm90_padded_dim(136, 128) == 256);
  CHECK(sm90_padded_dim(256, 256) == 256);
  CHECK(sm90_padded_dim(264, 8) == 0);
}
