// `assay bisect GOLDEN CANDIDATE`: where a wrong candidate first goes wrong.
//
// 1. The intermediates the candidate hands back (its /intermediates/<name>, judged as compare judges
//    them: verify/judge/candidate.h) are walked in the op's dependency order, along their walk axis:
//    chunk / C / NC (scans: chunk_states[c] is the state at the START of chunk c), S (optimizer
//    trajectories: index s = after step s + 1), split (attention split-KV partials; the combine
//    comes after every split). Per intermediate: the error / allowed of every walk index, the first
//    index out of tolerance with its multi-index, and how far inside every earlier index stayed.
//    The first bad place is the smallest such index over the intermediates.
// 2. The outputs (always): per output, with the element rule of the verdict (verify/judge/compare.h) and
//    the output's policy entry, the error / allowed at every position of the sequence axis
//    (docs/DESIGN.md axis vocabulary: T, S, Sq, Sk, L, M; without one, the offset over the non
//    batch/head axes), the first position out of tolerance with its multi-index, how far inside
//    every earlier position stayed, the chunk that position falls in when the case has a
//    `chunk_size`, and the worst (batch·head, tile) cells. Outputs are listed forward before
//    backward (a gradient is named "d" + an input), each group in the order they first go wrong.
//    Without intermediates this is the whole answer.
// 3. A repro bundle (write_bisect_bundle): the first bad walk step alone, as a small derived golden
//    and a candidate that `assay compare` re-runs on.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verify/judge/candidate.h"
#include "verify/io/golden.h"

namespace assay {

struct BisectOutput {
  std::string name, seq_axis;
  int64_t seq_len = 0;
  bool bad = false;
  bool backward = false;            // a gradient: named "d" + one of the golden's inputs (dq, dx, dB, ...)
  int64_t first_bad_pos = -1;       // along the sequence axis (exact, not grouped)
  std::string first_bad_index;      // the first mismatching element at that position
  double first_bad_ratio = 0;       // max error / allowed at that position
  double before_ratio = 0;          // max error / allowed over all earlier positions
  int64_t chunk = -1, chunk_size = 0;  // the chunk of first_bad_pos (case field chunk_size), or -1
  double max_ratio = 0;
  std::vector<std::string> worst_cells;  // "[B·H=3, T/64=11]: 41x" up to 3
  std::string tolerance_source;
};

// One judged intermediate, walked along its walk axis.
struct BisectStage {
  std::string name, walk_axis;  // walk_axis: "chunk" | "C" | "NC" | "S" | "split" | "" (none)
  int walk_dim = -1;            // the walk axis' dimension, -1 when none
  int64_t walk_len = 1;
  bool bad = false;
  int64_t first_bad = -1;           // walk index of the first element out of tolerance
  std::string first_bad_index;      // that element's multi-index
  double first_bad_ratio = 0;       // max error / allowed at that walk index
  double before_ratio = 0;          // max error / allowed over the earlier walk indices
  double max_ratio = 0;
  std::string tolerance_source;
  std::string label(int64_t i) const;  // "chunk 12", "step 4" (S index 3), "split 2"
};

struct BisectReport {
  std::string op, case_name, profile;
  std::vector<BisectStage> stages;    // judged intermediates: the bad ones first, by first_bad
  std::vector<BisectOutput> outputs;  // the bad ones first, by first_bad_pos
  std::vector<std::string> notes;     // intermediates the candidate gave that could not be judged
  CandidateResult judged;             // what compare saw (values for the repro bundle)
  std::string repro_golden, repro_candidate;  // set by write_bisect_bundle
  bool any_bad() const;
  // The stage with the smallest first bad walk index; nullptr when no intermediate has an element
  // out of tolerance (none bad, or bad only as a whole under a never-pass rule).
  const BisectStage* first_bad_stage() const;
  std::string text() const;           // the console lines
  nlohmann::json json() const;
};

BisectReport bisect_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                              const CandidateJudging& how);

// The repro bundle of r's first bad walk step k (a chunk, step or split), written as
// <prefix>.golden.h5 (a derived golden of level "bisect": the walked intermediate at k - 1 and k,
// the state going in and the state that came out, as an output with its bound; for scans the
// inputs and outputs of the tokens of chunks k - 1 and k, for optimizers the gradients of steps k
// and k + 1 (S indices k - 1, k); other inputs whole) and <prefix>.candidate.h5 (the candidate's
// values of the same slices, with its precision profile). `assay compare` judges the pair as it
// judged the full case (a bisect golden is never regenerated: only its own hashes are checked).
// Returns false (writing nothing) when no intermediate was out of tolerance. Temp file + rename.
bool write_bisect_bundle(const Golden& g, BisectReport& r, const std::string& prefix);

}  // namespace assay
