// The worker protocol of `assay verify`: the parent (verify/run/runner.cpp) runs each (kernel, golden)
// in a child process, `assay __worker`, so that a crash, a sticky CUDA error or a hang is a
// verdict for that case and the run goes on.
//
// The worker (verify/run/worker_cuda.cpp, CUDA builds only):
//   1. loads the golden and the plugins, finds the kernel, uploads the inputs (storage codes);
//   2. allocates every output with a guard band of kGuardBytes before and after it, fills the
//      guards with guard_byte(i) and the payload with the run's poison code (NaN where the dtype
//      has one; run 0 and run 1 use different codes, so an unwritten element also breaks the
//      bitwise run-to-run check even where the golden allows NaN or the dtype has no NaN);
//   3. launches, synchronizes, checks the guards and that the inputs were not modified,
//      downloads the outputs; repeats for run 1;
//   4. writes <dir>/candidate.h5 (/outputs/<name> = run 0, /run1/<name> = run 1, integer codes
//      with a dtype attribute: the candidate format `assay compare` reads) and <dir>/result.json.
// Exit codes: 0 ran (findings may be listed), 1 CUDA or launch error, 2 bad input, 125 no device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace assay::worker {

inline constexpr size_t kGuardBytes = 4096;
inline constexpr int kExitOk = 0, kExitCuda = 1, kExitInput = 2, kExitNoDevice = 125;

// The poison code of a dtype for run r (0 or 1): a NaN code for floating formats (two different
// NaN payloads where the format has more than one NaN), an invalid code (high bits set) for
// e2m1, alternating byte patterns for integers.
uint64_t poison_code(DType t, int run);
// Fills `n` elements of `elem_bytes` each with `code` (little-endian).
void fill_code(void* dst, size_t n, size_t elem_bytes, uint64_t code);

// Guard bands: byte i of a band (counted from the band's start) is guard_byte(i).
uint8_t guard_byte(size_t i);
void fill_guard(uint8_t* band, size_t n);
struct GuardCheck {
  size_t changed = 0;        // bytes that differ from the pattern
  int64_t first = -1, last = -1;  // offsets within the band
};
GuardCheck check_guard(const uint8_t* band, size_t n);
// One line: "output 'out': 2 bytes after the end overwritten (bytes +0..+1 past the last element)"
std::string describe_guard(const std::string& tensor, bool before, const GuardCheck& c, size_t band_bytes);

// Codes read back from a device buffer -> fp64 values for compare. A code with bits outside the
// format (e2m1 high nibble, e.g. the poison) decodes to NaN.
double decode_code(DType t, uint64_t code);
// Unpacks little-endian elements of elem_bytes each.
std::vector<uint64_t> unpack_codes(const void* src, size_t n, size_t elem_bytes);

}  // namespace assay::worker

namespace assay::worker {

struct WorkerArgs {
  std::string golden, kernel, out_dir;
  std::vector<std::string> plugins;
  int runs = 2;
  bool relations = false;  // also run the kernel's declared relations (verify/run/relations.h)
  bool probe = false;  // print the device description (JSON) and exit: 0, or 125 without a device
};

// `assay __worker`: verify/run/worker_cuda.cpp in CUDA builds; otherwise a stub that prints
// "built without CUDA" and exits 125.
int worker_main(const WorkerArgs& a);

}  // namespace assay::worker
