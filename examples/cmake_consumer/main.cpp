// consumer GOLDEN: reads a scaled_add golden through assay's installed package, re-runs both
// oracle forms on its inputs and checks them against the golden's expected values. Exit 0 when
// they agree to 1e-12 relative, 1 when not, 2 on bad input.
#include <cstdio>

#include <toml++/toml.h>

#include "reference/core/check.h"
#include "reference/scaled_add/scaled_add.h"
#include "verify/io/golden.h"
#include "verify/io/stale.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer golden/scaled_add/<case>.h5\n");
    return 2;
  }
  try {
    const auto g = assay::read_golden(argv[1]);
    if (const auto st = assay::check_stale(g, ""); st.stale) {
      std::fprintf(stderr, "%s: Stale: %s\n", argv[1], st.reason.c_str());
      return 2;
    }
    const auto doc = toml::parse(g.prov.case_toml);
    const auto& c = *doc["case"].as_array()->get(0)->as_table();
    const double alpha = c["alpha"].value_or(1.0), beta = c["beta"].value_or(1.0);
    const auto* x = g.input("x");
    const auto* y = g.input("y");
    const auto* out = g.output("out");
    if (!x || !y || !out) {
      std::fprintf(stderr, "%s: not a scaled_add golden\n", argv[1]);
      return 2;
    }
    const auto a = assay::ref::scaled_add_loop(x->data, y->data, alpha, beta);
    const auto b = assay::ref::scaled_add_eigen(x->data, y->data, alpha, beta);
    const double ra = assay::agreement_rel(a, out->expected.data), rb = assay::agreement_rel(b, out->expected.data);
    std::printf("%s/%s: %zu elements, loop form %.3e, Eigen form %.3e relative to the golden\n", g.prov.op.c_str(),
                g.prov.case_name.c_str(), a.size(), ra, rb);
    return ra <= 1e-12 && rb <= 1e-12 ? 0 : 1;
  } catch (const assay::InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
