// Errors carry their location and the failed expression. Library code throws; only main() exits.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace assay {

// A bad input (file, dataset, field, shape, dtype): the CLI maps it to a one-line error, exit 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An internal invariant failed: a bug in assay.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The two oracle forms of an op disagree beyond their limit: no golden may be written.
struct OracleDisagreement : Error {
  using Error::Error;
};

}  // namespace assay

#define ASSAY_CHECK(expr, ...)                                                                    \
  do {                                                                                            \
    if (!(expr))                                                                                  \
      throw ::assay::Error(::fmt::format("{}:{}: check failed: {}: {}", __FILE__, __LINE__, #expr, \
                                         ::fmt::format(__VA_ARGS__)));                            \
  } while (0)

#define ASSAY_INPUT_CHECK(expr, ...)                                                \
  do {                                                                              \
    if (!(expr)) throw ::assay::InputError(::fmt::format(__VA_ARGS__));             \
  } while (0)
