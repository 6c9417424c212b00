# python -m assay: `check` a Python kernel over an op's goldens (exit code = assay compare's), or
# `inspect` a golden. Usage errors: one line on stderr, exit 2.
"""Command line: ``python -m assay check --op OP --impl module.path:function [...]``."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .check import check
from .errors import AssayError
from .golden import open as open_golden


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"assay: error: {message}", file=sys.stderr)
        sys.exit(2)


def _load_impl(spec: str):
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise AssayError(f"--impl {spec}: expected module.path:function")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 (any import failure is a usage error here)
        raise AssayError(f"--impl {spec}: cannot import {mod} ({type(e).__name__}: {e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AssayError(f"--impl {spec}: {mod} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise AssayError(f"--impl {spec}: not callable")
    return obj


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
    c.add_argument("--quiet", action="store_true", help="do not print the verdict table")
    i = sub.add_parser("inspect", help="print a golden's case fields, inputs and outputs")
    i.add_argument("golden")
    a = p.parse_args(argv)
    try:
        if a.cmd == "inspect":
            return _inspect(a.golden)
        if a.html and a.no_html:
            raise AssayError("--html and --no-html: say one")
        html = False if a.no_html else (a.html or True)
        rep = check(a.op, _load_impl(a.impl), cases=a.cases or "*", level=a.level, profile=a.profile, out=a.out,
                    golden_dir=a.golden_dir, html=html, assay_bin=a.assay_bin, quiet=a.quiet)
        return rep.exit_code
    except AssayError as e:
        print(f"assay: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
