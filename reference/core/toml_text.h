// The one entry point for parsing TOML text that may come from anyone (a fixture, a golden's
// case_toml attribute, a case-fields block): the nesting is bounded before toml++ sees the text,
// because its parser recurses once per dotted-key part and per bracket, so a 70,000-part dotted
// key or 70,000 nested arrays would overflow the stack instead of giving an error.
#pragma once
#include <string>
#include <string_view>

#include <toml++/toml.h>

namespace assay {

// Dotted-key parts in one key, and brackets ([ and {) open at once, above which text is refused.
inline constexpr int kMaxTomlNesting = 64;

// toml::parse(text) with the bound above; InputError "<source>:<line>:<col>: ..." otherwise.
toml::table parse_toml(std::string_view text, const std::string& source);

}  // namespace assay
