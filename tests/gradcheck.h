// Central finite-difference gradcheck for the backward oracles' tests (reference/<op>/tests/):
// every element of every listed input of an inputs struct, against the analytic gradient.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "catch_compat.h"

namespace assay_test {

template <class In>
struct GradItem {
  const char* name;
  std::vector<double> In::*field;    // the input
  const std::vector<double>* grad;   // its analytic gradient (same size; empty input: skipped)
};

// For each item, the central difference (step 1e-6 * max(1, |x_i|)) of loss(in) w.r.t. every
// element, compared with the analytic gradient: rel = |a - fd| / max(|fd|, 1e-2 * max|fd|) (1e-12
// when the whole difference vanishes). Prints "<title> worst rel err per input: name=..." and
// returns the worst rel over all items.
template <class In, class Loss>
double gradcheck_inputs(const In& in, const std::vector<GradItem<In>>& items, const Loss& loss, const std::string& title) {
  double worst = 0;
  std::string line;
  for (const auto& it : items) {
    const std::vector<double>& v0 = in.*(it.field);
    REQUIRE(it.grad->size() == v0.size());
    if (v0.empty()) continue;
    std::vector<double> fd(v0.size());
    In w = in;
    for (size_t i = 0; i < v0.size(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::fabs(v0[i]));
      (w.*(it.field))[i] = v0[i] + h;
      const double lp = loss(w);
      (w.*(it.field))[i] = v0[i] - h;
      const double lm = loss(w);
      (w.*(it.field))[i] = v0[i];
      fd[i] = (lp - lm) / (2 * h);
    }
    double mx = 0;
    for (double e : fd) mx = std::max(mx, std::fabs(e));
    const double floor = mx > 0 ? 1e-2 * mx : 1e-12;
    double rel = 0;
    for (size_t i = 0; i < fd.size(); ++i)
      rel = std::max(rel, std::fabs((*it.grad)[i] - fd[i]) / std::max(std::fabs(fd[i]), floor));
    worst = std::max(worst, rel);
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s=%.2e", it.name, rel);
    line += buf;
  }
  std::printf("%s worst rel err per input:%s\n", title.c_str(), line.c_str());
  return worst;
}

}  // namespace assay_test
