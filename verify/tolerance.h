// The tolerance policy: one table keyed by (op, output, dtype); every entry carries a `why`.
//
// Element rule (NaN-safe: written as a negated <=):
//   ok_i  <=>  |a_i - e_i| <= atol + rtol * |e_i| + bound_k * bound_i
// (with `period`, |a_i - e_i| is the circular distance, for angle states)
// where bound_i is the golden's per-element error-bound magnitude (0 if the golden has none).
// `exact = true` compares codes bit-for-bit (quantizer outputs): the golden's spec-rounded codes
// must equal the candidate's codes (NaN as a class). A tensor passes when the mismatch count is
// <= max_mismatch (default 0) and none of the never-pass rules fired (verify/compare.h).
//
// Lookup order: an entry for (op, output, dtype) from fixtures/<op>.toml [[tolerance]] tables,
// then (op, "*", dtype), then the per-dtype default below.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace assay {

struct Tolerance {
  double atol = 0, rtol = 0, bound_k = 0;
  int64_t max_mismatch = 0;
  bool exact = false;
  // > 0: the values are angles modulo `period` (e.g. 2*pi): the error is the circular distance
  // min(|a - e| mod period, period - |a - e| mod period).
  double period = 0;
  std::string why;
  std::string source;  // "default[bf16]" or "fixtures/attention.toml [[tolerance]] #2"
};

// Per-dtype defaults, each with its why (verify/tolerance.cpp).
Tolerance default_tolerance(DType t);

class TolerancePolicy {
 public:
  struct Entry {
    std::string op, output;  // output "*" = any
    DType dtype;
    Tolerance tol;
  };
  // Reads the [[tolerance]] tables of every fixtures/<op>.toml in `dir` (missing dir: defaults).
  static TolerancePolicy load(const std::string& fixtures_dir);
  // Reads one fixture file's [[tolerance]] tables.
  void add_file(const std::string& path);
  Tolerance lookup(std::string_view op, std::string_view output, DType dtype) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace assay
