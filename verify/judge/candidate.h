// Candidate files: a kernel's outputs in HDF5, as written by Python, Triton, TileLang or CuTe
// harnesses (README "Checking a Python kernel").
//
//   candidate.h5
//     /outputs/<name>   (or /<name>)  one dataset per golden output, same shape as /expected/<name>
//       any float storage (fp64, fp32, fp16; bf16 upcast to fp32 is exact), or
//       integer storage of codes with a string attribute dtype = "bf16" | "fp8e4m3" | ... .
//       16-, 8-, 32- and 64-bit codes may be stored signed or unsigned (tensor.view(torch.int16)
//       gives signed storage of bf16 codes): only the bit pattern counts.
//     /intermediates/<name>  (optional) any of the golden's /intermediates (chunk states, split
//       partials, trajectories), same shape and storage rules; judged in rows of their own when the
//       op's fixture has a [[tolerance]] entry naming it (else reported as not judged), and a wrong
//       intermediate fails the case
//     attribute precision_profile (optional, root)  the kernel's precision profile
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "verify/judge/compare.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/judge/tolerance.h"

namespace assay {

// The candidate's values for golden output `o`, decoded to fp64. Throws InputError naming the file
// and dataset: missing dataset, wrong shape, unknown or wrong dtype, codes that are not codes of
// the named dtype, an integer dataset without a dtype attribute.
// group "intermediates": the candidate's /intermediates/<name> (no root fallback).
std::vector<double> read_candidate(const h5::File& f, const Output& o, std::string_view group = "outputs");

// How a candidate file is judged (assay compare's options).
struct CandidateJudging {
  std::string profile;               // --profile; empty: the file's precision_profile, else strict
  std::vector<std::string> outputs;  // only these outputs; empty: all
  double atol = -1, rtol = -1;       // >= 0: replace the selected entry's atol / rtol (bound_k, period kept)
};
struct CandidateResult {
  std::string profile;  // the profile judged under
  Verdict verdict = Verdict::Passed;
  // One per compared output (golden order), then one per judged intermediate (TensorReport::
  // intermediate set, golden order).
  std::vector<TensorReport> reports;
  std::vector<std::vector<double>> actual;  // the candidate's values (fp64), one per report
  std::vector<std::string> notes;           // intermediates the candidate gave that were not judged, and why
};
// Judges candidate file `cand` against golden `g` (already checked for staleness) under `policy`:
// resolves the profile (an option and a different file attribute is an error; an undeclared
// profile is refused), reads and compares every selected output. InputError on bad input.
CandidateResult judge_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                                const CandidateJudging& how);

// The intermediates part of judge_candidate (also used by the GPU runner): judges every
// /intermediates/<name> that `cand` holds (and `selected` accepts, when given) against the golden's
// intermediate of that name under the tolerance entry naming it for r.profile (override_tol, when
// given, rewrites it). Appends reports (intermediate = true) and actual values, sets r.verdict to
// Incorrect on a failure, and adds a note for each one it cannot judge (not in the golden, no entry
// of its own, an entry scaling a bound the golden lacks).
void judge_intermediates(const Golden& g, const TolerancePolicy& policy, const h5::File& cand, CandidateResult& r,
                         const std::function<bool(const std::string&)>& selected = nullptr,
                         const std::function<Tolerance(Tolerance)>& override_tol = nullptr);

}  // namespace assay
