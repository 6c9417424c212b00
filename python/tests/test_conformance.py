# The conformance harness without a GPU: its upstream table, its expected non-passes and the README
# table generated from them. The run itself needs a GPU machine (scripts/conformance).
import importlib
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
