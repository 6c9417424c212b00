# python -m assay: `check` a Python kernel over an op's goldens (exit code = assay compare's), or
# `inspect` a golden. Usage errors: one line on stderr, exit 2. `check` never imports the --impl
# module itself: the kernel runs in a child process (assay._worker), one case at a time under
# --timeout, so a kernel that exits, dies or hangs fails its case instead of ending the run.
"""Command line: ``python -m assay check --op OP --impl module.path:function [...]``."""
from __future__ import annotations

import argparse
import sys

from ._worker import log_phases_to_stderr
from .check import check
from .errors import AssayError
from .golden import open as open_golden


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"assay: error: {message}", file=sys.stderr)
        sys.exit(2)


def _inspect(path: str) -> int:
    g = open_golden(path)
    print(f"{g.path}: op {g.op}  case {g.case_name}  level {g.level}")
    print("  case: " + ", ".join(f"{k}={v}" for k, v in g.case.items()))
    for n, a in g.inputs.items():
        print(f"  input  {n:<16} {g.input_dtypes[n]:<8} {list(a.shape)}  [{','.join(g.axes[n])}]")
    for n, o in g.outputs.items():
        print(f"  output {n:<16} {o.dtype:<8} {list(o.shape)}  [{','.join(o.axes)}]")
    for n in g.intermediates:
        print(f"  intermediate {n:<10} {list(g.intermediate_shapes[n])}")
    return 0


def main(argv=None) -> int:
    p = _Parser(prog="python -m assay", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    c = sub.add_parser("check", help="run a Python kernel over an op's goldens and judge it with assay compare")
    c.add_argument("--op", required=True)
    c.add_argument("--impl", required=True, help="module.path:function, called as function(golden) -> {name: array}")
    c.add_argument("--cases", action="append", default=None, help="case-name glob (repeatable; default *)")
    c.add_argument("--level", default="L0", choices=["L0", "L1", "L2"])
    c.add_argument("--profile", default=None, help="the kernel's precision profile")
    c.add_argument("--out", default="build/check", help="output directory (default build/check)")
    c.add_argument("--golden-dir", default=None, help="golden directory (default: the op's goldens of the level)")
    c.add_argument("--html", default=None, metavar="FILE", help="write the HTML report here (default <out>/<op>/report.html)")
    c.add_argument("--no-html", action="store_true", help="skip the HTML report")
    c.add_argument("--assay-bin", default=None, help="the assay binary (default $ASSAY_BIN, build/bin/assay, PATH)")
    c.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="kill a kernel (or the --impl import) still running after this long: that case is Hung "
                        "(default 300; 0: no limit)")
    c.add_argument("--quiet", action="store_true", help="do not print the verdict table")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="print each phase's time on stderr: recipe inputs regenerated, the kernel, its candidate, compare")
    c.add_argument("--relations", action="append", default=None, metavar="FAMILY", nargs="?", const="all",
                   help="also run the relations that need no oracle (batch, continuation, varlen, layout; repeatable; "
                        "bare: all); the related runs call the kernel in this process")
    c.add_argument("--batch-invariant", action="store_true", help="the batch relations hold bit for bit")
    c.add_argument("--layout-offset", type=int, default=1 << 31, metavar="ELEMENTS",
                   help="the layout relation's parents put element offsets at least this far (default 2^31)")
    i = sub.add_parser("inspect", help="print a golden's case fields, inputs and outputs")
    i.add_argument("golden")
    d = sub.add_parser("doctor", help="print the binary, fixtures and goldens a check will use; exit 1 if any is "
                                      "missing or they do not belong together")
    d.add_argument("--assay-bin", default=None, help="the assay binary (default $ASSAY_BIN, build/bin/assay, PATH)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "inspect":
            return _inspect(a.golden)
        if a.cmd == "doctor":
            from .doctor import doctor
            problems = doctor(a.assay_bin)
            if problems:
                print(f"assay: doctor: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                      file=sys.stderr)
                return 1
            return 0
        if a.html and a.no_html:
            raise AssayError("--html and --no-html: say one")
        html = False if a.no_html else (a.html or True)
        mod, sep, attr = a.impl.partition(":")
        if not sep or not mod or not attr:
            raise AssayError(f"--impl {a.impl}: expected module.path:function")
        if not a.timeout >= 0 or a.timeout == float("inf"):
            raise AssayError(f"--timeout {a.timeout:g}: expected seconds >= 0 (0: no limit)")
        if a.verbose:
            log_phases_to_stderr()
        # The kernel as "module:function": imported and run in a child process, not here.
        rep = check(a.op, a.impl, cases=a.cases or "*", level=a.level, profile=a.profile, out=a.out,
                    golden_dir=a.golden_dir, html=html, assay_bin=a.assay_bin, quiet=a.quiet,
                    timeout=a.timeout or None,
                    relations=(True if "all" in (a.relations or []) else (a.relations or False)),
                    batch_invariant=a.batch_invariant, layout_offset=a.layout_offset)
        return rep.exit_code
    except AssayError as e:
        print(f"assay: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
