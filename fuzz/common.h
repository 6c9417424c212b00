// Shared by the fuzz harnesses (fuzz/fuzz_*.cpp): source-tree lookup, per-process temp files, the
// memory limit, the rejection rule (assay::InputError is the correct way to refuse an input;
// anything else escaping is a finding) and the HDF5 handle-leak check.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include <cxxabi.h>
#include <hdf5.h>

#include "reference/core/check.h"
#include "reference/core/tensor.h"

#ifndef ASSAY_SOURCE_DIR
#error "ASSAY_SOURCE_DIR must be defined (fuzz/CMakeLists.txt)"
#endif

namespace assay_fuzz {

// Declared-size bombs must be refused by assay's own guard (check_memory), below libFuzzer's
// -rss_limit_mb.
inline constexpr int64_t kMemoryLimit = int64_t{64} << 20;

// A finding: print it and abort, so that libFuzzer (or replay_main) reports it with a stack.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==assay-fuzz== FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A file of the source tree: relative to the current directory if it exists there (the binaries
// are run from the repository root, possibly on another machine), else under the compile-time
// source directory.
inline std::string source_path(const std::string& rel) {
  std::error_code ec;
  if (std::filesystem::exists(rel, ec)) return rel;
  const std::string abs = std::string(ASSAY_SOURCE_DIR) + "/" + rel;
  if (std::filesystem::exists(abs, ec)) return abs;
  throw std::runtime_error("cannot find " + rel + " here or under " ASSAY_SOURCE_DIR " (run from the repository root)");
}

// Removes the scratch directories of this user's harness processes that are gone (a crash or an
// abort skips the exit handler below).
inline void remove_stale_temp_dirs(const std::string& base) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("assay-fuzz-", 0) != 0) continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    const std::string pid = name.substr(11);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::filesystem::exists("/proc/" + pid, ec)) continue;
    std::filesystem::remove_all(e.path(), ec);
  }
}

// This process's scratch directory, $TMPDIR/assay-fuzz-<pid> (removed at normal exit; the string
// is never destroyed, so the exit handler can still use it).
inline const std::string& temp_dir() {
  static const std::string* dir = [] {
    const char* t = std::getenv("TMPDIR");
    const std::string base = t && *t ? t : "/tmp";
    remove_stale_temp_dirs(base);
    auto* d = new std::string(base + "/assay-fuzz-" + std::to_string(::getpid()));
    std::error_code ec;
    std::filesystem::create_directories(*d, ec);
    if (ec) finding("setup: cannot create " + *d + ": " + ec.message());
    return d;
  }();
  static const bool cleanup = std::atexit([] {
    std::error_code e;
    std::filesystem::remove_all(*dir, e);
  }) == 0;
  (void)cleanup;
  return *dir;
}

// Writes the bytes to temp_dir()/name and returns the path.
inline std::string write_temp(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) finding("setup: cannot write " + path);
  return path;
}

inline std::string demangled(const std::type_info& t) {
  int status = 0;
  char* s = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string r = status == 0 && s ? s : t.name();
  std::free(s);
  return r;
}

// ASSAY_FUZZ_VERBOSE=1: print each refusal (for writing regression inputs).
inline bool verbose() {
  static const bool v = std::getenv("ASSAY_FUZZ_VERBOSE") != nullptr;
  return v;
}

// Runs f(); true if it returned, false if it refused the input with assay::InputError. Any other
// exception is a finding (stage names the call).
template <class F>
bool accepts(const char* stage, F&& f) {
  try {
    f();
    return true;
  } catch (const assay::InputError& e) {
    if (verbose()) std::fprintf(stderr, "assay-fuzz: %s: InputError: %s\n", stage, e.what());
    return false;
  } catch (const std::exception& e) {
    finding(std::string(stage) + ": " + demangled(typeid(e)) + " escaped (only assay::InputError may): " + e.what());
  } catch (...) {
    finding(std::string(stage) + ": a non-std exception escaped");
  }
}

// After each input every HDF5 file and object must be closed again: a leaked hid_t keeps the
// file open (and a later open of the same path would see the stale one).
inline void require_hdf5_closed(const char* stage) {
  const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n != 0) finding(std::string(stage) + ": " + std::to_string(n) + " HDF5 file/object handle(s) left open");
}

// Once per process, before the first input.
inline void init_process() { assay::set_memory_limit(kMemoryLimit); }

// Runs a harness's one-time setup (loading the fixed goldens, policies); an exception there means
// the checkout is unusable (e.g. goldens not regenerated after a schema change), not that the
// input found something: say so and exit 3.
template <class F>
auto setup(const char* what, F&& f) -> decltype(f()) {
  try {
    init_process();
    return f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\n==assay-fuzz== setup failed (%s): %s\n", what, e.what());
    std::exit(3);
  }
}

}  // namespace assay_fuzz
