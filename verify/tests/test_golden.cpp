#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "catch_compat.h"
#include "fixtures/gen/inputs.h"
#include "reference/core/check.h"
#include "tests/common.h"
#include "verify/io/golden.h"
#include "verify/judge/candidate.h"
#include "verify/io/h5.h"
#include "verify/io/stale.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {
// One directory per test case: ctest runs the cases of this file as parallel processes, and the
// round-trip test asserts that no temp file is left in its directory.
fs::path test_dir(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("assay_test_golden_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}
Golden sample_golden() {
  Golden g;
  g.prov.op = "scaled_add";
  g.prov.case_name = "t";
  g.prov.level = "L0";
  g.prov.case_toml = "[[case]]\nname = \"t\"\nseed = 42\n";
  g.prov.seed = 42;
  g.inputs.push_back(Tensor{"x", {"B", "T"}, {2, 3}, DType::bf16, {1, -2, 0.5, -0.0, 3, 1e30}});
  g.inputs[0].data[5] = round_to(DType::bf16, 1e30);
  g.inputs.push_back(Tensor{"idx", {"B"}, {3}, DType::i32, {0, 5, -7}});
  for (const auto& t : g.inputs) g.input_hashes.push_back(gen::input_hash(t));
  Output o;
  o.expected = Tensor{"out", {"B", "T"}, {2, 3}, DType::f16, {1.0 / 3, 2, 3, 4, 5, 6}};
  o.bound = std::vector<double>{1, 2, 3, 4, 5, 6};
  g.outputs.push_back(o);
  Output q;
  q.expected = Tensor{"codes", {"N"}, {4}, DType::e2m1, {0.5, 1, -6, 0}};
  q.rounded = std::vector<uint64_t>{1, 2, 0xF, 0};
  g.outputs.push_back(q);
  g.intermediates.push_back(Tensor{"state", {"C", "N"}, {2, 2}, DType::f64, {1, 2, 3, 4}});
  g.agreement.push_back({"out", "a", "b", 1e-16});
  return g;
}
}  // namespace

TEST_CASE("goldens round-trip through HDF5", "[cpu][L0]") {
  const auto dir = test_dir("rt");
  const auto path = (dir / "rt.h5").string();
  const auto g = sample_golden();
  write_golden(path, g);
  REQUIRE(fs::exists(path));
  for (const auto& de : fs::directory_iterator(dir)) REQUIRE(de.path().string().find(".tmp.") == std::string::npos);
  const auto r = read_golden(path);
  REQUIRE(r.prov.op == "scaled_add");
  REQUIRE(r.prov.seed == 42);
  REQUIRE(r.prov.case_toml == g.prov.case_toml);
  REQUIRE(golden_diff(g, r).empty());
  REQUIRE(std::signbit(r.input("x")->data[3]));
  REQUIRE(r.input("idx")->data[2] == -7);
  REQUIRE(r.output("codes")->rounded->at(2) == 0xF);
  REQUIRE(!check_stale(r, "").stale);
}

TEST_CASE("a flipped input byte makes a golden Stale", "[cpu][L0]") {
  const auto dir = test_dir("flip");
  const auto path = (dir / "flip.h5").string();
  auto g = sample_golden();
  write_golden(path, g);
  auto r = read_golden(path);
  auto& idx = const_cast<Tensor&>(*r.input("idx"));
  idx.data[0] = 1;  // 0 -> 1: what a flipped low bit of the stored int32 decodes to
  auto s = check_stale(r, "");
  REQUIRE(s.stale);
  REQUIRE_THAT(s.reason, assay_test::Contains("input 'idx'"));
}

TEST_CASE("bad golden files give input errors naming file and dataset", "[cpu][L0]") {
  const auto dir = test_dir("bad");
  auto err = [](const std::string& p) {
    try {
      read_golden(p);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::ofstream((dir / "text.h5").string()) << "not hdf5";
  CHECK_THAT(err((dir / "text.h5").string()), assay_test::Contains("not an HDF5 file"));
  CHECK_THAT(err((dir / "absent.h5").string()), assay_test::Contains("no such file"));
  // Truncated: the first half of a valid golden.
  const auto good = (dir / "good.h5").string();
  write_golden(good, sample_golden());
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream((dir / "trunc.h5").string(), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  CHECK_THAT(err((dir / "trunc.h5").string()), assay_test::Contains("trunc.h5"));
  // Missing attribute / wrong dtype.
  {
    auto f = h5::File::create((dir / "noattr.h5").string());
    f.set_attr("/", "schema_version", kSchemaVersion);
  }
  CHECK_THAT(err((dir / "noattr.h5").string()), assay_test::Contains("missing attribute 'op'"));
}

TEST_CASE("a read that crashes or hangs the HDF5 library is refused by name, not a crash", "[cpu][L0]") {
  // What a malformed file can do to libhdf5 1.10 (the fuzzer found wild frees while it lists a
  // group): the probe runs the read in a child process first.
  try {
    h5::probe_in_child("bad.h5", [] { std::raise(SIGSEGV); });
    FAIL("a crashing read passed the probe");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), assay_test::Contains("bad.h5: malformed HDF5 file: the HDF5 library crashed"));
  }
  try {
    h5::probe_in_child("slow.h5", [] { ::sleep(30); }, 1);
    FAIL("a hanging read passed the probe");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), assay_test::Contains("slow.h5: malformed HDF5 file: the HDF5 library did not finish"));
  }
  // Our own errors are left to the caller's read (same message, same exit code).
  CHECK_NOTHROW(h5::probe_in_child("x.h5", [] { throw InputError("x.h5: /inputs: cannot list group"); }));
  CHECK_NOTHROW(h5::probe_in_child("x.h5", [] {}));
}

TEST_CASE("integer outputs stored as unsigned codes of their own width keep their sign (the GPU worker's candidates)",
          "[cpu][L0]") {
  // The worker writes every output as unsigned codes with a dtype attribute: an int64 -1 arrives
  // as 0xffffffffffffffff and an int32 -3 as 0xfffffffd; decoded through their dtype, not read as
  // the unsigned numbers 2^64 - 1 and 2^32 - 3.
  const auto dir = assay_test::fresh_dir("assay_test_golden", "unsigned_codes");
  const std::string path = (dir / "cand.h5").string();
  {
    auto f = h5::File::create(path);
    f.create_group("/outputs");
    const std::vector<uint64_t> c64{0, 1, ~uint64_t{0}};
    const std::vector<uint32_t> c32{0, 7, 0xfffffffdu};
    f.write("/outputs/a", h5::Elem::u64, {3}, c64.data());
    f.set_attr("/outputs/a", "dtype", std::string("int64"));
    f.write("/outputs/b", h5::Elem::u32, {3}, c32.data());
    f.set_attr("/outputs/b", "dtype", std::string("int32"));
    f.close();
  }
  const auto f = h5::File::open_read(path);
  Output a, b;
  a.expected = Tensor{"a", {"S"}, {3}, DType::i64, {0, 1, -1}};
  b.expected = Tensor{"b", {"S"}, {3}, DType::i32, {0, 7, -3}};
  CHECK(read_candidate(f, a) == std::vector<double>{0, 1, -1});
  CHECK(read_candidate(f, b) == std::vector<double>{0, 7, -3});
}

TEST_CASE("a scale link the reader would refuse is refused at write, and golden_diff sees the link", "[cpu][L0]") {
  const auto dir = test_dir("scale_link");
  auto g = sample_golden();
  Output sc;
  sc.expected = Tensor{"scale", {"NB"}, {1}, DType::ue8m0, {1}};
  sc.rounded = std::vector<uint64_t>{127};
  g.outputs.push_back(sc);
  auto& codes = g.outputs[1];
  codes.scaled_by = "scale", codes.scale_block = 32;  // 4 codes, one block of 32: fits
  const auto ok = (dir / "ok.h5").string();
  write_golden(ok, g);
  const auto r = read_golden(ok);
  REQUIRE(golden_diff(g, r).empty());
  auto other = g;
  other.outputs[1].scale_block = 16;  // still one block: readable, but not what was stored
  const auto d = golden_diff(other, r);
  REQUIRE(d.size() == 1);
  REQUIRE(d[0].find("scaled by 'scale' in blocks of 16 (stored: 'scale', 32)") != std::string::npos);
  // Blocks of 2 need two scales; the golden has one. Nothing is written, not even a temp file.
  codes.scale_block = 2;
  const auto bad = (dir / "bad.h5").string();
  REQUIRE_THROWS_WITH(write_golden(bad, g), assay_test::Contains("/expected/codes: attribute 'scaled_by'"));
  REQUIRE(!fs::exists(bad));
  for (const auto& de : fs::directory_iterator(dir)) REQUIRE(de.path().filename() == "ok.h5");
  codes.scale_block = 0;
  REQUIRE_THROWS_AS(write_golden(bad, g), InputError);
}

TEST_CASE("HDF5 chunks hold about 1 MiB whatever the shape, never one element each", "[cpu][L0]") {
  using assay::h5::chunk_shape;
  // The shape that once got 1-element chunks (16M chunk records; `assay gen` killed at 24 GB).
  CHECK(chunk_shape({1, 4096, 4096}, 8) == std::vector<int64_t>{1, 32, 4096});
  CHECK(chunk_shape({9, 65536, 64, 64}, 2) == std::vector<int64_t>{1, 128, 64, 64});
  CHECK(chunk_shape({3, 63, 96}, 4) == std::vector<int64_t>{3, 63, 96});   // all of it fits
  CHECK(chunk_shape({5, 1 << 20}, 8) == std::vector<int64_t>{1, 1 << 17});  // one row is 8 MiB: split it
  CHECK(chunk_shape({1000}, 8) == std::vector<int64_t>{1000});
  CHECK(chunk_shape({4, 0, 7}, 8) == std::vector<int64_t>{4, 1, 7});  // an empty axis still gives a valid chunk
  for (const auto& s : std::vector<std::vector<int64_t>>{{2, 3, 5, 7, 11, 13, 17}, {1 << 30}, {1, 1, 1 << 22}}) {
    const auto c = chunk_shape(s, 4);
    int64_t bytes = 4;
    for (size_t k = 0; k < s.size(); ++k) {
      CHECK(c[k] >= 1);
      CHECK(c[k] <= std::max<int64_t>(s[k], 1));
      bytes *= c[k];
    }
    CHECK(bytes <= (1 << 20));
  }
}
