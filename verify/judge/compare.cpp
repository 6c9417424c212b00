#include "verify/judge/compare.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "verify/io/golden.h"

namespace assay {

static const char* nf_class(double x) { return std::isnan(x) ? "NaN" : (x > 0 ? "+Inf" : "-Inf"); }

// y if the dtype represents it as a finite value, else the Inf it rounds to.
static double overflow_to_inf(DType t, double y) {
  const double r = round_to(t, y);
  return std::isinf(r) ? r : y;
}

ElementCheck check_element(const Output& golden, const Tolerance& tol, size_t i, double x) {
  const Tensor& g = golden.expected;
  const double y = g.data[i];
  ElementCheck c;
  const bool float_dtype = info(g.dtype).is_float;
  // The spec's one alternative allowed value (SCHEMA.md /alt), NaN as a class, is checked before
  // the NaN/Inf position rule: a documented NaN alternative (torchao's NaN scale for an MX block
  // holding a NaN, and the block's NaN dequantization) is not a position mismatch.
  if (!golden.waived.empty() && golden.waived[i]) return c;  // a NaN-scaled block (compare_output)
  if (golden.alt) {
    const double alt = (*golden.alt)[i];
    if (x == alt || (std::isnan(x) && std::isnan(alt))) return c;
  }
  // The truth as the output dtype holds it: a finite fp64 value past the dtype's range rounds
  // (RNE, non-saturating) to +-Inf in a format that has Inf, so a candidate that stores that
  // Inf is right and one that saturates to the largest finite value is not.
  const double yt = float_dtype && info(g.dtype).has_inf && std::isfinite(y) ? overflow_to_inf(g.dtype, y) : y;
  if (!std::isfinite(yt) || !std::isfinite(x)) {
    const bool same = (std::isnan(x) && std::isnan(yt)) || (std::isinf(x) && x == yt);
    c.bad = c.nonfinite = !same;
    c.err = same ? 0.0 : INFINITY;
    c.ratio = same ? 0.0 : INFINITY;
    return c;
  }
  double d = std::fabs(x - y);
  if (tol.period > 0) {
    d = std::fmod(d, tol.period);
    d = std::min(d, tol.period - d);
  }
  c.err = d;
  if (tol.exact) {
    // The exact answer: the golden's spec-rounded code, else the fp64 truth itself. Zeros
    // compare by value (+0 == -0), NaN as a class.
    const double want = golden.rounded ? decode(g.dtype, (*golden.rounded)[i]) : y;
    c.bad = !(x == want || (std::isnan(x) && std::isnan(want)));
    // The spec's other allowed encodings (SCHEMA.md /allowed_mask; /alt was accepted above).
    if (c.bad && golden.allowed_mask && float_dtype && round_to(g.dtype, x) == x)
      c.bad = !(((*golden.allowed_mask)[i] >> encode(g.dtype, x)) & 1u);
    c.ratio = c.bad ? INFINITY : 0.0;
    return c;
  }
  // Each term is 0 when its factor is 0: bound_k = 0 with a +inf bound adds nothing (0 * inf
  // would be NaN), and a NaN allowance, whatever produced it, allows nothing.
  auto term = [](double k, double v) { return k == 0 ? 0.0 : k * v; };
  double allowed = term(1.0, tol.atol) + term(tol.rtol, std::fabs(y)) + (golden.bound ? term(tol.bound_k, (*golden.bound)[i]) : 0.0) +
                   (golden.bound2 ? term(tol.bound2_k, (*golden.bound2)[i]) : 0.0);
  if (std::isnan(allowed)) allowed = 0;
  c.allowed = allowed;
  c.bad = !(d <= allowed);
  c.ratio = d == 0 ? 0.0 : (allowed > 0 ? d / allowed : INFINITY);
  return c;
}

std::vector<uint8_t> mismatch_mask(const Output& golden, const Tolerance& tol, const std::vector<double>& actual) {
  std::vector<uint8_t> bad(actual.size());
  for (size_t i = 0; i < bad.size(); ++i) bad[i] = check_element(golden, tol, i, actual[i]).bad;
  return bad;
}

TensorReport compare_tensor(const Output& golden, const std::vector<double>& a, const Tolerance& tol) {
  const Tensor& g = golden.expected;
  ASSAY_CHECK(a.size() == g.data.size(), "compare {}: {} candidate values for {} expected", g.name, a.size(), g.data.size());
  TensorReport r;
  r.name = g.name;
  r.dtype = g.dtype;
  r.shape = g.shape;
  r.n = g.size();
  r.tol = tol;
  const auto& e = g.data;
  const size_t n = e.size();

  double emax = 0;
  for (double x : e)
    if (std::isfinite(x)) emax = std::max(emax, std::fabs(x));
  const double rel_floor = 1e-6 * emax;

  double se = 0, sd = 0, sa = 0, sae = 0;
  std::vector<double> ulps;
  ulps.reserve(n);
  int64_t nonfinite_first = -1, finite_pairs = 0;
  double worst_excess = -1;
  const bool float_dtype = info(g.dtype).is_float;
  for (size_t i = 0; i < n; ++i) {
    const double x = a[i], y = e[i];
    const ElementCheck c = check_element(golden, tol, i, x);
    r.max_ratio = std::max(r.max_ratio, c.ratio);
    if (c.nonfinite) {
      ++r.nonfinite_mismatches;
      if (nonfinite_first < 0) nonfinite_first = static_cast<int64_t>(i);
    } else if (std::isfinite(x) && std::isfinite(y)) {
      const double d = c.err;
      ++finite_pairs;
      se += y * y, sd += d * d, sa += x * x, sae += x * y;
      r.max_abs = std::max(r.max_abs, d);
      const double den = std::max(std::fabs(y), rel_floor);
      if (d > 0) r.max_rel = std::max(r.max_rel, den > 0 ? d / den : INFINITY);
      if (float_dtype) ulps.push_back(d / ulp(g.dtype, y));
      if (c.bad && !tol.exact && d - c.allowed > worst_excess) {
        worst_excess = d - c.allowed;
        r.worst = static_cast<int64_t>(i);
        r.worst_allowed = c.allowed;
      }
      if (c.bad && tol.exact && r.worst < 0) r.worst = static_cast<int64_t>(i);
    }
    if (c.bad) {
      ++r.mismatches;
      if (r.first_bad < 0) r.first_bad = static_cast<int64_t>(i);
    }
  }
  r.rms_rel = se > 0 ? std::sqrt(sd / se) : (sd > 0 ? INFINITY : 0.0);
  r.cosine = (se > 0 && sa > 0) ? sae / std::sqrt(se * sa) : (se == 0 && sa == 0 ? 1.0 : 0.0);
  if (!ulps.empty()) {
    r.ulp_max = *std::max_element(ulps.begin(), ulps.end());
    const size_t k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(ulps.size()))) - 1;
    std::nth_element(ulps.begin(), ulps.begin() + static_cast<ptrdiff_t>(k), ulps.end());
    r.ulp_p99 = ulps[k];
  }
  if (n > 0 && finite_pairs == 0) {  // e.g. an all-NaN candidate: no metric is 0 or 1, they are undefined
    r.max_abs = r.max_rel = r.rms_rel = r.cosine = r.ulp_max = r.ulp_p99 = NAN;
  }
  if (r.worst < 0 && r.first_bad >= 0) r.worst = r.first_bad;
  if (r.first_bad >= 0) r.first_bad_index = golden.element_str(r.first_bad);
  if (r.worst >= 0) {
    r.worst_index = golden.element_str(r.worst);
    r.worst_actual = a[static_cast<size_t>(r.worst)];
    r.worst_expected = e[static_cast<size_t>(r.worst)];
  }

  // Never-pass rules.
  if (r.nonfinite_mismatches > 0) {
    const auto i = static_cast<size_t>(nonfinite_first);
    r.never_pass.push_back(fmt::format("{} NaN/Inf position mismatch(es); first at {}: candidate {} where golden is {}{}",
                                       r.nonfinite_mismatches, golden.element_str(nonfinite_first),
                                       std::isfinite(a[i]) ? fmt::format("{:g}", a[i]) : nf_class(a[i]),
                                       std::isfinite(e[i]) ? fmt::format("{:g}", e[i]) : nf_class(e[i]),
                                       std::isfinite(e[i]) && float_dtype && info(g.dtype).has_inf &&
                                               std::isinf(overflow_to_inf(g.dtype, e[i]))
                                           ? fmt::format(" (rounds to {} in {})", nf_class(overflow_to_inf(g.dtype, e[i])), name(g.dtype))
                                           : ""));
  }
  const bool golden_all_zero = std::all_of(e.begin(), e.end(), [](double v) { return v == 0; });
  const bool cand_all_zero = n > 0 && std::all_of(a.begin(), a.end(), [](double v) { return v == 0; });
  if (cand_all_zero && !golden_all_zero) r.never_pass.push_back("candidate is all zero; golden is not");
  auto constant = [](const std::vector<double>& v) {
    return v.size() > 1 && std::all_of(v.begin(), v.end(), [&](double x) {
             return x == v[0] || (std::isnan(x) && std::isnan(v[0]));
           });
  };
  if (!cand_all_zero && constant(a) && !constant(e))
    r.never_pass.push_back(fmt::format("candidate is constant ({:g}); golden is not", a.empty() ? 0.0 : a[0]));

  r.verdict = (r.never_pass.empty() && r.mismatches - r.nonfinite_mismatches <= tol.max_mismatch &&
               r.nonfinite_mismatches == 0)
                  ? Verdict::Passed
                  : Verdict::Incorrect;
  if (!r.never_pass.empty()) r.max_ratio = INFINITY;
  return r;
}

void check_rounded_accepted(const Golden& g, const TolerancePolicy& policy) {
  for (const auto& o : g.outputs) {
    if (!o.rounded) continue;
    const auto& e = o.expected;
    std::vector<double> v(o.rounded->size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = decode(e.dtype, (*o.rounded)[i]);
    const auto r = compare_tensor(o, v, policy.lookup(g.prov.op, e.name, e.dtype, kStrictProfile));
    if (r.verdict != Verdict::Passed)
      throw OracleDisagreement(fmt::format("{}/{}: output '{}': its own /rounded codes are rejected by its strict rule "
                                           "({} of {} elements, first {}: code {:#x} decodes to {}, expected {}): the "
                                           "golden would fail a kernel that writes exactly them",
                                           g.prov.op, g.prov.case_name, e.name, r.mismatches, r.n, r.first_bad_index,
                                           (*o.rounded)[static_cast<size_t>(r.first_bad)],
                                           v[static_cast<size_t>(r.first_bad)], e.data[static_cast<size_t>(r.first_bad)]));
  }
}

TensorReport compare_with_policy(const TolerancePolicy& policy, std::string_view op, const Output& golden,
                                 const std::vector<double>& actual, std::string_view profile) {
  const auto& e = golden.expected;
  TensorReport r = compare_tensor(golden, actual, policy.lookup(op, e.name, e.dtype, profile));
  if (r.verdict == Verdict::Passed) return r;
  std::vector<std::string> would;
  for (const auto& p : policy.profiles(op)) {
    if (p == profile) continue;
    const Tolerance t = policy.lookup(op, e.name, e.dtype, p);
    if (t.source == r.tol.source) continue;  // the same entry: no different verdict
    if (compare_tensor(golden, actual, t).verdict == Verdict::Passed) would.push_back(p);
  }
  if (!would.empty()) {
    r.hint = "would pass under profile";
    for (size_t k = 0; k < would.size(); ++k) r.hint += fmt::format("{} '{}'", k ? "," : "", would[k]);
    const auto* prof = policy.find_profile(op, would.front());  // null for "strict", which has no entry
    r.hint += fmt::format(" (declare it if the kernel computes that way: {})",
                          prof ? prof->why : "rounding to the storage dtypes only");
  }
  return r;
}

std::string TensorReport::summary() const {
  std::string s = fmt::format("{:<10} {:<9} {}{} n={} max_abs={:.3e} max_rel={:.3e} rms_rel={:.3e} cos={:.6f}",
                              verdict_name(verdict), intermediate ? "(i)" + name : name, assay::name(dtype),
                              tol.profile == kStrictProfile ? "" : " profile=" + tol.profile, n, max_abs, max_rel, rms_rel, cosine);
  if (info(dtype).is_float) s += fmt::format(" ulp_max={:.3g} ulp_p99={:.3g}", ulp_max, ulp_p99);
  s += fmt::format(" mismatches={}/{} (budget {})", mismatches, n, tol.max_mismatch);
  if (first_bad >= 0) s += fmt::format(" first={}", first_bad_index);
  if (worst >= 0)
    s += fmt::format(" worst={} got {:.6g} want {:.6g}{}", worst_index, worst_actual, worst_expected,
                     tol.exact ? "" : fmt::format(" allowed {:.3g}", worst_allowed));
  for (const auto& np : never_pass) s += " | NEVER-PASS: " + np;
  if (!hint.empty()) s += " | " + hint;
  return s;
}

namespace {
// The scale output of outs[k] and the block index of each element; nullopt without a usable link.
struct ScaleLink {
  size_t si;
  int64_t cols, scols, blk;
  size_t block(size_t i) const {
    return static_cast<size_t>((static_cast<int64_t>(i) / cols) * scols + (static_cast<int64_t>(i) % cols) / blk);
  }
};
std::optional<ScaleLink> scale_link(const std::vector<Output>& outs, size_t k, const std::vector<std::vector<double>>& actual) {
  const Output& o = outs[k];
  if (o.scaled_by.empty() || o.scale_block < 1) return std::nullopt;
  for (size_t j = 0; j < outs.size(); ++j)
    if (j != k && outs[j].expected.name == o.scaled_by && actual[j].size() == outs[j].expected.data.size())
      return ScaleLink{j, o.expected.shape.back(), outs[j].expected.shape.back(), o.scale_block};
  return std::nullopt;
}
}  // namespace

std::vector<uint8_t> scale_waiver(const std::vector<Output>& outs, size_t k, const std::vector<std::vector<double>>& actual) {
  const Output& o = outs[k];
  const auto link = o.rounded ? scale_link(outs, k, actual) : std::nullopt;
  if (!link) return {};
  const Output& sc = outs[link->si];
  const std::vector<double>& sa = actual[link->si];
  std::vector<uint8_t> w(o.expected.data.size(), 0);
  bool any = false;
  for (size_t i = 0; i < w.size(); ++i) {
    const size_t b = link->block(i);
    const bool nan_allowed = std::isnan(sc.expected.data[b]) || (sc.alt && std::isnan((*sc.alt)[b]));
    if (std::isnan(sa[b]) && nan_allowed) w[i] = 1, any = true;
  }
  if (!any) w.clear();
  return w;
}

TensorReport compare_output(const TolerancePolicy& policy, std::string_view op, const std::vector<Output>& outs, size_t k,
                            const std::vector<std::vector<double>>& actual, std::string_view profile,
                            const Tolerance* tol_override) {
  const Output& o = outs[k];
  const auto judge = [&](const Output& g) {
    return tol_override ? compare_tensor(g, actual[k], *tol_override) : compare_with_policy(policy, op, g, actual[k], profile);
  };
  if (auto w = scale_waiver(outs, k, actual); !w.empty()) {
    Output g = o;
    g.waived = std::move(w);
    return judge(g);
  }
  TensorReport r = judge(o);
  const auto link = scale_link(outs, k, actual);
  if (r.verdict == Verdict::Passed || o.rounded || !link) return r;
  const std::vector<double>& sa = actual[link->si];
  int64_t flushed = 0;
  std::string first;
  for (size_t i = 0; i < actual[k].size(); ++i) {
    if (sa[link->block(i)] != std::ldexp(1.0, -127) || actual[k][i] != 0 || o.expected.data[i] == 0) continue;
    if (!check_element(o, r.tol, i, actual[k][i]).bad) continue;
    if (flushed++ == 0) first = o.element_str(static_cast<int64_t>(i));
  }
  if (flushed > 0) {
    const std::string note = fmt::format(
        "{} wrong element(s) are 0 in blocks whose scale byte is 0 (first {}): E8M0 0x00 decodes to 2^-127 (OCP MX "
        "v1.0), so each is its code * 2^-127; a 0 there is a scale flushed to 0 or codes the golden does not allow",
        flushed, first);
    r.hint = r.hint.empty() ? note : r.hint + "; " + note;
  }
  return r;
}

}  // namespace assay
