#include "reference/scaled_add/scaled_add.h"

#include <cmath>

#include <Eigen/Core>

#include "reference/core/check.h"

namespace assay::ref {

std::vector<double> scaled_add_loop(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta) {
  ASSAY_CHECK(x.size() == y.size(), "x has {} elements, y {}", x.size(), y.size());
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = alpha * x[i] + beta * y[i];
  return out;
}

std::vector<double> scaled_add_eigen(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta) {
  ASSAY_CHECK(x.size() == y.size(), "x has {} elements, y {}", x.size(), y.size());
  const auto n = static_cast<Eigen::Index>(x.size());
  Eigen::Map<const Eigen::ArrayXd> ex(x.data(), n), ey(y.data(), n);
  std::vector<double> out(x.size());
  Eigen::Map<Eigen::ArrayXd>(out.data(), n) = ex * alpha + ey * beta;
  return out;
}

std::vector<double> scaled_add_bound(const std::vector<double>& x, const std::vector<double>& y, double alpha, double beta) {
  std::vector<double> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = std::fabs(alpha * x[i]) + std::fabs(beta * y[i]);
  return b;
}

}  // namespace assay::ref
