#include "reference/core/case_fields.h"
#include "reference/core/toml_text.h"

#include <cmath>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "reference/core/check.h"

namespace assay {

const CaseFields::Value& CaseFields::at(const std::string& key) const {
  const auto it = v_.find(key);
  if (it == v_.end()) throw InputError(fmt::format("case field '{}': missing (the op's fixture binding never read it)", key));
  return it->second;
}

double CaseFields::get_double(const std::string& key) const {
  const auto& v = at(key);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  throw InputError(fmt::format("case field '{}': expected a number", key));
}

int64_t CaseFields::get_int(const std::string& key) const {
  const auto& v = at(key);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (const auto* d = std::get_if<double>(&v); d && std::nearbyint(*d) == *d && std::fabs(*d) < 0x1p62)
    return static_cast<int64_t>(*d);
  throw InputError(fmt::format("case field '{}': expected an integer", key));
}

bool CaseFields::get_bool(const std::string& key) const {
  const auto& v = at(key);
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  if (const auto* i = std::get_if<int64_t>(&v); i && (*i == 0 || *i == 1)) return *i != 0;
  throw InputError(fmt::format("case field '{}': expected true or false", key));
}

std::string CaseFields::get_string(const std::string& key) const {
  if (const auto* s = std::get_if<std::string>(&at(key))) return *s;
  throw InputError(fmt::format("case field '{}': expected a string", key));
}

bool CaseFields::has_list(const std::string& key) const {
  if (!has(key)) return false;
  const auto& v = v_.at(key);
  return std::holds_alternative<std::vector<int64_t>>(v) || std::holds_alternative<std::vector<double>>(v);
}

std::vector<double> CaseFields::get_list(const std::string& key) const {
  if (!has(key)) return {};
  const auto& v = at(key);
  if (const auto* a = std::get_if<std::vector<int64_t>>(&v)) return std::vector<double>(a->begin(), a->end());
  if (const auto* a = std::get_if<std::vector<double>>(&v)) return *a;
  return {get_double(key)};
}

// A TOML float that reads back as a float: shortest round-trip digits, with a ".0" where fmt
// prints an integral value as "1".
static std::string toml_double(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  auto s = fmt::format("{}", x);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

static std::string toml_string(const std::string& x) {
  std::string s = "\"";
  for (const char c : x) {
    if (c == '"' || c == '\\') s += '\\', s += c;
    else if (static_cast<unsigned char>(c) < 0x20) s += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    else s += c;
  }
  return s + "\"";
}

std::string CaseFields::str() const {
  std::string s;
  for (const auto& [k, v] : v_) {
    s += k + " = ";
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) s += std::to_string(x);
          else if constexpr (std::is_same_v<T, double>) s += toml_double(x);
          else if constexpr (std::is_same_v<T, bool>) s += x ? "true" : "false";
          else if constexpr (std::is_same_v<T, std::string>) s += toml_string(x);
          else {
            s += "[";
            for (size_t i = 0; i < x.size(); ++i) {
              if (i) s += ", ";
              if constexpr (std::is_same_v<T, std::vector<double>>) s += toml_double(x[i]);
              else s += std::to_string(x[i]);
            }
            s += "]";
          }
        },
        v);
    s += "\n";
  }
  return s;
}

CaseFields CaseFields::parse(const std::string& text) {
  toml::table t;
  t = parse_toml(text, "case fields");
  CaseFields f;
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (v.is_integer()) f.set(key, *v.value<int64_t>());
    else if (v.is_floating_point()) f.set(key, *v.value<double>());
    else if (v.is_boolean()) f.set(key, *v.value<bool>());
    else if (v.is_string()) f.set(key, *v.value<std::string>());
    else if (const auto* a = v.as_array()) {
      bool ints = true;
      for (const auto& e : *a) ints &= e.is_integer();
      if (ints) {
        std::vector<int64_t> xs;
        for (const auto& e : *a) xs.push_back(*e.value<int64_t>());
        f.set(key, std::move(xs));
      } else {
        std::vector<double> xs;
        for (const auto& e : *a) {
          if (!(e.is_integer() || e.is_floating_point())) throw InputError(fmt::format("case field '{}': not an array of numbers", key));
          xs.push_back(*e.value<double>());
        }
        f.set(key, std::move(xs));
      }
    } else {
      throw InputError(fmt::format("case field '{}': not a number, bool, string or array", key));
    }
  }
  return f;
}

}  // namespace assay
