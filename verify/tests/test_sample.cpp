// Sampled outputs (reference/core/sample.h, golden/SCHEMA.md "Sampled outputs"): the oracles run per
// (sequence, head) slice on a one-sequence one-head copy of the case must give, bit for bit, the
// whole case's values at those elements, for every op that declares OpDef::sampling; the golden
// round-trips through HDF5; and a candidate is judged at the sampled elements only.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <omp.h>
#include <unistd.h>

#include "catch_compat.h"
#include "fixtures/gen/case.h"
#include "fixtures/gen/lend.h"
#include "fixtures/gen/op.h"
#include "reference/core/check.h"
#include "verify/io/golden.h"
#include "verify/io/h5.h"
#include "verify/io/stale.h"
#include "verify/judge/compare.h"

using namespace assay;
namespace fs = std::filesystem;

namespace {
fs::path dir_for(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("assay_test_sample_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

gen::Fixture fixture(const std::string& tag, const std::string& op, const std::string& body) {
  const auto d = dir_for(tag);
  const auto p = (d / (op + ".toml")).string();
  std::ofstream(p) << "op = \"" << op << "\"\n[[case]]\nname = \"twin\"\nlevel = \"L0\"\nseed = 7\n" << body;
  return gen::load_fixture(p);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The whole case and its sampled twin (same name and seed, so the same inputs).
struct Twin {
  gen::Generated whole, sampled;
};
Twin twin(const std::string& op, const std::string& body, const std::string& sample) {
  const gen::OpDef* d = gen::find_op(op);
  REQUIRE(d);
  const auto fa = fixture(op + "_whole", op, body);
  const auto fb = fixture(op + "_sampled", op, body + "sample = " + sample + "\n");
  return {gen::generate_case(*d, fa.cases.at(0)), gen::generate_case(*d, fb.cases.at(0))};
}

// The sampled twin as the ssd golden `gen` would write (case "twin", seed 7).
Golden sampled_golden(const Twin& t) {
  Golden g;
  g.prov.op = "ssd";
  g.prov.case_name = "twin";
  g.prov.level = "L0";
  g.prov.case_toml = "[[case]]\nname = \"twin\"\nseed = 7\n";
  g.prov.seed = 7;
  g.inputs = t.sampled.inputs;
  g.input_hashes = t.sampled.input_hashes;
  g.outputs = t.sampled.result.outputs;
  g.agreement = t.sampled.result.agreement;
  g.single_form = t.sampled.result.single_form;
  g.sample = t.sampled.sample;
  return g;
}

void check_twin(const Twin& t) {
  REQUIRE(!t.sampled.sample.empty());
  CHECK(t.sampled.result.intermediates.empty());
  REQUIRE(t.sampled.result.outputs.size() == t.whole.result.outputs.size());
  for (const auto& s : t.sampled.result.outputs) {
    INFO("output " << s.expected.name);
    const auto it = std::find_if(t.whole.result.outputs.begin(), t.whole.result.outputs.end(),
                                 [&](const Output& w) { return w.expected.name == s.expected.name; });
    REQUIRE(it != t.whole.result.outputs.end());
    const Output& w = *it;
    REQUIRE(s.sampled);
    CHECK(s.full_shape == w.expected.shape);
    CHECK(s.full_axes == w.expected.axes);
    REQUIRE(static_cast<int64_t>(s.sample_offsets.size()) == s.expected.size());
    REQUIRE(s.expected.size() > 0);
    int64_t differ = 0;
    for (size_t i = 0; i < s.sample_offsets.size(); ++i) {
      const auto k = static_cast<size_t>(s.sample_offsets[i]);
      differ += !same_bits(s.expected.data[i], w.expected.data[k]);
      if (s.bound) differ += !same_bits((*s.bound)[i], (*w.bound)[k]);
      if (s.bound2) differ += !same_bits((*s.bound2)[i], (*w.bound2)[k]);
      if (s.rounded) differ += (*s.rounded)[i] != (*w.rounded)[k];
    }
    CHECK(differ == 0);
    CHECK(s.bound.has_value() == w.bound.has_value());
  }
  // The agreement of the two oracle forms is still measured (per slice, the worst kept).
  CHECK(!t.sampled.result.agreement.empty());
}
}  // namespace

TEST_CASE("ssd sampled: each slice's oracle run equals the whole case at those elements, bit for bit", "[cpu][L0]") {
  check_twin(twin("ssd", "B = 3\nT = 70\nH = 4\nG = 2\nP = 8\nN = 16\nchunk_size = 16\ninitial_states = true\n",
                  "{ seqs = [0, 2, 1], heads = [0, 3, 2], tokens = 9 }"));
  check_twin(twin("ssd", "B = 2\nT = 33\nH = 2\nP = 4\nN = 8\nchunk_size = 16\nD = \"hp\"\nz = false\n", "\"default\""));
}

TEST_CASE("gated_delta sampled: slices of value heads (GVA) equal the whole case, bit for bit", "[cpu][L0]") {
  check_twin(twin("gated_delta", "B = 2\nT = 40\nH = 2\nHV = 4\nK = 16\nV = 8\nchunk_size = 16\nqk_l2norm = true\n",
                  "{ seqs = [1, 0], heads = [3, 1], tokens = 5 }"));
}

TEST_CASE("mamba3 sampled: SISO and MIMO slices equal the whole case, bit for bit", "[cpu][L0]") {
  check_twin(twin("mamba3", "variant = \"siso\"\nB = 2\nT = 20\nH = 2\nG = 1\nN = 8\nP = 8\nS = 4\nchunk_size = 8\n",
                  "\"default\""));
  check_twin(twin("mamba3", "variant = \"mimo\"\nB = 2\nT = 12\nH = 2\nG = 1\nN = 8\nP = 8\nR = 2\nchunk_size = 4\n",
                  "{ seqs = [1], heads = [1], tokens = 3 }"));
}

TEST_CASE("attention sampled: slices of query heads (GQA) equal the whole case, bit for bit", "[cpu][L0]") {
  check_twin(twin("attention", "B = 2\nSq = 40\nSk = 70\nHq = 4\nHkv = 2\nD = 16\ncausal = true\n",
                  "{ seqs = [0, 1], heads = [1, 2], tokens = 6 }"));
}

TEST_CASE("a bad sample field is refused with the field named", "[cpu][L0]") {
  const gen::OpDef* d = gen::find_op("ssd");
  const std::string body = "B = 2\nT = 8\nH = 2\nP = 4\nN = 4\nchunk_size = 4\n";
  auto msg = [&](const std::string& tag, const std::string& extra, const std::string& b = "") {
    try {
      gen::generate_case(*d, fixture(tag, "ssd", (b.empty() ? body : b) + extra).cases.at(0));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(msg("b1", "sample = { seqs = [2], heads = [0] }\n"), assay_test::Contains("field 'sample.seqs': 2 is not in [0, 2)"));
  CHECK_THAT(msg("b2", "sample = { seqs = [0, 1], heads = [0] }\n"), assay_test::Contains("give both, of the same length"));
  CHECK_THAT(msg("b3", "sample = { tokens = 0 }\n"), assay_test::Contains("field 'sample.tokens'"));
  CHECK_THAT(msg("b4", "sample = { slices = 3 }\n"), assay_test::Contains("field 'sample.slices': unknown field"));
  CHECK_THAT(msg("b5", "sample = 3\n"), assay_test::Contains("expected \"default\""));
  CHECK_THAT(msg("b6", "sample = \"default\"\nbackward = true\n"), assay_test::Contains("has no batch axis"));
  CHECK_THAT(msg("b7", "sample = \"default\"\nseqlens = [3, 5]\n", "B = 1\nT = 8\nH = 2\nP = 4\nN = 4\nchunk_size = 4\n"), assay_test::Contains("not with 'seqlens'"));
  const auto* sa = gen::find_op("scaled_add");
  try {
    gen::generate_case(*sa, fixture("b8", "scaled_add", "B = 1\nT = 2\nD = 2\nsample = \"default\"\n").cases.at(0));
    FAIL("scaled_add accepted a sample");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), assay_test::Contains("cannot be sampled"));
  }
}

TEST_CASE("a sampled golden round-trips, is Stale when its sample is edited, and judges only the sampled elements",
          "[cpu][L0]") {
  const auto t = twin("ssd", "B = 2\nT = 20\nH = 2\nP = 4\nN = 8\nchunk_size = 8\n", "{ seqs = [1], heads = [1], tokens = 4 }");
  const Golden g = sampled_golden(t);
  const auto dir = dir_for("rt");
  const auto path = (dir / "twin.h5").string();
  write_golden(path, g);
  const Golden r = read_golden(path);
  CHECK(r.prov.schema_version == kSchemaVersionSampled);
  CHECK(r.sample == g.sample);
  CHECK(golden_diff(g, r).empty());
  const auto st = check_stale(r, "");
  INFO(st.reason);
  CHECK(!st.stale);
  for (const auto& o : r.outputs) {
    CHECK(o.sampled);
    CHECK(o.sample_offsets == g.output(o.expected.name)->sample_offsets);
  }
  // Another sample under the same hashes: Stale.
  {
    auto f = h5::File::open_rw(path);
    const std::vector<int64_t> other{0};
    f.overwrite("/sample/seqs", h5::Elem::i64, other.data());
  }
  CHECK(check_stale(read_golden(path), "").stale);

  // Judging: a whole candidate equal to the whole case's expected values (rounded) passes; an
  // error outside the sampled slices is not seen; one inside is, at its whole-tensor index.
  const Output& so = *r.output("out");
  const Output& wo = *std::find_if(t.whole.result.outputs.begin(), t.whole.result.outputs.end(),
                                   [](const Output& o) { return o.expected.name == "out"; });
  std::vector<double> whole(wo.expected.data.size());
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = round_to(so.expected.dtype, wo.expected.data[i]);
  auto judged = [&](const std::vector<double>& cand) {
    std::vector<double> v(so.sample_offsets.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = cand[static_cast<size_t>(so.sample_offsets[i])];
    Tolerance tol;
    tol.bound_k = 3 * 0x1p-8;
    return compare_tensor(so, v, tol);
  };
  CHECK(judged(whole).verdict == Verdict::Passed);
  auto outside = whole;
  outside[0] += 100;  // sequence 0, head 0: not sampled
  CHECK(judged(outside).verdict == Verdict::Passed);
  auto inside = whole;
  const size_t k = static_cast<size_t>(so.sample_offsets.back());  // sequence 1, head 1, the last token
  inside[k] += 100;
  const auto rep = judged(inside);
  CHECK(rep.verdict == Verdict::Incorrect);
  CHECK(rep.first_bad_index == "[b=1, t=19, h=1, p=3]");
}

TEST_CASE("sampled with inputs as recipes: the big inputs stay lazy (no values held), same bits as the whole case",
          "[cpu][L0]") {
  const auto t = twin("gated_delta",
                      "B = 2\nT = 24\nH = 1\nHV = 2\nK = 16\nV = 8\nchunk_size = 8\nqk_l2norm = true\ninputs = \"recipe\"\n",
                      "{ seqs = [1], heads = [1], tokens = 4 }");
  check_twin(t);
  size_t lazy = 0;
  for (size_t i = 0; i < t.sampled.inputs.size(); ++i) {
    if (!t.sampled.lazy[i]) continue;
    ++lazy;
    CHECK(t.sampled.inputs[i].data.empty());
    CHECK(t.sampled.store_as_recipe(i));
    // Its streamed hash is the whole tensor's.
    const auto& w = *std::find_if(t.whole.inputs.begin(), t.whole.inputs.end(),
                                  [&](const Tensor& x) { return x.name == t.sampled.inputs[i].name; });
    CHECK(t.sampled.input_hashes[i] == gen::input_hash(w));
  }
  CHECK(lazy >= 4);  // q, k, v, g, beta (initial_state too)
}

TEST_CASE("sampled mamba3 with inputs as recipes: DT, whose values make_inputs reads, stays whole, the rest lazy",
          "[cpu][L0]") {
  const auto t = twin("mamba3", "variant = \"siso\"\nB = 2\nT = 12\nH = 2\nG = 1\nN = 8\nP = 4\nS = 4\nchunk_size = 4\n"
                                "inputs = \"recipe\"\n", "\"default\"");
  check_twin(t);
  for (size_t i = 0; i < t.sampled.inputs.size(); ++i)
    if (t.sampled.inputs[i].name == "DT") CHECK(!t.sampled.lazy[i]);
    else if (t.sampled.inputs[i].name == "V") CHECK(t.sampled.lazy[i]);
}

TEST_CASE("a malformed sampled golden is an input error naming file and dataset, before anything big is allocated",
          "[cpu][L0]") {
  const auto t = twin("ssd", "B = 2\nT = 20\nH = 2\nP = 4\nN = 8\nchunk_size = 8\n", "{ seqs = [1], heads = [1], tokens = 4 }");
  const Golden g = sampled_golden(t);
  const auto dir = dir_for("bad");
  const auto path = (dir / "g.h5").string();
  write_golden(path, g);
  auto err = [&](const std::string& tag, const std::function<void(h5::File&)>& edit) {
    const auto p = (dir / (tag + ".h5")).string();
    fs::copy_file(path, p, fs::copy_options::overwrite_existing);
    {
      auto f = h5::File::open_rw(p);
      edit(f);
      f.close();
    }
    try {
      (void)read_golden(p);
    } catch (const InputError& e) {
      const std::string w = e.what();
      CHECK(w.find('\n') == std::string::npos);
      CHECK_THAT(w, assay_test::Contains(p + ": /"));
      return w;
    }
    return std::string("no error");
  };
  CHECK_THAT(err("v3", [](h5::File& f) { f.set_attr("/", "schema_version", int64_t{3}); }),
             assay_test::Contains("/sample: sampled outputs need schema_version 4"));
  CHECK_THAT(err("tokens", [](h5::File& f) {
               const std::vector<int64_t> v{5, 2, 9, 19};
               f.overwrite("/sample/tokens", h5::Elem::i64, v.data());
             }),
             assay_test::Contains("tokens must ascend"));
  CHECK_THAT(err("head", [](h5::File& f) {
               const std::vector<int64_t> v{7};
               f.overwrite("/sample/heads", h5::Elem::i64, v.data());
             }),
             assay_test::Contains("is not below head_count"));
  CHECK_THAT(err("seq", [](h5::File& f) {
               const std::vector<int64_t> v{2};
               f.overwrite("/sample/seqs", h5::Elem::i64, v.data());
             }),
             assay_test::Contains("the sample does not fit the output"));
  CHECK_THAT(err("count", [](h5::File& f) { f.set_attr("/sample", "token_count", int64_t{1} << 40); }),
             assay_test::Contains("/expected/"));
  CHECK_THAT(err("full", [](h5::File& f) { f.set_attr_value("/expected/out", "full_shape", CaseFields::Value{std::vector<int64_t>{2, 20, 2}}); }),
             assay_test::Contains("/expected/out"));
  CHECK_THAT(err("huge", [](h5::File& f) {
               f.set_attr_value("/expected/out", "full_shape",
                                CaseFields::Value{std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40, 2, 4}});
             }),
             assay_test::Contains("/expected/out"));
}

namespace {
// Lends up to `pool` threads whenever asked (gen's CaseScheduler lends only what ended cases left).
struct CountingLender : gen::ThreadLender {
  std::mutex m;
  int pool, out = 0, peak = 0, to_slices = 0, to_hashing = 0;
  explicit CountingLender(int p) : pool(p) {}
  int take(int want, int& counter) {
    std::lock_guard<std::mutex> lk(m);
    const int k = std::max(0, std::min(want, pool - out));
    out += k, counter += k, peak = std::max(peak, out);
    return k;
  }
  int borrow(int want) override { return take(want, to_hashing); }  // recipe_hash's batches
  void repay(int n) override {
    std::lock_guard<std::mutex> lk(m);
    out -= n;
  }
  int borrow_wait(int want, const std::function<bool()>& stop) override {  // run_sampled's slices
    return stop() ? 0 : take(want, to_slices);
  }
};
}  // namespace

TEST_CASE("sampled with lent threads: slices and recipe hashing on borrowed threads give the same golden, all repaid",
          "[cpu][L0]") {
  const gen::OpDef* d = gen::find_op("gated_delta");
  REQUIRE(d);
  // v: 2 x 1024 x 8 x 128 = 2^21 elements, two hash blocks; six slices.
  const auto fx = fixture("lend", "gated_delta",
                          "B = 2\nT = 1024\nH = 2\nHV = 8\nK = 16\nV = 128\nchunk_size = 64\nqk_l2norm = true\n"
                          "inputs = \"recipe\"\nsample = { seqs = [0, 1, 0, 1, 0, 1], heads = [0, 7, 3, 4, 5, 1], tokens = 16 }\n");
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // the case's own thread; the rest is lent
  const gen::Generated alone = gen::generate_case(*d, fx.cases.at(0));
  CountingLender lend(3);
  gen::Generated lent;
  {
    const gen::LenderScope scope(&lend);
    lent = gen::generate_case(*d, fx.cases.at(0));
  }
  omp_set_num_threads(saved);
  CHECK(lend.to_slices > 0);
  CHECK(lend.to_hashing > 0);
  CHECK(lend.peak <= 3);
  CHECK(lend.out == 0);  // every borrowed thread repaid
  CHECK(lent.input_hashes == alone.input_hashes);
  REQUIRE(lent.result.outputs.size() == alone.result.outputs.size());
  for (size_t o = 0; o < lent.result.outputs.size(); ++o) {
    const auto& a = lent.result.outputs[o].expected.data;
    const auto& b = alone.result.outputs[o].expected.data;
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
  }
}
