#include "verify/run/worker.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace assay::worker {

uint64_t poison_code(DType t, int run) {
  const bool r0 = run % 2 == 0;
  switch (t) {
    case DType::f64: return r0 ? 0xFFFFFFFFFFFFFFFFull : 0x7FF8DEAD0000BEEFull;  // both NaN
    case DType::f32: return r0 ? 0xFFFFFFFFull : 0x7FC0BEEFull;
    case DType::bf16: return r0 ? 0xFFFFull : 0x7FC1ull;
    case DType::f16: return r0 ? 0xFFFFull : 0x7E01ull;
    case DType::e4m3: return r0 ? 0xFFull : 0x7Full;  // e4m3fn has two NaN codes: S.1111.111
    case DType::e5m2: return r0 ? 0xFFull : 0x7Eull;
    case DType::ue8m0: return 0xFFull;  // its only NaN; run-to-run differences still show in other dtypes
    case DType::e2m1: return r0 ? 0xFFull : 0xF5ull;  // not e2m1 codes at all: decode to NaN
    case DType::i8: case DType::u8: return r0 ? 0xA5ull : 0x5Aull;
    case DType::i32: case DType::u32: return r0 ? 0xA5A5A5A5ull : 0x5A5A5A5Aull;
    case DType::i64: return r0 ? 0xA5A5A5A5A5A5A5A5ull : 0x5A5A5A5A5A5A5A5Aull;
  }
  return 0;
}

void fill_code(void* dst, size_t n, size_t elem_bytes, uint64_t code) {
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n; ++i) std::memcpy(p + i * elem_bytes, &code, elem_bytes);  // little-endian host
}

uint8_t guard_byte(size_t i) { return static_cast<uint8_t>(0xC3u ^ ((i * 0x9Du) >> 1) ^ (i >> 8)); }

void fill_guard(uint8_t* band, size_t n) {
  for (size_t i = 0; i < n; ++i) band[i] = guard_byte(i);
}

GuardCheck check_guard(const uint8_t* band, size_t n) {
  GuardCheck c;
  for (size_t i = 0; i < n; ++i)
    if (band[i] != guard_byte(i)) {
      ++c.changed;
      if (c.first < 0) c.first = static_cast<int64_t>(i);
      c.last = static_cast<int64_t>(i);
    }
  return c;
}

std::string describe_guard(const std::string& tensor, bool before, const GuardCheck& c, size_t band_bytes) {
  if (before) {
    // Offsets counted back from the first element: byte -1 is the last byte of the band.
    const auto near = static_cast<int64_t>(band_bytes) - c.last, far = static_cast<int64_t>(band_bytes) - c.first;
    return fmt::format("canary: output '{}': {} guard bytes BEFORE the first element overwritten (bytes -{}..-{})", tensor,
                       c.changed, near, far);
  }
  return fmt::format("canary: output '{}': {} guard bytes AFTER the last element overwritten (bytes +{}..+{} past the end)",
                     tensor, c.changed, c.first, c.last);
}

double decode_code(DType t, uint64_t code) {
  const auto& i = info(t);
  if (i.is_float && i.bits < 64 && (code >> i.bits) != 0) return std::numeric_limits<double>::quiet_NaN();
  return decode(t, code);
}

std::vector<uint64_t> unpack_codes(const void* src, size_t n, size_t elem_bytes) {
  std::vector<uint64_t> v(n, 0);
  const auto* p = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) std::memcpy(&v[i], p + i * elem_bytes, elem_bytes);
  return v;
}

}  // namespace assay::worker
