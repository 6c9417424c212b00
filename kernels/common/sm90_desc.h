// kernels/common/sm90_desc.h: the host-computable half of the Hopper (sm_90a) machinery, plain
// C++ (no CUDA headers) so that CPU tests check it: the wgmma shared-memory matrix descriptor,
// the 128-byte swizzle that TMA writes and wgmma reads, and the canonical SW128 operand layouts
// (K-major and MN-major) the attention kernel uses.
//
// Tensors: none; byte offsets inside shared-memory tiles of 16-bit elements whose rows are 128
// bytes (64 elements) long, written by TMA with CU_TENSOR_MAP_SWIZZLE_128B.
//
// Sources (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Shared Memory Layout", "Matrix
// Descriptor Format"; "Tensor Map swizzle modes"):
//   descriptor bits  0-13  start address >> 4 (shared-window address)
//                   16-29  leading-dimension byte offset (LBO) >> 4
//                   32-45  stride-dimension byte offset (SBO) >> 4
//                   49-51  matrix base offset (0: every swizzle atom 1024-byte aligned)
//                   62-63  swizzle: 0 none, 1 128B, 2 64B, 3 32B
//   128B swizzle: inside each 1024-byte atom (8 rows of 128 bytes), the 16-byte chunk c of row r
//   is stored at chunk c ^ r; both TMA and wgmma apply it to address bits [4:6] ^= [7:9], so a
//   descriptor may start 32 / 64 / 96 bytes into a row (the k-steps of one 64-element row).
//   Canonical layouts in units of elements, T = 8 (16-bit elements per 16 bytes):
//     K-major  SW128: ((8, m), (T, 2k)) : ((8T, SBO), (1, T))     LBO unused (encoded 1)
//     MN-major SW128: ((8T, m), (8, k)) : ((1, LBO), (8T, SBO))
//   i.e. K-major: rows (M or N) at 128 bytes, 8-row groups at SBO, K contiguous inside the row;
//   MN-major: 64 MN-contiguous elements per 128-byte row, MN chunks of 64 at LBO, K rows at 128
//   bytes, 8-row K groups at SBO.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ASSAY_SM90_HD __host__ __device__ __forceinline__
#else
#define ASSAY_SM90_HD inline
#endif

namespace assay::kernels::sm90 {

constexpr uint32_t kSwizzle128B = 1;  // descriptor bits 62-63

// The 64-bit wgmma matrix descriptor for a shared-memory operand at shared address `saddr`.
ASSAY_SM90_HD uint64_t gmma_desc(uint32_t saddr, uint32_t lbo_bytes, uint32_t sbo_bytes, uint32_t swizzle) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32;
  d |= static_cast<uint64_t>(swizzle & 3u) << 62;
  return d;
}
// Fields back out of a descriptor (tests; bytes).
ASSAY_SM90_HD uint32_t gmma_desc_start(uint64_t d) { return static_cast<uint32_t>(d & 0x3FFFu) << 4; }
ASSAY_SM90_HD uint32_t gmma_desc_lbo(uint64_t d) { return static_cast<uint32_t>((d >> 16) & 0x3FFFu) << 4; }
ASSAY_SM90_HD uint32_t gmma_desc_sbo(uint64_t d) { return static_cast<uint32_t>((d >> 32) & 0x3FFFu) << 4; }
ASSAY_SM90_HD uint32_t gmma_desc_swizzle(uint64_t d) { return static_cast<uint32_t>(d >> 62); }

// 128-byte swizzle of a shared-memory byte address (atoms 1024-byte aligned).
ASSAY_SM90_HD uint32_t swizzle128(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

// Where TMA (SWIZZLE_128B, box inner dim 64 16-bit elements) puts element (row, col) of a box whose
// shared destination is `base` (1024-byte aligned): row r at base + 128 r, then swizzled.
ASSAY_SM90_HD uint32_t tma_sw128_addr(uint32_t base, int row, int col) {
  return swizzle128(base + static_cast<uint32_t>(row) * 128u + static_cast<uint32_t>(col) * 2u);
}

// The shared address wgmma reads for element (mn, k) of a K-major SW128 operand whose descriptor
// starts at `start` with stride-byte offset sbo (the canonical layout above, then the swizzle).
ASSAY_SM90_HD uint32_t gmma_kmajor_sw128_addr(uint32_t start, uint32_t sbo, int mn, int k) {
  const uint32_t off = static_cast<uint32_t>(mn % 8) * 128u + static_cast<uint32_t>(mn / 8) * sbo + static_cast<uint32_t>(k) * 2u;
  return swizzle128(start + off);
}
// ... and of an MN-major SW128 operand (element (mn, k); mn contiguous).
ASSAY_SM90_HD uint32_t gmma_mnmajor_sw128_addr(uint32_t start, uint32_t lbo, uint32_t sbo, int mn, int k) {
  const uint32_t off = static_cast<uint32_t>(mn % 64) * 2u + static_cast<uint32_t>(mn / 64) * lbo +
                       static_cast<uint32_t>(k % 8) * 128u + static_cast<uint32_t>(k / 8) * sbo;
  return swizzle128(start + off);
}

}  // namespace assay::kernels::sm90
