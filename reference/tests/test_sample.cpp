#include "catch_compat.h"
#include "reference/core/sample.h"

using namespace assay;

TEST_CASE("even_tokens keeps the first and the last token and spreads the rest", "[cpu][L0]") {
  CHECK(even_tokens(5, 8) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(even_tokens(65536, 3) == std::vector<int64_t>{0, 32768, 65535});
  const auto t = even_tokens(65536, 1024);
  REQUIRE(t.size() == 1024);
  CHECK(t.front() == 0);
  CHECK(t.back() == 65535);
  for (size_t k = 1; k < t.size(); ++k) CHECK(t[k] > t[k - 1]);
}

TEST_CASE("default_sample: first, middle and last (sequence, head), duplicates dropped", "[cpu][L0]") {
  const auto sp = default_sample(9, 64, 100, 1024);
  CHECK(sp.seqs == std::vector<int64_t>{0, 4, 8});
  CHECK(sp.heads == std::vector<int64_t>{0, 32, 63});
  CHECK(sp.tokens.size() == 100);
  const auto one = default_sample(1, 1, 7, 4);
  CHECK(one.seqs == std::vector<int64_t>{0});
  CHECK(one.tokens == std::vector<int64_t>{0, 2, 4, 6});
}

TEST_CASE("slice_offsets picks the slice's batch, its head on every head axis, and the sampled tokens", "[cpu][L0]") {
  SampleSpec sp;
  sp.seqs = {1};
  sp.heads = {5};
  sp.head_axes = {"H", "G"};
  sp.head_count = 8;
  sp.token_count = 4;
  sp.tokens = {0, 3};
  // x [B=2, T=4, H=8, P=3]: b = 1, h = 5, t in {0, 3}, every p.
  const auto o = slice_offsets(sp, 0, {"B", "T", "H", "P"}, {2, 4, 8, 3}, false);
  std::vector<int64_t> want;
  for (int64_t t : {0, 3})
    for (int64_t p = 0; p < 3; ++p) want.push_back(((1 * 4 + t) * 8 + 5) * 3 + p);
  CHECK(o == want);
  // B/C [B, T, G=2, N=2]: head 5 of 8 is in group 5 * 2 / 8 = 1.
  const auto g = slice_offsets(sp, 0, {"B", "T", "G", "N"}, {2, 4, 2, 2}, false);
  CHECK(g == std::vector<int64_t>{((1 * 4 + 0) * 2 + 1) * 2, ((1 * 4 + 0) * 2 + 1) * 2 + 1, ((1 * 4 + 3) * 2 + 1) * 2,
                                  ((1 * 4 + 3) * 2 + 1) * 2 + 1});
  // The slice's own tensor (one sequence, one head): the same tokens at batch 0, head 0.
  const auto s = slice_offsets(sp, 0, {"B", "T", "H", "P"}, {1, 4, 1, 3}, true);
  CHECK(s == std::vector<int64_t>{0, 1, 2, 9, 10, 11});
  // A per-head tensor without batch or token axis: the head's row.
  CHECK(slice_offsets(sp, 0, {"H", "P"}, {8, 3}, false) == std::vector<int64_t>{15, 16, 17});
  // Indices out of range are refused, not read past the end.
  sp.seqs = {2};
  CHECK_THROWS(slice_offsets(sp, 0, {"B", "T", "H", "P"}, {2, 4, 8, 3}, false));
  // Heads that do not divide the sampled count are refused.
  sp.seqs = {0};
  CHECK_THROWS(slice_offsets(sp, 0, {"B", "T", "G", "N"}, {2, 4, 3, 2}, false));
}

TEST_CASE("sample_offsets concatenates the slices in order", "[cpu][L0]") {
  SampleSpec sp = default_sample(3, 2, 2, 8);
  sp.head_axes = {"H"};
  const auto o = sample_offsets(sp, {"B", "H", "T"}, {3, 2, 2});
  // slices (0,0), (1,1), (2,1): offsets ((b*2+h)*2+t).
  CHECK(o == std::vector<int64_t>{0, 1, 6, 7, 10, 11});
  CHECK(sample_summary(sp) == "3 slices (seq, head): (0, 0) (1, 1) (2, 1); 2 of 2 tokens");
}
