// Sampled outputs: a case may check only some (sequence, head) slices of its outputs, at some
// tokens, so that a production-size case (2^31 elements and more) keeps a golden of a few MB and
// an oracle run of minutes (golden/SCHEMA.md "Sampled outputs").
//
// A sample is a list of slices, each one (batch index b, head index h), and a list of token
// positions. A slice of a tensor holds, in row-major order over the tensor's own axes, every
// element whose batch axis is b, whose head axes sit at h's position (an axis of n heads where the
// sampled head count is Hs takes index h * n / Hs: G groups of H heads, the Hkv of Hq query
// heads, the H key heads of HV value heads), whose token axis is one of `tokens`, and any index on
// the other axes. A slice's elements come slice by slice, in the order of `seqs` / `heads`.
//
// Tensors: any, by their axes (std::vector<std::string>) and shape (int64 extents); the indices
// returned are flat row-major offsets (int64) into that tensor.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace assay {

struct SampleSpec {
  std::vector<int64_t> seqs, heads;  // the slices, paired: (seqs[s], heads[s])
  std::vector<int64_t> tokens;       // ascending token positions (every token when all are kept)
  std::string batch_axis = "B";
  std::string token_axis = "T";
  std::vector<std::string> head_axes;  // the axes that count heads or groups of heads (H, G, HV, Hq, Hkv)
  int64_t head_count = 1;              // Hs: the extent of the sampled head axis (the outputs' heads)
  int64_t token_count = 0;             // T: the extent of the token axis in the full tensors
  bool empty() const { return seqs.empty(); }
  size_t slices() const { return seqs.size(); }
  bool operator==(const SampleSpec&) const = default;
};

// The default sample of a B x Hs case: the first sequence with the first head, one in the middle,
// and the last sequence with the last head (the largest offsets), duplicates dropped; `tokens`
// evenly spaced positions from 0 to T - 1 (all of them when T <= tokens).
SampleSpec default_sample(int64_t B, int64_t Hs, int64_t T, int64_t tokens);

// Evenly spaced token positions: round(k (T - 1) / (n - 1)), k = 0..n-1, first and last included;
// all of 0..T-1 when T <= n.
std::vector<int64_t> even_tokens(int64_t T, int64_t n);

// The flat offsets of slice s's elements in a tensor of these axes and shape. `sub`: the tensor is
// the slice's own (a case with one sequence and one head: batch and head extents 1, indices 0).
// A tensor without the batch axis, head axes or token axis is taken whole along what it lacks.
std::vector<int64_t> slice_offsets(const SampleSpec& sp, size_t s, const std::vector<std::string>& axes,
                                   const std::vector<int64_t>& shape, bool sub);

// Every slice's offsets, slice after slice: element i of a sampled output is element
// sample_offsets(...)[i] of the whole tensor.
std::vector<int64_t> sample_offsets(const SampleSpec& sp, const std::vector<std::string>& axes,
                                    const std::vector<int64_t>& shape);

// One line for reports: "3 slices (seq, head): (0, 0) (4, 32) (8, 63); 1024 of 65536 tokens".
std::string sample_summary(const SampleSpec& sp);

}  // namespace assay
