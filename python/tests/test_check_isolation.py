# `python -m assay check` never passes without judging (issue 43): a kernel that exits the process
# (sys.exit, SystemExit, os._exit, a signal) or never returns fails its own case (Failed / Hung), the
# run goes on in a fresh kernel process, an --impl that exits or hangs at import is a usage error, and
# an earlier run's reports and candidates are gone before any kernel code runs.
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import assay
from assay import AssayError

KERNELS = textwrap.dedent('''
    # scaled_add kernels that exit, die or hang on the int_exact case (out = alpha * x + beta * y)
    import os
    import signal
    import subprocess
    import sys
    import time

    import numpy as np
    import assay

    def good(g):
        d = assay.dtypes.get(g.outputs["out"].dtype)
        with np.errstate(all="ignore"):
            return {"out": (g.case["alpha"] * g.inputs_f64["x"] + g.case["beta"] * g.inputs_f64["y"]).astype(d.numpy)}

    def _on_int_exact(g, act):
        if g.case_name == "int_exact":
            act()
        return good(g)

    def sys_exit_0(g):
        return _on_int_exact(g, lambda: sys.exit(0))

    def raise_system_exit(g):
        def act():
            raise SystemExit
        return _on_int_exact(g, act)

    def os_exit_0(g):
        return _on_int_exact(g, lambda: os._exit(0))

    def sigkill(g):
        return _on_int_exact(g, lambda: os.kill(os.getpid(), signal.SIGKILL))

    def hangs(g):  # and leaves a grandchild that must die with it
        def act():
            p = subprocess.Popen(["sleep", "600"])
            with open(os.environ["HOSTILE_PIDFILE"], "w") as f:
                f.write(str(p.pid))
            time.sleep(600)
        return _on_int_exact(g, act)

    def exits_every_case(g):
        os._exit(0)

    def reports_absent(g):  # the CLI's kernel process: no report of an earlier run is left
        odir = os.environ["HOSTILE_ODIR"]
        for n in ("report.json", "junit.xml", "report.html", f"candidates/{g.case_name}.h5"):
            assert not os.path.exists(os.path.join(odir, n)), n
        return good(g)
''')

IMPORT_EXITS = "import sys\nsys.exit(0)\ndef k(g):\n    return {}\n"
IMPORT_OS_EXIT = "import os\nos._exit(0)\ndef k(g):\n    return {}\n"
IMPORT_HANGS = "import time\ntime.sleep(600)\ndef k(g):\n    return {}\n"
IMPORT_MARKS = textwrap.dedent('''
    # records, at import, which reports of an earlier run were still there
    import os
    odir = os.environ["HOSTILE_ODIR"]
    with open(os.environ["HOSTILE_MARK"], "w") as f:
        there = [n for n in ("report.json", "junit.xml", "report.html") if os.path.exists(os.path.join(odir, n))]
        f.write(" ".join(there))
    from hostile_kernels import good
''')


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    (d / "hostile_kernels.py").write_text(KERNELS)
    for name, text in (("import_exits", IMPORT_EXITS), ("import_os_exit", IMPORT_OS_EXIT),
                       ("import_hangs", IMPORT_HANGS), ("import_marks", IMPORT_MARKS)):
        (d / f"{name}.py").write_text(text)
    sys.path.insert(0, str(d))
    yield d
    sys.path.remove(str(d))


def _cli(kdir, tmp_path, *args, env=None, timeout=120):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(assay.__file__).parents[1]), str(kdir)]), **(env or {}))
    return subprocess.run([sys.executable, "-m", "assay", *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, env=e, timeout=timeout)


def _check_cli(kdir, tmp_path, assay_bin, impl, *more, env=None):
    return _cli(kdir, tmp_path, "check", "--op", "scaled_add", "--impl", impl, "--out", tmp_path / "o",
                "--assay-bin", assay_bin, *more, env=env)


def _passing_run(kdir, tmp_path, assay_bin):
    """An earlier, passing run: its reports are what a later run must not leave behind."""
    p = _check_cli(kdir, tmp_path, assay_bin, "hostile_kernels:good")
    assert p.returncode == 0, p.stdout + p.stderr
    odir = tmp_path / "o" / "scaled_add"
    assert all((odir / n).is_file() for n in ("report.json", "junit.xml", "report.html"))
    return odir


def _error_first_line(tmp_path, case="int_exact"):
    return (tmp_path / "o/scaled_add/candidates" / f"{case}.error").read_text().splitlines()[0]


@pytest.mark.parametrize("kernel,first", [
    ("sys_exit_0", "SystemExit(0) (raised by hostile_kernels:sys_exit_0)"),
    ("raise_system_exit", "SystemExit(None) (raised by hostile_kernels:raise_system_exit)"),
    ("os_exit_0", "kernel process exited with status 0 before writing a candidate (hostile_kernels:os_exit_0)"),
    ("sigkill", "kernel process killed by signal 9 (SIGKILL) before writing a candidate (hostile_kernels:sigkill)"),
])
def test_cli_exiting_kernel_is_failed(kdir, tmp_path, assay_bin, kernel, first):
    """A kernel that exits the process fails its case; the other cases still pass (a fresh kernel
    process runs them when the first one died) and nothing of the earlier passing run survives."""
    odir = _passing_run(kdir, tmp_path, assay_bin)
    p = _check_cli(kdir, tmp_path, assay_bin, f"hostile_kernels:{kernel}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert _error_first_line(tmp_path) == first
    v = assay.check("scaled_add", f"hostile_kernels:{kernel}", out=tmp_path / "api", assay_bin=assay_bin,
                    quiet=True).verdicts()
    assert v.pop("int_exact") == "Failed" and set(v.values()) == {"Passed"}, v
    rows = {c["case"]: c["verdict"] for c in json.loads((odir / "report.json").read_text())["cases"]}
    assert rows.pop("int_exact") == "Failed" and set(rows.values()) == {"Passed"}, rows
    assert not (odir / "candidates/int_exact.h5").exists()
    assert not list(odir.rglob("*.tmp.*"))


def test_cli_hung_kernel_is_killed(kdir, tmp_path, assay_bin):
    """--timeout: a kernel that never returns is killed with everything it started, its case is
    Hung, and the remaining cases run in a fresh kernel process."""
    pidfile = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    p = _check_cli(kdir, tmp_path, assay_bin, "hostile_kernels:hangs", "--timeout", "5", "--no-html",
                   env={"HOSTILE_PIDFILE": str(pidfile)})
    assert p.returncode == 1, p.stdout + p.stderr
    assert time.monotonic() - t0 < 60
    first = _error_first_line(tmp_path)
    assert first.startswith("Hung: ") and "within 5 s (--timeout)" in first and "hostile_kernels:hangs" in first, first
    assert " Hung " in p.stdout and " Passed " in p.stdout, p.stdout
    pid = int(pidfile.read_text())
    for _ in range(100):  # the grandchild was SIGKILLed with the kernel's process group
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
            break  # killed; a zombie until its parent, init, reaps it
        time.sleep(0.05)
    else:
        pytest.fail(f"grandchild {pid} of the hung kernel is still running")


def test_timeout_option_errors(kdir, tmp_path, assay_bin):
    p = _check_cli(kdir, tmp_path, assay_bin, "hostile_kernels:good", "--timeout", "-1")
    assert p.returncode == 2 and p.stderr.startswith("assay: error: ") and len(p.stderr.splitlines()) == 1, p.stderr
    with pytest.raises(AssayError, match="timeout"):  # a callable runs in this process: no timeout
        assay.check("scaled_add", lambda g: {}, timeout=5, out=tmp_path, assay_bin=assay_bin, quiet=True)
    with pytest.raises(AssayError, match="isolate"):
        assay.check("scaled_add", lambda g: {}, isolate=True, out=tmp_path, assay_bin=assay_bin, quiet=True)


@pytest.mark.parametrize("module,says,timeout", [("import_exits", "SystemExit(0)", 60),
                                                 ("import_os_exit", "exited with status 0 while importing", 60),
                                                 ("import_hangs", "did not finish within 3 s (--timeout)", 3)])
def test_cli_impl_exiting_at_import_is_usage_error(kdir, tmp_path, assay_bin, module, says, timeout):
    """An --impl module that exits or hangs while imported is a usage error (exit 2, one line), and
    the earlier run's reports are gone."""
    odir = _passing_run(kdir, tmp_path, assay_bin)
    p = _check_cli(kdir, tmp_path, assay_bin, f"{module}:k", "--timeout", timeout)
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("assay: error: "), p.stderr
    assert says in p.stderr and module in p.stderr, p.stderr
    assert not any((odir / n).exists() for n in ("report.json", "junit.xml", "report.html", "candidates/int_exact.h5"))


def test_cli_clears_reports_before_import_and_kernel(kdir, tmp_path, assay_bin):
    odir = _passing_run(kdir, tmp_path, assay_bin)
    mark = tmp_path / "mark"
    env = {"HOSTILE_ODIR": str(odir), "HOSTILE_MARK": str(mark)}
    p = _check_cli(kdir, tmp_path, assay_bin, "import_marks:good", env=env)
    assert p.returncode == 0 and mark.read_text() == "", (mark.read_text(), p.stdout + p.stderr)
    p = _check_cli(kdir, tmp_path, assay_bin, "hostile_kernels:reports_absent", env=env)
    assert p.returncode == 0, p.stdout + p.stderr


def test_api_in_process_clears_reports_first_and_catches_system_exit(kdir, tmp_path, assay_bin):
    import hostile_kernels as hk

    rep = assay.check("scaled_add", hk.good, out=tmp_path / "o", assay_bin=assay_bin, quiet=True)
    assert rep.passed
    odir = Path(rep.json_path).parent
    seen = []

    def kernel(g):
        seen.append([n for n in ("report.json", "junit.xml", "report.html") if (odir / n).exists()])
        return hk.sys_exit_0(g)

    rep = assay.check("scaled_add", kernel, out=tmp_path / "o", assay_bin=assay_bin, quiet=True)
    assert seen == [[]] * 3
    v = rep.verdicts()
    assert v.pop("int_exact") == "Failed" and set(v.values()) == {"Passed"} and rep.exit_code == 1
    assert _error_first_line(tmp_path).startswith("SystemExit(0) (raised by ")


def test_api_isolated_function(kdir, tmp_path, assay_bin):
    """isolate=True runs a module-level function in its own process, under ``timeout``."""
    import hostile_kernels as hk

    rep = assay.check("scaled_add", hk.os_exit_0, isolate=True, timeout=60, out=tmp_path / "o", assay_bin=assay_bin,
                      quiet=True)
    v = rep.verdicts()
    assert v.pop("int_exact") == "Failed" and set(v.values()) == {"Passed"}, v
    rep = assay.check("scaled_add", "hostile_kernels:exits_every_case", out=tmp_path / "o", assay_bin=assay_bin,
                      quiet=True, name="mine")
    assert set(rep.verdicts().values()) == {"Failed"} and rep.exit_code == 1, str(rep)
    assert _error_first_line(tmp_path) == "kernel process exited with status 0 before writing a candidate (mine)"
