#include "reference/core/toml_text.h"

#include <fmt/format.h>

#include "reference/core/check.h"

namespace assay {

namespace {
// Scans `text` as TOML's lexer would for strings and comments, counting brackets open at once and
// the dots of each key segment (a segment ends at '=', ',', a bracket or a newline; a float's one
// dot never comes near the bound). Throws at the first place that passes kMaxTomlNesting.
void check_nesting(std::string_view t, const std::string& source) {
  int depth = 0, dots = 0;
  size_t line = 1, line_start = 0;
  auto refuse = [&](size_t at, const char* what) {
    throw InputError(fmt::format("{}:{}:{}: malformed TOML: {} nested deeper than {} levels", source, line,
                                 at - line_start + 1, what, kMaxTomlNesting));
  };
  auto newline = [&](size_t at) { ++line, line_start = at + 1; };
  for (size_t i = 0; i < t.size(); ++i) {
    const char ch = t[i];
    switch (ch) {
      case '\n': newline(i), dots = 0; break;
      case '#':
        while (i + 1 < t.size() && t[i + 1] != '\n') ++i;
        break;
      case '"': case '\'': {
        const bool multi = t.substr(i, 3) == std::string_view(ch == '"' ? "\"\"\"" : "'''");
        const std::string_view close = multi ? t.substr(i, 3) : t.substr(i, 1);
        i += close.size();
        for (; i < t.size(); ++i) {
          if (t[i] == '\n') {
            if (!multi) break;  // an unterminated one-line string: toml++ reports it
            newline(i);
          } else if (ch == '"' && t[i] == '\\') {
            if (i + 1 < t.size() && t[i + 1] == '\n') newline(i + 1);
            ++i;
          } else if (t.substr(i, close.size()) == close) {
            while (multi && i + 3 < t.size() && t[i + 3] == ch) ++i;  // up to two quotes may end the content
            i += close.size() - 1;
            break;
          }
        }
        if (i < t.size() && t[i] == '\n') newline(i), dots = 0;
        break;
      }
      case '[': case '{':
        if (++depth > kMaxTomlNesting) refuse(i, "arrays or tables");
        dots = 0;
        break;
      case ']': case '}':
        depth = depth > 0 ? depth - 1 : 0;
        dots = 0;
        break;
      case '=': case ',': dots = 0; break;
      case '.':
        if (++dots > kMaxTomlNesting) refuse(i, "a dotted key");
        break;
      default: break;
    }
  }
}
}  // namespace

toml::table parse_toml(std::string_view text, const std::string& source) {
  check_nesting(text, source);
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}:{}: malformed TOML: {}", source, e.source().begin.line, e.source().begin.column,
                                 e.description()));
  }
}

}  // namespace assay
