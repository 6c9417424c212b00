// fuzz_error: the `<case>.error` files of `assay compare --golden-dir D --candidate-dir C`
// (verify/run/compare_dir.cpp), written by whoever produced the candidates.
//
// Fixed subject, made once per process: D holds one valid golden (scaled_add/normal_odd_shape).
// Per input, C/normal_odd_shape.error is made from the bytes: the first byte picks what it is
//   0: a regular file holding the rest of the bytes     3: a FIFO
//   1: a symbolic link to a file holding the rest       4: a symbolic link to itself (a loop)
//   2: a directory                                      5: a symbolic link to /dev/zero
// (other values: modulo 6), and `assay::compare_dirs` judges the pair.
//
// Correct outcome: exactly one case, verdict Failed (Hung when a regular file's first line starts
// with "Hung:"), a reason that printable() keeps on one line, a log tail of at most 64 KiB read.
// Findings: any exception, a crash, a sanitizer report, a hang (a FIFO opened for a blocking
// read), another verdict, an HDF5 handle left open.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fuzz/common.h"
#include "verify/run/compare_dir.h"
#include "verify/io/safe_files.h"

namespace fs = std::filesystem;

namespace {

struct Dirs {
  std::string golden, cands;
};

const Dirs& dirs() {
  static const Dirs d = assay_fuzz::setup("copying the golden", [] {
    Dirs r{assay_fuzz::temp_dir() + "/golden", assay_fuzz::temp_dir() + "/cands"};
    fs::create_directories(r.golden);
    fs::copy_file(assay_fuzz::source_path("golden/scaled_add/normal_odd_shape.h5"), r.golden + "/normal_odd_shape.h5",
                  fs::copy_options::overwrite_existing);
    return r;
  });
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Dirs& d = dirs();
  std::error_code ec;
  fs::remove_all(d.cands, ec);
  fs::create_directories(d.cands);
  const std::string err = d.cands + "/normal_odd_shape.error";
  const int kind = size ? data[0] % 6 : 0;
  const uint8_t* body = size ? data + 1 : data;
  const size_t n = size ? size - 1 : 0;
  switch (kind) {
    case 0: assay_fuzz::write_temp("cands/normal_odd_shape.error", body, n); break;
    case 1: fs::create_symlink(assay_fuzz::write_temp("target.txt", body, n), err); break;
    case 2: fs::create_directories(err); break;
    case 3:
      if (::mkfifo(err.c_str(), 0600) != 0) assay_fuzz::finding("setup: mkfifo failed");
      break;
    case 4: fs::create_symlink(err, err); break;
    default: fs::create_symlink("/dev/zero", err); break;
  }
  assay::CompareDirOptions o;
  o.golden_dir = d.golden;
  o.candidate_dir = d.cands;
  o.fixture_check = false;
  o.work_dir = assay_fuzz::temp_dir() + "/repro";
  assay_fuzz::accepts("compare_dirs", [&] {
    const auto rep = assay::compare_dirs(o);
    if (rep.cases.size() != 1) assay_fuzz::finding("compare_dirs: " + std::to_string(rep.cases.size()) + " cases for one golden");
    const auto& c = rep.cases.front();
    const bool hung = kind == 0 && n >= 5 && std::string(reinterpret_cast<const char*>(body), 5) == "Hung:";
    const auto want = hung ? assay::Verdict::Hung : assay::Verdict::Failed;
    if (c.verdict != want)
      assay_fuzz::finding(std::string("compare_dirs: verdict ") + std::string(assay::verdict_name(c.verdict)) + ", expected " +
                          std::string(assay::verdict_name(want)) + " (kind " + std::to_string(kind) + ")");
    const std::string shown = assay::printable(c.reason);
    for (char ch : shown)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) assay_fuzz::finding("printable() kept a control character");
    if (c.log_tail.size() > (64u << 10) + 1024) assay_fuzz::finding("log tail larger than the cap");
  });
  assay_fuzz::require_hdf5_closed("compare_dirs");
  return 0;
}
