// The tolerance policy: one table keyed by (op, output, dtype, profile); every entry carries a `why`.
//
// A precision profile names how a kernel COMPUTES, not how it stores: "strict" (the default:
// rounding to the storage dtypes only), or a profile an op's fixture declares under [profiles]
// (e.g. "tf32": fp32 storage with TF32 products; "bf16-states": chunk / recurrent states kept in
// bf16). A kernel declares its profile; `assay calibrate` proves every profile's entries against an
// emulation of that profile and against the op's mutants.
//
// Element rule (NaN-safe: written as a negated <=; a term whose factor is 0 is 0, so an infinite
// bound with bound_k = 0 adds nothing, and a NaN allowance allows nothing):
//   ok_i  <=>  |a_i - e_i| <= atol + rtol * |e_i| + bound_k * bound_i [+ bound2_k * bound2_i]
// (with `period`, |a_i - e_i| is the circular distance, for angle states)
// where bound_i is the golden's per-element error-bound magnitude (0 if the golden has none) and
// bound2_i its second magnitude, for the sensitivity to a rounding a profile adds (0 if none).
// `exact = true` compares codes bit-for-bit (quantizer outputs): the golden's spec-rounded codes
// must equal the candidate's codes (NaN as a class). A tensor passes when the mismatch count is
// <= max_mismatch (default 0) and none of the never-pass rules fired (verify/judge/compare.h).
//
// Lookup for (op, output, dtype, profile): strict's tolerance is the [[tolerance]] entry of
// fixtures/<op>.toml for (output, dtype), else ("*", dtype), else the per-dtype default below. Under
// another profile, its entry for (output, dtype), else ("*", dtype), widened term by term to at
// least strict's (atol, rtol, bound_k, max_mismatch: at_least_strict); an output the profile does
// not list is judged as under strict. So no element is ever allowed less under a profile than under
// strict: a profile names roundings a kernel adds, never ones it removes. `assay calibrate` also
// rejects a profile entry written tighter than strict in any term.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace assay {
namespace gen {
struct Fixture;  // fixtures/gen/case.h: the one reader of fixture files
}

struct Tolerance {
  double atol = 0, rtol = 0, bound_k = 0;
  double bound2_k = 0;  // factor of the golden's second magnitude (/bounds2), where it has one
  int64_t max_mismatch = 0;
  bool exact = false;
  // > 0: the values are angles modulo `period` (e.g. 2*pi): the error is the circular distance
  // min(|a - e| mod period, period - |a - e| mod period).
  double period = 0;
  std::string why;
  std::string source;   // "default[bf16]" or "attention.toml [[tolerance]] #2"
  std::string profile = "strict";  // the profile of the entry that was selected
  bool is_default() const { return source.rfind("default[", 0) == 0; }
};

inline constexpr const char* kStrictProfile = "strict";

// `p` with each of atol, rtol, bound_k, max_mismatch raised to strict's where strict's is larger
// (`source` then names both). InputError when they compare differently (exact / period differ).
Tolerance at_least_strict(const Tolerance& p, const Tolerance& strict);

// Per-dtype defaults, each with its why (verify/judge/tolerance.cpp).
Tolerance default_tolerance(DType t);

class TolerancePolicy {
 public:
  struct Entry {
    std::string op, output;  // output "*" = any
    DType dtype;
    std::string profile = kStrictProfile;
    Tolerance tol;
    int index = 0;  // 1-based position among the file's [[tolerance]] tables
  };
  struct Profile {
    std::string op, name, why;
  };
  // Reads the [[tolerance]] tables of every fixtures/<op>.toml in `dir` (missing dir: defaults).
  static TolerancePolicy load(const std::string& fixtures_dir);
  // THE way a run gets the policy that judges `ops`: their fixtures' [profiles] and [[tolerance]]
  // tables only (another op's half-edited fixture cannot break the run). InputError naming the path
  // when a <fixtures_dir>/<op>.toml does not exist; an empty fixtures_dir gives the per-dtype
  // defaults only (library callers that judge without fixtures).
  static TolerancePolicy for_ops(const std::string& fixtures_dir, const std::vector<std::string>& ops);
  // The policy of one fixture already read (gen::load_fixture parses every fixture file: this
  // class never opens one itself).
  static TolerancePolicy for_fixture(const gen::Fixture& fx);
  // Adds one fixture's [profiles] and [[tolerance]] tables. InputError naming the file and entry.
  void add_fixture(const gen::Fixture& fx);
  // add_fixture(gen::load_fixture(path)).
  void add_file(const std::string& path);
  // Throws InputError if `profile` is neither "strict" nor declared by the op's fixture.
  Tolerance lookup(std::string_view op, std::string_view output, DType dtype,
                   std::string_view profile = kStrictProfile) const;
  // The entry naming `output` itself for this dtype under `profile`, else under strict; never a
  // "*" entry or a default. How intermediates are judged: their tolerance must come from a model
  // of that intermediate, never from a catch-all. nullopt: none.
  std::optional<Tolerance> lookup_named(std::string_view op, std::string_view output, DType dtype,
                                        std::string_view profile = kStrictProfile) const;
  const std::vector<Entry>& entries() const { return entries_; }
  // "strict" first, then the op's declared profiles in file order.
  std::vector<std::string> profiles(std::string_view op) const;
  bool has_profile(std::string_view op, std::string_view profile) const;
  const Profile* find_profile(std::string_view op, std::string_view profile) const;
  // Throws InputError naming the profile and the op's known ones, unless has_profile.
  void require_profile(std::string_view op, std::string_view profile, std::string_view where) const;

 private:
  std::vector<Entry> entries_;
  std::vector<Profile> profiles_;
};

}  // namespace assay
