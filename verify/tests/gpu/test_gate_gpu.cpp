// GPU tests of the gate (CTest label gpu; never run in CI). A plain program rather than Catch2:
// without a GPU it must exit 125 so CTest counts it as SKIPPED (SKIP_RETURN_CODE), never passed.
//
//   test_gate_gpu MODE --assay EXE --plugin-dir DIR --golden DIR
//   MODE: mutants | example_plugin | builtin | sanitize-memcheck | sanitize-racecheck |
//         sanitize-synccheck | sanitize-initcheck            (the gate's own machinery)
//         kernels-<op>                 every built-in kernel of <op> on its L0 goldens: Passed or
//                                      NotSupported, each kernel passing at least one case
//         mutants-<op>                 every GPU mutant of <op> (libassay_<op>_mutants.so, kernels
//                                      <op>_mutant_*) is rejected (Incorrect or Failed) on at least
//                                      one L0 golden (or, for a defect that is a sanitizer's to
//                                      find, under that sanitizer: tool_for)
//         relations-<op>               `verify --relations` over every built-in kernel of <op>: every
//                                      case and relation row Passed or NotSupported (no false alarm),
//                                      each kernel passing >= 1 relation row; then every relation-only
//                                      mutant of <op> (relation_mutants below): no plain L0 case rejects
//                                      it, and the relation named for it does
//         sanitize-kernels-<tool>      every built-in quant / optim / ssd / gated_delta / mamba3 kernel on all its L0 cases and
//                                      the attention kernels on a reduced set: 0 sanitizer errors
//
// With a CTest resource spec (cmake/resources/gpus.json), CTEST_RESOURCE_GROUP_0_GPUS="id:N,..."
// pins the test to GPU N through CUDA_VISIBLE_DEVICES.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

int g_failures = 0;
#define EXPECT(cond, ...)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      ++g_failures;                                                                        \
      fmt::print(stderr, "FAIL {}:{}: {}: {}\n", __FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
    }                                                                                      \
  } while (0)

struct Run {
  int code = -1;
  nlohmann::json j;
  std::string out;
};

Run assay(const std::string& exe, const std::string& args) {
  const std::string cmd = exe + " " + args;
  fmt::print(stderr, "$ {}\n", cmd);
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  try {
    r.j = nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "not JSON ({}):\n{}\n", e.what(), r.out);
  }
  return r;
}

std::map<std::string, nlohmann::json> by_kernel(const nlohmann::json& j) {
  std::map<std::string, nlohmann::json> m;
  if (j.is_object() && j.contains("cases"))
    for (const auto& c : j["cases"]) m[c["kernel"].get<std::string>() + "/" + c["case"].get<std::string>()] = c;
  return m;
}

bool contains(const nlohmann::json& c, const std::string& what) {
  const std::string s = c.dump();
  return s.find(what) != std::string::npos;
}

void expect_case(const std::map<std::string, nlohmann::json>& m, const std::string& key, const std::string& verdict,
                 const std::string& must_mention) {
  auto it = m.find(key);
  EXPECT(it != m.end(), "no case {} in the report", key);
  if (it == m.end()) return;
  const auto got = it->second.value("verdict", std::string("?"));
  EXPECT(got == verdict, "{}: verdict {} (want {}); reason: {}", key, got, verdict, it->second.value("reason", std::string()));
  if (!must_mention.empty())
    EXPECT(contains(it->second, must_mention), "{}: the report does not mention '{}': {}", key, must_mention,
           it->second.value("reason", std::string()));
  fmt::print(stderr, "  {:<36} {:<12} {}\n", key, got, it->second.value("reason", std::string()));
}

// Built-in kernels of one op: every case Passed or NotSupported, each kernel passes >= 1 case.
void expect_all_pass_or_unsupported(const nlohmann::json& j) {
  std::map<std::string, std::map<std::string, int>> counts;
  for (const auto& c : j["cases"]) {
    const auto k = c.value("kernel", std::string()), v = c.value("verdict", std::string());
    ++counts[k][v];
    EXPECT(v == "Passed" || v == "NotSupported", "{}/{}: {} ({})", k, c.value("case", std::string()), v,
           c.value("reason", std::string()));
  }
  EXPECT(!counts.empty(), "no kernel ran");
  for (const auto& [k, vs] : counts) {
    std::string line;
    for (const auto& [v, n] : vs) line += fmt::format(" {}={}", v, n);
    fmt::print(stderr, "  {:<32}{}\n", k, line);
    EXPECT(vs.count("Passed") && vs.at("Passed") > 0, "{} passes no case", k);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: test_gate_gpu MODE --assay EXE --plugin-dir DIR --golden DIR\n");
    return 2;
  }
  const std::string mode = argv[1];
  std::string exe = "assay", plugin_dir = ".", golden = "golden";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--assay") exe = v;
    else if (k == "--plugin-dir") plugin_dir = v;
    else if (k == "--golden") golden = v;
  }
  if (const char* g = std::getenv("CTEST_RESOURCE_GROUP_0_GPUS")) {
    // "id:1,slots:1" -> CUDA_VISIBLE_DEVICES=1
    std::string s = g;
    const auto a = s.find("id:");
    if (a != std::string::npos) {
      const auto id = s.substr(a + 3, s.find(',', a) - a - 3);
      setenv("CUDA_VISIBLE_DEVICES", id.c_str(), 1);
      fmt::print(stderr, "CTest resource: GPU {}\n", id);
    }
  }
  const std::string mutants = plugin_dir + "/libassay_mutants.so", example = plugin_dir + "/libassay_example_plugin.so";
  const std::string common = fmt::format("--json --golden {} --no-fixture-check", golden);
  Run r;
  const auto skip_if_no_gpu = [](const Run& run) {
    if (run.j.is_object() && run.j["device"].is_null()) {
      fmt::print(stderr, "SKIPPED: no GPU ({})\n", run.j.value("device_error", std::string()));
      return true;
    }
    return false;
  };
  // A run of correct kernels: a JSON report, every case Passed or NotSupported, exit 0.
  const auto expect_clean_run = [](const Run& run) {
    EXPECT(run.j.is_object() && run.j.contains("cases"), "no JSON report");
    if (run.j.is_object() && run.j.contains("cases")) expect_all_pass_or_unsupported(run.j);
    EXPECT(run.code == 0, "exit code {} (want 0)", run.code);
  };
  if (mode.rfind("kernels-", 0) == 0) {
    const std::string op = mode.substr(8);
    r = assay(exe, fmt::format("verify {} --op {}", common, op));
    if (skip_if_no_gpu(r)) return 125;
    expect_clean_run(r);
    fmt::print(stderr, "{}: {} failures\n", mode, g_failures);
    return g_failures ? 1 : 0;
  }
  if (mode.rfind("mutants-", 0) == 0) {
    // Every GPU mutant of <op> (libassay_<op>_mutants.so, kernels named <op>_mutant_*) runs on at
    // least one L0 golden and is rejected (Incorrect or Failed) by at least one.
    const std::string op = mode.substr(8);
    r = assay(exe, fmt::format("verify {} --op {} --plugin {}/libassay_{}_mutants.so --kernel '{}_mutant_*'", common, op,
                               plugin_dir, op, op));
    if (skip_if_no_gpu(r)) return 125;
    std::map<std::string, std::vector<std::string>> rejected;
    std::map<std::string, int> ran;
    if (r.j.is_object() && r.j.contains("cases"))
      for (const auto& c : r.j["cases"]) {
        const auto k = c.value("kernel", std::string()), v = c.value("verdict", std::string());
        ran[k] += v != "NotSupported";
        // A deadlocked mbarrier ring is that defect's usual symptom: Hung counts for the mutants
        // whose planted bug is a wrong phase parity.
        const bool hang_ok = v == "Hung" && k == "attention_mutant_sm90_parity_flip";
        if (v == "Incorrect" || v == "Failed" || hang_ok)
          rejected[k].push_back(fmt::format("{} {}: {}", c.value("case", std::string()), v, c.value("reason", std::string())));
      }
    EXPECT(!ran.empty(), "no {}_mutant_* kernel in the report", op);
    if (op == "attention")  // the v1 five and the sm90 five must all be there
      for (const char* m : {"kv_tile0", "no_o_rescale", "gqa_modulo", "fp16_partials", "causal_top_left", "sm90_kv_tile0",
                            "sm90_stage_stuck", "sm90_parity_flip", "sm90_stale_scores", "sm90_no_o_rescale"})
        EXPECT(ran.count(std::string("attention_mutant_") + m), "attention_mutant_{} missing", m);
    // Mutants whose defect is a sanitizer's to find: rejected under that tool on >= 1 L0 golden
    // (a missing barrier need not change a result on a given GPU; racecheck sees the hazard).
    const std::map<std::string, std::string> tool_for{{"ssd_mutant_no_sync", "racecheck"},
                                                      {"ssd_mutant_tail_unguarded", "memcheck"}};
    // Mutants whose defect needs a tensor past 2^31 elements: no L0 golden is that large, and a
    // dedicated GPU test rejects each (CTest name given).
    const std::map<std::string, std::string> large_only{{"ssd_mutant_offsets_i32", "gpu.ssd.large_2e31_offsets_i32_rejected"}};
    // Mutants that only a relation shows (no L0 golden does): relations-<op> checks each.
    const std::map<std::string, std::string> relation_only{{"ssd_mutant_init_neighbour_odd_b", "gpu.relations.ssd"},
                                                           {"ssd_mutant_seeded_short_no_decay", "gpu.relations.ssd"}};
    for (const auto& [k, n] : ran) {
      if (const auto l = relation_only.find(k); l != relation_only.end()) {
        fmt::print(stderr, "  {}: ran {} L0 cases, rejected by {} (relation-only: {})\n", k, n, rejected[k].size(), l->second);
        EXPECT(rejected[k].empty(), "{} is rejected by a plain L0 golden: not relation-only", k);
        continue;
      }
      if (const auto l = large_only.find(k); l != large_only.end()) {
        fmt::print(stderr, "  {}: ran {} L0 cases (needs a tensor past 2^31 elements: {})\n", k, n, l->second);
        continue;
      }
      EXPECT(n > 0, "{} ran on no case", k);
      fmt::print(stderr, "  {}: ran {} cases, rejected by {}\n", k, n, rejected[k].size());
      for (const auto& line : rejected[k]) fmt::print(stderr, "    {}\n", line);
      const auto tool = tool_for.find(k);
      if (tool == tool_for.end()) {
        EXPECT(!rejected[k].empty(), "{} was not rejected by any L0 golden", k);
        continue;
      }
      const Run t = assay(exe, fmt::format("sanitize --tool {} {} --op {} --plugin {}/libassay_{}_mutants.so --kernel {} --runs 1",
                                           tool->second, common, op, plugin_dir, op, k));
      int failed = 0;
      if (t.j.is_object() && t.j.contains("cases"))
        for (const auto& c : t.j["cases"]) failed += c.value("verdict", std::string()) == "Failed" && contains(c, tool->second);
      EXPECT(failed > 0, "{} was not rejected by {} on any L0 golden", k, tool->second);
      fmt::print(stderr, "    {}: Failed on {} case(s)\n", tool->second, failed);
    }
    EXPECT(r.code == 1, "exit code {} (want 1)", r.code);
    fmt::print(stderr, "{}: {} failures\n", mode, g_failures);
    return g_failures ? 1 : 0;
  }
  if (mode.rfind("relations-", 0) == 0) {
    const std::string op = mode.substr(10);
    r = assay(exe, fmt::format("verify {} --op {} --relations", common, op));
    if (skip_if_no_gpu(r)) return 125;
    expect_clean_run(r);
    std::map<std::string, int> rel_passed;
    if (r.j.is_object() && r.j.contains("cases"))
      for (const auto& c : r.j["cases"])
        if (c.contains("relation")) rel_passed[c.value("kernel", std::string())] += c.value("verdict", std::string()) == "Passed";
    for (const auto& [k, n] : rel_passed) {
      fmt::print(stderr, "  {}: {} relation rows passed\n", k, n);
      EXPECT(n > 0, "{} passes no relation row", k);
    }
    EXPECT(!rel_passed.empty(), "no relation row in the report");
    // Relation-only mutants: the relation that must catch each one.
    const std::map<std::string, std::map<std::string, std::string>> relation_mutants{
        {"ssd", {{"ssd_mutant_init_neighbour_odd_b", "batch.extended"}, {"ssd_mutant_seeded_short_no_decay", "continuation"}}}};
    if (const auto it = relation_mutants.find(op); it != relation_mutants.end())
      for (const auto& [k, rel] : it->second) {
        const Run m = assay(exe, fmt::format("verify {} --op {} --relations --plugin {}/libassay_{}_mutants.so --kernel {}", common, op,
                                             plugin_dir, op, k));
        int plain_rejected = 0, caught = 0;
        if (m.j.is_object() && m.j.contains("cases"))
          for (const auto& c : m.j["cases"]) {
            const auto v = c.value("verdict", std::string());
            const bool bad = v == "Incorrect" || v == "Failed";
            if (!c.contains("relation")) {
              plain_rejected += bad;
              if (bad) fmt::print(stderr, "    plain {}: {} {}\n", c.value("case", std::string()), v, c.value("reason", std::string()));
            } else if (bad && c.value("relation", std::string()) == rel) {
              ++caught;
              fmt::print(stderr, "    {}: {}\n", c.value("case", std::string()), c.value("reason", std::string()));
            }
          }
        fmt::print(stderr, "  {}: rejected by {} plain L0 cases, caught by {} on {} cases\n", k, plain_rejected, rel, caught);
        EXPECT(plain_rejected == 0, "{} is rejected by a plain L0 case: not a relation-only mutant", k);
        EXPECT(caught > 0, "{} was not caught by {}", k, rel);
        EXPECT(m.code == 1, "{}: exit code {} (want 1)", k, m.code);
      }
    fmt::print(stderr, "{}: {} failures\n", mode, g_failures);
    return g_failures ? 1 : 0;
  }
  if (mode.rfind("sanitize-kernels-", 0) == 0) {
    const std::string tool = mode.substr(17);
    // Attention under the sanitizers: a reduced shape set (racecheck is slow on big tiles).
    // (attention_sm90 claims decode_sq1_*, d96_sq33_sk129, tiles3_t64_d80_fp16_splits7 and
    // d128_causal_sq130_sk1000: its TMA / mbarrier ring under racecheck and synccheck.)
    const char* reduced = "--case 'decode_sq1_*' --case 'paged_ps3_sink' --case 'd96_sq33_sk129' --case 'varlen_empty' "
                          "--case 'causal_window_sink_sq_gt_sk' --case 'tiles3_t64_d80_fp16_splits7' "
                          "--case 'd128_causal_sq130_sk1000'";
    for (const std::string& sel : {std::string("--op quant"), std::string("--op optim"), std::string("--op ssd"), std::string("--op gated_delta"), std::string("--op mamba3"),
                                  fmt::format("--op attention {}", reduced)}) {
      r = assay(exe, fmt::format("sanitize --tool {} {} --runs 1 {}", tool, common, sel));
      if (skip_if_no_gpu(r)) return 125;
      expect_clean_run(r);
    }
    fmt::print(stderr, "{}: {} failures\n", mode, g_failures);
    return g_failures ? 1 : 0;
  }
  if (mode == "mutants") {
    // The acceptance run: one invocation with the correct built-in kernel and six broken ones.
    // The run must complete, report every case, and give each its verdict.
    r = assay(exe, fmt::format("verify {} --plugin {} --case int_exact --timeout 15 --kernel scaled_add_v1 --kernel mut_oob_far "
                               "--kernel mut_hang --kernel mut_segv --kernel mut_past_end --kernel mut_unwritten "
                               "--kernel mut_nondet",
                               common, mutants));
  } else if (mode == "example_plugin") {
    r = assay(exe, fmt::format("verify {} --plugin {} --kernel example_scaled_add", common, example));
  } else if (mode == "builtin") {
    r = assay(exe, fmt::format("verify {} --kernel scaled_add_v1 --junit /tmp/assay_gate_gpu_junit.xml", common));
  } else if (mode.rfind("sanitize-", 0) == 0) {
    const std::string tool = mode.substr(9);
    const std::map<std::string, std::string> planted{
        {"memcheck", "mut_oob_alloc"}, {"racecheck", "mut_race"}, {"synccheck", "mut_syncwarp"}, {"initcheck", "mut_uninit"}};
    r = assay(exe, fmt::format("sanitize --tool {} {} --plugin {} --plugin {} --case int_exact --kernel scaled_add_v1 "
                               "--kernel example_scaled_add --kernel {}",
                               tool, common, mutants, example, planted.at(tool)));
    if (r.j.is_object() && r.j["device"].is_null()) {
      fmt::print(stderr, "SKIPPED: no GPU ({})\n", r.j.value("device_error", std::string()));
      return 125;
    }
    const auto& d = r.j["device"];
    fmt::print(stderr, "device: {} | pci {} | CUDA_VISIBLE_DEVICES={} | {}\n", d.value("name", std::string()),
               d.value("pci_bus_id", std::string()), d.value("cuda_visible_devices", std::string()),
               r.j.value("sanitizer_version", std::string()));
    const auto m = by_kernel(r.j);
    expect_case(m, "scaled_add_v1/int_exact", "Passed", "0 error");
    expect_case(m, "example_scaled_add/int_exact", "Passed", "0 error");
    expect_case(m, planted.at(tool) + "/int_exact", "Failed", tool);
    EXPECT(r.code == 1, "exit code {} (want 1)", r.code);
    EXPECT(r.j.value("sanitizer_version", std::string()).find("ersion") != std::string::npos, "no sanitizer version recorded");
    fmt::print(stderr, "{}: {} failures\n", mode, g_failures);
    return g_failures ? 1 : 0;
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (r.j.is_object() && r.j["device"].is_null()) {
    fmt::print(stderr, "SKIPPED: no GPU ({})\n", r.j.value("device_error", std::string()));
    return 125;
  }
  EXPECT(r.j.is_object(), "no JSON report");
  if (!r.j.is_object()) return 1;
  const auto& d = r.j["device"];
  for (const char* k : {"name", "driver", "cuda_runtime"})
    EXPECT(!d.value(k, std::string()).empty(), "device field '{}' missing from the report", k);
  fmt::print(stderr, "device: {} | driver {} | CUDA runtime {} | pci {} | CUDA_VISIBLE_DEVICES={}\n", d.value("name", std::string()),
             d.value("driver", std::string()), d.value("cuda_runtime", std::string()), d.value("pci_bus_id", std::string()),
             d.value("cuda_visible_devices", std::string()));
  const auto m = by_kernel(r.j);
  if (mode == "mutants") {
    EXPECT(m.size() == 7, "{} cases reported (want 7: the run must go on after crashes and hangs)", m.size());
    expect_case(m, "scaled_add_v1/int_exact", "Passed", "");
    expect_case(m, "mut_oob_far/int_exact", "Failed", "cudaErrorIllegalAddress");
    expect_case(m, "mut_hang/int_exact", "Hung", "watchdog");
    expect_case(m, "mut_segv/int_exact", "Failed", "SIGSEGV");
    expect_case(m, "mut_past_end/int_exact", "Failed", "AFTER the last element");
    expect_case(m, "mut_unwritten/int_exact", "Incorrect", "NaN");
    expect_case(m, "mut_nondet/int_exact", "Incorrect", "bitwise");
    EXPECT(r.code == 1, "exit code {} (want 1)", r.code);
  } else if (mode == "example_plugin") {
    expect_case(m, "example_scaled_add/int_exact", "Passed", "");
    expect_case(m, "example_scaled_add/normal_odd_shape", "Passed", "");
    expect_case(m, "example_scaled_add/specials_fp16", "Passed", "");
    EXPECT(r.code == 0, "exit code {} (want 0)", r.code);
  } else if (mode == "builtin") {
    expect_case(m, "scaled_add_v1/int_exact", "Passed", "");
    expect_case(m, "scaled_add_v1/normal_odd_shape", "NotSupported", "fp32");
    expect_case(m, "scaled_add_v1/specials_fp16", "NotSupported", "fp16");
    EXPECT(r.code == 0, "exit code {} (want 0)", r.code);
    FILE* f = std::fopen("/tmp/assay_gate_gpu_junit.xml", "r");
    EXPECT(f != nullptr, "no JUnit file");
    if (f) {
      std::string x;
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) x.append(buf, n);
      std::fclose(f);
      EXPECT(x.find("<testcase classname=\"scaled_add.scaled_add_v1\" name=\"int_exact\"") != std::string::npos, "JUnit lacks the case");
      EXPECT(x.find("<skipped") != std::string::npos, "JUnit lacks the skipped NotSupported cases");
    }
  }
  fmt::print(stderr, "{}: {} failures\n", mode, g_failures);
  return g_failures ? 1 : 0;
}
