// Helpers shared by the optimizer oracles' sources (reference/optim/*.cpp), kept in one place so
// that every optimizer sums, bias-corrects and takes maxima the same way, and the packaging that
// every <optimizer>_golden.cpp uses (GoldenBuilder). Not part of the contract (optim.h,
// optim_golden.h): no tensors of its own; vectors are the flat tensors of optim.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "reference/optim/optim_golden.h"

namespace assay::optim::detail {

// Sum of squares in double, sequentially in element order (each element widened first).
template <typename F>
double sumsq(const std::vector<F>& x) {
  double s = 0;
  for (F e : x) s += static_cast<double>(e) * static_cast<double>(e);
  return s;
}
// The same over a list of tensors: one running sum in list order (not a sum of per-tensor sums).
template <typename F>
double sumsq_flat(const std::vector<std::vector<F>>& xs) {
  double s = 0;
  for (const auto& x : xs)
    for (F e : x) s += static_cast<double>(e) * static_cast<double>(e);
  return s;
}

// Pairwise (cascade) sum of squares: a different reduction order from the sequential loops (the
// second fp64 forms use it).
inline double pairwise_sq(const double* x, size_t n) {
  if (n <= 8) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
  }
  const size_t h = n / 2;
  return pairwise_sq(x, h) + pairwise_sq(x + h, n - h);
}
inline double pairwise_sq(const std::vector<double>& x) { return pairwise_sq(x.data(), x.size()); }

// torch.maximum on floats: NaN-propagating max (amsgrad's running max, inf-norms).
inline float nan_max(float a, float b) {
  return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
}

// The fp64 bias correction 1 - beta^t (1 when switched off), as the textbook forms write it.
inline double bias_correction(bool on, double beta, int64_t t) {
  return on ? 1.0 - std::pow(beta, static_cast<double>(t)) : 1.0;
}

// One optimizer's OracleResult under construction: outputs named by their check class, the
// emulation recorded beside the truth when the context asks (GoldenContext::emu), and the
// generation-time check that an emulation lies within its own golden's bound.
class GoldenBuilder {
 public:
  explicit GoldenBuilder(const GoldenContext& ctx) : ctx_(ctx) {}
  OracleResult r;
  // Records `v` as the emulation's value of output `name` (last record wins).
  void record(const std::string& name, std::vector<double> v) const;
  // An output without rounded codes; records the truth (integer outputs: trackers, flags).
  Output out(std::string name, std::vector<std::string> axes, Shape shape, DType dt, std::vector<double> truth) const;
  // Exact output: truth = fp64, rounded = the emulation's codes in dt (axes N, or M K for 2-D).
  Output exact(std::string name, const Shape& shape, DType dt, std::vector<double> truth, const std::vector<float>& emu,
               std::vector<double> bound = {}) const;
  // Bounded output: truth and its per-element bound (axes N, or M K for 2-D).
  Output bounded(std::string name, const Shape& shape, DType dt, std::vector<double> truth,
                 std::vector<double> bound) const;
  // Throws Error if |emu - truth| > bound anywhere: a golden whose own bound does not cover the
  // fp32 form would be self-contradictory.
  void check_within(const std::string& what, const std::vector<double>& truth, const std::vector<float>& emu,
                    const std::vector<double>& bound) const;
  // An agreement entry: agreement_rel(a, b) of the two fp64 forms for output `tensor`.
  void agree(std::string tensor, std::string form_a, std::string form_b, const std::vector<double>& a,
             const std::vector<double>& b);

 private:
  const GoldenContext& ctx_;
};

}  // namespace assay::optim::detail
