// Relations that need no oracle (`assay verify --relations`, issue 40): identities a correct kernel
// satisfies at any shape, checked on a golden's own inputs by running the kernel again on related
// cases derived from them (no new oracle, no new golden):
//
//   batch.alone      every sequence of a batch run alone (B = 1)                      family "batch"
//   batch.extended   the batch with a copy of its last sequence appended (B + 1)      family "batch"
//   continuation     tokens [0, T1) then [T1, T) with the state handed over from the  family "continuation"
//                    first run's final-state outputs (a chunked prefill)
//   varlen           every sequence of a packed (seq_idx / cu_seqlens) case run as a  family "varlen"
//                    dense case of its own (its own initial state where the op has one)
//
// Each check's runs are reassembled into the golden's output shapes (the elements its runs cover)
// and judged element by element: every covered element by the golden's tolerance (the one element
// rule, verify/judge/compare.h check_element), and, where the kernel declares batch invariance
// (KernelDef::batch_invariant), the batch checks also bit for bit against the one run of the golden
// case. A failure names the check, the sequence and run that produced the element, and its first
// bad element. The layout relation (the same values as strided views into a wider parent) exists for
// Python kernels only (python/assay/relations.py): built-in and plugin kernels receive dense
// tensors (kernels/registry.h).
//
// Everything here is host code and pure: plan_checks derives the related cases from a golden;
// execute_check runs them through a caller's function (the worker's GPU launch, or a host kernel in
// the tests) and reassembles; judge_check gives the verdict.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/registry.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/judge/tolerance.h"
#include "verify/judge/verdict.h"

namespace assay::relations {

// The families a kernel may declare (KernelDef::relations, plugin flags ASSAY_KERNEL_REL_*).
const std::vector<std::string>& families();
bool known_family(std::string_view f);

// Run output `run_output` (axis `axis`, elements [src0, src0 + len)) lands in golden output
// `golden_output` at [dst0, dst0 + len) along the same axis; every other axis matches one to one.
struct Placement {
  std::string run_output, golden_output;
  int axis = 0;
  int64_t src0 = 0, dst0 = 0, len = 0;
};

// Input `input` of this run is output `from_output` of the earlier run `from_run` (the state handed
// over by a chunked prefill), re-encoded in the input's dtype.
struct Handover {
  std::string input, from_output;
  int from_run = 0;
};

struct SubRun {
  std::string label;  // "sequence 1 alone", "tokens [0, 32)"
  int sequence = -1;  // the golden's sequence (batch row or packed sequence) it computes; -1: all
  CaseFields fields;
  std::vector<Tensor> inputs;  // sorted by name; a handed-over input has its shape and dtype, no values yet
  std::vector<Handover> handovers;
  std::vector<kernels::TensorSpec> outputs;  // sorted by name
  std::vector<Placement> places;
};

struct Check {
  std::string name;    // "batch.alone"
  std::string family;  // "batch"
  std::string what;    // one line: what it runs
  std::string not_applicable;  // non-empty: why this golden cannot form it (the check is NotSupported)
  bool bitwise = false;        // also bit for bit against the golden case's one run
  std::vector<SubRun> runs;
  std::vector<std::string> notes;  // what it leaves uncovered (an empty packed sequence: not run)
};

// The checks of the declared families for golden `g` (op-specific: which inputs are states, how a
// case is packed; docs/DESIGN.md "Relations"). Unknown families: InputError.
std::vector<Check> plan_checks(const Golden& g, const std::vector<std::string>& families, bool batch_invariant);

// What the kernel sees of a sub-run (like verify/run/kernel_case.h for a golden).
kernels::KernelCase kernel_case_of(const Golden& g, const SubRun& r);

// Runs one sub-run: fills `codes` (output name -> the output's codes, row-major, in its dtype) and
// returns "" or the error.
using RunFn = std::function<std::string(const kernels::KernelCase& kc, const std::vector<Tensor>& inputs,
                                        std::map<std::string, std::vector<uint64_t>>& codes)>;
using SupportFn = std::function<kernels::Support(const kernels::KernelCase& kc)>;

// The reassembled result of one check: per golden output (golden order), the codes (uncovered
// elements 0) and the covered mask.
struct Executed {
  std::string status = "ok";  // "ok", "not_supported", "error"
  std::string message;
  std::vector<std::vector<uint64_t>> codes;
  std::vector<std::vector<uint8_t>> covered;
};
Executed execute_check(const Check& c, const Golden& g, const SupportFn& support, const RunFn& run);

// The worker's record of the checks in its candidate file (verify/run/worker.h): a group
// /relations/<check> per check with attributes status ("ok", "not_applicable", "not_supported",
// "error") and message and, when ok, /relations/<check>/<output> (codes in the output's dtype, the
// golden's shape, attribute dtype) and /relations/<check>/covered/<output> (u8).
// read_executed reads one back (the parent, runner_judge.cpp); InputError naming the file and dataset.
void write_executed(h5::File& f, const Golden& g, const std::vector<Check>& checks, const std::vector<Executed>& done);
Executed read_executed(const h5::File& f, const Golden& g, const Check& c);

// The element `flat` of golden output `out` comes from which run of `c` (-1: not covered).
int run_of(const Check& c, const Golden& g, const std::string& out, int64_t flat);

struct CheckVerdict {
  Verdict verdict = Verdict::NotRun;
  std::string reason;
  int64_t covered = 0, differing = 0;  // covered elements; those not bitwise equal to the one run
};
// base_codes: the golden case's one run (per golden output, golden order).
CheckVerdict judge_check(const Check& c, const Golden& g, const TolerancePolicy& policy, std::string_view profile,
                         const std::vector<std::vector<uint64_t>>& base_codes, const Executed& e);

// A relation candidate file written by Python (python/assay/relations.py) for golden `g`, judged
// against `base` (the case's own candidate) the same way:
//   root attributes  relation (check name), relation_what, relation_status ("ok", "not_applicable",
//                    "not_supported", "error"), relation_message, relation_bitwise ("1" or "0"),
//                    relation_runs (JSON [[label, sequence], ...]), relation_notes (JSON [...])
//   /outputs/<name>        the reassembled values (the candidate format, verify/judge/candidate.h)
//   /relation/run/<name>   integers, golden shape: 0 not covered, r + 1 = produced by run r
// InputError (one line naming the file and attribute or dataset) for a malformed file.
CheckVerdict judge_relation_file(const Golden& g, const TolerancePolicy& policy, std::string_view profile,
                                 const h5::File& base, const h5::File& rel);

// Element slicing helpers (exposed for tests): gather `idx` along `axis`.
Tensor gather(const Tensor& t, int axis, const std::vector<int64_t>& idx);
int axis_of(const std::vector<std::string>& axes, std::string_view a);  // -1 when absent

}  // namespace assay::relations
