"""The PEP 517 backend of the gputrace wheel: maturin, plus the preload library.

maturin (python/pyproject.toml, `bindings = "bin"` on analyzer/) builds the `gputrace`
command against glibc 2.17 with zig, checks it against the manylinux2014 policy, and
writes the metadata, the sdist and the wheel. Two things it cannot do alone, done here
before handing over:

* libgputrace.so. maturin builds one Cargo package per wheel and, with `bin` bindings,
  packs that package's executables only; the preload library is the cdylib of another
  package (interpose/), which is no dependency of the command's (a cdylib is never built
  as a dependency anyway), and maturin has no build hook. So `cargo zigbuild` builds it
  first, for the same target and glibc, into the Python package (gputrace/), as the
  NVIDIA and PyTorch wheels carry their shared libraries: it installs into
  site-packages/gputrace/ (the command into bin/), where `gputrace run` looks for it from
  its own folder, and where `gputrace.library()` gives it. (A wheel's data directory
  would put it in the environment's lib/, but `pip install --target` drops that.)
* The sdist. maturin's holds the command's package and its path dependencies, and its
  workspace lists only those; the library's two packages (interpose/, cupti-sys/) are
  added to it and to the workspace here, so that a wheel builds from the sdist alone.

Without cargo every hook stops with one line ("cargo not found; install the wheel
instead") rather than maturin's attempt to download a Rust toolchain.

    python3 python/gputrace_build.py check FILE...   # newest GLIBC_ version each file needs
"""

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GLIBC = "2.17"
RUST_TARGET = "x86_64-unknown-linux-gnu"
PACKAGE_LIB = HERE / "gputrace" / "libgputrace.so"
# Where earlier builds put the library: emptied, so that no wheel carries two copies.
OLD_LIBS = (HERE / "gputrace.data" / "scripts" / "libgputrace.so",
            HERE / "gputrace.data" / "data" / "lib" / "libgputrace.so")
DATA_DIR = HERE / "gputrace.data"
# The library's packages, which maturin's sdist leaves out.
LIBRARY_PACKAGES = ("interpose", "cupti-sys")
# What maturin is asked for, whatever the caller's settings: zig against glibc 2.17, the
# manylinux2014 check, a stripped command, Cargo.lock as it is.
MATURIN_ARGS = ["--zig", "--compatibility", "manylinux2014", "--strip", "--locked"]


class NoCargo(SystemExit):
    pass


def log(msg):
    print(f"gputrace_build: {msg}", file=sys.stderr, flush=True)


def _need_cargo():
    if not shutil.which("cargo"):
        log("cargo not found; install the wheel instead (pip install gputrace), or install Rust")
        raise NoCargo(1)


def _root():
    """The workspace root: python/.. in a checkout, the sdist's root in an sdist."""
    for d in (HERE, HERE.parent):
        if (d / "Cargo.toml").is_file() and (d / "interpose" / "Cargo.toml").is_file():
            return d
    log(f"no Cargo workspace with interpose/ at or above {HERE}")
    raise SystemExit(1)


def _target_dir(root, env):
    base = Path(env.get("CARGO_TARGET_DIR") or root / "target")
    return base if base.is_absolute() else root / base


def _env():
    """The build's environment: the wheel ships without debug info or symbol tables.

    zig is named by a path that stays the same from one build to the next: pip installs
    ziglang into a new temporary environment for each isolated build, and cargo would
    rebuild every crate when the compiler wrappers' paths change. A link in the target
    directory points at this build's zig."""
    env = dict(os.environ)
    env["CARGO_PROFILE_RELEASE_DEBUG"] = "false"
    env["CARGO_PROFILE_RELEASE_STRIP"] = "symbols"
    if "CARGO_ZIGBUILD_ZIG_PATH" in env:
        return env
    try:
        import ziglang
    except ImportError:
        return env
    zig_dir = Path(ziglang.__file__).resolve().parent
    if not (zig_dir / "zig").is_file():
        return env
    link = _target_dir(_root(), env) / "wheel-zig"
    try:
        if not (link.is_symlink() and link.resolve() == zig_dir):
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(zig_dir, target_is_directory=True)
        env["CARGO_ZIGBUILD_ZIG_PATH"] = str(link / "zig")
    except OSError:
        env["CARGO_ZIGBUILD_ZIG_PATH"] = str(zig_dir / "zig")
    return env


def _tool(name):
    """A build tool (maturin, cargo-zigbuild) from its PyPI package as this interpreter
    sees it, else PATH; copied to the target directory's wheel-bin/ and run from there.
    The compiler wrappers they write name their own path, and pip installs them into a
    new temporary environment for each isolated build: from a path that changes, cargo
    would rebuild every crate each time."""
    from importlib import metadata

    found = None
    try:
        for f in metadata.distribution(name).files or []:
            if f.name == name and Path(f.locate()).is_file():
                found = Path(f.locate()).resolve()
    except metadata.PackageNotFoundError:
        pass
    found = found or (Path(shutil.which(name)) if shutil.which(name) else None)
    if not found:
        log(f"{name} not found: pip install maturin cargo-zigbuild ziglang")
        raise SystemExit(1)
    stable = _target_dir(_root(), os.environ) / "wheel-bin" / name
    try:
        if not (stable.is_file() and stable.stat().st_size == found.stat().st_size
                and stable.read_bytes() == found.read_bytes()):
            stable.parent.mkdir(parents=True, exist_ok=True)
            tmp = stable.with_suffix(".part")
            shutil.copyfile(found, tmp)
            tmp.chmod(0o755)
            tmp.replace(stable)
        return str(stable)
    except OSError:
        return str(found)


def _zigbuild():
    return _tool("cargo-zigbuild")


def build_library():
    """Builds libgputrace.so into maturin's data directory; returns its path."""
    root = _root()
    env = _env()
    # A target directory of its own: maturin's build of the command sets the compiler
    # environment differently, and in one directory each build would invalidate the
    # crates the other built; apart, a second install finds both up to date.
    base = _target_dir(root, env)
    env["CARGO_TARGET_DIR"] = str(base / "wheel-lib")
    cmd = [
        _zigbuild(), "zigbuild", "--release", "--locked",
        "--target", f"{RUST_TARGET}.{GLIBC}",
        "-p", "gputrace-interpose", "--lib",
    ]
    log(" ".join(cmd[1:]))
    t0 = time.monotonic()
    # Cargo's output goes to stderr: a PEP 517 backend's stdout is not its own.
    r = subprocess.run(cmd, cwd=root, env=env, stdout=sys.stderr)
    if r.returncode != 0:
        log(f"cargo zigbuild failed (exit {r.returncode})")
        raise SystemExit(1)
    built = base / "wheel-lib" / RUST_TARGET / "release" / "libgputrace.so"
    for old in OLD_LIBS:
        old.unlink(missing_ok=True)
    dest = PACKAGE_LIB
    shutil.copyfile(built, dest)
    dest.chmod(0o755)
    newest = newest_glibc(dest.read_bytes())
    log(f"libgputrace.so built in {time.monotonic() - t0:.0f} s, needs GLIBC_{newest}")
    if _version(newest) > _version(GLIBC):
        log(f"libgputrace.so needs GLIBC_{newest}, newer than manylinux2014's {GLIBC}")
        raise SystemExit(1)
    return dest


def _version(v):
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def newest_glibc(data):
    """The newest GLIBC_x.y version named in an ELF file's bytes ("0" if none): the
    version strings of its .gnu.version_r section are plain text in the file."""
    best = "0"
    i = data.find(b"GLIBC_")
    while i >= 0:
        j = i + 6
        while j < len(data) and (data[j:j + 1].isdigit() or data[j:j + 1] == b"."):
            j += 1
        v = data[i + 6:j].decode().strip(".")
        if v and v[0].isdigit() and _version(v) > _version(best):
            best = v
        i = data.find(b"GLIBC_", j)
    return best


def _maturin_settings(config_settings):
    settings = dict(config_settings or {})
    extra = settings.get("maturin.build-args", settings.get("build-args")) or []
    if isinstance(extra, str):
        extra = extra.split()
    settings["maturin.build-args"] = [*MATURIN_ARGS, *extra]
    settings.pop("build-args", None)
    return settings


# ---------------------------------------------------------------------------------
# PEP 517


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _need_cargo()
    import maturin

    _for_maturin()
    return maturin.prepare_metadata_for_build_wheel(
        metadata_directory, _maturin_settings(config_settings)
    )


def _for_maturin():
    """maturin runs `maturin` and zig from PATH: this interpreter's scripts first (where
    pip installed them, with or without build isolation); the profile as the library's."""
    import sysconfig

    env = _env()
    for k in ("CARGO_PROFILE_RELEASE_DEBUG", "CARGO_PROFILE_RELEASE_STRIP", "CARGO_ZIGBUILD_ZIG_PATH"):
        if k in env:
            os.environ[k] = env[k]
    # maturin wants its data directory to exist, even for the metadata.
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    scripts = sysconfig.get_path("scripts")
    stable = str(Path(_tool("maturin")).parent)
    os.environ["PATH"] = os.pathsep.join([stable, scripts, str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _need_cargo()
    import maturin

    _for_maturin()
    build_library()
    t0 = time.monotonic()
    name = maturin.build_wheel(
        wheel_directory, _maturin_settings(config_settings), metadata_directory
    )
    size = (Path(wheel_directory) / name).stat().st_size
    log(f"maturin packed {name} ({size} bytes) in {time.monotonic() - t0:.0f} s")
    return name


def build_sdist(sdist_directory, config_settings=None):
    _need_cargo()
    import maturin

    _for_maturin()
    # The sdist carries sources only: not a library left by an earlier wheel build.
    for lib in (PACKAGE_LIB, *OLD_LIBS):
        lib.unlink(missing_ok=True)
    name = maturin.build_sdist(sdist_directory, config_settings)
    _complete_sdist(Path(sdist_directory) / name)
    return name


def _complete_sdist(path):
    """Adds the library's packages to maturin's sdist and to its workspace."""
    root = _root()
    with tarfile.open(path, "r:gz") as t:
        members = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
    top = members[0][0].name.split("/")[0]
    files = []
    for pkg in LIBRARY_PACKAGES:
        listed = subprocess.run(
            ["cargo", "package", "--list", "--allow-dirty", "--manifest-path",
             str(root / pkg / "Cargo.toml")],
            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
        ).stdout.decode().split()
        files += [f"{pkg}/{f}" for f in listed
                  if f not in ("Cargo.toml.orig", ".cargo_vcs_info.json", "Cargo.lock")]
    out = []
    for m, data in members:
        if m.name == f"{top}/Cargo.toml":
            text = data.decode()
            start = text.index("members = [")
            end = text.index("]", start)
            names = [s.strip().strip('"') for s in text[start + 11:end].split(",") if s.strip()]
            names += [p for p in LIBRARY_PACKAGES if p not in names]
            text = text[:start] + "members = [" + ", ".join(f'"{n}"' for n in names) + text[end:]
            data = text.encode()
            m.size = len(data)
        out.append((m, data))
    # This backend, which the sdist's pyproject.toml names (maturin packs only the
    # Python package).
    files.append(Path(__file__).name)
    for f in sorted(files):
        data = (root / f if "/" in f else HERE / f).read_bytes()
        info = tarfile.TarInfo(f"{top}/{f}")
        info.size = len(data)
        info.mode = 0o644
        info.mtime = out[0][0].mtime
        out.append((info, data))
    tmp = path.with_suffix(".part")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for m, data in out:
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    tmp.replace(path)
    log(f"{path.name}: added this backend and {len(files) - 1} files of "
        f"{', '.join(LIBRARY_PACKAGES)}")


# ---------------------------------------------------------------------------------
# Command line


def main(argv):
    if len(argv) >= 2 and argv[0] == "check":
        failed = False
        for p in argv[1:]:
            newest = newest_glibc(Path(p).read_bytes())
            ok = _version(newest) <= _version(GLIBC)
            print(f"{p}: newest GLIBC_{newest}{'' if ok else f' (FAIL: newer than {GLIBC})'}")
            failed |= not ok
        return 1 if failed else 0
    print(__doc__.rsplit("\n\n", 1)[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
