// One include for Catch2 v2 (Debian 12) and v3 (GPU machine). Tests include only this header.
#pragma once
#include <string>
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
namespace assay_test {
inline auto Contains(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
}  // namespace assay_test
#else
#include <catch2/catch.hpp>
namespace assay_test {
inline auto Contains(const std::string& s) { return Catch::Matchers::Contains(s); }
}  // namespace assay_test
#endif
