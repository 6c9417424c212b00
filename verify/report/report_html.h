// The HTML report of `assay verify`, `assay compare` (one golden or --golden-dir) and Python's
// assay.check: one self-contained file (inline CSS and SVG, no scripts, no network fetches).
//
//   - the verdict table (one row per case: verdict, kernel, case, profile, worst error / allowed,
//     reason), with a link to each case that did not pass;
//   - per case that did not pass: its reason, findings, repro bundle and worker log tail, and per
//     tensor the policy entry with its `why`, the first and the worst mismatch as multi-indices, and
//     three plots from its ErrorProfile (verify/judge/error_profile.h): max error / allowed along the
//     sequence axis (class "seq-plot"), a (batch·head x tile) heatmap of error / allowed (class
//     "heatmap"), and a histogram of log10(error / allowed) (class "hist");
//   - passing tensors show their margin (max error / allowed).
#pragma once
#include <string>

#include "verify/report/report.h"

namespace assay {

std::string to_html(const RunReport& r);

// Writes `text` to `path` through `<path>.tmp.<pid>` and a rename (never a half-written report);
// InputError naming the path when it cannot be written.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace assay
