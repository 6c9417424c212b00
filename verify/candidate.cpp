#include "verify/candidate.h"

#include <fmt/format.h>

#include "reference/core/check.h"

namespace assay {

std::vector<double> read_candidate(const h5::File& f, const Output& o) {
  const auto& e = o.expected;
  std::string ds = "/outputs/" + e.name;
  if (!f.exists(ds)) ds = "/" + e.name;
  if (!f.exists(ds))
    throw InputError(fmt::format("{}: /outputs/{}: missing dataset (the golden's output '{}')", f.path(), e.name, e.name));
  const auto inf = f.info(ds);
  if (inf.shape != e.shape)
    throw InputError(fmt::format("{}: {}: wrong shape {} (golden {} {})", f.path(), ds, shape_str(inf.shape),
                                 e.name, shape_str(e.shape)));
  if (f.has_attr(ds, "dtype")) {
    const auto s = f.attr_str(ds, "dtype");
    const auto d = parse_dtype(s);
    if (!d) throw InputError(fmt::format("{}: {}: unknown dtype '{}'", f.path(), ds, s));
    if (*d != e.dtype && *d != DType::f32 && *d != DType::f64)
      throw InputError(fmt::format("{}: {}: wrong dtype {} (golden output '{}' is {})", f.path(), ds, s, e.name, name(e.dtype)));
    if (inf.is_integer && info(*d).is_float) {
      if (static_cast<int>(inf.elem_size) != info(*d).storage_bytes)
        throw InputError(fmt::format("{}: {}: {}-byte integers cannot hold {} codes", f.path(), ds, inf.elem_size, s));
      auto codes = f.read_u64(ds);
      if (inf.is_signed && inf.elem_size < 8)  // signed storage of codes: keep the stored bit pattern
        for (auto& c : codes) c &= (uint64_t{1} << (8 * inf.elem_size)) - 1;
      std::vector<double> v(codes.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (info(*d).bits < 64 && (codes[i] >> info(*d).bits) != 0)
          throw InputError(fmt::format("{}: {}: element {} holds {:#x}, not a {} code", f.path(), ds, i, codes[i], s));
        v[i] = decode(*d, codes[i]);
      }
      return v;
    }
  }
  if (inf.is_integer && info(e.dtype).is_float)
    throw InputError(fmt::format("{}: {}: integer dataset for {} output '{}' needs a string attribute dtype naming its codes",
                                 f.path(), ds, name(e.dtype), e.name));
  return f.read_f64(ds);
}

}  // namespace assay
