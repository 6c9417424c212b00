// The resolved fields of one case: every field an op's fixture binding read (fixtures/<op>.cpp),
// with its default applied where the case file left it out. `assay gen` records them in the golden
// (the /case group, golden/SCHEMA.md); kernels read them from their KernelCase
// (kernels/registry.h), so no kernel re-derives a fixture default by hand.
//
// Values: int64 (B = 2), double (alpha = 0.5), bool (causal = true), string (recipe = "nvfp4"),
// arrays of int64 (seqlens_k = [70, 9, 0]) or of doubles. Getters convert between numbers where
// the value is exact (an integral double as int, a bool as 0 / 1) and throw InputError naming the
// field otherwise, or when a field without a default is missing.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace assay {

class CaseFields {
 public:
  using Value = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

  void set(const std::string& key, Value v) { v_[key] = std::move(v); }
  bool has(const std::string& key) const { return v_.count(key) != 0; }
  const std::map<std::string, Value>& all() const { return v_; }
  bool empty() const { return v_.empty(); }

  // Required: InputError if absent.
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<double> get_list(const std::string& key) const;  // numbers of an array (or one number)
  // With a default for fields an op reads only in some modes.
  int64_t get_int(const std::string& key, int64_t dflt) const { return has(key) ? get_int(key) : dflt; }
  double get_double(const std::string& key, double dflt) const { return has(key) ? get_double(key) : dflt; }
  bool get_bool(const std::string& key, bool dflt) const { return has(key) ? get_bool(key) : dflt; }
  std::string get_string(const std::string& key, const std::string& dflt) const { return has(key) ? get_string(key) : dflt; }
  bool has_string(const std::string& key) const { return has(key) && std::holds_alternative<std::string>(v_.at(key)); }
  bool has_list(const std::string& key) const;

  // One line per field, "key = value" in TOML syntax, sorted by key; parse() reads it back with
  // the same types (an empty array reads back as integers). The plugin C ABI hands kernels this.
  std::string str() const;
  static CaseFields parse(const std::string& toml_text);

 private:
  const Value& at(const std::string& key) const;
  std::map<std::string, Value> v_;
};

}  // namespace assay
