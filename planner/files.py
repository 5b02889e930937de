"""Every file planner reads or writes goes through here.

Reading: only regular files (a FIFO, a socket, ``/dev/zero`` or a folder is refused before it is
opened, so that nothing can block or stream forever), each kind with a size cap, text decoded as
UTF-8 with an error naming the line. Each file read is remembered for the rest of the command.

Writing: the output path is checked first (:func:`check_output`, called before expensive work
where a command can), then the content goes to a temporary file beside the target, is flushed to
disk and renamed over the target in one step (``os.replace``): a full disk, a crash or Ctrl-C
leaves the old file (or no file) and never half of one. A write never replaces a file the same
command read (its model, job, hardware, calibration, saved search or launch script), a folder, a
device or a read-only file; each refusal is one paragraph saying so.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from planner.errors import PlannerError

KiB = 2**10
MiB = 2**20

MAX_SPEC_BYTES = MiB
"""Model, hardware, job and calibration files and HuggingFace config.json files: 1 MiB (the
largest published config.json is a few KiB, catalog YAMLs 3-10 KiB; the pure-Python YAML parser
reads 1 MiB in about a second)."""
MAX_SAVED_BYTES = 64 * MiB
"""`planner search --save` files (100 ranked plans of DeepSeek-V3 with per-stage detail are about
1 MiB)."""
MAX_SCRIPT_BYTES = 4 * MiB
"""Megatron-LM launch scripts and argument files."""
MAX_RAW_BYTES = 64 * MiB
"""`planner calibrate` raw measurement files (<stem>-raw.json)."""
MAX_SNAPSHOT_BYTES = 4 * 2**30
"""PyTorch memory snapshots (a dump with max_entries=100000 on one device is 50-200 MiB)."""

MAX_NESTING = 32
"""Deepest nesting of lists and mappings in any structured file planner reads (YAML, TOML, JSON:
specs nest 4 levels, saved searches 6, a Megatron-Bridge ConfigContainer YAML 3, a torchtitan TOML
2). One limit and one message for every reader: the parsers planner uses recurse once per level
(PyYAML's composer, tomllib, the json scanner) and would otherwise end in a RecursionError."""


def nesting_error(origin: str) -> PlannerError:
    """The one paragraph for a file nested deeper than :data:`MAX_NESTING`."""
    return PlannerError(f"'{origin}' nests lists or mappings more than {MAX_NESTING} levels deep.",
                        hint="A spec or launch file nests a few levels; check that it is the file you meant.")


# A bracket outside quoted strings and comments (TOML's four string forms; JSON's one is among them).
_FLOW_TOKEN = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]')


def check_flow_nesting(text: str, origin: str) -> None:
    """Refuse text whose brackets (``[``/``{`` outside strings and comments) nest deeper than
    :data:`MAX_NESTING`, before a parser that recurses in Python (tomllib) reads it. A lexical
    scan: it needs no parse, so a 50,000-deep file costs one pass over its text."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return
    depth = 0
    for m in _FLOW_TOKEN.finditer(text):
        c = m.group()
        if len(c) != 1:
            continue
        if c in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise nesting_error(origin)
        else:
            depth = max(depth - 1, 0)


# Files this command has read: (device, inode) -> (path as given, what it is, mtime_ns, size).
_inputs: dict[tuple[int, int], tuple[str, str, int, int]] = {}


def reset_inputs() -> None:
    """Forget the files read so far (planner.cli.main calls it at the start of each command)."""
    _inputs.clear()


def note_input(path: str | os.PathLike, what: str) -> None:
    """Remember that this command read ``path`` (so that no write replaces it)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if stat.S_ISREG(st.st_mode):
        _inputs[(st.st_dev, st.st_ino)] = (str(path), what, st.st_mtime_ns, st.st_size)


def _input_of(st: os.stat_result) -> tuple[str, str] | None:
    found = _inputs.get((st.st_dev, st.st_ino))
    if found is None:
        return None
    given, what, mtime, size = found
    # A recycled inode (the input deleted, another file created) has another mtime or size.
    if (mtime, size) != (st.st_mtime_ns, st.st_size):
        return None
    return given, what


def _size_text(n: int) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", MiB), ("KiB", KiB)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} bytes"


def _empty(path) -> bool:
    return str(path).strip() == ""


def _os_reason(exc: BaseException) -> str:
    """A user's words for an OS error."""
    code = getattr(exc, "errno", None)
    reasons = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOENT: "no such file or folder",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EISDIR: "it is a folder",
        errno.ENAMETOOLONG: "the name is too long",
        errno.ELOOP: "too many levels of symbolic links",
        errno.EFBIG: "the file is too large for the file system",
        errno.EIO: "an input/output error",
    }
    if code in reasons:
        return reasons[code]
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


# ---- reading ---------------------------------------------------------------------------------


def check_input(path: str | os.PathLike, what: str, *, folder_hint: str | None = None) -> os.stat_result:
    """The ``stat`` of an input that is an existing regular file; a one-paragraph error otherwise."""
    if _empty(path):
        raise PlannerError(f"The {what} path is empty.", hint=f"Give the path of a {what} file.")
    try:
        st = os.stat(path)
    except ValueError:  # an embedded NUL character
        raise PlannerError(f"The {what} path {str(path)!r} contains a NUL character.") from None
    except FileNotFoundError:
        raise PlannerError(f"{what[:1].upper() + what[1:]} file '{path}' does not exist.") from None
    except OSError as exc:
        raise PlannerError(f"Cannot read {what} file '{path}': {_os_reason(exc)}.") from None
    if stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"'{path}' is a folder, not a {what} file.", hint=folder_hint)
    if not stat.S_ISREG(st.st_mode):
        raise PlannerError(
            f"'{path}' is not a regular file (it is a FIFO, a device or a socket): planner reads {what} "
            "files only from regular files, so that a pipe or a device cannot block it or stream forever.",
            hint="Copy the content into a file and give that file.",
        )
    return st


def read_bytes(path: str | os.PathLike, what: str, limit: int, *, folder_hint: str | None = None,
               own: bool = False) -> bytes:
    """The content of a regular file of at most ``limit`` bytes. ``own``: planner's own committed data
    (the validation report the tie resolution reads), not a user's input, so a command that
    regenerates it (``planner results``) may write it."""
    st = check_input(path, what, folder_hint=folder_hint)
    too_big = PlannerError(
        f"'{path}' is {_size_text(max(st.st_size, limit + 1))}, more than the {_size_text(limit)} planner reads "
        f"from a {what} file.",
        hint=f"Check that '{path}' is the {what} file you meant.",
    )
    if st.st_size > limit:
        raise too_big
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it cannot block.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PlannerError(f"Cannot read {what} file '{path}': {_os_reason(exc)}.") from None
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode):
            raise PlannerError(f"'{path}' is not a regular file; planner reads {what} files only from regular files.")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(MiB, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise too_big
    except OSError as exc:
        raise PlannerError(f"Cannot read {what} file '{path}': {_os_reason(exc)}.") from None
    finally:
        os.close(fd)
    if not own:
        note_input(path, what)
    return b"".join(chunks)


def decode_text(data: bytes, path, what: str) -> str:
    """UTF-8 text (a byte-order mark is dropped); an error names the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PlannerError(
            f"{what[:1].upper() + what[1:]} file '{path}' is not UTF-8 text: byte 0x{data[exc.start]:02x} at line "
            f"{line} cannot be decoded.",
            hint="Save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8), or check that it is the file you meant.",
        ) from None


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_SPEC_BYTES, *,
              folder_hint: str | None = None, own: bool = False) -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes (``own``: see :func:`read_bytes`)."""
    return decode_text(read_bytes(path, what, limit, folder_hint=folder_hint, own=own), path, what)


# ---- writing ---------------------------------------------------------------------------------


def _cannot(what: str, path, why: str, hint: str | None = None) -> PlannerError:
    return PlannerError(f"Cannot write {what} '{path}': {why}.", hint=hint)


def check_output(path: str | os.PathLike, what: str, *, suffixes: tuple[str, ...] | None = None) -> Path:
    """Check that ``path`` can take the output before any work is done; returns the file that will
    be written (a symbolic link's target). Refuses a missing or read-only folder, a folder, a
    device or FIFO, a read-only file, and any file this command read."""
    if _empty(path):
        raise PlannerError(f"The path for the {what} is empty.", hint="Give a file name.")
    p = Path(path)
    if "\x00" in str(p):
        raise PlannerError(f"The path for the {what} {str(path)!r} contains a NUL character.")
    if suffixes and p.suffix.lower() not in suffixes:
        raise PlannerError(f"The {what} '{path}' must end in {' or '.join(suffixes)}.",
                           hint=f"Name the file e.g. out{suffixes[0]}.")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot(what, path, _os_reason(exc)) from None
    target = p
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _cannot(what, path, "it is a folder", hint="Give a file name inside it.")
        if not stat.S_ISREG(st.st_mode):
            raise _cannot(what, path, "it is not a regular file (a device, FIFO or socket)",
                          hint="planner writes only regular files; leave out the option to print to the terminal "
                          "where the command can, or give a file name.")
        read = _input_of(st)
        if read is not None:
            given, kind = read
            same = "" if os.path.abspath(given) == os.path.abspath(p) else f" (as '{given}')"
            raise _cannot(what, path, f"it is the {kind} file this command read{same}, and planner never writes "
                          "over its own input", hint="Choose another file name.")
        if not st.st_mode & 0o222 or (os.geteuid() != 0 and not os.access(p, os.W_OK)):
            raise _cannot(what, path, "the file is read-only", hint="Choose another name, or make it writable first.")
        target = Path(os.path.realpath(p))
    folder = target.parent
    try:
        fst = os.stat(folder)
    except FileNotFoundError:
        raise _cannot(what, path, f"the folder '{folder}' does not exist",
                      hint=f"Create it first (mkdir -p '{folder}') or choose another path.") from None
    except OSError as exc:
        raise _cannot(what, path, f"the folder '{folder}' cannot be used ({_os_reason(exc)})") from None
    if not stat.S_ISDIR(fst.st_mode):
        raise _cannot(what, path, f"'{folder}' is not a folder")
    if not fst.st_mode & 0o222 or not os.access(folder, os.W_OK | os.X_OK):
        raise _cannot(what, path, f"the folder '{folder}' is read-only", hint="Choose a folder you can write to.")
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_with(path: str | os.PathLike, what: str, fill: Callable[[Path], None], *, executable: bool = False,
               suffixes: tuple[str, ...] | None = None) -> Path:
    """Write ``path`` atomically: ``fill(tmp)`` writes a temporary file beside it, which then
    replaces ``path`` in one rename. On any failure the temporary file is removed and ``path`` is
    as it was."""
    target = check_output(path, what, suffixes=suffixes)
    old_mode = None
    try:
        old_mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        pass
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp" + target.suffix)
    except OSError as exc:
        raise _cannot(what, path, _os_reason(exc)) from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        fill(tmp)
        mode = old_mode if old_mode is not None else 0o666 & ~_umask()
        if executable:
            mode |= (mode & 0o444) >> 2  # x wherever r is set
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        state = "it is unchanged" if old_mode is not None else "no file was created"
        raise _cannot(what, path, f"{_os_reason(exc)}; {state}") from None
    except BaseException:
        _remove(tmp)
        raise
    return target


def _remove(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:
        pass


def write_bytes(path: str | os.PathLike, data: bytes, what: str, *, executable: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`write_with`)."""

    def fill(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    return write_with(path, what, fill, executable=executable)


def write_text(path: str | os.PathLike, text: str, what: str, *, executable: bool = False) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`write_with`)."""
    return write_bytes(path, text.encode("utf-8"), what, executable=executable)


def prepare_folder(path: str | os.PathLike, what: str) -> Path:
    """A folder to write several files into, created (with its parents) if missing."""
    if _empty(path):
        raise PlannerError(f"The folder for the {what} is empty.", hint="Give a folder name.")
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise PlannerError(f"Cannot use '{path}' for the {what}: {_os_reason(exc)}.") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise PlannerError(f"Cannot write the {what} into '{path}': it is a file, not a folder.",
                           hint="Give a folder name.")
    if st is None:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PlannerError(f"Cannot create the folder '{path}' for the {what}: {_os_reason(exc)}.") from None
    elif not st.st_mode & 0o222 or not os.access(p, os.W_OK | os.X_OK):
        raise PlannerError(f"Cannot write the {what} into '{path}': the folder is read-only.")
    return p
