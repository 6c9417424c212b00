// Shared helpers for the Catch2 tests of every folder (on the include path of each test executable
// as "tests/common.h"): the test-input RNG and temp dirs. Fixture inputs never use these: they come
// from fixtures/gen (Philox, portable); these are for tests that build their own small inputs.
#pragma once
#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace assay_test {

// splitmix64 (Steele, Lea and Flood, 2014): deterministic and portable. `s` is the raw state;
// each test file derives it from its own seeds.
struct SplitMix64 {
  uint64_t s = 0;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double u01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 random bits
};

// Uniform doubles in [lo, hi) from splitmix64, and vectors of them.
struct UniformRng : SplitMix64 {
  double u(double lo, double hi) { return lo + (hi - lo) * u01(); }
  std::vector<double> vec(int64_t n, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = u(lo, hi);
    return v;
  }
};

// A fresh, empty directory under the system temp dir: <tmp>/<group>/<name>.
// A per-process directory <tmp>/<group>_<pid>/<name>: two test runs on one machine (two checkouts,
// or a build's ctest beside a fresh clone's CI) must never share, or remove, each other's files.
inline std::filesystem::path fresh_dir(const std::string& group, const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / (group + "_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace assay_test
