"""Builds the gputrace wheel: the `gputrace` command and libgputrace.so for x86_64 Linux,
glibc 2.17 or newer (manylinux2014, so pip 19.3 and later take it).

It is the PEP 517 backend that python/pyproject.toml names, and a command:

    python3 python/gputrace_wheel.py build [DIR]     # the wheel into DIR (default .whl-gputrace)
    python3 python/gputrace_wheel.py check FILE...   # glibc baseline, libraries, stripped

The wheel:

    gputrace/__init__.py, gputrace/__main__.py   `python -m gputrace ...` runs the command
    gputrace-V.data/scripts/gputrace             the command
    gputrace-V.data/scripts/libgputrace.so       the preload library, beside the command
    gputrace-V.dist-info/METADATA, WHEEL, RECORD

pip installs `.data/scripts/` into the environment's bin/ (TARGET/bin with --target,
~/.local/bin with --user), so the library lands next to the command under every install
scheme, and `gputrace run` finds it there without any setting.

Both artifacts come from one `cargo zigbuild` (zig links them against glibc 2.17's
symbols), release profile, without debug info and stripped. Nothing is written unless
both binaries pass `check`: no glibc symbol newer than the baseline, no library outside
the manylinux set, no symbol table or debug sections.

Only the standard library is used here (tomllib, or tomli below Python 3.11).
"""

import base64
import hashlib
import os
import platform
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

GLIBC = (2, 17)
ARCH = "x86_64"
RUST_TARGET = f"{ARCH}-unknown-linux-gnu"
PLATFORM_TAGS = (f"manylinux_{GLIBC[0]}_{GLIBC[1]}_{ARCH}", f"manylinux2014_{ARCH}")
# Shared libraries a manylinux wheel may take from the system (the manylinux2014 policy
# less the X11 and glib ones, which we never need).
SYSTEM_LIBS = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
}
# What goes into the wheel's scripts folder, as named by cargo.
ARTIFACTS = ("gputrace", "libgputrace.so")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def log(msg):
    print(f"gputrace_wheel: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------
# ELF: the versions a file needs from its shared libraries, which ones, and its sections


class ElfError(Exception):
    pass


def read_elf(path):
    """Returns (needed libraries, version names needed, section names) of a 64-bit
    little-endian ELF file, from its section headers (present in stripped files too)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(off):
        return data[off:data.index(b"\0", off)].decode()

    def strtab(index):
        return sections[index][4]  # sh_offset

    names = [cstr(strtab(shstrndx) + s[0]) for s in sections]
    needed, versions = [], set()
    for (_, sh_type, _, _, off, size, link, info, _, _) in sections:
        if sh_type == 6:  # SHT_DYNAMIC: DT_NEEDED entries
            for pos in range(off, off + size, 16):
                tag, val = struct.unpack_from("<qQ", data, pos)
                if tag == 0:
                    break
                if tag == 1:
                    needed.append(cstr(strtab(link) + val))
        elif sh_type == 0x6FFFFFFE:  # SHT_GNU_verneed: Elf64_Verneed, then Elf64_Vernaux
            pos = off
            for _ in range(info):
                _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, pos)
                apos = pos + aux
                for _ in range(cnt):
                    _, _, _, name, anext = struct.unpack_from("<IHHII", data, apos)
                    versions.add(cstr(strtab(link) + name))
                    apos += anext
                pos += nxt
    return needed, versions, names


def glibc_version(name):
    """(2, 17) for "GLIBC_2.17"; None for other version names."""
    if name.startswith("GLIBC_") and name[6:7].isdigit():
        return tuple(int(x) for x in name[6:].split("."))
    return None


def check(path, glibc=GLIBC):
    """(one-line description, problems) of a binary that is to go into the wheel."""
    needed, versions, sections = read_elf(path)
    found = [v for v in map(glibc_version, versions) if v]
    newest = max(found, default=None)
    problems = []
    newer = sorted(v for v in found if v > glibc)
    if newer:
        names = ", ".join("GLIBC_" + fmt(v) for v in newer)
        problems.append(f"needs glibc symbols newer than {fmt(glibc)}: {names}")
    if "GLIBC_PRIVATE" in versions:
        problems.append("needs GLIBC_PRIVATE symbols")
    others = sorted(set(needed) - SYSTEM_LIBS)
    if others:
        problems.append(f"needs libraries outside the manylinux set: {', '.join(others)}")
    unstripped = [s for s in sections if s == ".symtab" or s.startswith(".debug")]
    if unstripped:
        problems.append(f"not stripped: {', '.join(unstripped)}")
    desc = (f"{path}: newest glibc symbol {'GLIBC_' + fmt(newest) if newest else 'none'}, "
            f"needs {', '.join(needed)}, {'not ' if unstripped else ''}stripped")
    return desc, problems


def fmt(version):
    return ".".join(map(str, version))


# ---------------------------------------------------------------------------------
# Building the two artifacts


def _zigbuild_tools():
    """cargo-zigbuild and zig, from their PyPI packages as this interpreter sees them."""
    from importlib import metadata

    zigbuild = None
    try:
        for f in metadata.distribution("cargo-zigbuild").files or []:
            if f.name == "cargo-zigbuild":
                p = Path(f.locate()).resolve()
                if p.is_file():
                    zigbuild = p
    except metadata.PackageNotFoundError:
        pass
    zigbuild = zigbuild or shutil.which("cargo-zigbuild")
    if not zigbuild:
        raise RuntimeError("cargo-zigbuild not found: pip install cargo-zigbuild ziglang")
    zig = None
    try:
        import ziglang

        p = Path(ziglang.__file__).parent / "zig"
        zig = p if p.is_file() else None
    except ImportError:
        pass
    return Path(zigbuild), zig


def build_artifacts():
    """Builds the command and the preload library; returns {wheel name: path}."""
    if sys.platform != "linux" or platform.machine() != ARCH:
        raise RuntimeError(f"the gputrace wheel is built on {ARCH} Linux only")
    zigbuild, zig = _zigbuild_tools()
    env = dict(os.environ)
    # The release profile keeps debug info for our own use; the wheel ships without it.
    env["CARGO_PROFILE_RELEASE_DEBUG"] = "false"
    env["CARGO_PROFILE_RELEASE_STRIP"] = "symbols"
    if zig and "CARGO_ZIGBUILD_ZIG_PATH" not in env:
        env["CARGO_ZIGBUILD_ZIG_PATH"] = str(zig)
    cmd = [
        str(zigbuild), "zigbuild", "--release", "--locked",
        "--target", f"{RUST_TARGET}.{fmt(GLIBC)}",
        "-p", "gputrace-analyzer", "--bin", "gputrace",
        "-p", "gputrace-interpose", "--lib",
    ]
    log(" ".join(cmd[1:]))
    t0 = time.monotonic()
    # Cargo's output goes to stderr: a PEP 517 backend's stdout is not its own.
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=sys.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"cargo zigbuild failed (exit {r.returncode})")
    log(f"built in {time.monotonic() - t0:.0f} s")
    target_dir = Path(env.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not target_dir.is_absolute():
        target_dir = ROOT / target_dir
    out = target_dir / RUST_TARGET / "release"
    return {name: out / name for name in ARTIFACTS}


# ---------------------------------------------------------------------------------
# Writing the wheel


def project():
    """[project] of pyproject.toml, with the version of the Cargo workspace."""
    with open(HERE / "pyproject.toml", "rb") as f:
        proj = tomllib.load(f)["project"]
    with open(ROOT / "Cargo.toml", "rb") as f:
        proj["version"] = tomllib.load(f)["workspace"]["package"]["version"]
    return proj


def metadata_text(proj):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {proj['name']}",
        f"Version: {proj['version']}",
        f"Summary: {proj['description']}",
        f"License: {proj['license']}",
        f"Requires-Python: {proj['requires-python']}",
    ]
    lines += [f"Classifier: {c}" for c in proj.get("classifiers", [])]
    return "\n".join(lines) + "\n"


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def write_wheel(out_dir, artifacts):
    """Writes the wheel into out_dir from {name in scripts/: path}; returns its file name.
    Entries are in a fixed order with a fixed timestamp (SOURCE_DATE_EPOCH if set), so the
    same artifacts give the same bytes."""
    proj = project()
    name, version = proj["name"], proj["version"]
    dist = f"{name}-{version}"
    entries = []  # (name in the zip, bytes, mode)
    pkg = HERE / "gputrace"
    for f in sorted(pkg.glob("*.py")):
        entries.append((f"gputrace/{f.name}", f.read_bytes(), 0o644))
    for arcname, path in artifacts.items():
        entries.append((f"{dist}.data/scripts/{arcname}", Path(path).read_bytes(), 0o755))
    wheel = ["Wheel-Version: 1.0", "Generator: gputrace_wheel", "Root-Is-Purelib: false"]
    wheel += [f"Tag: py3-none-{t}" for t in PLATFORM_TAGS]
    info = f"{dist}.dist-info"
    entries.append((f"{info}/METADATA", metadata_text(proj).encode(), 0o644))
    entries.append((f"{info}/WHEEL", ("\n".join(wheel) + "\n").encode(), 0o644))
    record = "".join(f"{n},{_record_hash(b)},{len(b)}\n" for n, b, _ in entries)
    record += f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), 0o644))

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    filename = f"{dist}-py3-none-{'.'.join(PLATFORM_TAGS)}.whl"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (filename + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for n, b, mode in entries:
            zi = zipfile.ZipInfo(n, stamp)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, b)
    tmp.replace(out_dir / filename)
    return filename


def build(out_dir):
    artifacts = build_artifacts()
    bad = []
    for path in artifacts.values():
        desc, problems = check(path)
        log(desc)
        bad += [f"{path}: {p}" for p in problems]
    if bad:
        raise RuntimeError("the artifacts cannot go into a manylinux wheel:\n" + "\n".join(bad))
    filename = write_wheel(out_dir, artifacts)
    size = (Path(out_dir) / filename).stat().st_size
    log(f"wrote {Path(out_dir) / filename} ({size} bytes)")
    return filename


# ---------------------------------------------------------------------------------
# PEP 517


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return build(wheel_directory)


# ---------------------------------------------------------------------------------
# Command line


def main(argv):
    if len(argv) >= 1 and argv[0] == "build" and len(argv) <= 2:
        try:
            build(argv[1] if len(argv) == 2 else ROOT / ".whl-gputrace")
        except RuntimeError as e:
            log(str(e))
            return 1
        return 0
    if len(argv) >= 2 and argv[0] == "check":
        failed = False
        for path in argv[1:]:
            try:
                desc, problems = check(path)
            except (OSError, ElfError, struct.error, ValueError) as e:
                desc, problems = f"{path}: cannot read it", [str(e)]
            print(desc)
            for p in problems:
                print(f"  FAIL {p}")
            failed |= bool(problems)
        return 1 if failed else 0
    print("\n\n".join(__doc__.split("\n\n")[1:3]), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
