# assay.check and `python -m assay check`: a numpy scaled_add passes every scaled_add golden, a
# broken one is Incorrect, one that raises is Failed and the run goes on; exit codes agree.
import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import assay
from assay import AssayError

IMPLS = textwrap.dedent('''
    # scaled_add kernels for the assay.check tests: out = alpha * x + beta * y
    import numpy as np
    import assay

    def _out(g, alpha, beta):
        d = assay.dtypes.get(g.outputs["out"].dtype)
        x, y = g.inputs_f64["x"], g.inputs_f64["y"]
        with np.errstate(all="ignore"):  # the specials case holds NaN and Inf
            return {"out": (alpha * x + beta * y).astype(d.numpy)}

    def good(g):
        return _out(g, g.case["alpha"], g.case["beta"])

    def broken(g):  # the sign of beta dropped
        return _out(g, g.case["alpha"], abs(g.case["beta"]))

    def raises_on_int_exact(g):
        if g.case_name == "int_exact":
            raise ValueError("boom in the kernel")
        return good(g)

    def wrong_shape(g):
        return {"out": np.zeros(3)}
''')


@pytest.fixture(scope="module")
def impls(tmp_path_factory):
    d = tmp_path_factory.mktemp("impls")
    (d / "sa_impls.py").write_text(IMPLS)
    sys.path.insert(0, str(d))
    import sa_impls

    yield d, sa_impls
    sys.path.remove(str(d))


@pytest.fixture(scope="module")
def has_compare_dir(run_assay):
    p = run_assay("compare", "--help")
    if "--golden-dir" not in p.stdout or "--candidate-dir" not in p.stdout:
        pytest.fail("this assay binary has no `compare --golden-dir/--candidate-dir` mode (rebuild: scripts/test)")


def _check(impl, tmp_path, assay_bin, **kw):
    return assay.check("scaled_add", impl, out=tmp_path / "out", assay_bin=assay_bin, quiet=True, **kw)


N_SCALED_ADD = 3


def test_good_passes(impls, tmp_path, assay_bin, has_compare_dir, record_summary, repo):
    rep = _check(impls[1].good, tmp_path, assay_bin)
    assert rep.exit_code == 0 and rep.passed, str(rep)
    assert [r[1] for r in rep.rows] == ["Passed"] * N_SCALED_ADD
    assert [r[0] for r in rep.rows] == sorted(p.stem for p in (repo / "golden/scaled_add").glob("*.h5"))
    assert rep.json["tool"] == "compare" and Path(rep.junit_path).is_file() and Path(rep.html_path).is_file()
    assert json.loads(Path(rep.json_path).read_text()) == rep.json
    assert "Passed" in str(rep) and "int_exact" in str(rep)
    record_summary(f"assay.check scaled_add (numpy): {len(rep.rows)} cases Passed")


def test_broken_is_incorrect(impls, tmp_path, assay_bin, has_compare_dir):
    rep = _check(impls[1].broken, tmp_path, assay_bin, html=False)
    assert rep.exit_code == 1 and not rep.passed and rep.html_path is None
    assert "Incorrect" in {v for _, v, _ in rep.rows}


def test_raising_is_failed_and_run_goes_on(impls, tmp_path, assay_bin, has_compare_dir):
    rep = _check(impls[1].raises_on_int_exact, tmp_path, assay_bin)
    v = rep.verdicts()
    assert v.pop("int_exact") == "Failed" and set(v.values()) == {"Passed"}, str(rep)
    assert rep.exit_code == 1
    err = tmp_path / "out/scaled_add/candidates/int_exact.error"
    first = err.read_text().splitlines()[0]
    assert first == "ValueError: boom in the kernel (raised by sa_impls:raises_on_int_exact)"
    assert "Traceback" in err.read_text()
    assert "boom in the kernel" in dict((c, r) for c, _, r in rep.rows)["int_exact"]
    assert not (tmp_path / "out/scaled_add/candidates/int_exact.h5").exists()
    # a later good run removes the stale .error
    rep = _check(impls[1].good, tmp_path, assay_bin, cases="int_*")
    assert rep.rows == [("int_exact", "Passed", rep.rows[0][2])] and not err.exists()


def test_bad_candidate_is_failed(impls, tmp_path, assay_bin, has_compare_dir):
    rep = _check(impls[1].wrong_shape, tmp_path, assay_bin, cases="int_exact")
    assert rep.verdicts() == {"int_exact": "Failed"} and rep.exit_code == 1
    first = (tmp_path / "out/scaled_add/candidates/int_exact.error").read_text().splitlines()[0]
    assert first.startswith("AssayError: ") and "wrong shape (3,)" in first


def test_usage_errors(impls, tmp_path, assay_bin):
    with pytest.raises(AssayError, match="unknown op 'no_such_op'"):
        assay.check("no_such_op", impls[1].good, out=tmp_path, assay_bin=assay_bin, quiet=True)
    with pytest.raises(AssayError, match="match no golden"):
        assay.check("scaled_add", impls[1].good, cases="zzz*", out=tmp_path, assay_bin=assay_bin, quiet=True)
    with pytest.raises(AssayError, match="build it"):
        assay.check("scaled_add", impls[1].good, out=tmp_path, assay_bin=tmp_path / "nope", quiet=True)
    with pytest.raises(AssayError, match="level 'L9'"):
        assay.check("scaled_add", impls[1].good, level="L9", out=tmp_path, assay_bin=assay_bin, quiet=True)


def _cli(impls, tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(assay.__file__).parents[1]), str(impls[0])]))
    return subprocess.run([sys.executable, "-m", "assay", *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize("impl,code", [("good", 0), ("broken", 1), ("raises_on_int_exact", 1)])
def test_cli_exit_codes(impls, tmp_path, assay_bin, has_compare_dir, impl, code):
    p = _cli(impls, tmp_path, "check", "--op", "scaled_add", "--impl", f"sa_impls:{impl}", "--out", tmp_path / "o",
             "--assay-bin", assay_bin, "--no-html")
    assert p.returncode == code, p.stdout + p.stderr
    rep = _check(getattr(impls[1], impl), tmp_path, assay_bin, html=False)
    assert rep.exit_code == p.returncode
    assert "scaled_add:" in p.stdout and "int_exact" in p.stdout


def test_cli_verbose_prints_phase_times(impls, tmp_path, assay_bin, has_compare_dir):
    """--verbose: per case the kernel's and the candidate's seconds (from the kernel process), then
    compare's (from the parent), on stderr; without it none of these lines."""
    args = ["check", "--op", "scaled_add", "--impl", "sa_impls:good", "--out", tmp_path / "o", "--assay-bin",
            assay_bin, "--no-html", "--cases", "int_*"]
    p = _cli(impls, tmp_path, *args, "--verbose")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("assay: ")]
    assert len(lines) == 3, p.stderr
    assert lines[0].startswith("assay: scaled_add/int_exact: sa_impls:good returned in ") and lines[0].endswith(" s (its inputs' regeneration included)")
    assert lines[1].startswith("assay: scaled_add/int_exact: candidate ") and "int_exact.h5 written in " in lines[1]
    assert lines[2].startswith("assay: scaled_add: assay compare judged 1 case(s) in ") and lines[2].endswith(" s")
    q = _cli(impls, tmp_path, *args)
    assert q.returncode == 0 and "returned in" not in q.stderr and "judged" not in q.stderr, q.stderr


def test_cli_html_file_and_repeated_cases(impls, tmp_path, assay_bin, has_compare_dir):
    html = tmp_path / "elsewhere" / "mine.html"
    p = _cli(impls, tmp_path, "check", "--op", "scaled_add", "--impl", "sa_impls:broken", "--out", tmp_path / "o",
             "--assay-bin", assay_bin, "--html", html, "--cases", "int_*", "--cases", "specials_*")
    assert p.returncode == 1, p.stdout + p.stderr
    assert html.is_file() and 'class="seq-plot"' in html.read_text()
    assert not (tmp_path / "o" / "scaled_add" / "report.html").exists()
    assert "int_exact" in p.stdout and "specials_fp16" in p.stdout and "normal_odd_shape" not in p.stdout


def test_cli_usage_errors(impls, tmp_path, assay_bin):
    for args in (["check", "--op", "no_such_op", "--impl", "sa_impls:good"],
                 ["check", "--op", "scaled_add", "--impl", "sa_impls:nope"],
                 ["check", "--op", "scaled_add", "--impl", "no_module_here:good"],
                 ["check", "--op", "scaled_add"],
                 ["frobnicate"]):
        p = _cli(impls, tmp_path, *args, *(["--assay-bin", assay_bin] if args[0] == "check" else []))
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("assay: error: "), p.stderr


def test_cli_inspect(tmp_path, impls, repo):
    p = _cli(impls, tmp_path, "inspect", repo / "golden/scaled_add/int_exact.h5")
    assert p.returncode == 0 and "alpha=0.5" in p.stdout and "bf16" in p.stdout, p.stderr


def test_level_l1_generates_goldens(impls, tmp_path, assay_bin, has_compare_dir, monkeypatch):
    """L1 goldens are generated with `assay gen` into <repo>/build/golden-L1 when missing (the repo
    root redirected to a temp dir here), then judged like L0."""
    check_mod = importlib.import_module("assay.check")
    monkeypatch.setattr(check_mod, "repo_root", lambda: tmp_path)
    rep = _check(impls[1].good, tmp_path, assay_bin, level="L1", html=False)
    assert rep.verdicts() == {"large_l1": "Passed"} and rep.exit_code == 0, str(rep)
    assert (tmp_path / "build/golden-L1/scaled_add/large_l1.h5").is_file()
    with pytest.raises(AssayError, match="no_such_op"):
        assay.check("no_such_op", impls[1].good, level="L1", out=tmp_path, assay_bin=assay_bin, quiet=True)


def test_refuses_unsafe_report_and_candidate_paths(impls, tmp_path, assay_bin, repo):
    """A report or candidate path that is a directory, FIFO or symlink, an --html that is a golden, a
    candidate or another report, and a candidate directory that is the golden directory are usage
    errors, found before the kernel runs or anything is removed."""
    gdir = tmp_path / "goldens"
    shutil.copytree(repo / "golden/scaled_add", gdir)
    before = {p.name: p.read_bytes() for p in gdir.iterdir()}
    calls = []

    def kernel(g):
        calls.append(g.case_name)
        return impls[1].good(g)

    odir = tmp_path / "out" / "scaled_add"
    cdir = odir / "candidates"

    def refused(match, **kw):
        kw = {"out": tmp_path / "out", "golden_dir": gdir, **kw}
        with pytest.raises(AssayError, match=match) as e:
            assay.check("scaled_add", kernel, assay_bin=assay_bin, quiet=True, **kw)
        assert "\n" not in str(e.value)
        return str(e.value)

    assert refused("is a golden", html=gdir / "int_exact.h5").startswith(f"{gdir / 'int_exact.h5'}: ")
    refused("is the candidate of case int_exact", html=cdir / "int_exact.h5")
    refused("is the JSON report", html=odir / "report.json")
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    assert refused("exists and is a FIFO, not a regular file", html=fifo).startswith(f"{fifo}: ")
    cdir.mkdir(parents=True)
    (odir / "report.json").mkdir()
    refused(f"{odir / 'report.json'}: exists and is a directory")
    (odir / "report.json").rmdir()
    keep = tmp_path / "keep.h5"
    keep.write_text("keep")
    (cdir / "int_exact.h5").symlink_to(keep)
    refused(f"{cdir / 'int_exact.h5'}: exists and is a symlink")
    (cdir / "int_exact.h5").unlink()
    shared = tmp_path / "o2" / "scaled_add" / "candidates"  # --golden-dir is where the candidates go
    shutil.copytree(gdir, shared)
    refused("is a golden", out=tmp_path / "o2", golden_dir=shared, cases="int_exact")
    assert calls == [] and stat.S_ISFIFO(os.lstat(fifo).st_mode) and keep.read_text() == "keep"
    assert {p.name: p.read_bytes() for p in gdir.iterdir()} == before
    assert {p.name: p.read_bytes() for p in shared.iterdir()} == before
