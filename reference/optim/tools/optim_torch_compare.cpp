// Reads the directory written by torch_optim_check.py and recomputes every configuration with the
// fp32 emulation of reference/optim; prints the bit-mismatch count per tensor and the largest
// ulp distance. Exit 0 if every configuration the spec marks exact matched, else 1.
//
// Not part of the CMake build (the op's CMakeLists holds exactly one assay_add_oracle call).
// Build by hand from the repo root, e.g.:
//   g++ -std=c++20 -O2 -ffp-contract=off -fno-fast-math -I. -DFMT_HEADER_ONLY
//       reference/optim/optim_common.cpp reference/optim/bf16_copy.cpp reference/optim/adam.cpp
//       reference/optim/sgd.cpp
//       reference/optim/tools/optim_torch_compare.cpp -o optim_torch_compare
// (add -I<torch>/include if fmt is not installed: torch ships fmt's headers).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "reference/optim/optim.h"

using namespace assay::optim;

static std::vector<float> load(const std::string& path, size_t n, bool must = true) {
  std::vector<float> x(n);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    if (must) {
      std::fprintf(stderr, "missing %s\n", path.c_str());
      std::exit(2);
    }
    return {};
  }
  const size_t r = std::fread(x.data(), 4, n, f);
  std::fclose(f);
  if (r != n) {
    std::fprintf(stderr, "short read %s\n", path.c_str());
    std::exit(2);
  }
  return x;
}

static int64_t ordered(float x) {
  int32_t i;
  std::memcpy(&i, &x, 4);
  return i < 0 ? -static_cast<int64_t>(i & 0x7FFFFFFF) : i;
}

struct Cmp {
  size_t mismatches = 0;
  int64_t max_ulp = 0;
  size_t first = SIZE_MAX;
};
static Cmp compare(const std::vector<float>& a, const std::vector<float>& b) {
  Cmp c;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (bits_of(a[i]) != bits_of(b[i])) {
      ++c.mismatches;
      if (c.first == SIZE_MAX) c.first = i;
      c.max_ulp = std::max<int64_t>(c.max_ulp, std::llabs(ordered(a[i]) - ordered(b[i])));
    }
  }
  return c;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::ifstream mf(dir + "/manifest.txt");
  std::string line;
  size_t n = 0;
  bool all_exact = true;
  std::vector<float> g, p, m, v, vmax, buf;
  while (std::getline(mf, line)) {
    std::istringstream is(line);
    std::string kind;
    is >> kind;
    if (kind == "n") {
      is >> n;
      g = load(dir + "/in_g.bin", n), p = load(dir + "/in_p.bin", n);
      m = load(dir + "/in_m.bin", n), v = load(dir + "/in_v.bin", n);
      vmax = load(dir + "/in_vmax.bin", n), buf = load(dir + "/in_buf.bin", n);
      continue;
    }
    if (kind == "torch") {
      std::printf("%s\n", line.c_str());
      continue;
    }
    if (kind == "adam") {
      std::string tag, path;
      int decoupled, ams, maxi;
      int64_t step0;
      AdamHyper h;
      int bf16 = 0;
      is >> tag >> path >> decoupled >> ams >> maxi >> step0 >> h.lr >> h.beta1 >> h.beta2 >> h.eps >>
          h.weight_decay >> bf16;
      h.decoupled = decoupled, h.amsgrad = ams, h.maximize = maxi, h.bf16_storage = bf16;
      const AdamImpl impl = path == "single"    ? AdamImpl::torch_single
                            : path == "foreach" ? AdamImpl::torch_foreach
                                                : AdamImpl::torch_fused;
      AdamState32 s{p, m, v, vmax, step0};
      std::vector<float> gg = g;
      if (bf16) {  // torch's .to(bfloat16) is RNE
        for (auto* x : {&gg, &s.p, &s.m, &s.v, &s.vmax})
          for (float& e : *x) e = bf16_to_f32(bf16_rne(e));
      }
      adam_step_f32(impl, h, gg, s);
      const Cmp cp = compare(s.p, load(dir + "/" + tag + "_p.bin", n));
      const Cmp cm = compare(s.m, load(dir + "/" + tag + "_m.bin", n));
      const Cmp cv = compare(s.v, load(dir + "/" + tag + "_v.bin", n));
      // Spec B1.3: fused Adam with L2 decay is not reproduced (tolerance only).
      const bool exact_expected = !(impl == AdamImpl::torch_fused && !h.decoupled);
      std::printf("%-26s p %8zu (max %lld ulp)  m %8zu  v %8zu  of %zu%s\n", tag.c_str(),
                  cp.mismatches, static_cast<long long>(cp.max_ulp), cm.mismatches, cv.mismatches,
                  n, exact_expected ? "" : "   [tolerance-only per spec]");
      if (exact_expected && (cp.mismatches || cm.mismatches || cv.mismatches)) all_exact = false;
      if (!exact_expected && !h.amsgrad) {
        // Explore the unresolved fused Adam-L2 grad formula: m = fma(b1, m, fma(-b1, g', g')).
        const std::vector<float> tm = load(dir + "/" + tag + "_m.bin", n);
        const float b1 = f32(h.beta1), wdf = f32(h.weight_decay);
        const char* names[] = {"fma(p,wdf,g)", "g+fl(p*wdf)", "f32(g+p*wd) dbl", "f32(fma dbl)", "fl(g+p*wdf)dblprod"};
        for (int hyp = 0; hyp < 5; ++hyp) {
          size_t mism = 0;
          for (size_t i = 0; i < n; ++i) {
            float gi = h.maximize ? -g[i] : g[i];
            const float pi = p[i];
            float gp;
            switch (hyp) {
              case 0: gp = std::fma(pi, wdf, gi); break;
              case 1: gp = gi + pi * wdf; break;
              case 2: gp = f32(static_cast<double>(gi) + static_cast<double>(pi) * h.weight_decay); break;
              case 3: gp = f32(std::fma(static_cast<double>(pi), h.weight_decay, static_cast<double>(gi))); break;
              default: gp = f32(static_cast<double>(gi) + static_cast<double>(pi) * static_cast<double>(wdf)); break;
            }
            const float mm = std::fma(b1, m[i], std::fma(-b1, gp, gp));
            mism += bits_of(mm) != bits_of(tm[i]);
          }
          std::printf("    explore fused-L2 m with g' = %-20s: %zu mismatches\n", names[hyp], mism);
        }
        // Lane pattern: which of H0 (fma) / H1 (no contraction) matches, by i mod 8.
        size_t neither = 0, lane0[8] = {0}, lane1[8] = {0};
        for (size_t i = 0; i < n; ++i) {
          const float gi = h.maximize ? -g[i] : g[i];
          const float g0 = std::fma(p[i], wdf, gi), g1 = gi + p[i] * wdf;
          const float m0 = std::fma(b1, m[i], std::fma(-b1, g0, g0));
          const float m1 = std::fma(b1, m[i], std::fma(-b1, g1, g1));
          const bool a0 = bits_of(m0) == bits_of(tm[i]), a1 = bits_of(m1) == bits_of(tm[i]);
          if (!a0 && !a1) ++neither;
          if (!a0) ++lane0[i % 8];
          if (!a1) ++lane1[i % 8];
        }
        std::printf("    neither: %zu; H0 misses by i%%8:", neither);
        for (int k = 0; k < 8; ++k) std::printf(" %zu", lane0[k]);
        std::printf("; H1 misses by i%%8:");
        for (int k = 0; k < 8; ++k) std::printf(" %zu", lane1[k]);
        std::printf("\n");
      }
      continue;
    }
    if (kind == "sgd") {
      std::string tag, path;
      SgdHyper h;
      int nest, preset;
      is >> tag >> path >> h.momentum >> h.dampening >> nest >> h.weight_decay >> preset >> h.lr;
      h.nesterov = nest;
      SgdState32 s{p, preset ? buf : std::vector<float>{}, preset ? 5 : 0};
      sgd_step_f32(h, g, s);
      const Cmp cp = compare(s.p, load(dir + "/" + tag + "_p.bin", n));
      size_t bm = 0;
      if (h.momentum != 0) bm = compare(s.buf, load(dir + "/" + tag + "_buf.bin", n)).mismatches;
      const bool exact_expected = path != "fused";  // fused SGD: order not in the spec
      std::printf("%-26s p %8zu (max %lld ulp)  buf %8zu  of %zu%s\n", tag.c_str(), cp.mismatches,
                  static_cast<long long>(cp.max_ulp), bm, n,
                  exact_expected ? "" : "   [not specified: informational]");
      if (exact_expected && (cp.mismatches || bm)) all_exact = false;
      continue;
    }
  }
  std::printf("%s\n", all_exact ? "ALL EXACT" : "MISMATCHES");
  return all_exact ? 0 : 1;
}
