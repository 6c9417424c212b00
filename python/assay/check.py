# assay.check: runs a Python kernel over every golden of an op, writes one candidate per case, and
# has the C++ binary judge them all in one `assay compare --golden-dir` call (the element rule lives
# only in C++). Kernel exceptions (SystemExit included) become Failed cases, never a crash of the run.
# The earlier run's reports and candidates are removed before any kernel code runs, so a run that dies
# leaves no passing report behind. An isolated kernel (``"module:function"``, the CLI) runs in a child
# process (assay._worker): one that exits, dies or hangs past ``timeout`` fails only its own case.
"""Check a Python kernel against the goldens of an op.

>>> report = assay.check("scaled_add", lambda g: {"out": g.case["alpha"] * g.inputs_f64["x"]
...                                                      + g.case["beta"] * g.inputs_f64["y"]})
>>> report.passed
True
"""
from __future__ import annotations

import fnmatch
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import _files, _worker
from . import relations as _relations
from .errors import AssayError

__all__ = ["CheckReport", "check", "find_binary", "repo_root"]

LEVELS = ("L0", "L1", "L2")
_log = logging.getLogger("assay")  # phase times at INFO (python/README.md "Phase times")


def repo_root() -> Path:
    """The assay checkout this package lives in (the directory holding ``python/``)."""
    return Path(__file__).resolve().parents[2]


def find_binary(assay_bin=None) -> str:
    """The ``assay`` binary: ``assay_bin``, else ``$ASSAY_BIN``, else ``<repo>/build/bin/assay``, else
    ``assay`` on PATH. AssayError saying how to build it when there is none."""
    for cand, what in ((assay_bin, "assay_bin"), (os.environ.get("ASSAY_BIN"), "ASSAY_BIN")):
        if cand:
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return os.fspath(cand)
            raise AssayError(f"{what}={cand}: no such executable (build it: scripts/test, or "
                             f"cmake -S . -B build && cmake --build build --target assay)")
    default = repo_root() / "build" / "bin" / "assay"
    if default.is_file() and os.access(default, os.X_OK):
        return str(default)
    found = shutil.which("assay")
    if found:
        return found
    raise AssayError(f"the assay binary is missing ({default} and none on PATH): build it with scripts/test, or "
                     f"cmake -S {repo_root()} -B build && cmake --build build --target assay, or set ASSAY_BIN")


@dataclass
class CheckReport:
    """The result of :func:`check`.

    ``rows``: (case, verdict, reason) per golden case; ``exit_code``: the compare exit code (0 all
    passed, 1 any Incorrect/Failed/Hung, 2 any Stale, 125 none passed); ``json``: the parsed
    report; ``json_path``, ``html_path`` (None with ``html=False``), ``junit_path``; ``candidate_dir``.
    """

    op: str
    rows: list = field(default_factory=list)
    exit_code: int = 0
    json: dict = field(default_factory=dict)
    json_path: str = ""
    html_path: str | None = None
    junit_path: str = ""
    candidate_dir: str = ""

    @property
    def passed(self) -> bool:
        """True when every case passed (exit code 0)."""
        return self.exit_code == 0

    def verdicts(self) -> dict:
        """case -> verdict."""
        return {c: v for c, v, _ in self.rows}

    def __str__(self) -> str:
        w = max([len("case")] + [len(c) for c, _, _ in self.rows])
        lines = [f"{'case':<{w}}  {'verdict':<12}  reason", f"{'-' * w}  {'-' * 12}  {'-' * 6}"]
        for c, v, r in self.rows:
            lines.append(f"{c:<{w}}  {v:<12}  {r}".rstrip())
        counts = {}
        for _, v, _ in self.rows:
            counts[v] = counts.get(v, 0) + 1
        summary = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no cases"
        lines.append(f"{self.op}: {summary}; exit {self.exit_code}")
        lines.append(f"report: {self.json_path}" + (f"  html: {self.html_path}" if self.html_path else "")
                     + f"  junit: {self.junit_path}")
        return "\n".join(lines)


def _installed_goldens(binary_getter):
    """``<prefix>/share/assay/golden`` of an installed binary (``<prefix>/bin/assay``), else None: an
    installed assay judges with the goldens it was installed with, not this checkout's."""
    try:
        exe = Path(binary_getter()).resolve()
    except AssayError:
        return None
    d = exe.parent.parent / "share" / "assay" / "golden"
    return d if d.is_dir() else None


def _golden_dir(op: str, level: str, cases: str, golden_dir, binary_getter) -> Path:
    if golden_dir is not None:
        d = Path(golden_dir)
        if not d.is_dir():
            raise AssayError(f"golden_dir {d}: no such directory")
        return d
    if level == "L0":
        root = Path(os.environ.get("ASSAY_GOLDEN_DIR") or _installed_goldens(binary_getter) or repo_root() / "golden")
        d = root / op
        if not d.is_dir():
            ops = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
            raise AssayError(f"unknown op '{op}': no golden directory {d} (ops: {', '.join(ops) or 'none'})")
        return d
    out = repo_root() / "build" / f"golden-{level}"
    d = out / op
    if not _matching(d, cases):
        for g in _globs(cases):  # gen takes one --case glob
            cmd = [binary_getter(), "gen", "--op", op, "--level", level, "--case", g, "--out", str(out)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise AssayError(f"{' '.join(cmd)} exited {p.returncode}: {_first_line(p.stderr or p.stdout)}")
    return d


def _globs(cases) -> list:
    """``cases`` as a list of globs: one glob string, or a list / tuple of them."""
    globs = [cases] if isinstance(cases, str) else list(cases)
    if not globs or not all(isinstance(g, str) and g for g in globs):
        raise AssayError(f"cases {cases!r}: expected a glob or a list of globs")
    return globs


def _matching(d: Path, cases) -> list:
    if not d.is_dir():
        return []
    globs = _globs(cases)
    return sorted(p for p in glob.glob(str(d / "*.h5")) if any(fnmatch.fnmatchcase(Path(p).stem, g) for g in globs))


def _case_args(cases) -> list:
    return [a for g in _globs(cases) for a in ("--case", g)]


def _first_line(s: str) -> str:
    for line in (s or "").splitlines():
        if line.strip():
            return line.strip()
    return "(no message)"


def _impl_spec(fn, isolate: bool):
    """``module:function`` when the kernel runs in a child process, None when in this one."""
    if isinstance(fn, str):
        _worker.split_spec(fn)
        return fn
    if not callable(fn):
        raise AssayError(f"fn: {fn!r} is not callable")
    if not isolate:
        return None
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None) or ""
    obj = sys.modules.get(mod) if mod and mod != "__main__" else None
    for part in qual.split(".") if obj is not None and "<" not in qual else ():
        obj = getattr(obj, part, None)
    if obj is not fn:
        raise AssayError(f"fn {_worker.fn_name(fn)}: isolate=True needs a function its child process can import "
                         f"as module:function (not a lambda, a local or a __main__ function)")
    return f"{mod}:{qual}"


def _timeout(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 or timeout == float("inf"):
        raise AssayError(f"timeout {timeout!r}: expected a number of seconds > 0 (or None)")
    return float(timeout)


def _refuse_unsafe_outputs(goldens: list, todo: list, reports: list):
    """AssayError before anything is removed or run: a report, candidate or .error path that exists
    as anything but a regular file, a candidate or report that is a golden, and an HTML report that
    is a candidate or another report. ``reports``: (path or None, role)."""
    inputs = _files.Inputs()
    for g in goldens:
        inputs.add(g, f"a golden of this run ({g})")
    for case, _, cand, err in todo:
        _files.check_output(cand, inputs, f"the candidate of case {case}")
        _files.check_output(err, inputs, f"the error file of case {case}")
    for path, role in reports:
        if path is not None:
            _files.check_output(path, inputs, role)
    others = _files.Inputs()
    for case, _, cand, err in todo:
        others.add(cand, f"the candidate of case {case}").add(err, f"the error file of case {case}")
    for path, role in reports:
        if path is not None:
            _files.check_output(path, others, role)
            others.add(path, role)


def _run_in_process(fn, name: str, todo: list, profile):
    for _, gpath, cand, err in todo:
        _worker.run_case(fn, name, gpath, cand, err, profile)


def _run_isolated(spec: str, name, todo: list, profile, timeout) -> str:
    """Runs the cases in a kernel process, a fresh one after each that died or hung. Returns the
    kernel's name."""
    w = None
    try:
        for case, gpath, cand, err in todo:
            if w is None:
                w = _worker.Worker(spec, profile, name, timeout)
                name = w.name
            if not w.run(case, gpath, cand, err):
                w = None  # dead or killed: the next case starts a fresh one
    except BaseException:
        if w is not None:
            w.close(kill=True)
        raise
    if w is not None:
        w.close()
    return name or spec


def _relation_families(relations) -> tuple:
    """``relations`` as a tuple of family names: False / None (none), True (all), or names."""
    if relations is None or relations is False:
        return ()
    if relations is True:
        return _relations.FAMILIES
    fams = (relations,) if isinstance(relations, str) else tuple(relations)
    bad = [f for f in fams if f not in _relations.FAMILIES]
    if bad or not fams:
        raise AssayError(f"relations {relations!r}: expected True or any of {', '.join(_relations.FAMILIES)}")
    return fams


def _run_relations(fn, todo: list, rdir: Path, families: tuple, batch_invariant: bool, layout_offset: int):
    """Every planned relation check of every case whose own run left a candidate: one relation
    candidate ``<rdir>/<case>@<check>.h5`` each (assay.relations.run_check)."""
    from .golden import open as open_golden

    for case, gpath, cand, _ in todo:
        if not cand.is_file():
            continue  # the case itself failed: its row says why
        g = open_golden(gpath)
        base = _relations.read_outputs(cand, g)
        for c in _relations.plan(g, families, batch_invariant=batch_invariant, layout_offset=layout_offset):
            _relations.run_check(fn, g, c, base, rdir / f"{case}@{c.name}.h5")


def check(op: str, fn, cases="*", level: str = "L0", profile: str | None = None, out="build/check",
          golden_dir=None, html=True, assay_bin=None, quiet: bool = False, name=None, timeout=None,
          isolate: bool = False, relations=False, batch_invariant: bool = False,
          layout_offset: int = 1 << 31) -> CheckReport:
    """Runs ``fn(golden)`` on every golden of ``op`` whose case name matches ``cases`` (a glob or a
    list of globs) and judges the outputs with ``assay compare --golden-dir`` (one call).

    ``fn`` returns a dict output name -> array (numpy, torch, jax, cupy), or a tuple
    ``(outputs, intermediates)``. Goldens: ``golden_dir``, else ``<repo>/golden/<op>`` for L0
    (``$ASSAY_GOLDEN_DIR/<op>`` when set), else ``<repo>/build/golden-<level>/<op>``, generated
    with ``assay gen`` when no case matches there. Candidates go to ``<out>/<op>/candidates/<case>.h5``;
    an exception of ``fn`` (SystemExit included; KeyboardInterrupt goes through), or of writing its
    candidate, goes to ``<case>.error`` with its traceback and the case is Failed. The report (JSON,
    JUnit, HTML unless ``html=False``) is written under ``<out>/<op>/`` (``html`` may also be the HTML
    file's path), the verdict table printed unless ``quiet``. The earlier run's reports and these
    cases' candidates are removed before ``fn`` runs.

    ``fn`` runs in this process, without a time limit (``os._exit`` or a hang there ends or stalls
    the run, with no report left). Isolated, it runs in a child process of its own, as
    ``python -m assay check`` does: pass ``fn`` as ``"module.path:function"`` (imported there, the
    current directory and this process's ``sys.path`` on its path), or a module-level function with
    ``isolate=True``. Then a kernel that exits or dies fails its case, one still running after
    ``timeout`` seconds (None: no limit; the import has the same limit) is killed with its process
    group and its case is Hung, and a fresh process runs the remaining cases.

    ``relations``: also run the relations that need no oracle (``True``: all of ``batch``,
    ``continuation``, ``varlen``, ``layout``; or a list of them; assay.relations): ``fn`` again on
    cases derived from each golden's inputs (a sequence alone or in a larger batch, a chunked prefill
    with the state handed over, each packed sequence alone, the inputs as strided views of wider
    parents whose offsets pass ``layout_offset`` elements), one more report row ``<case>@<check>``
    each, judged by the golden's tolerance (the batch checks bit for bit with
    ``batch_invariant=True``). The related runs call ``fn`` in this process, isolated or not.

    Never raises for a failing kernel; AssayError for usage errors: an unknown op or level, no
    golden matching ``cases``, the binary missing, an output path that is not a regular file or is
    an input, an isolated kernel that cannot be imported, or the binary refusing the run (its
    message). ``name`` is the kernel's name in the reports (default: ``module:function`` of ``fn``).
    """
    if level not in LEVELS:
        raise AssayError(f"level '{level}': expected one of {', '.join(LEVELS)}")
    families = _relation_families(relations)
    if isinstance(layout_offset, bool) or not isinstance(layout_offset, int) or layout_offset < 0:
        raise AssayError(f"layout_offset {layout_offset!r}: expected an integer >= 0 (elements)")
    spec = _impl_spec(fn, isolate)
    timeout = _timeout(timeout)
    if timeout is not None and spec is None:
        raise AssayError("timeout: a kernel running in this process has no time limit; pass isolate=True "
                         "or fn as 'module:function'")
    if not op or "/" in op or op.startswith("."):
        raise AssayError(f"op '{op}': not an op name")
    binary = None

    def get_binary():
        nonlocal binary
        binary = binary or find_binary(assay_bin)
        return binary

    gdir = _golden_dir(op, level, cases, golden_dir, get_binary)
    goldens = _matching(gdir, cases)
    if not goldens:
        raise AssayError(f"cases {cases!r} match no golden in {gdir}")
    get_binary()

    odir = Path(out) / op
    cdir = odir / "candidates"
    json_path, junit_path = odir / "report.json", odir / "junit.xml"
    # html: True (<out>/<op>/report.html), False (none), or a path of its own.
    html_path = (Path(html) if isinstance(html, (str, os.PathLike)) else odir / "report.html") if html else None
    todo = [(Path(g).stem, g, cdir / f"{Path(g).stem}.h5", cdir / f"{Path(g).stem}.error") for g in goldens]
    reports = [(json_path, "the JSON report"), (junit_path, "the JUnit report"), (html_path, "the HTML report")]
    _refuse_unsafe_outputs(goldens, todo, reports)
    # Nothing of an earlier run may outlive this one, whatever the kernel does: clear first.
    for path, _ in reports:
        if path is not None:
            path.unlink(missing_ok=True)
    try:
        cdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AssayError(f"out {out}: cannot create {cdir} ({e.strerror})") from None
    for _, _, cand, err in todo:
        cand.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
    rdir = odir / "relations"
    for case, _, _, _ in todo:  # an earlier run's relation candidates of these cases
        for old in glob.glob(str(rdir / f"{glob.escape(case)}@*.h5")):
            Path(old).unlink(missing_ok=True)

    if spec is None:
        name = name or _worker.fn_name(fn)
        _run_in_process(fn, name, todo, profile)
    else:
        name = _run_isolated(spec, name, todo, profile, timeout)
    if families:
        try:
            rdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise AssayError(f"out {out}: cannot create {rdir} ({e.strerror})") from None
        _run_relations(fn if spec is None or callable(fn) else _worker.load_impl(spec), todo, rdir, families,
                       batch_invariant, layout_offset)

    cmd = [binary, "compare", "--golden-dir", str(gdir), "--candidate-dir", str(cdir), *_case_args(cases),
           "--name", name, "--json-file", str(json_path), "--junit", str(junit_path), "--work-dir", str(odir / "repro")]
    if html_path is not None:
        cmd += ["--html", str(html_path)]
    if families:
        cmd += ["--relations-dir", str(rdir)]
    if profile:
        cmd += ["--profile", profile]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    _log.info("%s: assay compare judged %d case(s) in %.1f s", op, len(todo), time.perf_counter() - t0)
    report_json = None
    if json_path.is_file():
        try:
            report_json = json.loads(json_path.read_text())
        except json.JSONDecodeError:
            report_json = None
    if report_json is None or not report_json.get("cases"):
        raise AssayError(f"assay compare exited {p.returncode}: {_first_line(p.stderr or p.stdout)}")
    rows = [(c.get("case", "?"), c.get("verdict", "?"), " ".join(str(c.get("reason", "")).split()))
            for c in report_json["cases"]]
    rep = CheckReport(op=op, rows=rows, exit_code=p.returncode, json=report_json, json_path=str(json_path),
                      html_path=str(html_path) if html_path is not None else None, junit_path=str(junit_path),
                      candidate_dir=str(cdir))
    if not quiet:
        print(rep, file=sys.stdout, flush=True)
    return rep
