# assay._files: how the package writes a file. An output path that exists must be a regular file (a
# directory, symlink, FIFO or device there is refused, never replaced), an output is never one of the
# run's inputs (the golden being judged), and a file is written to a temp name in its own directory
# and renamed onto the path, so it is whole or absent.
"""Output-path rules shared by :mod:`assay.candidate` and :func:`assay.check`."""
from __future__ import annotations

import os
import secrets
import stat

from .errors import AssayError

_KINDS = ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular(path) -> str | None:
    """Why ``path`` cannot be written ("exists and is a FIFO, not a regular file") when something
    other than a regular file is there; None for a regular file or nothing. The last component is
    not followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:  # a loop or a component that is no directory: nothing can be written there either
        return f"cannot be looked at ({e.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return f"exists and is {kind}, not a regular file"


class Inputs:
    """Files an output must not be, matched by (device, inode) (hard links, symlinked directories)
    and by resolved path (files not there yet)."""

    def __init__(self):
        self._ids, self._real = {}, {}

    def add(self, path, what: str):
        """Registers the input ``path``; ``what`` is how a refusal names it ("the golden ... being judged")."""
        self._real.setdefault(os.path.realpath(path), what)
        try:
            st = os.stat(path)
            self._ids.setdefault((st.st_dev, st.st_ino), what)
        except OSError:
            pass
        return self

    def find(self, path) -> str | None:
        """How the input that ``path`` names is described, or None."""
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in self._ids:
                return self._ids[(st.st_dev, st.st_ino)]
        except OSError:
            pass
        return self._real.get(os.path.realpath(path))


def check_output(path, inputs: Inputs | None = None, role: str = ""):
    """AssayError, one line starting with ``path``, when ``path`` exists as anything but a regular
    file or is one of ``inputs``. ``role`` ends the message ("the HTML report")."""
    tail = f" ({role})" if role else ""
    why = not_regular(path)
    if why:
        raise AssayError(f"{path}: {why}; refusing to replace it{tail}")
    what = inputs.find(path) if inputs is not None else None
    if what:
        raise AssayError(f"{path}: is {what}; refusing to overwrite it{tail}")


def temp_next_to(path) -> str:
    """A new empty file ``<path>.tmp.<pid>.<random>``, created exclusively (never through a link)."""
    for _ in range(16):
        tmp = f"{os.fspath(path)}.tmp.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}.tmp.{os.getpid()}.*: no free temp name")


def replace(tmp: str, path, inputs: Inputs | None = None, role: str = ""):
    """Renames ``tmp`` onto ``path``, checking ``path`` once more just before (AssayError; ``tmp``
    is the caller's to remove)."""
    check_output(path, inputs, role)
    os.replace(tmp, path)


def write_text(path, text: str, role: str = ""):
    """Writes a small text file whole or not at all (AssayError for a path that is no regular file;
    OSError when it cannot be written)."""
    check_output(path, role=role)
    tmp = temp_next_to(path)
    try:
        with open(tmp, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
        replace(tmp, path, role=role)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
