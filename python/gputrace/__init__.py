"""gputrace: what a CUDA job's GPU was waiting for.

The wheel installs the `gputrace` command and the preload library libgputrace.so side by
side in the environment's bin/ folder. This package only finds them:
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
    """Path of the installed libgputrace.so (beside the command)."""
    lib = Path(binary()).parent / "libgputrace.so"
    if not lib.is_file():
        raise FileNotFoundError(f"gputrace: {lib} is missing; reinstall the gputrace wheel")
    return str(lib)


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
