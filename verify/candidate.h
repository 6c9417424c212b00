// Candidate files: a kernel's outputs in HDF5, as written by Python, Triton, TileLang or CuTe
// harnesses (README "Checking a Python kernel").
//
//   candidate.h5
//     /outputs/<name>   (or /<name>)  one dataset per golden output, same shape as /expected/<name>
//       any float storage (fp64, fp32, fp16; bf16 upcast to fp32 is exact), or
//       integer storage of codes with a string attribute dtype = "bf16" | "fp8e4m3" | ... .
//       16-, 8-, 32- and 64-bit codes may be stored signed or unsigned (tensor.view(torch.int16)
//       gives signed storage of bf16 codes): only the bit pattern counts.
//     attribute precision_profile (optional, root)  the kernel's precision profile
#pragma once
#include <string>
#include <vector>

#include "reference/core/tensor.h"
#include "verify/compare.h"
#include "verify/golden.h"
#include "verify/h5.h"
#include "verify/tolerance.h"

namespace assay {

// The candidate's values for golden output `o`, decoded to fp64. Throws InputError naming the file
// and dataset: missing dataset, wrong shape, unknown or wrong dtype, codes that are not codes of
// the named dtype, an integer dataset without a dtype attribute.
std::vector<double> read_candidate(const h5::File& f, const Output& o);

// How a candidate file is judged (assay compare's options).
struct CandidateJudging {
  std::string profile;               // --profile; empty: the file's precision_profile, else strict
  std::vector<std::string> outputs;  // only these outputs; empty: all
  double atol = -1, rtol = -1;       // >= 0: replace the selected entry's atol / rtol (bound_k, period kept)
};
struct CandidateResult {
  std::string profile;  // the profile judged under
  Verdict verdict = Verdict::Passed;
  std::vector<TensorReport> reports;  // one per compared output, golden order
  std::vector<std::vector<double>> actual;  // the candidate's values (fp64), one per report
};
// Judges candidate file `cand` against golden `g` (already checked for staleness) under `policy`:
// resolves the profile (an option and a different file attribute is an error; an undeclared
// profile is refused), reads and compares every selected output. InputError on bad input.
CandidateResult judge_candidate(const Golden& g, const TolerancePolicy& policy, const h5::File& cand,
                                const CandidateJudging& how);

}  // namespace assay
