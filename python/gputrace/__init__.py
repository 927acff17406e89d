"""gputrace: what a CUDA job's GPU was waiting for.

The wheel installs the `gputrace` command into the environment's bin/ folder and the
preload library libgputrace.so into this package's folder. This package only finds them:
`python -m gputrace ARGS` runs the command (handy where bin/ is not on PATH), and
`binary()` and `library()` give their paths, e.g. for LD_PRELOAD by hand.
"""

import os
import shutil
import sys
import sysconfig
from pathlib import Path

__all__ = ["binary", "library"]


def _candidates(name):
    # Where pip put the file, as this install's RECORD says (venv, --user, system).
    try:
        from importlib import metadata

        for f in metadata.distribution("gputrace").files or []:
            if f.name == name and f.parent.name == "bin":
                yield Path(f.locate())
    except Exception:  # metadata missing or odd: try the other places
        pass
    # pip install --target DIR: the package is DIR/gputrace, the scripts DIR/bin.
    yield Path(__file__).resolve().parent.parent / "bin" / name
    yield Path(sysconfig.get_path("scripts")) / name
    found = shutil.which(name)
    if found:
        yield Path(found)


def _find(name):
    for p in _candidates(name):
        if p.is_file():
            return str(p.resolve())
    raise FileNotFoundError(
        f"gputrace: cannot find the installed {name}; reinstall the gputrace wheel "
        f"(python: {sys.executable})"
    )


def binary():
    """Path of the installed `gputrace` command."""
    return _find("gputrace")


def library():
    """Path of the installed libgputrace.so: in this package's folder (where `gputrace run`
    looks too), or beside the command (wheels of 0.1.0)."""
    here = Path(__file__).resolve().parent / "libgputrace.so"
    if here.is_file():
        return str(here)
    beside = Path(binary()).parent / "libgputrace.so"
    if beside.is_file():
        return str(beside.resolve())
    raise FileNotFoundError(f"gputrace: {here} is missing; reinstall the gputrace wheel")


def main(argv=None):
    """Replaces this Python process with the `gputrace` command and these arguments, so
    signals and the exit status are the command's own."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        exe = binary()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 125
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe, *args])
