// Packaging shared by every optimizer's golden (optim_golden.h, GoldenBuilder in optim_internal.h):
// output constructors by check class, the emulation record, the self-check of bounds.
#include <cmath>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "reference/core/dtype.h"
#include "reference/optim/optim_golden.h"
#include "reference/optim/optim_internal.h"

namespace assay::optim {

std::vector<float> as_f(const std::vector<double>& x) { return {x.begin(), x.end()}; }
std::vector<double> as_d(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::vector<std::vector<double>> split(const std::vector<double>& x, const std::vector<int64_t>& sizes) {
  std::vector<std::vector<double>> out;
  size_t o = 0;
  for (auto s : sizes) {
    out.emplace_back(x.begin() + static_cast<long>(o), x.begin() + static_cast<long>(o + s));
    o += static_cast<size_t>(s);
  }
  return out;
}
std::vector<std::vector<float>> splitf(const std::vector<double>& x, const std::vector<int64_t>& sizes) {
  std::vector<std::vector<float>> out;
  for (auto& v : split(x, sizes)) out.push_back(as_f(v));
  return out;
}

namespace detail {

namespace {
std::vector<uint64_t> codes(const std::vector<float>& x, DType dt) {
  std::vector<uint64_t> c(x.size());
  for (size_t i = 0; i < x.size(); ++i) c[i] = encode_f32(dt, x[i]);
  return c;
}
std::vector<std::string> axes_of(const Shape& shape) {
  return shape.size() == 1 ? std::vector<std::string>{"N"} : std::vector<std::string>{"M", "K"};
}
}  // namespace

void GoldenBuilder::record(const std::string& name, std::vector<double> v) const {
  if (ctx_.emu) (*ctx_.emu)[name] = std::move(v);
}

Output GoldenBuilder::out(std::string name, std::vector<std::string> axes, Shape shape, DType dt,
                          std::vector<double> truth) const {
  record(name, truth);
  Output o;
  o.expected = Tensor{std::move(name), std::move(axes), std::move(shape), dt, std::move(truth)};
  return o;
}

Output GoldenBuilder::exact(std::string name, const Shape& shape, DType dt, std::vector<double> truth,
                            const std::vector<float>& emu, std::vector<double> bound) const {
  Output o = out(name, axes_of(shape), shape, dt, std::move(truth));
  record(name, as_d(emu));
  o.rounded = codes(emu, dt);
  if (!bound.empty()) o.bound = std::move(bound);
  return o;
}

Output GoldenBuilder::bounded(std::string name, const Shape& shape, DType dt, std::vector<double> truth,
                              std::vector<double> bound) const {
  Output o = out(std::move(name), axes_of(shape), shape, dt, std::move(truth));
  o.bound = std::move(bound);
  return o;
}

void GoldenBuilder::check_within(const std::string& what, const std::vector<double>& truth,
                                 const std::vector<float>& emu, const std::vector<double>& bound) const {
  for (size_t i = 0; i < truth.size(); ++i) {
    const double e = std::fabs(static_cast<double>(emu[i]) - truth[i]);
    if (!(e <= bound[i]))
      throw Error(fmt::format("{}: the f32 form of '{}' leaves its fp64 bound at {}: |{} - {}| = {} > {}", ctx_.where,
                              what, i, emu[i], truth[i], e, bound[i]));
  }
}

void GoldenBuilder::agree(std::string tensor, std::string form_a, std::string form_b, const std::vector<double>& a,
                          const std::vector<double>& b) {
  r.agreement.push_back({std::move(tensor), std::move(form_a), std::move(form_b), agreement_rel(a, b)});
}

}  // namespace detail
}  // namespace assay::optim
