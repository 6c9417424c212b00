#!/usr/bin/env python3
"""The conformance run: upstream kernels judged by assay, each under the profile its own code implies.

    scripts/conformance [--only GLOB]... [--skip GLOB]... [--out DIR] [--docs docs/conformance.md] [--save-rows F.json]
    scripts/conformance --docs docs/conformance.md --docs-from A.json B.json   # runs split over processes
    scripts/conformance --list | --readme

For every upstream of conformance/upstreams/*.py (see conformance/upstream.py), this picks the L0
goldens of its op that it claims (from each golden's resolved case fields), runs it on each with
`assay.check` (in this process: the upstream's compiled kernels stay cached from case to case) and
compares each verdict with conformance/expected.toml:

  - a case that is not Passed must be listed there for that upstream, with its verdict and a named
    cause (an upstream defect or convention, with a link where one exists);
  - a listed case must still not pass (a fix upstream, or in assay, retires its entry);
  - an upstream that cannot run here (package missing, no GPU) is reported as not run, never as
    passed.

Exit 0 when every upstream ran and every verdict is as expected; 1 on an unexplained non-pass or a
listed one that now passes; 3 when everything that ran was as expected but some upstream did not
run. `--docs FILE` writes the table (upstream, version, op, profile, cases, passed, expected
non-pass, causes) as markdown; `--save-rows F.json` keeps the run's table rows, and `--docs-from`
writes the table from the rows of several runs that together cover every upstream once. `--list` runs nothing: it prints each upstream's claims and checks
expected.toml against them (exit 1 on a stale entry). `--readme` rewrites README.md's "Upstream
behaviours" table from expected.toml's [[behaviour]] rows.
"""
import argparse
import fnmatch
import glob
import importlib
import importlib.metadata
import json
import os
import pkgutil
import platform
import sys
import time
import tomllib
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # conformance.*
sys.path.insert(0, os.path.join(REPO, "python"))  # assay

from conformance.upstream import Unavailable, Upstream  # noqa: E402

EXPECTED = os.path.join(HERE, "expected.toml")
VERDICTS = ("Incorrect", "Failed", "Hung")


def load_upstreams():
    """Every Upstream of conformance/upstreams/*.py, in module then list order."""
    import conformance.upstreams as pkg
    ups = []
    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"conformance.upstreams.{m.name}")
        for u in getattr(mod, "UPSTREAMS", []):
            if not isinstance(u, Upstream):
                raise SystemExit(f"conformance/upstreams/{m.name}.py: UPSTREAMS holds {type(u).__name__}, not Upstream")
            ups.append(u)
    names = [u.name for u in ups]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SystemExit(f"conformance/upstreams: duplicate upstream names {dup}")
    return ups


def load_expected(path=EXPECTED):
    """{(upstream, case): entry}; every entry needs upstream, case, verdict, outputs and cause."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    out = {}
    for i, e in enumerate(doc.get("expect", []), 1):
        where = f"{os.path.relpath(path, REPO)} [[expect]] #{i}"
        for k in ("upstream", "case", "verdict", "cause", "kind"):
            if not isinstance(e.get(k), str) or not e[k]:
                raise SystemExit(f"{where}: field '{k}': required (a non-empty string)")
        if e["verdict"] not in VERDICTS:
            raise SystemExit(f"{where}: field 'verdict': '{e['verdict']}' is not one of {', '.join(VERDICTS)}")
        if e["kind"] not in ("defect", "convention", "conditioning"):
            raise SystemExit(f"{where}: field 'kind': '{e['kind']}' is not defect, convention or conditioning")
        key = (e["upstream"], e["case"])
        if key in out:
            raise SystemExit(f"{where}: duplicate entry for upstream {key[0]} case {key[1]}")
        out[key] = e
    return out


def load_pending(golden_root, path=EXPECTED):
    """{(op, case): why}: [[pending]] rows, L0 cases added since the saved runs and not yet run on a GPU.
    --docs-from shows them as not run (never as passed); a saved verdict for one is a problem (retire
    the row)."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    out = {}
    for i, e in enumerate(doc.get("pending", []), 1):
        where = f"{os.path.relpath(path, REPO)} [[pending]] #{i}"
        for k in ("op", "case", "why"):
            if not isinstance(e.get(k), str) or not e[k]:
                raise SystemExit(f"{where}: field '{k}': required (a non-empty string)")
        if not os.path.exists(os.path.join(golden_root, e["op"], e["case"] + ".h5")):
            raise SystemExit(f"{where}: field 'case': no golden golden/{e['op']}/{e['case']}.h5")
        out[(e["op"], e["case"])] = e["why"]
    return out


def load_behaviours(path=EXPECTED):
    """The [[behaviour]] rows: behaviour, case (op/case), in_assay, shown_by."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    rows = doc.get("behaviour", [])
    for i, b in enumerate(rows, 1):
        for k in ("behaviour", "case", "in_assay", "shown_by"):
            if not isinstance(b.get(k), str) or not b[k]:
                raise SystemExit(f"conformance/expected.toml [[behaviour]] #{i}: field '{k}': required (a non-empty string)")
        op_case = b["case"].split("/")
        if len(op_case) != 2 or not os.path.isfile(os.path.join(REPO, "golden", op_case[0], op_case[1] + ".h5")):
            raise SystemExit(f"conformance/expected.toml [[behaviour]] #{i}: field 'case': no golden golden/{b['case']}.h5")
    return rows


README_BEGIN = "<!-- upstream behaviours: generated by conformance/run.py --readme from conformance/expected.toml -->"
README_END = "<!-- end of upstream behaviours -->"


def readme_table(behaviours):
    """The README's "Upstream behaviours" table, between its markers."""
    L = [README_BEGIN, "| upstream behaviour | case | in assay | shown by |", "|---|---|---|---|"]
    for b in behaviours:
        shown = b["shown_by"]
        if not shown.startswith("no upstream"):
            shown = ", ".join(f"`{n.strip()}`" for n in shown.split(","))
        L.append(f"| {b['behaviour']} | `{b['case']}` | {b['in_assay']} | {shown} |")
    L.append(README_END)
    return "\n".join(L)


def update_readme(path, behaviours):
    """Replaces the table between the markers; False when the markers are missing."""
    with open(path) as f:
        text = f.read()
    a, b = text.find(README_BEGIN), text.find(README_END)
    if a < 0 or b < a:
        return False
    new = text[:a] + readme_table(behaviours) + text[b + len(README_END):]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)
    return True


def dist_version(dist):
    if dist == "mamba-ssm":
        src = os.environ.get("MAMBA_SSM_SRC") or next(iter(sorted(glob.glob(os.path.join(REPO, ".upstream", "mamba_ssm-*")))), "")
        base = os.path.basename(src.rstrip("/"))
        if base.startswith("mamba_ssm-"):
            return base[len("mamba_ssm-"):] + " (sdist sources)"
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        try:
            mod = importlib.import_module(dist.replace("-core", "").replace("-", "_"))
            return getattr(mod, "__version__", "?")
        except Exception:  # noqa: BLE001
            return "not installed"


def one_autotune_config():
    """Triton autotuners run the first of their configs that fits this GPU, with no benchmarking per
    shape: the kernel still runs one of its own configurations, as a user's autotuned run does (which
    also skips a config that does not fit: the autotuner scores an OutOfResources config as never
    fastest), at a fraction of the time (mamba_ssm's SSD autotuning took 546 s for 9 cases on an
    H100). Applied before any upstream module is imported (the decorators run at import). False when
    Triton is missing."""
    try:
        from triton.runtime import autotuner
    except Exception:  # noqa: BLE001
        return False
    try:
        from triton.runtime.errors import OutOfResources
    except Exception:  # noqa: BLE001
        OutOfResources = getattr(autotuner, "OutOfResources", None)
    orig_init, orig_run = autotuner.Autotuner.__init__, autotuner.Autotuner.run

    def init(self, fn, arg_names, configs, *args, **kwargs):
        configs = list(configs)
        orig_init(self, fn, arg_names, configs[:1], *args, **kwargs)
        self._assay_next_configs = configs[1:]

    def run(self, *args, **kwargs):
        while True:
            try:
                return orig_run(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001
                rest = getattr(self, "_assay_next_configs", [])
                if OutOfResources is None or not isinstance(e, OutOfResources) or not rest:
                    raise
                self.configs = [rest.pop(0)]  # this config does not fit: the next one, as autotuning would
                getattr(self, "cache", {}).clear()

    autotuner.Autotuner.__init__, autotuner.Autotuner.run = init, run
    return True


_OPENED = {}  # path -> assay.Golden: every upstream of an op reads the same goldens


def claimed(assay, u, golden_root):
    ok, skipped = [], []
    for path in sorted(glob.glob(os.path.join(golden_root, u.op, "*.h5"))):
        g = _OPENED.get(path)
        if g is None:
            g = _OPENED[path] = assay.open(path)
        try:
            yes, why = u.supports(g.case, g)
        except Exception as e:  # noqa: BLE001
            yes, why = False, f"supports raised {type(e).__name__}: {e}"
        (ok if yes else skipped).append(g.case_name if yes else (g.case_name, why))
    return ok, skipped


def run_one(assay, u, cases, out):
    """{case: (verdict, reason, report case json)}; raises Unavailable."""
    saved = {k: os.environ.get(k) for k in u.env}
    os.environ.update(u.env)
    try:
        fn = u.checked_fn()  # Unavailable propagates
        rep = assay.check(u.op, fn, cases=list(cases), level="L0", profile=u.profile, out=out,
                          name=u.name, quiet=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    res = {}
    for c in rep.json.get("cases", []):
        res[c["case"]] = (c.get("verdict", "?"), " ".join(str(c.get("reason", "")).split()), c)
    return res, rep


def tensor_lines(case_json):
    lines = []
    for t in case_json.get("tensors") or []:
        if t.get("verdict") == "Passed":
            continue
        r = t.get("max_ratio")
        lines.append(f"{t.get('name')}: {t.get('verdict')} max_ratio {r if r is not None else 'inf'} "
                     f"first {t.get('first_mismatch', t.get('first_bad_index', '?'))} "
                     f"mismatches {t.get('mismatches', '?')}" + (f" hint: {t['hint']}" if t.get("hint") else ""))
    return lines


def judge(row, listed, problems, not_run):
    """Fills row's passed / expected / not_run from row["verdicts"] ({case: [verdict, reason]}) and
    the upstream's expected.toml entries; appends the unexplained ones to problems. Returns the
    lines to print as (line, case) with case set where the verdict is unexplained. The live run
    and --docs-from judge the same way."""
    row["passed"], row["expected"], row["not_run"] = 0, [], []
    lines = []
    for c, (v, reason) in row["verdicts"].items():
        e = listed.get(c)
        if v == "Failed" and "Unavailable:" in reason:  # the upstream refused this machine for this case
            not_run.append(f"{row['upstream']} {c}: {reason}")
            row["not_run"].append((c, reason))
            lines.append((f"   NOT RUN: {c}: {reason}", None))
            continue
        if v == "Passed":
            row["passed"] += 1
            if e:
                problems.append(f"{row['upstream']} {c}: Passed, but expected.toml lists it as {e['verdict']} "
                                f"({e['cause']}): retire the entry")
            continue
        if e and e["verdict"] == v:
            row["expected"].append((c, v, e))
            lines.append((f"   expected {v}: {c} ({e['kind']}: {e['cause'][:100]})", None))
            continue
        problems.append(f"{row['upstream']} {c}: {v}" + (f" (expected.toml says {e['verdict']})" if e else
                                                          " (not in expected.toml)") + f": {reason}")
        lines.append((f"   UNEXPECTED {v}: {c}: {reason}", c))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], help="upstream name glob (repeatable)")
    ap.add_argument("--skip", action="append", default=[], help="upstream name glob to leave out (repeatable)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "conformance"))
    ap.add_argument("--golden", default=os.path.join(REPO, "golden"))
    ap.add_argument("--docs", help="write the markdown table here (e.g. docs/conformance.md)")
    ap.add_argument("--save-rows", metavar="FILE", help="write this run's table rows as JSON (for --docs-from)")
    ap.add_argument("--docs-from", nargs="+", metavar="FILE",
                    help="run nothing: write --docs from the --save-rows files of runs covering every upstream once")
    ap.add_argument("--list", action="store_true", help="list the upstreams and their claims, run nothing")
    ap.add_argument("--one-config", action="store_true",
                    help="Triton autotuners keep their first config only (saves minutes of autotuning on a GPU)")
    ap.add_argument("--readme", action="store_true",
                    help="rewrite README.md's upstream behaviours table from conformance/expected.toml, run nothing")
    args = ap.parse_args(argv)
    import assay

    behaviours = load_behaviours()
    if args.readme:
        if not update_readme(os.path.join(REPO, "README.md"), behaviours):
            print("README.md: the upstream behaviours markers are missing", file=sys.stderr)
            return 2
        print(f"README.md: {len(behaviours)} upstream behaviours written")
        return 0

    if args.docs_from:
        return docs_from(args.docs_from, args.docs, args.golden)
    if args.one_config and not args.list:
        print(f"--one-config: {'Triton autotuners keep their first config' if one_autotune_config() else 'no Triton here'}")
    everything = load_upstreams()
    ups = [u for u in everything if (not args.only or any(fnmatch.fnmatch(u.name, g) for g in args.only))
           and not any(fnmatch.fnmatch(u.name, g) for g in args.skip)]
    expected = load_expected()
    known = {u.name for u in everything}
    stray = sorted({k[0] for k in expected if k[0] not in known})
    if stray:
        print(f"conformance/expected.toml names upstreams that do not exist: {stray}", file=sys.stderr)
        return 2
    for b in behaviours:
        names = [] if b["shown_by"].startswith("no upstream") else [n.strip() for n in b["shown_by"].split(",")]
        bad = [n for n in names if n not in known]
        if bad:
            print(f"conformance/expected.toml [[behaviour]] {b['case']}: shown_by names no upstream: {bad}", file=sys.stderr)
            return 2
    rows, problems, not_run = [], [], []
    for u in ups:
        cases, skipped = claimed(assay, u, args.golden)
        row = dict(upstream=u.name, dist=u.dist, version=dist_version(u.dist), op=u.op, profile=u.profile,
                   claimed=len(cases), total=len(cases) + len(skipped), passed=0, expected=[], skipped=skipped,
                   status="ran", why=u.profile_why, seconds=0.0)
        rows.append(row)
        print(f"== {u.name} ({u.dist} {row['version']}): {u.op}, profile {u.profile}, claims {len(cases)} of {row['total']}",
              flush=True)
        listed = {c: e for (n, c), e in expected.items() if n == u.name}
        for c in sorted(set(listed) - set(cases)):
            problems.append(f"{u.name} {c}: listed in expected.toml but not claimed (or no such golden)")
        if args.list or not cases:
            row["status"] = "listed" if args.list else "claims nothing"
            continue
        t0 = time.perf_counter()
        try:
            res, rep = run_one(assay, u, cases, os.path.join(args.out, u.name.replace("/", "_")))
        except Unavailable as e:
            row["status"] = f"not run: {e}"
            not_run.append(f"{u.name}: {e}")
            print(f"   NOT RUN: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 (a harness or binary failure is a problem, not a verdict)
            row["status"] = f"error: {type(e).__name__}: {e}"
            problems.append(f"{u.name}: the run itself failed: {type(e).__name__}: {e}")
            traceback.print_exc()
            continue
        row["seconds"] = time.perf_counter() - t0
        row["verdicts"] = {c: list(res.get(c, ("no verdict", "", {}))[:2]) for c in cases}
        for ln, unexpected_case in judge(row, listed, problems, not_run):
            print(ln)
            for tl in tensor_lines(res[unexpected_case][2]) if unexpected_case in res else ():
                print(f"      {tl}")
        print(f"   {row['passed']} passed, {len(row['expected'])} expected non-pass, "
              f"{row['claimed'] - row['passed'] - len(row['expected']) - len(row.get('not_run', []))} unexpected; "
              f"{row['seconds']:.1f} s; report {rep.json_path}", flush=True)
    if args.docs or args.save_rows:
        meta = run_meta(args.one_config)
        if args.save_rows:
            _write_atomic(args.save_rows, json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        if args.docs:
            write_docs(args.docs, rows, meta)
    if args.list:
        for p in problems:
            print(f"PROBLEM: {p}")
        print(f"conformance --list: {len(rows)} upstreams, nothing run" + (f"; {len(problems)} problem(s)" if problems else ""))
        return 1 if problems else 0
    print()
    for p in problems:
        print(f"PROBLEM: {p}")
    for n in not_run:
        print(f"NOT RUN: {n}")
    if problems:
        print(f"conformance: {len(problems)} problem(s)")
        return 1
    if not_run:
        print(f"conformance: as expected where it ran; {len(not_run)} upstream(s) not run")
        return 3
    print("conformance: every verdict as expected")
    return 0


def run_meta(one_config):
    import torch  # the run needs it anyway; recorded for the table
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return {"machine": f"{gpu}, torch {torch.__version__}, Python {platform.python_version()}", "one_config": one_config}


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def docs_from(files, docs, golden_root):
    """--docs-from: one table from the saved rows of runs that together cover every upstream exactly
    once. The saved per-case verdicts are judged again against today's claims (a case an upstream no
    longer claims moves to "cannot express"; a newly claimed case that has no verdict is a problem:
    run it) and today's expected.toml, exactly as a live run judges them."""
    if not docs:
        print("--docs-from needs --docs FILE", file=sys.stderr)
        return 2
    import assay
    rows, metas = [], []
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
            metas.append(d["meta"])
            for r in d["rows"]:
                if r["status"] == "ran" and not isinstance(r.get("verdicts"), dict):
                    raise KeyError(f"row {r.get('upstream')}: no per-case verdicts")
            rows += d["rows"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{f}: not a --save-rows file: {e}", file=sys.stderr)
            return 2
    ups = {u.name: u for u in load_upstreams()}
    names = [r["upstream"] for r in rows]
    missing = [n for n in ups if n not in names]
    dup = sorted({n for n in names if names.count(n) > 1})
    stray = sorted(set(names) - set(ups))
    if missing or dup or stray:
        print(f"--docs-from: the runs must cover every upstream once: missing {missing}, twice {dup}, unknown {stray}",
              file=sys.stderr)
        return 2
    if len({m["machine"] for m in metas}) != 1 or len({m["one_config"] for m in metas}) != 1:
        print(f"--docs-from: the runs were made on different machines or settings: {metas}", file=sys.stderr)
        return 2
    expected = load_expected()
    pending = load_pending(golden_root)
    problems, not_run = [], []
    for r in rows:
        u = ups[r["upstream"]]
        r.update(profile=u.profile, why=u.profile_why)
        listed = {c: e for (n, c), e in expected.items() if n == u.name}
        if r["status"] != "ran":
            for c in sorted(listed):
                problems.append(f"{u.name} {c}: listed in expected.toml, but the upstream did not run ({r['status']})")
            continue
        cases, skipped = claimed(assay, u, golden_root)
        waiting = []
        for c in cases:
            why = pending.get((u.op, c))
            if c not in r["verdicts"] and why:
                waiting.append((c, f"pending a GPU run: {why}"))
            elif c not in r["verdicts"]:
                problems.append(f"{u.name} {c}: claimed, but the saved run has no verdict for it: run it")
            elif why:
                problems.append(f"{u.name} {c}: the saved run has a verdict, but expected.toml lists it as [[pending]]: retire the row")
        r["verdicts"] = {c: r["verdicts"][c] for c in cases if c in r["verdicts"]}
        r.update(claimed=len(cases), total=len(cases) + len(skipped), skipped=skipped)
        for c in sorted(set(listed) - set(cases)):
            problems.append(f"{u.name} {c}: listed in expected.toml but not claimed (or no such golden)")
        judge(r, listed, problems, not_run)
        for c, why in waiting:
            r["not_run"].append((c, why))
            not_run.append(f"{u.name} {c}: {why}")
    for p in problems:
        print(f"PROBLEM: {p}")
    if problems:
        print(f"--docs-from: {len(problems)} problem(s); {docs} not written")
        return 1
    order = {n: i for i, n in enumerate(ups)}
    write_docs(docs, sorted(rows, key=lambda r: order[r["upstream"]]), metas[0],
               sources=sorted(os.path.relpath(os.path.abspath(f), REPO) for f in files))
    print(f"{docs}: {len(rows)} upstreams from {len(files)} runs; every verdict as expected"
          + (f"; {len(not_run)} not run" if not_run else ""))
    return 0


def status_cell(r):
    nr = r.get("not_run") or []
    if not nr:
        return r["status"]
    return f"{r['status']}; {len(nr)} case(s) not run (see below)"


def write_docs(path, rows, meta, sources=()):
    L = ["# Conformance: upstream kernels under assay", "",
         "Generated by conformance/run.py (`scripts/conformance --docs docs/conformance.md`, or `--docs-from` over",
         "the `--save-rows` files of runs split across processes); do not edit by hand."]
    if sources:
        L.append("Judged from the saved verdicts of " + ", ".join(f"`{s}`" for s in sources) + " against today's "
                 "claims and `conformance/expected.toml`.")
    L += [f"Machine: {meta['machine']}"
          + ("; Triton autotuners ran the first of their configs that fits (--one-config)." if meta["one_config"] else "."), "",
         "Each upstream kernel runs on every L0 golden of its op that it can express, under the precision profile",
         "its own code implies. A case that does not pass is listed in `conformance/expected.toml` with its",
         "cause; the run fails on any other non-pass and on a listed case that passes. A case or upstream that",
         "could not run on this machine is reported as not run, never as passed.", "",
         "| upstream | version | op | profile | cases | passed | expected non-pass | status |",
         "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| `{r['upstream']}` | {r['version']} | {r['op']} | {r['profile']} | {r['claimed']} of {r['total']} | "
                 f"{r['passed']} | {len(r['expected'])} | {status_cell(r)} |")
    L += ["", "## Expected non-passes", "", "| upstream | case | verdict | kind | cause |", "|---|---|---|---|---|"]
    for r in rows:
        for c, v, e in r["expected"]:
            link = f" ({e['link']})" if e.get("link") else ""
            L.append(f"| `{r['upstream']}` | `{r['op']}/{c}` | {v} | {e['kind']} | {e['cause']}{link} |")
    not_run = [(r, c, why) for r in rows for c, why in (r.get("not_run") or [])]
    not_run += [(r, "(every case)", r["status"][len("not run: "):]) for r in rows if r["status"].startswith("not run")]
    if not_run:
        L += ["", "## Not run on this machine", "", "| upstream | case | why |", "|---|---|---|"]
        for r, c, why in not_run:
            where = c if c.startswith("(") else f"`{r['op']}/{c}`"
            L.append(f"| `{r['upstream']}` | {where} | {why} |")
    L += ["", "## Why each upstream runs under its profile", ""]
    for r in rows:
        L.append(f"- `{r['upstream']}` ({r['profile']}): {r['why']}")
    L += ["", "## Cases an upstream cannot express", ""]
    for r in rows:
        if r["skipped"]:
            why = {}
            for c, w in r["skipped"]:
                why.setdefault(w, []).append(c)
            L.append(f"- `{r['upstream']}`: " + "; ".join(f"{w} ({len(cs)})" for w, cs in why.items()))
    _write_atomic(path, "\n".join(L) + "\n")


if __name__ == "__main__":
    sys.exit(main())
