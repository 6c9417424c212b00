// Repro bundles of Incorrect cases: write_repro (inputs, expected, actual, |diff|, mismatch mask and
// an error map per output, in one HDF5 file), the error map itself, and safe_name for file names.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "verify/judge/compare.h"
#include "verify/io/h5.h"
#include "verify/run/runner_internal.h"
#include "verify/io/safe_files.h"

namespace assay {
namespace fs = std::filesystem;

// ---- repro bundles -------------------------------------------------------------------------------------

namespace {

// Error map: mismatches aggregated by (batch, head, tile of the sequence axis), from the tensor's
// axis letters. Returns the map's axes, shape and counts.
struct ErrorMap {
  std::vector<std::string> axes;
  Shape shape;
  std::vector<int64_t> count;
  int64_t tile = 64;
};
ErrorMap error_map(const Tensor& t, const std::vector<uint8_t>& bad, int64_t tile) {
  ErrorMap m;
  m.tile = tile;
  std::vector<int> pick;  // which tensor axes are kept, and whether tiled
  std::vector<bool> tiled;
  for (size_t d = 0; d < t.axes.size(); ++d) {
    const auto& a = t.axes[d];
    if (a == "B") pick.push_back(static_cast<int>(d)), tiled.push_back(false);
    else if (a == "H" || a == "Hq" || a == "Hkv" || a == "HV" || a == "G") pick.push_back(static_cast<int>(d)), tiled.push_back(false);
    else if (a == "T" || a == "S" || a == "Sq" || a == "Sk" || a == "M" || a == "L")
      pick.push_back(static_cast<int>(d)), tiled.push_back(true);
  }
  if (pick.empty() && !t.shape.empty()) pick.push_back(0), tiled.push_back(t.shape[0] > tile);
  for (size_t j = 0; j < pick.size(); ++j) {
    const auto n = t.shape[static_cast<size_t>(pick[j])];
    m.axes.push_back(tiled[j] ? t.axes[static_cast<size_t>(pick[j])] + "/" + std::to_string(tile) : t.axes[static_cast<size_t>(pick[j])]);
    m.shape.push_back(tiled[j] ? (n + tile - 1) / tile : n);
  }
  m.count.assign(static_cast<size_t>(std::max<int64_t>(numel(m.shape), 1)), 0);
  for (size_t i = 0; i < bad.size(); ++i) {
    if (!bad[i]) continue;
    const auto idx = t.unravel(static_cast<int64_t>(i));
    int64_t flat = 0;
    for (size_t j = 0; j < pick.size(); ++j) {
      int64_t v = idx[static_cast<size_t>(pick[j])];
      if (tiled[j]) v /= tile;
      flat = flat * m.shape[j] + v;
    }
    ++m.count[static_cast<size_t>(flat)];
  }
  return m;
}

std::string worst_cells(const ErrorMap& m, int k) {
  std::vector<size_t> idx(m.count.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return m.count[a] > m.count[b]; });
  int64_t cells = 0;
  for (auto c : m.count) cells += c > 0;
  std::string s = fmt::format("error map by (");
  for (size_t j = 0; j < m.axes.size(); ++j) s += (j ? ", " : "") + m.axes[j];
  s += fmt::format("): {} of {} cells have mismatches; worst", cells, m.count.size());
  for (int r = 0; r < k && r < static_cast<int>(idx.size()) && m.count[idx[static_cast<size_t>(r)]] > 0; ++r) {
    int64_t f = static_cast<int64_t>(idx[static_cast<size_t>(r)]);
    std::vector<int64_t> c(m.shape.size());
    for (size_t j = m.shape.size(); j-- > 0;) c[j] = f % m.shape[j], f /= m.shape[j];
    s += " [";
    for (size_t j = 0; j < c.size(); ++j) s += fmt::format("{}{}={}", j ? ", " : "", m.axes[j], c[j]);
    s += fmt::format("]:{}", m.count[idx[static_cast<size_t>(r)]]);
  }
  return s;
}

}  // namespace

namespace runner_detail {

void write_repro(const std::string& path, const Golden& g, const std::string& kernel,
                 const std::vector<std::vector<double>>& actual, const std::vector<Tolerance>& tols,
                 std::vector<std::string>& notes) {
  check_output_path(path, "repro bundle");
  fs::create_directories(fs::path(path).parent_path());
  auto f = h5::File::create(path);
  f.set_attr("/", "op", g.prov.op);
  f.set_attr("/", "case", g.prov.case_name);
  f.set_attr("/", "kernel", kernel);
  f.set_attr("/", "case_toml", g.prov.case_toml);
  for (const char* grp : {"/inputs", "/expected", "/actual", "/absdiff", "/mismatch", "/error_map"}) f.create_group(grp);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& t = g.inputs[i];
    const std::string ds = "/inputs/" + t.name;
    if (input_is_recipe(g, i) && static_cast<int64_t>(t.data.size()) != numel(t.shape)) {
      // Read without its values (read_golden(path, false)): the golden's recipe regenerates it.
      f.create_group(ds);
      f.set_attr(ds, "dtype", std::string(name(t.dtype)));
      f.set_attr(ds, "stored_as", std::string("the golden's recipe: read the golden for its values"));
      continue;
    }
    f.write(ds, h5::Elem::f64, t.shape, t.data.data());  // exact values of the storage codes
    f.set_attr(ds, "dtype", std::string(name(t.dtype)));
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const auto& o = g.outputs[k];
    const auto& e = o.expected;
    std::vector<double> d(e.data.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = std::fabs(actual[k][i] - e.data[i]);
    Output ow;  // with the waiver the verdict applied (compare_output), so the mask flags what it counted
    if (auto w = scale_waiver(g.outputs, k, actual); !w.empty()) ow = o, ow.waived = std::move(w);
    const std::vector<uint8_t> bad = mismatch_mask(ow.waived.empty() ? o : ow, tols[k], actual[k]);  // the verdict's own rule
    f.write("/expected/" + e.name, h5::Elem::f64, e.shape, e.data.data());
    f.write("/actual/" + e.name, h5::Elem::f64, e.shape, actual[k].data());
    f.write("/absdiff/" + e.name, h5::Elem::f64, e.shape, d.data());
    f.write("/mismatch/" + e.name, h5::Elem::u8, e.shape, bad.data());
    for (const char* grp : {"/expected/", "/actual/"}) f.set_attr(grp + e.name, "dtype", std::string(name(e.dtype)));
    const auto m = error_map(e, bad, 64);
    f.write("/error_map/" + e.name, h5::Elem::i64, m.shape, m.count.data());
    std::string ax;
    for (size_t j = 0; j < m.axes.size(); ++j) ax += (j ? "," : "") + m.axes[j];
    f.set_attr("/error_map/" + e.name, "axes", ax);
    int64_t nb = 0;
    for (auto b : bad) nb += b;
    if (nb) notes.push_back(fmt::format("'{}': {}", e.name, worst_cells(m, 3)));
  }
  f.close();
}

std::string safe_name(std::string s) {
  for (auto& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  return s;
}

}  // namespace runner_detail

}  // namespace assay
