#include "verify/io/h5.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "reference/core/check.h"
#include "reference/core/tensor.h"
#include "verify/io/safe_files.h"

namespace assay::h5 {

namespace {
struct SilenceHdf5 {
  SilenceHdf5() {
    // No library shutdown at exit: after a failed H5Fclose (disk full) the library still holds the
    // file, and its atexit cleanup would crash flushing it again. The OS reclaims everything.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    // No filter plugins: a candidate naming an unknown filter must not make HDF5 load a shared
    // library from $HDF5_PLUGIN_PATH (only the built-in deflate and shuffle are accepted, below).
    H5PLset_loading_state(0);
  }
};
const SilenceHdf5 silence_hdf5;
// A thread-safe HDF5 build keeps one error stack (and its auto-print setting) per thread, so the
// setting above covers only the main thread: every thread that opens a file silences its own.
void silence_this_thread() {
  thread_local const bool done = [] { return H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0; }();
  (void)done;
}

hid_t native(Elem e) {
  switch (e) {
    case Elem::f64: return H5T_NATIVE_DOUBLE;
    case Elem::f32: return H5T_NATIVE_FLOAT;
    case Elem::u8: return H5T_NATIVE_UINT8;
    case Elem::i8: return H5T_NATIVE_INT8;
    case Elem::u16: return H5T_NATIVE_UINT16;
    case Elem::i16: return H5T_NATIVE_INT16;
    case Elem::u32: return H5T_NATIVE_UINT32;
    case Elem::i32: return H5T_NATIVE_INT32;
    case Elem::u64: return H5T_NATIVE_UINT64;
    case Elem::i64: return H5T_NATIVE_INT64;
  }
  return H5T_NATIVE_DOUBLE;
}
}  // namespace

}  // namespace assay::h5

// Sanitizer builds (the fuzz harnesses) report errors through a death callback; the probe's child
// must not run the fuzzer's crash handling, only die.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace assay::h5 {

size_t elem_size(Elem e) {
  switch (e) {
    case Elem::f64: case Elem::u64: case Elem::i64: return 8;
    case Elem::f32: case Elem::u32: case Elem::i32: return 4;
    case Elem::u16: case Elem::i16: return 2;
    default: return 1;
  }
}

std::recursive_mutex& library_mutex() {
  static std::recursive_mutex m;
  return m;
}

void probe_in_child(const std::string& path, const std::function<void()>& read, int timeout_s) {
  std::lock_guard<std::recursive_mutex> lk(library_mutex());
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return;  // no child to spare: read in this process, as before
  if (pid == 0) {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDERR_FILENO), ::dup2(devnull, STDOUT_FILENO);
    try {
      read();
    } catch (...) {  // our errors: the parent's read throws them again, with their message
    }
    ::_exit(0);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      throw InputError(fmt::format("{}: malformed HDF5 file: the HDF5 library did not finish reading it in {} s; refused",
                                   path, timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(r == 0 ? 1 : 0));
  }
  if (WIFSIGNALED(status))
    throw InputError(fmt::format("{}: malformed HDF5 file: the HDF5 library crashed reading it ({}); refused", path,
                                 strsignal(WTERMSIG(status))));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw InputError(fmt::format("{}: malformed HDF5 file: reading it failed in the library (exit {}); refused", path,
                                 WIFEXITED(status) ? WEXITSTATUS(status) : -1));
}

void File::fail(const std::string& obj, const std::string& what) const {
  throw InputError(obj.empty() ? fmt::format("{}: {}", path_, what) : fmt::format("{}: {}: {}", path_, obj, what));
}

File File::create(const std::string& path) {
  silence_this_thread();
  File f;
  f.path_ = path;
  check_output_path(path, "");  // H5Fcreate truncates: never a device, FIFO, link or an input
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // The 1.8 file format (compact object headers), readable by any HDF5 >= 1.8 reader.
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
  f.file_ = Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
  if (!f.file_) f.fail("", "cannot create HDF5 file");
  return f;
}

// Only regular files (symbolic links to them included) are opened: a FIFO or a device would block
// HDF5's signature check forever, a directory or a socket cannot be a golden.
void File::require_regular_file() const {
  std::error_code ec;
  const auto st = std::filesystem::status(path_, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) fail("", fmt::format("cannot stat: {}", ec.message()));
  if (!std::filesystem::exists(st)) fail("", "no such file");
  if (!std::filesystem::is_regular_file(st)) fail("", "not a regular file (a FIFO, directory, socket or device)");
}

File File::open_read(const std::string& path) {
  silence_this_thread();
  File f;
  f.path_ = path;
  f.require_regular_file();
  note_input(path);  // an output path equal to this file is refused (safe_files.h)
  if (H5Fis_hdf5(path.c_str()) <= 0) f.fail("", "not an HDF5 file (or truncated)");
  f.file_ = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.file_) f.fail("", "cannot open HDF5 file (truncated or corrupt)");
  return f;
}

File File::open_rw(const std::string& path) {
  silence_this_thread();
  File f;
  f.path_ = path;
  f.require_regular_file();
  if (H5Fis_hdf5(path.c_str()) <= 0) f.fail("", "not an HDF5 file (or truncated)");
  f.file_ = Handle(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!f.file_) f.fail("", "cannot open HDF5 file for writing");
  return f;
}

void File::overwrite(const std::string& ds, Elem e, const void* data) {
  if (!exists(ds)) fail(ds, "missing dataset");
  Handle d(H5Dopen2(file_.get(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d || H5Dwrite(d.get(), native(e), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) fail(ds, "cannot overwrite dataset");
}

void File::close() {
  if (!file_) return;
  const hid_t id = file_.release();
  const herr_t fl = H5Fflush(id, H5F_SCOPE_LOCAL);
  const herr_t cl = H5Fclose(id);
  if (fl < 0 || cl < 0) fail("", "cannot flush or close the file (disk full or an I/O error?)");
}

bool File::exists(const std::string& p) const {
  // Check each path component so that a missing parent is not an error, and that every component
  // is a hard link before anything is opened through it: an external link would make HDF5 open
  // another file (any path, a FIFO that blocks), a soft or user-defined link points elsewhere in
  // ways assay never writes. Such a link is refused, naming it.
  std::string cur;
  size_t pos = 1;
  while (pos <= p.size()) {
    size_t next = p.find('/', pos);
    if (next == std::string::npos) next = p.size();
    cur = p.substr(0, next);
    if (H5Lexists(file_.get(), cur.c_str(), H5P_DEFAULT) <= 0) return false;
    pos = next + 1;
    if (cur == "/") continue;  // the root group: no link leads to it
    H5L_info_t li;
    if (H5Lget_info(file_.get(), cur.c_str(), &li, H5P_DEFAULT) < 0) fail(cur, "cannot read the link (corrupt file?)");
    if (li.type != H5L_TYPE_HARD)
      fail(cur, fmt::format("{} link: refused (assay reads objects stored in the file itself, never through links)",
                            li.type == H5L_TYPE_EXTERNAL ? "an external" : li.type == H5L_TYPE_SOFT ? "a soft" : "a user-defined"));
  }
  return true;
}

bool File::is_group(const std::string& p) const {
  const Handle h = obj(p);
  return H5Iget_type(h.get()) == H5I_GROUP;
}

Handle File::obj(const std::string& p) const {
  if (!exists(p)) fail(p, "missing");
  Handle h(H5Oopen(file_.get(), p.c_str(), H5P_DEFAULT), H5Oclose);
  if (!h) fail(p, "cannot open (corrupt file?)");
  return h;
}

void File::create_group(const std::string& g) {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_obj_track_times(gcpl.get(), false);
  Handle h(H5Gcreate2(file_.get(), g.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
  if (!h) fail(g, "cannot create group");
}

std::vector<std::string> File::list(const std::string& group) const {
  std::vector<std::string> names;
  if (!exists(group)) return names;
  Handle g(H5Gopen2(file_.get(), group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g) fail(group, "not a group");
  H5G_info_t gi;
  if (H5Gget_info(g.get(), &gi) < 0) fail(group, "cannot list group");
  for (hsize_t i = 0; i < gi.nlinks; ++i) {
    ssize_t n = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(group, "cannot list group");
    std::string s(static_cast<size_t>(n), '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), static_cast<size_t>(n) + 1, H5P_DEFAULT);
    names.push_back(s);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t> chunk_shape(const std::vector<int64_t>& shape, size_t elem_bytes) {
  const int64_t target = std::max<int64_t>(1, int64_t{1 << 20} / static_cast<int64_t>(std::max<size_t>(elem_bytes, 1)));
  std::vector<int64_t> chunk(shape.size(), 1);
  int64_t acc = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] <= target / acc) {
      chunk[k] = std::max<int64_t>(shape[k], 1);
      acc *= chunk[k];
    } else {
      chunk[k] = std::max<int64_t>(1, target / acc);
      break;
    }
  }
  return chunk;
}

void File::write(const std::string& ds, Elem e, const std::vector<int64_t>& shape, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hsize_t n = 1;
  for (auto d : dims) n *= d;
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_obj_track_times(dcpl.get(), false);
  const size_t bytes = static_cast<size_t>(n) * elem_size(e);
  if (!dims.empty() && n > 0 && bytes > 16384) {  // small datasets: contiguous (a chunk index costs more than it saves)
    const auto cs = chunk_shape(shape, elem_size(e));
    std::vector<hsize_t> chunk(cs.begin(), cs.end());
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    H5Pset_shuffle(dcpl.get());
    H5Pset_deflate(dcpl.get(), 6);
  }
  Handle d(H5Dcreate2(file_.get(), ds.c_str(), native(e), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!d) fail(ds, "cannot create dataset");
  if (n > 0 && H5Dwrite(d.get(), native(e), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) fail(ds, "cannot write dataset");
}

DatasetInfo File::info(const std::string& ds) const {
  if (!exists(ds)) fail(ds, "missing dataset");
  Handle d(H5Dopen2(file_.get(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d) fail(ds, "not a dataset");
  Handle space(H5Dget_space(d.get()), H5Sclose);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  DatasetInfo r;
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(ds, "unreadable dataspace");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  r.shape.assign(dims.begin(), dims.end());
  check_storage(ds, d.get());
  const H5T_class_t cls = H5Tget_class(type.get());
  r.is_float = cls == H5T_FLOAT;
  r.is_integer = cls == H5T_INTEGER;
  r.is_signed = r.is_integer && H5Tget_sign(type.get()) == H5T_SGN_2;
  r.elem_size = H5Tget_size(type.get());
  return r;
}

// A dataset's elements must live in this file and be stored the way assay writes them: contiguous,
// compact or chunked, with no filter but deflate and shuffle. External raw storage would make HDF5
// read any file (its bytes then shown as "got" values), a virtual layout maps other files, and any
// other filter is a plugin (loading is switched off) or not something assay writes.
void File::check_storage(const std::string& ds, hid_t d) const {
  Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  if (!dcpl) fail(ds, "cannot read the dataset's storage properties (corrupt file?)");
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL) fail(ds, "a virtual dataset (its elements live in other files): refused");
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT && layout != H5D_CHUNKED) fail(ds, "unknown storage layout: refused");
  if (H5Pget_external_count(dcpl.get()) != 0)
    fail(ds, "external raw storage (its elements live in another file): refused");
  const int nf = H5Pget_nfilters(dcpl.get());
  if (nf < 0) fail(ds, "cannot read the dataset's filters (corrupt file?)");
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    char fname[64] = {0};
    unsigned config = 0;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, sizeof fname, fname, &config);
    if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE)
      fail(ds, fmt::format("filter {} ('{}'): refused (assay reads deflate and shuffle only)", static_cast<long>(id),
                           printable(std::string_view(fname, strnlen(fname, sizeof fname)), 60)));
  }
}

// The declared element count, refused (naming the dataset) when it overflows or the 8-byte
// values it would take pass the memory limit: a 54 KB file may declare terabytes.
int64_t File::declared_elements(const std::string& ds, const DatasetInfo& inf) const {
  int64_t n = 0;
  try {
    n = numel(inf.shape);
    check_memory(n, 16, "declared shape " + shape_str(inf.shape));  // the values and one working copy
  } catch (const InputError& e) {
    fail(ds, e.what());
  }
  return n;
}

std::vector<double> File::read_f64(const std::string& ds) const {
  auto inf = info(ds);
  if (!inf.is_float && !inf.is_integer) fail(ds, "dataset is not numeric");
  const auto n = static_cast<hsize_t>(declared_elements(ds, inf));
  std::vector<double> v(static_cast<size_t>(n));
  Handle d(H5Dopen2(file_.get(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  if (n > 0 && H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    fail(ds, "cannot read dataset (corrupt or truncated file?)");
  return v;
}

std::vector<uint64_t> File::read_u64(const std::string& ds) const {
  auto inf = info(ds);
  if (!inf.is_integer) fail(ds, "expected an integer (storage-bits) dataset");
  const auto n = static_cast<hsize_t>(declared_elements(ds, inf));
  Handle d(H5Dopen2(file_.get(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  std::vector<uint64_t> v(static_cast<size_t>(n));
  if (inf.is_signed) {
    std::vector<int64_t> s(static_cast<size_t>(n));
    if (n > 0 && H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()) < 0)
      fail(ds, "cannot read dataset (corrupt or truncated file?)");
    for (size_t i = 0; i < s.size(); ++i) v[i] = static_cast<uint64_t>(s[i]);
  } else if (n > 0 && H5Dread(d.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
    fail(ds, "cannot read dataset (corrupt or truncated file?)");
  }
  return v;
}

static Handle scalar_space() { return Handle(H5Screate(H5S_SCALAR), H5Sclose); }

// set_attr replaces an existing attribute (files opened with open_rw are edited in place).
void File::replace_attr(hid_t h, const std::string& o, const std::string& name) const {
  const htri_t e = H5Aexists(h, name.c_str());
  if (e > 0 && H5Adelete(h, name.c_str()) < 0) fail(o, fmt::format("cannot replace attribute '{}'", name));
}

void File::set_attr(const std::string& o, const std::string& name, const std::string& value) {
  Handle h = obj(o);
  replace_attr(h.get(), o, name);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  auto sp = scalar_space();
  Handle a(H5Acreate2(h.get(), name.c_str(), type.get(), sp.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a) fail(o, fmt::format("cannot create attribute '{}'", name));
  std::string buf = value.empty() ? std::string(1, '\0') : value;
  if (H5Awrite(a.get(), type.get(), buf.data()) < 0) fail(o, fmt::format("cannot write attribute '{}'", name));
}
// Writes a scalar attribute of file type ftype from one value of memory type mtype; false on failure.
static bool write_scalar_attr(hid_t obj, const std::string& name, hid_t ftype, hid_t mtype, const void* value) {
  auto sp = scalar_space();
  Handle a(H5Acreate2(obj, name.c_str(), ftype, sp.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  return a && H5Awrite(a.get(), mtype, value) >= 0;
}
void File::set_attr(const std::string& o, const std::string& name, int64_t value) {
  Handle h = obj(o);
  replace_attr(h.get(), o, name);
  if (!write_scalar_attr(h.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value))
    fail(o, fmt::format("cannot write attribute '{}'", name));
}
void File::set_attr(const std::string& o, const std::string& name, double value) {
  Handle h = obj(o);
  replace_attr(h.get(), o, name);
  if (!write_scalar_attr(h.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value))
    fail(o, fmt::format("cannot write attribute '{}'", name));
}
bool File::has_attr(const std::string& o, const std::string& name) const {
  if (!exists(o) && o != "/") return false;
  return H5Aexists_by_name(file_.get(), o.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}
File::ScalarAttr File::scalar_attr(const std::string& o, const std::string& name, bool want_string) const {
  if (!has_attr(o, name)) fail(o, fmt::format("missing attribute '{}'", name));
  ScalarAttr r{Handle(H5Aopen_by_name(file_.get(), o.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose), Handle()};
  r.type = Handle(H5Aget_type(r.attr.get()), H5Tclose);
  const auto cls = H5Tget_class(r.type.get());
  if (want_string ? cls != H5T_STRING : cls != H5T_FLOAT && cls != H5T_INTEGER)
    fail(o, fmt::format("attribute '{}' is not a {}", name, want_string ? "string" : "number"));
  Handle space(H5Aget_space(r.attr.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    fail(o, fmt::format("attribute '{}' is not a scalar{}", name, want_string ? " string" : ""));
  return r;
}
std::string File::attr_str(const std::string& o, const std::string& name) const {
  const auto [a, type] = scalar_attr(o, name, true);
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(type.get()));
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0) fail(o, fmt::format("cannot read attribute '{}'", name));
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  size_t n = H5Tget_size(type.get());
  std::string s(n, '\0');
  if (H5Aread(a.get(), type.get(), s.data()) < 0) fail(o, fmt::format("cannot read attribute '{}'", name));
  s.resize(strnlen(s.data(), n));
  return s;
}
int64_t File::attr_int(const std::string& o, const std::string& name) const {
  const auto [a, type] = scalar_attr(o, name, false);
  if (H5Tget_class(type.get()) != H5T_INTEGER) fail(o, fmt::format("attribute '{}' is not an integer", name));
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) fail(o, fmt::format("cannot read attribute '{}'", name));
  return v;
}
double File::attr_f64(const std::string& o, const std::string& name) const {
  const auto [a, type] = scalar_attr(o, name, false);
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail(o, fmt::format("cannot read attribute '{}'", name));
  return v;
}

std::vector<std::string> File::attr_names(const std::string& o) const {
  Handle h = obj(o);
  std::vector<std::string> names;
  hsize_t idx = 0;
  auto collect = [](hid_t, const char* n, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(n);
    return 0;
  };
  if (H5Aiterate2(h.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &names) < 0) fail(o, "cannot list attributes");
  std::sort(names.begin(), names.end());
  return names;
}

void File::set_attr_value(const std::string& o, const std::string& name, const CaseFields::Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return set_attr(o, name, *i);
  if (const auto* d = std::get_if<double>(&v)) return set_attr(o, name, *d);
  if (const auto* s = std::get_if<std::string>(&v)) return set_attr(o, name, *s);
  Handle h = obj(o);
  replace_attr(h.get(), o, name);
  hid_t file_type = H5T_STD_U8LE, mem_type = H5T_NATIVE_UINT8;
  const void* data = nullptr;
  hsize_t n = 1;
  uint8_t b = 0;
  Handle sp;
  if (const auto* x = std::get_if<bool>(&v)) {  // bools: 1-byte unsigned scalars (an int64 is 8 bytes)
    b = *x ? 1 : 0;
    data = &b;
    sp = scalar_space();
  } else {
    if (const auto* a = std::get_if<std::vector<int64_t>>(&v)) {
      file_type = H5T_STD_I64LE, mem_type = H5T_NATIVE_INT64, data = a->data(), n = a->size();
    } else {
      const auto& d = std::get<std::vector<double>>(v);
      file_type = H5T_IEEE_F64LE, mem_type = H5T_NATIVE_DOUBLE, data = d.data(), n = d.size();
    }
    // An empty array is a null dataspace: no elements, the type still says which kind.
    sp = n == 0 ? Handle(H5Screate(H5S_NULL), H5Sclose) : Handle(H5Screate_simple(1, &n, nullptr), H5Sclose);
  }
  Handle a(H5Acreate2(h.get(), name.c_str(), file_type, sp.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a || (n > 0 && H5Awrite(a.get(), mem_type, data) < 0)) fail(o, fmt::format("cannot write attribute '{}'", name));
}

CaseFields::Value File::attr_value(const std::string& o, const std::string& name) const {
  if (!has_attr(o, name)) fail(o, fmt::format("missing attribute '{}'", name));
  Handle a(H5Aopen_by_name(file_.get(), o.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  const auto cls = H5Tget_class(type.get());
  if (cls == H5T_STRING) return attr_str(o, name);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) fail(o, fmt::format("attribute '{}' is not a number, string or array", name));
  const auto kind = H5Sget_simple_extent_type(space.get());
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (kind == H5S_SCALAR) {
    if (cls == H5T_INTEGER && H5Tget_size(type.get()) == 1) return attr_int(o, name) != 0;
    if (cls == H5T_INTEGER) return attr_int(o, name);
    return attr_f64(o, name);
  }
  const hssize_t n = kind == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(space.get());
  if ((kind != H5S_NULL && rank != 1) || n < 0 || n > (1 << 20))
    fail(o, fmt::format("attribute '{}' is not a scalar or a 1-D array of at most 2^20 numbers", name));
  if (cls == H5T_INTEGER) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    if (n > 0 && H5Aread(a.get(), H5T_NATIVE_INT64, v.data()) < 0) fail(o, fmt::format("cannot read attribute '{}'", name));
    return v;
  }
  std::vector<double> v(static_cast<size_t>(n));
  if (n > 0 && H5Aread(a.get(), H5T_NATIVE_DOUBLE, v.data()) < 0) fail(o, fmt::format("cannot read attribute '{}'", name));
  return v;
}

}  // namespace assay::h5
