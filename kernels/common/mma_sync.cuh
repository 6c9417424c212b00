// kernels/common/mma_sync.cuh: the Ampere/Hopper warp-level tensor-core primitives every
// mma.sync kernel family shares (device code only; include from .cu files): cp.async 16-byte copies,
// ldmatrix (plain and transposed), mma.sync m16n8k16 with fp32 accumulators for bf16 / fp16 operands,
// and round-to-nearest packing of fp32 into those operands.
//
// Tensors: none; fragments follow the PTX ISA layouts of mma.m16n8k16 (A row-major 16x16, B
// column-major 16x8, C/D 16x8 fp32: thread t holds rows t/4 and t/4 + 8, columns 2 (t%4) + {0, 1}).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace assay::kernels::mma {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// mma.sync m16n8k16, A row-major, B column-major, fp32 accumulators c += a b, of 16-bit element
// type ET ("bf16" or "f16").
#define ASSAY_MMA_M16N8K16(ET, c, a, b0, b1)                                                              \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ET "." ET ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};\n"                                                           \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                      \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

// Round-to-nearest conversions of fp32 to the 16-bit element type: one value, a pair.
__device__ __forceinline__ void cvt_rn(float x, __nv_bfloat16& h) { h = __float2bfloat16_rn(x); }
__device__ __forceinline__ void cvt_rn(float x, __half& h) { h = __float2half_rn(x); }
__device__ __forceinline__ void cvt_rn(float lo, float hi, __nv_bfloat162& h) { h = __floats2bfloat162_rn(lo, hi); }
__device__ __forceinline__ void cvt_rn(float lo, float hi, __half2& h) { h = __floats2half2_rn(lo, hi); }

// The element type T (__nv_bfloat16 or __half) of the tensor-core kernels: its MMA, a packed pair
// of T (the A fragment of P), and the storage code of one value (O).
template <typename T>
struct Ty {
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  using T2 = std::conditional_t<kBf16, __nv_bfloat162, __half2>;
  __device__ static __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kBf16)
      ASSAY_MMA_M16N8K16("bf16", c, a, b0, b1);
    else
      ASSAY_MMA_M16N8K16("f16", c, a, b0, b1);
  }
  __device__ static __forceinline__ uint32_t pack(float lo, float hi) {
    T2 h;
    cvt_rn(lo, hi, h);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ uint16_t code(float x) {
    T h;
    cvt_rn(x, h);
    return *reinterpret_cast<uint16_t*>(&h);
  }
};

}  // namespace assay::kernels::mma
