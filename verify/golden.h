// Golden files: golden/<op>/<case>.h5, layout in golden/SCHEMA.md.
#pragma once
#include <string>
#include <vector>

#include "reference/core/tensor.h"

namespace assay {

inline constexpr int64_t kSchemaVersion = 1;
inline constexpr const char* kRngName = "philox4x32-10/assay-inputs-v1";

struct Provenance {
  int64_t schema_version = kSchemaVersion;
  std::string op, case_name, level, case_toml, rng = kRngName;
  uint64_t seed = 0;
  std::string generator, git_rev, compiler;
};

struct Golden {
  Provenance prov;
  std::vector<Tensor> inputs;             // values are exactly the decoded storage codes
  std::vector<std::string> input_hashes;  // recorded FNV-1a of the storage bytes (fixtures/gen/inputs.h)
  std::vector<Output> outputs;
  std::vector<Tensor> intermediates;
  std::vector<FormAgreement> agreement;

  const Output* output(std::string_view name) const;
  const Tensor* input(std::string_view name) const;
};

// Writes to <path>.tmp.<pid> and renames over <path>: a golden is either whole or absent.
void write_golden(const std::string& path, const Golden& g);

// Reads and validates (schema version, dtypes, shapes, sizes). Throws InputError naming the file
// and dataset. Does not check staleness (verify/stale.h does).
Golden read_golden(const std::string& path);

// Storage dtype -> HDF5 element type used for its codes.
std::string golden_rel_path(const std::string& op, const std::string& case_name);  // "<op>/<case>.h5"

}  // namespace assay

namespace assay {
// Differences between a freshly generated golden and a stored one, as one line each:
// inputs must be bit-identical, outputs/bounds/intermediates within `rel` (agreement_rel),
// rounded codes identical, case text identical. Empty = the same golden.
std::vector<std::string> golden_diff(const Golden& fresh, const Golden& stored, double rel = 1e-12);
// "<op>/<case>.h5 <level> <input>=<fnv1a64> ..." (inputs sorted by name): one MANIFEST line.
std::string manifest_line(const Golden& g);
}  // namespace assay
