// fuzz_golden: the golden and candidate HDF5 readers.
//
// Input: the bytes of an HDF5 file (seeds: the committed goldens and candidate files). They are
// written to a per-process temp file, then read the way `assay compare` / `assay verify` read
// files from disk (assay::h5::File::open_read on a path):
//   1. assay::read_golden(path), and on success assay::check_stale(golden, "") (stored hashes);
//   2. the same file as a candidate: assay::read_candidate(file, output) for every output of a
//      few fixed valid goldens (loaded once), each output independently.
// Correct rejection: assay::InputError. Findings: any other exception, a crash, a sanitizer report
// (ASan/UBSan/LSan), an HDF5 handle left open after the input, a timeout or an OOM (the memory
// limit is 64 MiB, so a declared-size bomb must be refused by check_memory first). A crash whose
// top frames are inside libhdf5 is an HDF5 bug rather than ours: report it separately.
#include <string>
#include <vector>

#include "fuzz/common.h"
#include "verify/judge/candidate.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/io/stale.h"

namespace {

// The goldens whose outputs the input is read against as a candidate: float outputs (scaled_add)
// and code outputs (NVFP4: fp4e2m1 codes, fp8e4m3 block scales, fp32 amax).
const std::vector<assay::Golden>& fixed_goldens() {
  static const std::vector<assay::Golden> g = assay_fuzz::setup("loading the fixed goldens", [] {
    std::vector<assay::Golden> v;
    for (const char* rel : {"golden/scaled_add/normal_odd_shape.h5", "golden/quant/nvfp4_sixth_fold_witness.h5"})
      v.push_back(assay::read_golden(assay_fuzz::source_path(rel)));
    assay_fuzz::require_hdf5_closed("setup");
    return v;
  });
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& fixed = fixed_goldens();
  const std::string path = assay_fuzz::write_temp("input.h5", data, size);

  assay_fuzz::accepts("read_golden", [&] {
    const assay::Golden g = assay::read_golden(path);
    (void)assay::check_stale(g, "");
  });
  assay_fuzz::require_hdf5_closed("read_golden");

  assay_fuzz::accepts("open_read", [&] {
    const auto f = assay::h5::File::open_read(path);
    for (const auto& g : fixed)
      for (const auto& o : g.outputs) assay_fuzz::accepts("read_candidate", [&] { (void)assay::read_candidate(f, o); });
  });
  assay_fuzz::require_hdf5_closed("read_candidate");
  return 0;
}
