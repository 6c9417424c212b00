// fuzz_compare: `assay compare` after loading, structure-aware.
//
// Fixed subjects, loaded once: a few small valid goldens (float outputs; NVFP4 code outputs with
// exact tolerances, allowed-code masks and alternatives) and each op's tolerance policy
// (fixtures/<op>.toml). From the input bytes the harness writes a candidate HDF5 with
// assay::h5::File (per golden output: where the dataset is, its element type, its shape, its
// `dtype` attribute and its values, which may be the golden's, perturbed, raw bytes, NaN/Inf
// payloads; an optional root `precision_profile`) and picks the command-line options (--profile,
// --atol, --rtol, --output). Then it runs what run_compare in verify/cli/cmd_compare.cpp runs once
// the golden is read and fresh: open_read, assay::judge_candidate (verify/judge/candidate.h: profile
// resolution, read_candidate, compare_with_policy or the --atol/--rtol override), and both report
// forms (TensorReport::summary() lines, tensor_json and dump).
//
// Correct rejection: assay::InputError. Findings: any other exception (e.g. nlohmann::json errors
// from dump), a crash, a sanitizer report, an HDF5 handle left open, and one semantic check: a
// candidate that is an exact copy of the golden (fp64 values, or the spec-rounded codes in their
// storage type with a dtype attribute) under no overrides must pass.
//
// Input layout (bytes past the end read as 0, so the empty input is the exact copy of subject 0):
//   subject, options flags [, --profile spec][, --atol f64][, --rtol f64][, --output mask],
//   root precision_profile spec, then per golden output:
//   layout, element type, shape mode [, shape bytes], dtype attribute mode [, bytes],
//   value mode [, value bytes].
// Set ASSAY_FUZZ_SAVE_CANDIDATES=<dir> to keep every candidate written (seeds for fuzz_golden), and
// ASSAY_FUZZ_VERBOSE=1 to print each report and refusal.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fuzz/common.h"
#include "verify/judge/candidate.h"
#include "verify/judge/compare.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/report/report.h"
#include "verify/judge/tolerance.h"

namespace {

using assay::DType;
using assay::h5::Elem;

struct Subject {
  std::string golden_path;
  assay::Golden g;
  assay::TolerancePolicy policy;
  std::vector<std::string> profiles;  // "strict" first
};

const std::vector<Subject>& subjects() {
  static const std::vector<Subject> s = assay_fuzz::setup("loading the fixed goldens and policies", [] {
    std::vector<Subject> v;
    for (const char* rel : {"golden/scaled_add/normal_odd_shape.h5", "golden/scaled_add/specials_fp16.h5",
                            "golden/quant/nvfp4_sixth_fold_witness.h5"}) {
      Subject x;
      x.golden_path = assay_fuzz::source_path(rel);
      x.g = assay::read_golden(x.golden_path);
      x.policy.add_file(assay_fuzz::source_path("fixtures/" + x.g.prov.op + ".toml"));
      x.profiles = x.policy.profiles(x.g.prov.op);
      v.push_back(std::move(x));
    }
    assay_fuzz::require_hdf5_closed("setup");
    return v;
  });
  return s;
}

// Reads the input front to back; past the end every read gives zeros.
class Bytes {
 public:
  Bytes(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8() { return pos_ < n_ ? p_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{u8()} << (8 * i);
    return v;
  }
  double f64() {
    const uint64_t b = u64();
    double d;
    std::memcpy(&d, &b, 8);
    return d;
  }
  std::string str(size_t max_len) {
    std::string s(u8() % (max_len + 1), '\0');
    for (auto& c : s) c = static_cast<char>(u8());
    return s;
  }
  // Up to k bytes of the input (fewer near the end).
  std::vector<uint8_t> take(size_t k) {
    k = std::min(k, n_ - pos_);
    std::vector<uint8_t> r(p_ + pos_, p_ + pos_ + k);
    pos_ += k;
    return r;
  }

 private:
  const uint8_t* p_;
  size_t n_, pos_ = 0;
};

// (Append only: the regression inputs index this list.)
constexpr Elem kElems[] = {Elem::f64, Elem::f32, Elem::u8,  Elem::i8,  Elem::u16,
                           Elem::u32, Elem::i32, Elem::u64, Elem::i64, Elem::i16};
bool elem_is_float(Elem e) { return e == Elem::f64 || e == Elem::f32; }

// Valid dtype names, aliases included (reference/core/dtype.h parse_dtype).
constexpr const char* kDtypeNames[] = {"fp64", "f64", "float64", "fp32", "f32", "float32", "bf16", "bfloat16", "fp16",
                                       "f16", "half", "fp8e4m3", "e4m3", "e4m3fn", "float8_e4m3fn", "fp8e5m2", "e5m2",
                                       "float8_e5m2", "fp4e2m1", "e2m1", "ue8m0", "e8m0", "i8", "u8", "i32", "int32",
                                       "u32", "i64"};

// A profile: 0 none, 1 "strict", 2 one of the op's profiles, 3 a fuzzed string.
std::string profile_spec(Bytes& in, const Subject& s) {
  switch (in.u8() % 4) {
    case 1: return assay::kStrictProfile;
    case 2: return s.profiles[in.u8() % s.profiles.size()];
    case 3: return in.str(24);
    default: return {};
  }
}

// x's code in dtype d (integer dtypes: two's complement; out of range or NaN: INT64_MIN).
uint64_t code_of(DType d, double x) {
  if (assay::info(d).is_float) return assay::encode(d, x);
  return x >= -0x1p63 && x < 0x1p63 ? static_cast<uint64_t>(static_cast<int64_t>(x)) : uint64_t{1} << 63;
}
// The golden's code (storage bits of the output dtype) for element i, and its value.
uint64_t golden_code(const assay::Output& o, size_t i) {
  return o.rounded ? (*o.rounded)[i] : code_of(o.expected.dtype, o.expected.data[i]);
}
double golden_value(const assay::Output& o, size_t i) {
  return o.rounded ? assay::decode(o.expected.dtype, (*o.rounded)[i]) : o.expected.data[i];
}

double special(Bytes& in) {
  switch (in.u8() % 10) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return -std::numeric_limits<double>::quiet_NaN();
    case 2: {  // a NaN with a fuzzed payload
      uint64_t b = 0x7FF0000000000000ull | (in.u64() & 0x000FFFFFFFFFFFFFull) | 1;
      double d;
      std::memcpy(&d, &b, 8);
      return d;
    }
    case 3: return std::numeric_limits<double>::infinity();
    case 4: return -std::numeric_limits<double>::infinity();
    case 5: return -0.0;
    case 6: return std::numeric_limits<double>::max();
    case 7: return std::numeric_limits<double>::denorm_min();
    case 8: return 2.0 * std::numeric_limits<float>::max();  // Inf once stored as fp32
    default: return in.f64();
  }
}

// One candidate dataset's bytes (n elements of type e) for golden output o: value mode 0 the
// golden's values (codes for integer storage), 1 perturbed, 2 raw input bytes, 3 specials at a few
// positions, 4 a constant, 5 zeros.
std::vector<uint8_t> make_values(Bytes& in, const assay::Output& o, Elem e, size_t n) {
  const size_t eb = assay::h5::elem_size(e), m = o.expected.data.size();
  std::vector<uint8_t> buf(n * eb);
  const uint8_t mode = in.u8() % 6;
  if (mode == 2) {  // raw bytes, cycled
    const auto raw = in.take(std::min<size_t>(n * eb, 4096));
    for (size_t k = 0; k < buf.size() && !raw.empty(); ++k) buf[k] = raw[k % raw.size()];
    return buf;
  }
  std::vector<double> v(n, 0.0);
  std::vector<uint64_t> c(n, 0);
  const bool have = m > 0;
  for (size_t i = 0; i < n && have && mode != 5; ++i) {
    v[i] = golden_value(o, i % m);
    c[i] = golden_code(o, i % m);
  }
  auto code = [&](double x) { return code_of(o.expected.dtype, x); };
  if (mode == 1) {  // perturbed by k * 2^-s relative
    const int k = static_cast<int8_t>(in.u8());
    const int sh = in.u8() % 64;
    for (size_t i = 0; i < n; ++i) {
      v[i] = v[i] * (1.0 + std::ldexp(static_cast<double>(k), -sh));
      c[i] = code(v[i]);
    }
  } else if (mode == 3 && n > 0) {  // specials at a few positions
    for (int k = in.u8() % 8; k-- > 0;) {
      const size_t i = in.u16() % n;
      v[i] = special(in);
      c[i] = in.u8() & 1 ? code(v[i]) : in.u64();
    }
  } else if (mode == 4) {  // a constant
    const double x = in.u8() & 1 ? special(in) : in.f64();
    const uint64_t cx = code(x);
    for (size_t i = 0; i < n; ++i) v[i] = x, c[i] = cx;
  }
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = buf.data() + i * eb;
    if (e == Elem::f64) std::memcpy(p, &v[i], 8);
    else if (e == Elem::f32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(p, &f, 4);
    } else {
      std::memcpy(p, &c[i], eb);  // little-endian: the low bytes
    }
  }
  return buf;
}

assay::Shape make_shape(Bytes& in, const assay::Shape& golden) {
  switch (in.u8() % 6) {
    case 1: return {};
    case 2: {
      assay::Shape s(in.u8() % 5);
      for (auto& d : s) d = in.u8() % 9;
      return s;
    }
    case 3: {
      if (golden.empty()) return {1};
      auto s = golden;
      auto& d = s[in.u8() % s.size()];
      d = in.u8() & 1 ? d + 1 : std::max<int64_t>(0, d - 1);
      return s;
    }
    case 4: return {assay::numel(golden)};
    case 5: {
      auto s = golden;
      s.insert(s.begin(), 1);
      return s;
    }
    default: return golden;
  }
}

std::string dtype_attr(Bytes& in, const assay::Output& o) {
  switch (in.u8() % 6) {
    case 1: return std::string(assay::name(o.expected.dtype));
    case 2: return "fp32";
    case 3: return "fp64";
    case 4: return kDtypeNames[in.u8() % std::size(kDtypeNames)];
    case 5: return in.str(16);
    default: return {};
  }
}

// Whether a dataset holds exactly the golden's answer in a faithful storage: fp64 or fp32 values
// equal to the golden's (fp32 only where every value is an fp32 value; dtype attribute absent, the
// storage's or the output's), or, in integers of the output dtype's storage width, its codes (float
// formats, dtype attribute naming it) or its values (integer dtypes, same signedness).
bool is_exact_copy(const assay::Output& out, Elem e, const assay::Shape& shape, const std::string& dtype,
                   const std::vector<uint8_t>& values) {
  const DType d = out.expected.dtype;
  const auto& di = assay::info(d);
  if (shape != out.expected.shape) return false;
  if (elem_is_float(e)) {
    if (!(dtype.empty() || dtype == (e == Elem::f64 ? "fp64" : "fp32") || dtype == di.name)) return false;
  } else {
    const bool is_signed = e == Elem::i8 || e == Elem::i16 || e == Elem::i32 || e == Elem::i64;
    const bool d_signed = d == DType::i8 || d == DType::i32 || d == DType::i64;
    if (assay::h5::elem_size(e) != static_cast<size_t>(di.storage_bytes)) return false;
    if (di.is_float ? dtype != di.name : !(dtype.empty() || dtype == di.name) || is_signed != d_signed) return false;
  }
  const size_t eb = assay::h5::elem_size(e);
  for (size_t i = 0; i * eb < values.size(); ++i) {
    const double y = golden_value(out, i);
    double x = 0;
    if (e == Elem::f64) {
      std::memcpy(&x, values.data() + i * 8, 8);
    } else if (e == Elem::f32) {
      float f;
      std::memcpy(&f, values.data() + i * 4, 4);
      x = f;
    } else {
      uint64_t code = 0;
      std::memcpy(&code, values.data() + i * eb, eb);
      if (code != (golden_code(out, i) & (eb == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * eb)) - 1))) return false;
      continue;
    }
    if (!((std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, 8) == 0)) return false;
  }
  return true;
}

// A finite number >= 0, as the CLI's validator accepts; else the option is not given.
double cli_tolerance(Bytes& in) {
  const double x = std::fabs(in.f64());
  return std::isfinite(x) ? x : -1;
}

// run_compare (verify/cli/cmd_compare.cpp) after the golden was read and found fresh: open the
// candidate, judge_candidate, and both report forms (--json and the console text), built here
// instead of printed.
assay::Verdict run_compare(const Subject& s, const std::string& candidate, const assay::CandidateJudging& how,
                           std::string& text) {
  using namespace assay;
  const Golden& g = s.g;
  nlohmann::json js{{"golden", s.golden_path}, {"candidate", candidate}, {"op", g.prov.op}, {"case", g.prov.case_name},
                    {"fixture_checked", true}};
  const auto cand = h5::File::open_read(candidate);
  const auto res = judge_candidate(g, s.policy, cand, how);
  js["profile"] = res.profile;
  js["verdict"] = verdict_name(res.verdict);
  for (const auto& r : res.reports) js["tensors"].push_back(tensor_json(r));
  text = js.dump(2) + "\n";
  text += fmt::format("{}/{}: golden {} vs candidate {} (profile {})\n", g.prov.op, g.prov.case_name, s.golden_path,
                      candidate, res.profile);
  for (const auto& r : res.reports) text += fmt::format("  {}\n    tolerance {}: {}\n", r.summary(), r.tol.source, r.tol.why);
  text += fmt::format("{} {}/{}\n", verdict_name(res.verdict), g.prov.op, g.prov.case_name);
  return res.verdict;
}

void save_candidate(const std::string& path, const uint8_t* data, size_t size) {
  static const char* dir = std::getenv("ASSAY_FUZZ_SAVE_CANDIDATES");
  if (!dir || !*dir) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the input names the copy
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::filesystem::copy_file(path, fmt::format("{}/cand-{:016x}.h5", dir, h),
                             std::filesystem::copy_options::overwrite_existing, ec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& subs = subjects();
  Bytes in(data, size);
  const Subject& s = subs[in.u8() % subs.size()];
  const auto& outs = s.g.outputs;

  // Command-line options.
  assay::CandidateJudging o;  // assay compare's options
  const uint8_t flags = in.u8();
  if (flags & 1) o.profile = profile_spec(in, s);
  if (flags & 2) o.atol = cli_tolerance(in);
  if (flags & 4) o.rtol = cli_tolerance(in);
  if (flags & 8) {
    const uint8_t mask = in.u8();
    for (size_t i = 0; i < outs.size() && i < 7; ++i)
      if (mask & (1u << i)) o.outputs.push_back(outs[i].expected.name);
    if (mask & 0x80) o.outputs.push_back(in.str(8));  // a name the golden may not have
  }
  const std::string root_profile = profile_spec(in, s);
  // Whether the candidate is an exact copy of the golden judged with no overrides (must pass).
  bool exact_copy = o.profile.empty() && o.atol < 0 && o.rtol < 0 && o.outputs.empty() &&
                    (root_profile.empty() || root_profile == assay::kStrictProfile);

  // The candidate file (writing it must always work: it is well-formed by construction).
  const std::string path = assay_fuzz::temp_dir() + "/candidate.h5";
  const bool written = assay_fuzz::accepts("write candidate", [&] {
    auto f = assay::h5::File::create(path);
    bool have_outputs_group = false;
    for (const auto& out : outs) {
      const uint8_t layout = in.u8() % 4;  // 0 /outputs/<name>, 1 /<name>, 2 missing, 3 both
      const Elem e = kElems[in.u8() % std::size(kElems)];
      const assay::Shape shape = make_shape(in, out.expected.shape);
      const std::string dtype = dtype_attr(in, out);
      const int64_t n = assay::numel(shape);
      if (n > (int64_t{1} << 16)) {  // keep every input fast
        exact_copy = false;
        continue;
      }
      const auto values = make_values(in, out, e, static_cast<size_t>(n));
      exact_copy = exact_copy && layout != 2 && is_exact_copy(out, e, shape, dtype, values);
      std::vector<std::string> where;
      if (layout == 0 || layout == 3) where.push_back("/outputs/" + out.expected.name);
      if (layout == 1 || layout == 3) where.push_back("/" + out.expected.name);
      for (const auto& ds : where) {
        if (ds.rfind("/outputs/", 0) == 0 && !have_outputs_group) {
          f.create_group("/outputs");
          have_outputs_group = true;
        }
        f.write(ds, e, shape, values.data());
        if (!dtype.empty()) f.set_attr(ds, "dtype", dtype);
      }
    }
    if (!root_profile.empty()) f.set_attr("/", "precision_profile", root_profile);
    f.close();
  });
  if (!written) assay_fuzz::finding("a well-formed candidate could not be written (InputError from assay::h5::File)");
  assay_fuzz::require_hdf5_closed("write candidate");
  save_candidate(path, data, size);

  assay::Verdict verdict = assay::Verdict::NotRun;
  std::string report;
  const bool ran = assay_fuzz::accepts("compare", [&] { verdict = run_compare(s, path, o, report); });
  assay_fuzz::require_hdf5_closed("compare");
  if (assay_fuzz::verbose()) std::fprintf(stderr, "%s(exact copy: %s)\n", report.c_str(), exact_copy ? "yes" : "no");
  if (exact_copy && !(ran && verdict == assay::Verdict::Passed))
    assay_fuzz::finding(fmt::format("an exact copy of {}'s outputs did not pass ({})", s.golden_path,
                                    ran ? std::string(assay::verdict_name(verdict)) : "refused with InputError"));
  return 0;
}
