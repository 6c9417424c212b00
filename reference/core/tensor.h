// Tensors as the oracles, goldens and the runner exchange them: named, fp64 values, a logical
// shape with one axis letter (or short name) per dimension from the shared vocabulary
// (docs/DESIGN.md "Axis vocabulary": B, T, S, Sq, Sk, H, Hq, Hkv, HV, G, D, Dv, P, N, K, V, R, Q,
// L, M ...), and a dtype
// (for inputs the storage dtype the values were rounded to; for outputs the kernel-facing dtype).
// Layout is dense row-major over `shape`.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace assay {

using Shape = std::vector<int64_t>;

// The element count; InputError on a negative dimension or a product past int64 (a shape such as
// (4294967296, 4294967296) must not wrap to 0 and pass as an empty tensor).
int64_t numel(const Shape& s);
// Bytes a command may allocate for one tensor or dataset before it refuses (InputError naming it):
// $ASSAY_MAX_MEMORY bytes if set (and set_memory_limit()), else a quarter of physical memory.
int64_t memory_limit();
void set_memory_limit(int64_t bytes);
// Throws InputError("<what>: <n> elements of <bytes_each> bytes ... above the memory limit") if
// n * bytes_each > memory_limit().
void check_memory(int64_t n, int64_t bytes_each, const std::string& what);
std::string shape_str(const Shape& s);  // "[2, 63, 4]"

struct Tensor {
  std::string name;
  std::vector<std::string> axes;  // one per dimension, e.g. {"B", "T", "H", "D"}
  Shape shape;
  DType dtype = DType::f64;
  std::vector<double> data;  // row-major, numel(shape) values

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  // "[b=1, t=62, h=3]" style multi-index of a flat offset, in the tensor's axis letters.
  std::string index_str(int64_t flat) const;
  std::vector<int64_t> unravel(int64_t flat) const;
};

// One expected output of an op.
struct Output {
  Tensor expected;                           // fp64 truth; expected.dtype = kernel-facing dtype
  std::optional<std::vector<double>> bound;  // per-element error-bound magnitude (e.g. sum_j p|v|)
  // A second magnitude, for the sensitivity to a rounding a precision profile adds (e.g. Mamba-3's
  // final_ssm under bf16-angles: the rotation scale of every accumulated key); the tolerance term
  // bound2_k * bound2 (verify/judge/tolerance.h).
  std::optional<std::vector<double>> bound2;
  std::optional<std::vector<uint64_t>> rounded;  // spec-rounded codes in expected.dtype (exact answer)
  bool allow_nonfinite = false;  // the truth itself holds NaN/Inf (e.g. quantizing NaN input)
  // Where the spec allows more than one encoding (exact outputs only): per element, a bitmask of
  // the allowed codes (formats of <= 6 bits, bit c = code c allowed) and/or one alternative value.
  std::optional<std::vector<uint64_t>> allowed_mask;
  std::optional<std::vector<double>> alt;
  // Codes scaled per block by another output (MX element codes and packed bytes by their UE8M0
  // scale): that output's name and the block's length along the last axis (rows map one to one).
  // A block whose scale is NaN decodes to NaN whatever its codes (verify/judge/compare.h,
  // scale_waiver).
  std::string scaled_by;
  int64_t scale_block = 0;
  // Set per candidate by the judge, never stored: 1 = this element is accepted whatever its value.
  std::vector<uint8_t> waived;
  // A sampled output (reference/core/sample.h, golden/SCHEMA.md "Sampled outputs"): the kernel
  // writes the whole tensor (full_axes, full_shape); `expected` (axes {"sample"}) and the per-element
  // arrays above hold only its elements at the flat offsets `sample_offsets`.
  bool sampled = false;
  std::vector<std::string> full_axes;
  Shape full_shape;
  std::vector<int64_t> sample_offsets;
  // "[b=8, t=65535, h=63, p=1]" for element i: the index in the whole tensor when sampled.
  std::string element_str(int64_t i) const;
};

// Measured agreement of the two oracle forms on one tensor.
struct FormAgreement {
  std::string tensor;
  std::string form_a, form_b;
  double max_rel = 0;  // agreement_rel(a, b)
};

struct OracleResult {
  std::vector<Output> outputs;
  // Chunk states, split partials, trajectories: fp64 values; Tensor::dtype is the dtype a kernel
  // holds the intermediate in (what a candidate's /intermediates/<name> is judged as, like an
  // output's kernel-facing dtype; f64 where no kernel form exists).
  std::vector<Tensor> intermediates;
  // Per-element error-bound magnitudes of intermediates (same shape, the outputs' bound analogue),
  // by intermediate name. `assay gen` rounds them UP to bf16 before writing (a bound rounded up
  // stays a bound; 2 bytes an element keeps goldens small): golden/SCHEMA.md.
  std::map<std::string, std::vector<double>> intermediate_bounds;
  std::vector<FormAgreement> agreement;
  // Every output needs an agreement entry of its own (tensor == its name), or a reason here why it
  // has only one form (recorded in the golden, shown by `assay inspect`); `assay gen` refuses
  // an output with neither.
  std::map<std::string, std::string> single_form;
};

// Relative agreement of two fp64 arrays, the one metric used for "the two forms agree to 1e-12"
// and for `assay gen --check`:  max_i |a_i - b_i| / max(|b_i|, rms(b)), with rms(b) the
// root-mean-square of b (a tensor-scale floor, so exact cancellations do not divide by ~0).
// 0 for empty arrays; +inf if exactly one side is NaN/Inf at some position or they differ there.
double agreement_rel(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace assay
