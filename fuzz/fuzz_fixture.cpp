// fuzz_fixture: the fixture TOML -> case parser and the input builder (what `assay gen` does for
// each case before it runs the oracles).
//
// Input: the text of a fixture file (seeds: fixtures/*.toml). `assay gen` requires the `op` field
// to equal the file stem, so the text is written to <temp>/<op>.toml where <op> is the value of an
// `op = "..."` line if that names a built-in op, else the built-in op picked by the first byte.
// Then, as verify/cli/cmd_gen.cpp and fixtures/gen/op.cpp (generate_case) do, up to the oracle:
//   assay::gen::load_fixture(path); per case (each independently, as gen's jobs):
//   generate_inputs(op, case), the dist.<tensor> name check, case.check_all_read().
// The oracles are not run (slow; fuzz them separately). The file is also read as a tolerance
// policy (assay::TolerancePolicy::add_file), the other consumer of fixture files.
// Correct rejection: assay::InputError. Findings: any other exception (e.g. assay::Error from an
// ASSAY_CHECK in an input builder), a crash, a sanitizer report, a timeout or an OOM (the memory
// limit is 64 MiB: an input shape above it must be refused by check_memory).
#include <string>
#include <string_view>
#include <vector>

#include "fixtures/gen/case.h"
#include "fixtures/gen/op.h"
#include "fuzz/common.h"
#include "verify/judge/tolerance.h"

namespace {

// The op whose name the file gets: an `op = "<built-in op>"` line, else the first byte's pick.
std::string pick_op(std::string_view text) {
  static const std::vector<std::string> ops = assay_fuzz::setup("listing the built-in ops", [] {
    auto v = assay::gen::op_names();
    if (v.empty()) throw std::runtime_error("no ops are built in");
    return v;
  });
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.substr(0, 2) != "op") continue;
    line.remove_prefix(2);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() != '=') continue;
    line.remove_prefix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.size() < 2 || line.front() != '"') continue;
    const auto q = line.find('"', 1);
    if (q == std::string_view::npos) continue;
    const std::string name(line.substr(1, q - 1));
    for (const auto& o : ops)
      if (o == name) return name;
  }
  return ops[text.empty() ? 0 : static_cast<unsigned char>(text[0]) % ops.size()];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string op = pick_op(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string path = assay_fuzz::write_temp(op + ".toml", data, size);
  const assay::gen::OpDef* def = assay::gen::find_op(op);

  assay_fuzz::accepts("load_fixture", [&] {
    const auto fx = assay::gen::load_fixture(path);
    for (const auto& c : fx.cases) {
      assay_fuzz::accepts("case", [&] {
        const auto inputs = assay::gen::generate_inputs(*def, c);
        // generate_case: every input tensor named in dist.* must exist.
        if (const auto* d = c.table.get("dist"); d && d->as_table()) {
          for (const auto& [k, v] : *d->as_table()) {
            (void)v;
            bool found = false;
            for (const auto& t : inputs) found |= t.name == k.str();
            if (!found) c.fail("dist." + std::string(k.str()), "no input tensor of this op has this name");
          }
        }
        c.check_all_read();  // (gen runs the oracle first, which reads its own fields)
      });
    }
  });
  assay_fuzz::accepts("TolerancePolicy::add_file", [&] {
    assay::TolerancePolicy policy;
    policy.add_file(path);
  });
  return 0;
}
