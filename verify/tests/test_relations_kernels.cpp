// The built-in kernels on the related cases of their declared relations (verify/run/relations.h),
// host side only (CUDA builds; no GPU needed): every check a committed L0 golden forms, for a kernel
// that takes the golden, is accepted in all its runs by the kernel's can_implement, so
// `assay verify --relations` runs it instead of answering NotSupported; and every declared family
// is runnable on at least one golden.
#include <filesystem>
#include <map>
#include <set>

#include "catch_compat.h"
#include "kernels/registry.h"
#include "verify/io/golden.h"
#include "verify/run/kernel_case.h"
#include "verify/run/relations.h"

using namespace assay;

TEST_CASE("every built-in kernel takes every related case of the goldens it takes") {
  const std::string root = std::string(ASSAY_SOURCE_DIR) + "/golden";
  int kernels_with_relations = 0;
  for (const auto* k : kernels::all_kernels()) {
    if (k->relations.empty()) continue;
    ++kernels_with_relations;
    std::set<std::string> runnable;
    int checks = 0;
    for (const auto& e : std::filesystem::directory_iterator(root + "/" + k->op)) {
      if (e.path().extension() != ".h5") continue;
      const Golden g = read_golden(e.path().string());
      if (!k->can_implement(kernel_case_of(g)).ok) continue;
      for (const auto& c : relations::plan_checks(g, k->relations, k->batch_invariant)) {
        if (!c.not_applicable.empty()) continue;
        ++checks;
        for (const auto& r : c.runs) {
          const auto s = k->can_implement(relations::kernel_case_of(g, r));
          INFO(k->name << " " << g.prov.case_name << "@" << c.name << " " << r.label << ": " << s.reason);
          CHECK(s.ok);
        }
        runnable.insert(c.family);
      }
    }
    INFO(k->name);
    CHECK(checks > 0);
    for (const auto& f : k->relations) CHECK(runnable.count(f) == 1);
  }
  CHECK(kernels_with_relations >= 9);
}
