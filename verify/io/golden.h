// Golden files: golden/<op>/<case>.h5, layout in golden/SCHEMA.md.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fixtures/gen/recipe.h"
#include "reference/core/case_fields.h"
#include "reference/core/sample.h"
#include "reference/core/tensor.h"

namespace assay {

inline constexpr int64_t kSchemaVersion = 2;  // 2: content hashes over every dataset and attribute
// 3: some input is stored as its recipe (golden/SCHEMA.md "Inputs by recipe"). A golden whose inputs
// are all values is still written as version 2, so every older golden keeps its bytes and hashes.
inline constexpr int64_t kSchemaVersionRecipe = 3;
// 4: the outputs are sampled (golden/SCHEMA.md "Sampled outputs"): a /sample group, and each
// /expected/<name> holds only the sampled elements of a tensor of attributes full_axes, full_shape.
inline constexpr int64_t kSchemaVersionSampled = 4;
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
  // Empty, or parallel to inputs: a set entry is (write_golden) / was (read_golden) stored as its
  // recipe, and read_golden regenerated the values from it (gen::realize, the fixture's own code).
  std::vector<std::optional<gen::Recipe>> input_recipes;
  // Set by read_golden when a regenerated input's codes do not hash to its recorded fnv1a64: the
  // one-line Stale reason naming the file and dataset (check_stale reports it first).
  std::string recipe_stale;
  std::vector<Output> outputs;
  // Empty unless the outputs are sampled (reference/core/sample.h): then every Output is sampled
  // (Output::sampled, full_axes, full_shape, sample_offsets) and the golden holds no intermediates.
  SampleSpec sample;
  std::vector<Tensor> intermediates;  // fp64 values; dtype = the dtype kernels hold it in
  std::map<std::string, std::vector<double>> intermediate_bounds;  // by name (bf16-rounded up)
  std::vector<FormAgreement> agreement;
  // Outputs with one oracle form only, and why (OracleResult::single_form).
  std::map<std::string, std::string> single_form;
  // The resolved case fields (reference/core/case_fields.h): what a kernel may read of the case.
  CaseFields case_fields;
  // As recorded in the file by read_golden (empty when absent); write_golden ignores them and
  // records golden_hashes(*this) / content_hash(*this). verify/io/stale.h compares the two.
  std::map<std::string, std::string> recorded_hashes;  // dataset path -> its fnv1a64 attribute
  std::string recorded_content_hash;                    // root attribute content_fnv1a64

  const Output* output(std::string_view name) const;
  const Tensor* input(std::string_view name) const;
  const Tensor* intermediate(std::string_view name) const;
  // Intermediate `name` as an Output (expected values, its dtype, its bound if any), so that a
  // candidate's intermediate is judged by the one element rule and the policy, like an output.
  std::optional<Output> intermediate_output(std::string_view name) const;
};

// Whether input i is (to be) stored as its recipe.
bool input_is_recipe(const Golden& g, size_t i);
// The schema version a golden is written with: kSchemaVersionRecipe when an input is a recipe, else
// its prov.schema_version (content_hash covers this number).
int64_t written_schema_version(const Golden& g);

// Writes to <path>.tmp.<pid> and renames over <path>: a golden is either whole or absent.
void write_golden(const std::string& path, const Golden& g);

// Reads and validates (schema version, dtypes, shapes, sizes). Throws InputError naming the file
// and dataset. Does not check staleness (verify/io/stale.h does).
// realize_recipes = false: inputs stored as recipes keep no values (Tensor::data empty; their
// regenerated codes are still hashed, a block at a time, and checked against the recorded hash):
// for readers that judge outputs and need no input values (the runner's parent, compare), so a
// golden with a 2^31-element recipe input costs no 16 GB.
Golden read_golden(const std::string& path, bool realize_recipes = true);
// As read_golden(path, false), but recipe inputs are neither regenerated nor hashed (Tensor::data
// empty, recipe_stale never set): for the GPU worker, which makes their codes (gen::recipe_codes)
// and checks them against input_hashes itself (gen::codes_hash), one regeneration instead of two.
Golden read_golden_recipes_unhashed(const std::string& path);

std::string golden_rel_path(const std::string& op, const std::string& case_name);  // "<op>/<case>.h5"

}  // namespace assay

namespace assay {
// Differences between a freshly generated golden and a stored one, as one line each:
// inputs must be bit-identical (by hash) and stored alike (a recipe input by the same recipe, so
// the stored golden may be read unhashed), outputs/bounds/intermediates within `rel`
// (agreement_rel), rounded codes identical, case text identical. Empty = the same golden.
std::vector<std::string> golden_diff(const Golden& fresh, const Golden& stored, double rel = 1e-12);
// Content hashes (FNV-1a 64, 16 hex digits), so that any edit of a golden is Stale:
//   golden_hashes: one per output-side dataset (/expected, /rounded, /bounds, /allowed_mask, /alt,
//     /intermediates), over its name, shape, its attributes (dtype, axes, allow_nonfinite) and its
//     values (fp64 bytes, or codes as uint64);
//   content_hash: over the root provenance that decides a verdict (schema_version, op, case,
//     level, case_toml, seed, rng, oracle_agreement), the /case fields, every input's name, dtype, axes, shape and
//     fnv1a64, and every golden_hashes entry. generator, git_rev and compiler are not covered (they
//     say who wrote the file, not what it asserts).
std::map<std::string, std::string> golden_hashes(const Golden& g);
std::string content_hash(const Golden& g);
// "<op>/<case>.h5 <level> <input>=<fnv1a64> ..." (inputs sorted by name): one MANIFEST line.
std::string manifest_line(const Golden& g);
}  // namespace assay
