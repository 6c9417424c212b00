# The conformance harness without a GPU: its upstream table, its expected non-passes and the README
# table generated from them. The run itself needs a GPU machine (scripts/conformance).
import importlib
import json
import os
import subprocess
import sys
import tomllib

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))
run = importlib.import_module("conformance.run")


def test_upstreams_are_named_once_and_declare_a_profile_of_their_op():
    ups = run.load_upstreams()
    assert len(ups) >= 15
    for u in ups:
        with open(REPO / "fixtures" / f"{u.op}.toml", "rb") as f:
            declared = set(tomllib.load(f).get("profiles", {}))
        assert u.profile == "strict" or u.profile in declared, f"{u.name}: profile {u.profile} not declared by {u.op}"
        assert u.profile_why, f"{u.name}: profile_why is empty"
        assert list((REPO / "golden" / u.op).glob("*.h5")), f"{u.name}: no golden of op {u.op}"


def test_list_checks_every_expected_entry_against_the_claims():
    # --list imports no upstream package and runs nothing; a stale expected.toml entry (an upstream
    # that does not claim the case) exits 1.
    p = subprocess.run([sys.executable, str(REPO / "conformance" / "run.py"), "--list"], capture_output=True, text=True,
                       cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nothing run" in p.stdout


def test_expected_entries_need_a_verdict_and_a_named_cause(tmp_path):
    good = ('[[expect]]\nupstream = "torch.sdpa[cudnn]"\ncase = "c"\nverdict = "Incorrect"\nkind = "defect"\n'
            'cause = "why"\n')
    p = tmp_path / "e.toml"
    p.write_text(good)
    assert ("torch.sdpa[cudnn]", "c") in run.load_expected(str(p))
    for bad, field in [(good.replace('cause = "why"\n', ""), "cause"),
                       (good.replace('"Incorrect"', '"Passed"'), "verdict"),
                       (good.replace('"defect"', '"bug"'), "kind"),
                       (good + good, "duplicate")]:
        p.write_text(bad)
        with pytest.raises(SystemExit, match=field):
            run.load_expected(str(p))


def test_readme_upstream_table_is_generated_from_expected_toml():
    text = (REPO / "README.md").read_text()
    table = run.readme_table(run.load_behaviours())
    assert table in text, "README.md's upstream behaviours table is stale: run python3 conformance/run.py --readme"
    known = {u.name for u in run.load_upstreams()}
    for b in run.load_behaviours():
        if not b["shown_by"].startswith("no upstream"):
            for n in b["shown_by"].split(","):
                assert n.strip() in known, f"{b['case']}: shown_by {n.strip()} is no conformance upstream"


RESULTS = sorted(str(p) for p in (REPO / "conformance" / "results").glob("*.json"))


def _docs_from(tmp_path, files):
    out = tmp_path / "conformance.md"
    p = subprocess.run([sys.executable, str(REPO / "conformance" / "run.py"), "--docs", str(out), "--docs-from", *files],
                       capture_output=True, text=True, cwd=REPO)
    return p, out


def test_committed_conformance_table_is_the_saved_runs_judged_today(tmp_path):
    # docs/conformance.md is what the committed GPU runs give under today's claims and expected.toml:
    # an expected.toml edit that a saved verdict contradicts, or a stale table, fails here.
    assert RESULTS, "conformance/results holds no saved run"
    p, out = _docs_from(tmp_path, RESULTS)
    assert p.returncode == 0, p.stdout + p.stderr
    want = out.read_text().replace(str(tmp_path), "")
    assert (REPO / "docs" / "conformance.md").read_text() == want, \
        "docs/conformance.md is stale: run conformance/run.py --docs docs/conformance.md --docs-from conformance/results/*.json"


def _rewrite(tmp_path, change):
    files = []
    for f in RESULTS:
        d = json.loads(open(f).read())
        change(d)
        q = tmp_path / os.path.basename(f)
        q.write_text(json.dumps(d))
        files.append(str(q))
    return files


def test_docs_from_rejects_what_a_live_run_rejects(tmp_path):
    def flip(verdict_of):  # sets the verdict of one (upstream, case) wherever it is saved
        def change(d):
            for r in d["rows"]:
                for (u, c), v in verdict_of.items():
                    if r["upstream"] == u and c in r.get("verdicts", {}):
                        r["verdicts"][c] = [v, "changed by the test"]
        return change
    # a listed non-pass that now passes: retire its entry
    p, out = _docs_from(tmp_path, _rewrite(tmp_path, flip({("torch.sdpa[efficient]", "causal_sq239_gt_sk63"): "Passed"})))
    assert p.returncode == 1 and "retire the entry" in p.stdout and not out.exists(), p.stdout + p.stderr
    # a non-pass nobody listed
    p, out = _docs_from(tmp_path, _rewrite(tmp_path, flip({("torch.sdpa[math]", "causal_sq239_gt_sk63"): "Incorrect"})))
    assert p.returncode == 1 and "not in expected.toml" in p.stdout and not out.exists(), p.stdout + p.stderr

    def drop_upstream(d):
        d["rows"] = [r for r in d["rows"] if r["upstream"] != "torch.sdpa[math]"]
    p, out = _docs_from(tmp_path, _rewrite(tmp_path, drop_upstream))
    assert p.returncode == 2 and "missing ['torch.sdpa[math]']" in p.stderr, p.stdout + p.stderr

    def drop_case(d):
        for r in d["rows"]:
            if r["upstream"] == "torch.sdpa[math]":
                r["verdicts"].pop(sorted(r["verdicts"])[0])
    p, out = _docs_from(tmp_path, _rewrite(tmp_path, drop_case))
    assert p.returncode == 1 and "no verdict for it: run it" in p.stdout, p.stdout + p.stderr


def test_one_config_falls_back_to_the_next_config_that_fits(monkeypatch):
    # --one-config keeps a Triton autotuner's first config; one that does not fit the GPU
    # (OutOfResources) gives way to the next, as autotuning would, instead of failing the case.
    triton = pytest.importorskip("triton")
    from triton.runtime import autotuner
    from triton.runtime.errors import OutOfResources
    monkeypatch.setattr(autotuner.Autotuner, "__init__", autotuner.Autotuner.__init__)
    monkeypatch.setattr(autotuner.Autotuner, "run", autotuner.Autotuner.run)
    tried = []

    def fake_init(self, fn, arg_names, configs, *a, **k):
        self.configs, self.cache = list(configs), {}

    def fake_run(self, *a, **k):
        tried.append(self.configs[0])
        if self.configs[0] == "big":
            raise OutOfResources(295936, 232448, "shared memory")
        return self.configs[0]
    monkeypatch.setattr(autotuner.Autotuner, "__init__", fake_init)
    monkeypatch.setattr(autotuner.Autotuner, "run", fake_run)
    assert run.one_autotune_config()
    t = autotuner.Autotuner.__new__(autotuner.Autotuner)
    autotuner.Autotuner.__init__(t, None, [], ["big", "small", "tiny"])
    assert t.configs == ["big"]
    assert autotuner.Autotuner.run(t) == "small" and tried == ["big", "small"]
    assert triton


def test_per_sequence_hands_each_sequence_as_a_b1_view_and_stacks_the_outputs():
    # scripts/gpu_scale's explanation of a batched failure: the same kernel once per sequence.
    import numpy as np
    from types import SimpleNamespace

    ps = importlib.import_module("conformance.per_sequence")
    x = np.arange(15.0).reshape(3, 5)
    A = np.array([0.5, 2.0])
    reads = []

    class G:
        case = {"B": 3, "chunk_size": 4}
        axes = {"x": ("B", "T"), "A": ("H",)}
        outputs = {"out": SimpleNamespace(axes=("B", "T")), "total": SimpleNamespace(axes=())}
        case_name = "c"

        def to_torch(self, device=None, names=None):
            reads.append(device)
            return {"x": x, "A": A}

    seen = []

    def fn(g):
        t = g.to_torch(device="cuda")
        seen.append((g.case["B"], g.case["chunk_size"], g.case_name, t["x"].shape, np.shares_memory(t["x"], x), t["A"] is A))
        return {"out": t["x"] * A[1], "total": t["x"].sum()}

    out = ps.per_sequence(fn, device="cpu")(G())
    assert reads == ["cpu"]  # the inputs made once, every sequence a view of them
    assert seen == [(1, 4, "c", (1, 5), True, True)] * 3
    np.testing.assert_array_equal(out["out"], x * 2.0)
    assert out["total"] == x[2].sum()  # no B axis: the last call's
