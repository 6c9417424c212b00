# Shared by the examples in this folder: pick the goldens a kernel claims (from each golden's
# resolved case fields) and run assay.check on exactly those.
"""Check a kernel on exactly the goldens it claims.

A kernel that implements a subset of an op's cases decides it from each golden's resolved case
fields (never from the names); ``assay.check`` then gets the claimed names as a list of globs, so
one check call, one report and one exit code cover exactly the claimed cases.
"""
import glob
import os
import sys
import time


def claimed_cases(assay, op, accept, golden_root="golden"):
    """([claimed case names], [(skipped name, why)]) over golden/<op>/*.h5; ``accept(case, golden) -> (bool, why)``."""
    claimed, skipped = [], []
    for path in sorted(glob.glob(os.path.join(golden_root, op, "*.h5"))):
        g = assay.open(path)
        ok, why = accept(g.case, g)
        if ok:
            claimed.append(g.case_name)
        else:
            skipped.append((g.case_name, why))
    return claimed, skipped


def announce_claims(title, op, claimed, skipped):
    """Prints what the kernel claims and why it leaves the others out; False (and a line on stderr)
    when it claims nothing."""
    print(f"{title}: claims {len(claimed)} of {len(claimed) + len(skipped)} {op} L0 goldens")
    for name, why in skipped:
        print(f"  not claimed: {name} ({why})")
    if not claimed:
        print("nothing claimed", file=sys.stderr)
    return bool(claimed)


def timed_check(assay, op, fn, claimed, out, warmup_golden, sync=lambda: None, profile=None, name=None):
    """One untimed warm-up call of ``fn``, then ``assay.check`` over exactly ``claimed``, timed.
    Returns (report, seconds)."""
    fn(assay.open(warmup_golden))
    sync()
    t0 = time.perf_counter()
    report = assay.check(op, fn, cases=list(claimed), level="L0", profile=profile, out=out, name=name)
    sync()
    return report, time.perf_counter() - t0


def backward_leaves(golden, supports, grads, device):
    """For a backward example's fn(golden): refuses a golden that ``supports`` does not claim
    (NotImplementedError with the reason), else returns (case fields, the golden's inputs as torch
    tensors on ``device``, and a leaf copy requiring grad of every input that a gradient of
    ``grads`` (gradient name -> input name) belongs to)."""
    ok, why = supports(golden.case, golden)
    if not ok:
        raise NotImplementedError(f"{golden.case_name}: {why}")
    x = golden.to_torch(device=device)
    leaves = {name: x[name].clone().requires_grad_(True) for name in grads.values() if name in x}
    return golden.case, x, leaves


def leaf_grads(leaves, grads):
    """The leaves' gradients after the backward pass, under the golden's names (``grads``: gradient
    name -> input name; only the inputs the golden has)."""
    return {grad: leaves[name].grad for grad, name in grads.items() if name in leaves}


def _first_present(d, *keys):
    for k in keys:
        v = d.get(k)
        if v is not None and v != "":
            return v
    return "?"


def tensor_findings(case_entry):
    """[(tensor, verdict, first bad index, worst index, error/allowed ratio)] of a report case's failing
    tensors (report JSON keys: first_mismatch / worst_mismatch, e.g. "[b=0, t=3, hv=1, v=2]", and max_ratio)."""
    rows = []
    for t in case_entry.get("tensors") or []:
        if t.get("verdict") == "Passed":
            continue
        ratio = t.get("max_ratio")
        rows.append((t.get("name", "?"), t.get("verdict", "?"),
                     _first_present(t, "first_mismatch", "first_bad_index"),
                     _first_present(t, "worst_mismatch", "worst_index"),
                     float("inf") if ratio is None else float(ratio)))
    return rows


def print_case_verdicts(report, claimed):
    """Prints every claimed case's verdict with each tensor's error/allowed, and where a case is not
    Passed, each failing tensor's first and worst bad index. Returns the number of cases not Passed."""
    verdicts = {c["case"]: c for c in report.json["cases"]}
    bad = 0
    for n in claimed:
        c = verdicts.get(n)
        v = "no verdict" if c is None else c["verdict"]
        print(f"{n}: {v} {'' if c is None else c.get('reason', '')}")
        for t in (c or {}).get("tensors") or []:
            r = t.get("max_ratio")
            print(f"    {t.get('name')}: {t.get('verdict')}, error/allowed {r if r is not None else 'inf'}")
        if v != "Passed":
            bad += 1
            for name, verdict, first, worst, ratio in tensor_findings(c or {}):
                print(f"      {name}: {verdict}, first bad {first}, worst {worst}, error/allowed {ratio:.3g}")
    return bad
