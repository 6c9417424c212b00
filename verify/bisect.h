// `assay bisect GOLDEN CANDIDATE`: where a wrong candidate first goes wrong.
//
// Today it walks the outputs (the fallback the issue names for candidates without intermediates):
// per output, with the element rule of the verdict (verify/compare.h) and the output's policy
// entry, the error / allowed at every position of the sequence axis (docs/DESIGN.md axis
// vocabulary: T, S, Sq, Sk, L, M; without one, the offset over the non batch/head axes), the first
// position out of tolerance with its multi-index, how far inside the tolerance every earlier
// position stayed, the chunk that position falls in when the case has a `chunk_size`, and the
// worst (batch·head, tile) cells. Outputs are listed in the order they first go wrong.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verify/candidate.h"
#include "verify/golden.h"

namespace assay {

struct BisectOutput {
  std::string name, seq_axis;
  int64_t seq_len = 0;
  bool bad = false;
  int64_t first_bad_pos = -1;       // along the sequence axis (exact, not grouped)
  std::string first_bad_index;      // the first mismatching element at that position
  double first_bad_ratio = 0;       // max error / allowed at that position
  double before_ratio = 0;          // max error / allowed over all earlier positions
  int64_t chunk = -1, chunk_size = 0;  // the chunk of first_bad_pos (case field chunk_size), or -1
  double max_ratio = 0;
  std::vector<std::string> worst_cells;  // "[B·H=3, T/64=11]: 41x" up to 3
  std::string tolerance_source;
};

struct BisectReport {
  std::string op, case_name, profile;
  std::vector<BisectOutput> outputs;  // the bad ones first, by first_bad_pos
  bool any_bad() const;
  std::string text() const;           // the console lines
  nlohmann::json json() const;
};

BisectReport bisect_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                              const CandidateJudging& how);

}  // namespace assay
