// Staleness: a golden whose inputs no longer match what its fixture generates is Stale, an
// error, never a pass (docs/DESIGN.md "Stale is an error"). Checked in this order:
//   1. every stored input's bits hash to the recorded fnv1a64 (a flipped byte is caught), every
//      output-side dataset (values and attributes) to its recorded fnv1a64, and the root
//      provenance with the list of datasets to content_fnv1a64 (verify/io/golden.h): an edited
//      /expected, /bounds, /rounded or dtype attribute is Stale; the seed and case attributes
//      agree with the recorded case text;
//   2. the fixture fixtures/<op>.toml still has the case, and its verbatim text is unchanged;
//   3. the fixture regenerates inputs with the same hashes (same names, dtypes, shapes, bits).
#pragma once
#include <string>

#include "verify/io/golden.h"

namespace assay {

struct StaleResult {
  bool stale = false;
  std::string reason;  // empty when fresh
};

// fixtures_dir empty: only check 1 runs (the caller reports that the fixture was not checked).
StaleResult check_stale(const Golden& g, const std::string& fixtures_dir);

}  // namespace assay
