// A small RAII wrapper over the HDF5 1.10 C API: files, groups, datasets, attributes.
// Every failure throws assay::InputError naming the file and the object path; HDF5's own error
// stack printing is switched off. Files are read as written by someone untrusted: objects only
// through hard links, dataset elements only from this file (no external raw storage or virtual
// layout), no filter but deflate and shuffle, and HDF5's plugin loading off. Datasets are written deterministically: no object timestamps,
// fixed chunking, shuffle + deflate for datasets over 16 KiB.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <hdf5.h>

#include "reference/core/case_fields.h"

namespace assay::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t release() {  // the caller closes it (and checks the result)
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

enum class Elem { f64, f32, u8, i8, u16, i16, u32, i32, u64, i64 };
size_t elem_size(Elem e);  // bytes per element

// The chunk shape File::write gives a dataset over 16 KiB: about 1 MiB, whole trailing dims while
// they fit, then part of the next one, leading dims 1. (Splitting off leading dims one at a time
// without recounting the chunk's bytes once made 1-element chunks of a [1, 4096, 4096] tensor:
// 16M chunk records, 11 GB of HDF5 index, and `assay gen` killed for memory.)
std::vector<int64_t> chunk_shape(const std::vector<int64_t>& shape, size_t elem_bytes);

struct DatasetInfo {
  std::vector<int64_t> shape;
  bool is_float = false, is_integer = false, is_signed = false;
  size_t elem_size = 0;
};

// Runs `read` in a forked child process before the caller reads the file for real. HDF5 1.10
// parses a malformed file with little defence: a crafted golden or candidate can crash the library
// (a wild free while listing a group, found by fuzzing) or make it loop. A child that dies by a
// signal, exits abnormally or runs past `timeout_s` makes this throw InputError naming the file;
// otherwise (the read succeeded or threw one of our errors) the caller's own read, the same code
// on the same bytes, behaves the same in this process.
void probe_in_child(const std::string& path, const std::function<void()>& read, int timeout_s = 60);

// The HDF5 library (Debian's serial build) is not thread-safe: whole-file reads and writes that
// may run on worker threads (calibrate, gen) hold this lock, and probe_in_child forks under it, so
// no other thread is inside the library when the child is made.
std::recursive_mutex& library_mutex();

class File {
 public:
  static File create(const std::string& path);  // truncates
  static File open_read(const std::string& path);
  static File open_rw(const std::string& path);  // for tools and tests that edit a copy
  const std::string& path() const { return path_; }

  void create_group(const std::string& g);
  bool exists(const std::string& obj) const;       // "/inputs/x"
  bool is_group(const std::string& obj) const;     // an existing object that is a group
  std::vector<std::string> list(const std::string& group) const;  // child names, sorted

  // Writes raw little-endian elements of type `e` (n = prod(shape)).
  void write(const std::string& ds, Elem e, const std::vector<int64_t>& shape, const void* data);
  // Overwrites an existing dataset's elements in place (same count), converting from `e`.
  void overwrite(const std::string& ds, Elem e, const void* data);
  DatasetInfo info(const std::string& ds) const;
  // Reads any numeric dataset converted to double / to uint64 (integers only).
  std::vector<double> read_f64(const std::string& ds) const;
  std::vector<uint64_t> read_u64(const std::string& ds) const;

  // set_attr creates the attribute, or replaces one of that name.
  void set_attr(const std::string& obj, const std::string& name, const std::string& value);
  void set_attr(const std::string& obj, const std::string& name, int64_t value);
  void set_attr(const std::string& obj, const std::string& name, double value);
  bool has_attr(const std::string& obj, const std::string& name) const;
  std::string attr_str(const std::string& obj, const std::string& name) const;  // fixed or variable length
  int64_t attr_int(const std::string& obj, const std::string& name) const;
  double attr_f64(const std::string& obj, const std::string& name) const;
  // Every attribute of an object, sorted; typed values for a golden's /case group: int64 and
  // float64 scalars, 1-byte integer scalars as bools, strings, 1-D int64 / float64 arrays.
  std::vector<std::string> attr_names(const std::string& obj) const;
  void set_attr_value(const std::string& obj, const std::string& name, const CaseFields::Value& v);
  CaseFields::Value attr_value(const std::string& obj, const std::string& name) const;

  // Flushes and closes; InputError if either fails (disk full, quota, I/O error): a file that did
  // not close cleanly must not be renamed into place.
  void close();

 private:
  Handle obj(const std::string& path) const;
  [[noreturn]] void fail(const std::string& obj, const std::string& what) const;
  void require_regular_file() const;
  void check_storage(const std::string& ds, hid_t d) const;
  void replace_attr(hid_t h, const std::string& obj, const std::string& name) const;
  int64_t declared_elements(const std::string& ds, const DatasetInfo& inf) const;
  // The open scalar attribute `name` of object o and its type: fail() when it is missing, not a
  // string (want_string) or not a number (else), or holds more than one element.
  struct ScalarAttr {
    Handle attr, type;
  };
  ScalarAttr scalar_attr(const std::string& o, const std::string& name, bool want_string) const;
  std::string path_;
  Handle file_;
};

}  // namespace assay::h5
