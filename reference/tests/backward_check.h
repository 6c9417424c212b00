// Scaffolding the backward oracles' tests share (reference/<op>/tests/test_*_backward*.cpp), next
// to tests/gradcheck.h (the finite-difference check itself):
//   loss_of        L = sum_i <upstream_i, output_i>, the scalar whose gradient a backward oracle
//                  returns, from pairs {upstream gradient, forward output}: what a gradcheck's loss
//                  evaluates at every perturbed input;
//   require_refused  every listed corruption of a valid set of upstream gradients (a wrong size, a
//                  gradient for an output the case does not have) makes a backward form throw
//                  InputError.
#pragma once
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "reference/core/check.h"

namespace assay_test {

// <a, b> over the common prefix, in ascending order (an absent, empty, upstream gradient gives 0).
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

// sum over the pairs of dot(upstream, output), in the order given.
inline double loss_of(
    std::initializer_list<std::pair<const std::vector<double>&, const std::vector<double>&>> terms) {
  double l = 0;
  for (const auto& [up, out] : terms) l += dot(up, out);
  return l;
}

// For each corruption: a copy of `valid` so changed must make backward(copy) throw InputError.
template <class Upstream, class Backward>
void require_refused(const Upstream& valid,
                     std::initializer_list<std::type_identity_t<std::function<void(Upstream&)>>> corruptions,
                     const Backward& backward) {
  for (const auto& corrupt : corruptions) {
    Upstream u = valid;
    corrupt(u);
    REQUIRE_THROWS_AS(backward(u), assay::InputError);
  }
}

}  // namespace assay_test
