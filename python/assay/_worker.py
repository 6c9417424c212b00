# assay._worker: runs a kernel over goldens, in this process (run_case) or in a child process that
# the parent supervises (Worker, and main: `python -c <_CHILD> REQUEST_FD REPLY_FD`).
#
# A case ends in exactly one of <case>.h5 (the candidate) and <case>.error, whose first line is the
# one-line reason that `assay compare --golden-dir` shows:
#   "<Type>: <message> (raised by <kernel>)"     the kernel raised (SystemExit: "SystemExit(<code>) (...)")
#   "<Type>: <message> (writing the candidate of <kernel>)"   its outputs could not be written
#   "kernel process exited with status N before writing a candidate (<kernel>)"   os._exit, a crash
#   "kernel process killed by signal N (SIGNAME) before writing a candidate (<kernel>)"
#   "Hung: the kernel <kernel> did not return within T s (--timeout); killed"
# compare gives "Hung:" the verdict Hung, every other .error Failed.
#
# Protocol (one JSON object a line, on two pipes of their own; the kernel's stdin is /dev/null and its
# stdout / stderr are the parent's): the parent sends {"impl", "sys_path", "name", "profile",
# "log_phases"} (log_phases: the child logs its phase times to stderr too, as the parent does), the
# child imports the kernel and answers {"ready": name} or {"usage": message}; then per case the parent
# sends {"case", "golden", "candidate", "error"} and the child writes the candidate or .error itself
# and answers {"done": case} (or {"usage": message} for an unreadable golden). The child runs in a
# process group of its own, which is killed whole when the child dies, hangs or is done.
"""The kernel process of ``python -m assay check`` (and ``assay.check`` with ``isolate=True``)."""
from __future__ import annotations

import glob
import importlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import _files, candidate
from .errors import AssayError
from .golden import open as open_golden

# The child's command line: `-m assay._worker` would run a second copy of this module (the package
# imports it), so the child calls main() of the one the package imported.
_CHILD = "import sys; from assay._worker import main; sys.exit(main())"
_log = logging.getLogger("assay")  # phase times at INFO (python/README.md "Phase times")
_EXIT_GRACE_S = 2.0  # how long a child whose pipe closed may take to exit before it is killed


def log_phases_to_stderr():
    """The "assay" logger's INFO records (phase times) as ``assay: <message>`` lines on stderr
    (``python -m assay check --verbose``, and its kernel process)."""
    if not _log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("assay: %(message)s"))
        _log.addHandler(h)
    _log.setLevel(logging.INFO)


def fn_name(fn) -> str:
    """``module:qualname`` of a kernel, its name in the reports."""
    mod = getattr(fn, "__module__", None) or "?"
    return f"{mod}:{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', repr(fn))}"


def describe(exc: BaseException) -> str:
    """One line for an exception: ``Type: message``; ``SystemExit(code)`` for an exit."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def write_error(path: Path, first_line: str, detail: str = ""):
    """Writes ``<case>.error``: the one-line reason, then details (a traceback)."""
    _files.write_text(path, " ".join(first_line.split()) + "\n" + (f"\n{detail}" if detail else ""))


def _write_exc(path: Path, exc: BaseException, what: str):
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    write_error(path, f"{describe(exc)} ({what})", tb)


def run_case(fn, name: str, gpath, cand: Path, err: Path, profile):
    """Runs ``fn`` on the golden ``gpath`` and writes its candidate ``cand``, or ``err`` when it
    raised (any exception, SystemExit included) or its outputs could not be written. KeyboardInterrupt
    goes through; an unreadable golden is an AssayError of the run."""
    golden = open_golden(gpath)
    t0 = time.perf_counter()
    try:
        result = fn(golden)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the kernel's failure is the case's verdict
        _write_exc(err, e, f"raised by {name}")
        return
    t1 = time.perf_counter()
    _log.info("%s/%s: %s returned in %.1f s (its inputs' regeneration included)", golden.op, golden.case_name,
              name, t1 - t0)
    try:
        outputs, inter = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
        candidate.write(cand, golden, outputs, precision_profile=profile, intermediates=inter)
        _log.info("%s/%s: candidate %s written in %.1f s", golden.op, golden.case_name, cand, time.perf_counter() - t1)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        _write_exc(err, e, f"writing the candidate of {name}")


def split_spec(spec: str) -> tuple:
    """(module, attribute path) of ``module.path:function``; AssayError for anything else."""
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise AssayError(f"kernel {spec}: expected module.path:function")
    return mod, attr


def load_impl(spec: str):
    """Imports the kernel ``module.path:function`` (the current directory on sys.path, as for
    ``python -m``). AssayError, one line, when it cannot be imported (an exit at import included) or
    is not a callable."""
    mod, attr = split_spec(spec)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(mod)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 (any import failure, sys.exit included, is a usage error)
        raise AssayError(f"kernel {spec}: cannot import {mod} ({describe(e)})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AssayError(f"kernel {spec}: {mod} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise AssayError(f"kernel {spec}: not callable")
    return obj


def _how_it_ended(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


class Worker:
    """The parent's end of one kernel process (see the header). Starting it imports the kernel
    (AssayError, one line, when that fails, exits or takes over ``timeout`` seconds); :meth:`run`
    runs one case. Once the process died or hung it is gone: start a new Worker."""

    def __init__(self, spec: str, profile, name, timeout):
        self.spec, self.timeout, self.name = spec, timeout, name
        self._buf = b""
        env = dict(os.environ)
        here = str(Path(__file__).resolve().parents[1])  # so the child imports this assay package
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(req_r), str(rep_w)],
                                         stdin=subprocess.DEVNULL, pass_fds=(req_r, rep_w), env=env,
                                         start_new_session=True)
        except BaseException:
            for fd in (req_w, rep_r):
                os.close(fd)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._req, self._rep = os.fdopen(req_w, "wb", buffering=0), rep_r
        self._poll = select.poll()  # not select.select: it cannot take descriptors over 1023
        self._poll.register(rep_r, select.POLLIN)
        mod = spec.partition(":")[0]
        path = [os.fspath(p) for p in sys.path if isinstance(p, (str, os.PathLike))]  # the child's sys.path
        try:
            ok = self._send({"impl": spec, "sys_path": path, "name": name, "profile": profile,
                             "log_phases": _log.isEnabledFor(logging.INFO)})
            reply = self._receive() if ok else "eof"
        except BaseException:
            self._end(kill=True)
            raise
        if isinstance(reply, dict) and "ready" in reply:
            self.name = reply["ready"]
            return
        rc = self._end(kill=reply == "timeout")
        if isinstance(reply, dict) and "usage" in reply:
            raise AssayError(reply["usage"])
        if reply == "timeout":
            raise AssayError(f"kernel {spec}: importing {mod} did not finish within {self.timeout:g} s (--timeout)")
        raise AssayError(f"kernel {spec}: the kernel process {_how_it_ended(rc)} while importing {mod}")

    def run(self, case: str, gpath, cand: Path, err: Path) -> bool:
        """Runs one case; True when the process lives on. When the process died or hung (and was
        killed), this writes ``err`` and returns False. AssayError for an unreadable golden."""
        req = {"case": case, "golden": os.path.abspath(gpath), "candidate": os.path.abspath(cand),
               "error": os.path.abspath(err)}
        reply = self._receive() if self._send(req) else "eof"
        if isinstance(reply, dict) and reply.get("done") == case:
            return True
        hung = reply == "timeout"
        pid, rc = self.proc.pid, self._end(kill=hung)
        if isinstance(reply, dict) and "usage" in reply:
            raise AssayError(reply["usage"])
        # Whatever the dead process left of this case goes: its temp files, a candidate or .error.
        for p in (cand, err):
            for left in [*glob.glob(glob.escape(str(p)) + f".tmp.{pid}.*"), p]:
                try:
                    os.unlink(left)
                except OSError:
                    pass
        detail = f"case {case}, golden {gpath}, kernel process {pid}"
        if hung:
            write_error(err, f"Hung: the kernel {self.name} did not return within {self.timeout:g} s (--timeout); "
                             f"killed", detail + ": killed with its process group\n")
        else:
            write_error(err, f"kernel process {_how_it_ended(rc)} before writing a candidate ({self.name})",
                        detail + "\n")
        return False

    def close(self, kill: bool = False):
        """Ends the process: no more cases (it exits), then its process group is killed; at once
        with ``kill`` (the run is being abandoned, e.g. KeyboardInterrupt)."""
        try:
            self._req.close()
        except OSError:
            pass
        self._end(kill=kill)

    def _send(self, obj) -> bool:
        try:
            self._req.write(json.dumps(obj).encode() + b"\n")
            return True
        except (BrokenPipeError, ValueError):  # the child is gone (ValueError: pipe already closed)
            return False

    def _receive(self):
        """The child's next reply (a dict), "eof" (it closed its pipe: died) or "timeout"."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return "timeout"
            if not self._poll.poll(None if left is None else max(1, int(left * 1000) + 1)):
                continue
            chunk = os.read(self._rep, 1 << 16)
            if not chunk:
                return "eof"
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            return "eof"  # not ours: the protocol is broken, the process is no use
        return reply if isinstance(reply, dict) else "eof"

    def _end(self, kill: bool) -> int:
        """Kills the child's process group (the child and whatever it started) and reaps the child;
        returns its exit status (negative: the signal). Unless ``kill``, the child gets
        _EXIT_GRACE_S to exit by itself first, so its own exit status is the one reported. The group
        is killed before the child is reaped, so its id cannot have been reused."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        if not kill:
            t_end = time.monotonic() + _EXIT_GRACE_S
            while time.monotonic() < t_end:
                if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    break
                time.sleep(0.01)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        rc = self.proc.wait()
        for f in (self._req, self._rep):
            try:
                f.close() if hasattr(f, "close") else os.close(f)
            except OSError:
                pass
        return rc


def main(argv=None) -> int:
    """The child: ``python -c <_CHILD> REQUEST_FD REPLY_FD`` (see the header)."""
    argv = sys.argv[1:] if argv is None else argv
    req_fd, rep_fd = int(argv[0]), int(argv[1])
    for fd in (req_fd, rep_fd):  # not inherited by what the kernel starts
        os.set_inheritable(fd, False)
    requests, replies = os.fdopen(req_fd, "rb"), os.fdopen(rep_fd, "wb", buffering=0)

    def reply(**kw):
        replies.write(json.dumps(kw).encode() + b"\n")

    init = json.loads(requests.readline() or b"null")
    if not isinstance(init, dict):
        return 2
    sys.path[:] = init["sys_path"]
    if init.get("log_phases"):  # the parent logs phase times: so does this process
        log_phases_to_stderr()
    try:
        fn = load_impl(init["impl"])
    except AssayError as e:
        reply(usage=str(e))
        return 0
    name = init.get("name") or fn_name(fn)
    reply(ready=name)
    for line in requests:
        r = json.loads(line)
        try:
            run_case(fn, name, r["golden"], Path(r["candidate"]), Path(r["error"]), init.get("profile"))
        except AssayError as e:  # an unreadable golden: a usage error of the run, as in-process
            reply(usage=str(e))
            return 0
        reply(done=r["case"])
    return 0
