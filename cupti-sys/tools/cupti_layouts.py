#!/usr/bin/env python3
"""Measure CUPTI activity-record layouts across several CUPTI header sets.

Usage:
    cupti_layouts.py --out LAYOUTS.md LABEL=INCLUDE_DIR [LABEL=INCLUDE_DIR ...]

The last header set given is the reference (the one the bindings are
generated from). For every activity kind listed in KINDS the tool

  1. reads the CUpti_ActivityKind enum of each header set to find out which
     record struct that release documents as the one it hands back,
  2. lists the top-level fields of that struct from the header text (only to
     know which names exist; the numbers come from the compiler),
  3. writes a small C program that prints sizeof/offsetof for every field and
     compiles it with gcc against that header set,
  4. compares the offsets with the reference struct and writes a markdown
     report.

Nothing from the headers is copied into the report except struct and field
names and the numbers gcc prints.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

# (activity kind suffix, fields to show first; other fields follow)
KINDS = [
    ("CONCURRENT_KERNEL", [
        "kind", "start", "end", "completed", "deviceId", "contextId",
        "streamId", "correlationId", "gridX", "gridY", "gridZ", "blockX",
        "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
        "registersPerThread", "name", "graphId", "graphNodeId", "launchType",
        "isSharedMemoryCarveoutRequested", "queued", "submitted",
    ]),
    ("MEMCPY", [
        "kind", "copyKind", "srcKind", "dstKind", "flags", "bytes", "start",
        "end", "deviceId", "contextId", "streamId", "correlationId",
        "graphNodeId", "graphId",
    ]),
    ("MEMCPY2", [
        "kind", "copyKind", "srcKind", "dstKind", "flags", "bytes", "start",
        "end", "deviceId", "contextId", "streamId", "srcDeviceId",
        "dstDeviceId", "correlationId",
    ]),
    ("MEMSET", [
        "kind", "value", "bytes", "start", "end", "deviceId", "contextId",
        "streamId", "correlationId", "memoryKind", "flags",
    ]),
    ("SYNCHRONIZATION", [
        "kind", "type", "start", "end", "correlationId", "contextId",
        "streamId", "cudaEventId",
    ]),
    ("DEVICE", [
        "kind", "flags", "globalMemorySize", "numMultiprocessors",
        "maxBlocksPerMultiprocessor", "computeCapabilityMajor",
        "computeCapabilityMinor", "id", "uuid", "name",
    ]),
    ("MEMORY2", [
        "kind", "memoryOperationType", "memoryKind", "correlationId",
        "address", "bytes", "timestamp", "deviceId", "contextId", "streamId",
    ]),
    ("MEMORY_POOL", [
        "kind", "memoryPoolOperationType", "memoryPoolType", "correlationId",
        "deviceId", "address", "size", "timestamp",
    ]),
    ("CUDA_EVENT", ["kind", "correlationId", "contextId", "streamId",
                    "eventId"]),
    ("RUNTIME", ["kind", "cbid", "start", "end", "processId", "threadId",
                 "correlationId", "returnValue"]),
    ("CONTEXT", ["kind", "contextId", "deviceId"]),
    ("EXTERNAL_CORRELATION", ["kind", "externalKind", "externalId",
                              "correlationId"]),
    ("OVERHEAD", ["kind", "overheadKind", "objectKind", "start", "end"]),
    ("MARKER", ["kind", "flags", "timestamp", "id", "name", "domain"]),
    ("NAME", ["kind", "objectKind", "name"]),
]

# Plain (non-activity) structs whose layout also matters.
EXTRA_STRUCTS = [
    "CUpti_CallbackData", "CUpti_ResourceData", "CUpti_SynchronizeData",
    # runtime API callback parameter blocks (functionParams)
    "cudaLaunchKernel_v7000_params", "cudaLaunchKernel_ptsz_v7000_params",
    "cudaLaunchKernelExC_v11060_params", "cudaLaunchCooperativeKernel_v9000_params",
    "cudaGraphLaunch_v10000_params", "cudaMemcpy_v3020_params",
    "cudaMemcpyAsync_v3020_params", "cudaMemsetAsync_v3020_params",
    "cudaStreamSynchronize_v3020_params", "cudaEventSynchronize_v3020_params",
    "cudaStreamWaitEvent_v3020_params", "cudaMalloc_v3020_params",
    "cudaFree_v3020_params",
    # driver API callback parameter blocks
    "cuLaunchKernel_params", "cuLaunchKernelEx_params",
]

HEADERS = ["cupti_activity.h", "cupti_activity_deprecated.h",
           "cupti_callbacks.h", "generated_cuda_runtime_api_meta.h",
           "generated_cuda_meta.h"]
CBID_HEADERS = ["cupti_runtime_cbid.h", "cupti_driver_cbid.h"]


def read_headers(inc):
    text = ""
    for h in HEADERS:
        p = os.path.join(inc, h)
        if os.path.exists(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                text += f.read() + "\n"
    return text


def api_version(inc):
    with open(os.path.join(inc, "cupti_version.h"), encoding="utf-8",
              errors="replace") as f:
        m = re.search(r"^#define CUPTI_API_VERSION\s+(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else "?"


def read_cbids(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return {n: int(v) for n, v in re.findall(
        r"(CUPTI_(?:RUNTIME|DRIVER)_TRACE_CBID_\w+)\s*=\s*(\d+)", text)}


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


def kind_struct_map(text):
    """Map CUPTI_ACTIVITY_KIND_X -> record struct named in its doc comment."""
    m = re.search(r"typedef enum \{(.*?)\}\s*CUpti_ActivityKind\s*;", text, re.S)
    if not m:
        raise SystemExit("CUpti_ActivityKind enum not found")
    out = {}
    for doc, name in re.findall(r"/\*\*(.*?)\*/\s*(CUPTI_ACTIVITY_KIND_\w+)",
                                m.group(1), re.S):
        found = re.findall(r"\\ref\s+(CUpti_Activity\w+)", doc)
        if not found:
            found = re.findall(r"(CUpti_Activity\w+)", doc)
        if found:
            out[name[len("CUPTI_ACTIVITY_KIND_"):]] = found[0]
    return out


def struct_body(text, name):
    """Text between the braces of `typedef struct ... { ... } name;`."""
    m = re.search(r"\}\s*" + re.escape(name) + r"\s*;", text)
    if not m:
        return None
    end = m.start()
    depth = 0
    i = end
    while i >= 0:
        c = text[i]
        if c == "}":
            depth += 1
        elif c == "{":
            depth -= 1
            if depth == 0:
                return text[i + 1:end]
        i -= 1
    return None


def apply_lp64(body):
    """Keep what a 64-bit Linux build sees for CUPTILP64 conditionals."""
    out, stack = [], []
    for line in body.split("\n"):
        t = line.strip()
        if t.startswith("#ifdef CUPTILP64"):
            stack.append(True)
        elif t.startswith("#ifndef CUPTILP64"):
            stack.append(False)
        elif t.startswith("#else") and stack:
            stack[-1] = not stack[-1]
        elif t.startswith("#endif") and stack:
            stack.pop()
        elif t.startswith("#"):
            raise SystemExit("unexpected directive in struct: " + t)
        elif all(stack):
            out.append(line)
    return "\n".join(out)


def top_level_fields(text, name):
    body = struct_body(text, name)
    if body is None:
        return None
    body = apply_lp64(strip_comments(body))
    prev = None
    while prev != body:  # collapse nested struct/union bodies
        prev = body
        body = re.sub(r"\{[^{}]*\}", " @ ", body)
    fields = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl or ":" in decl:  # empty or bit-field
            continue
        decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
        m = re.search(r"([A-Za-z_]\w*)\s*$", decl)
        if m:
            fields.append(m.group(1))
    return fields


def measure(inc, structs):
    """structs: {name: [fields]} -> {name: (size, {field: (off, size)})}"""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <cupti.h>",
             "int main(void) {"]
    for s, fields in structs.items():
        lines.append('  printf("S %s %%zu\\n", sizeof(%s));' % (s, s))
        for f in fields:
            lines.append('  printf("F %s %s %%zu %%zu\\n", offsetof(%s, %s), '
                         'sizeof(((%s *)0)->%s));' % (s, f, s, f, s, f))
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "layouts.c")
        exe = os.path.join(d, "layouts")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run(["gcc", "-std=gnu11", "-w", "-I", inc, src, "-o", exe],
                       check=True)
        out = subprocess.run([exe], check=True, capture_output=True,
                             text=True).stdout
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "S":
            res[parts[1]] = (int(parts[2]), {})
        else:
            res[parts[1]][1][parts[2]] = (int(parts[3]), int(parts[4]))
    return res


def ordered_fields(preferred, all_sets):
    seen, order = set(), []
    for f in preferred:
        if any(f in s for s in all_sets) and f not in seen:
            order.append(f)
            seen.add(f)
    for s in all_sets:
        for f in s:
            if f not in seen:
                order.append(f)
                seen.add(f)
    return order


def is_padding(field):
    return re.match(r"^(pad|padding|reserved)\d*$", field) is not None


def compare(old, new):
    """Compare an older record layout with the reference one.

    old/new: (size, {field: (offset, size)}). Returns a dict with
    'bad' (shared non-padding fields whose offset or size moved),
    'in_pad' (reference-only fields that lie inside the old record, i.e. in
    what used to be padding), 'past_end' (reference-only fields at or past
    the end of the old record) and 'pad_changed' (padding fields resized).
    """
    old_size, old_f = old
    _, new_f = new
    res = {"bad": [], "in_pad": [], "past_end": [], "pad_changed": [],
           "old_only": []}
    for f, (off, sz) in new_f.items():
        if f in old_f:
            if old_f[f] != (off, sz):
                key = "pad_changed" if is_padding(f) else "bad"
                res[key].append((f, old_f[f], (off, sz)))
        elif not is_padding(f):
            res["in_pad" if off < old_size else "past_end"].append((f, off, sz))
    for f in old_f:
        if f not in new_f and not is_padding(f):
            res["old_only"].append(f)
    return res


def verdict_text(label, old_name, ref_label, ref_name, c, old_size, new_size):
    names = ("same struct name `%s`" % ref_name if old_name == ref_name
             else "`%s` (%d B) vs `%s` (%d B)" % (old_name, old_size,
                                                  ref_name, new_size))
    if old_name == ref_name and old_size != new_size:
        names += ", but %d B vs %d B" % (old_size, new_size)
    parts = []
    if c["bad"]:
        parts.append("**INCOMPATIBLE**: " + ", ".join(
            "`%s` %d/%d in %s but %d/%d in %s" % (f, o[0], o[1], label, n[0],
                                                  n[1], ref_label)
            for f, o, n in c["bad"]))
    else:
        parts.append("prefix-compatible (every shared field at the same "
                     "offset and size)")
    if c["in_pad"]:
        parts.append("new in %s, sitting in what is padding in %s (do not "
                     "trust on %s): %s" % (ref_label, label, label, ", ".join(
                         "`%s`@%d" % (f, o) for f, o, _ in c["in_pad"])))
    if c["past_end"]:
        parts.append("new in %s, past the end of the %s record (must not be "
                     "read): %s" % (ref_label, label, ", ".join(
                         "`%s`@%d" % (f, o) for f, o, _ in c["past_end"])))
    if c["old_only"]:
        parts.append("only in %s: %s" % (label, ", ".join(
            "`%s`" % f for f in c["old_only"])))
    return "%s, %s: %s" % (label, names, "; ".join(parts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("sets", nargs="+", help="LABEL=INCLUDE_DIR")
    args = ap.parse_args()
    sets = [s.split("=", 1) for s in args.sets]
    ref_label = sets[-1][0]

    texts = [read_headers(inc) for _, inc in sets]
    kmaps = [kind_struct_map(t) for t in texts]
    # Every struct any release uses, so that the reference header set can
    # also be checked for its own (older-versioned) definition of it.
    used = []
    for km in kmaps:
        for kind, _ in KINDS:
            s = km.get(kind)
            if s and s not in used:
                used.append(s)
    used += EXTRA_STRUCTS

    per_set = []  # (label, kindmap, {struct: (size, fields)})
    for (label, inc), text, kmap in zip(sets, texts, kmaps):
        wanted = {}
        for s in used:
            fl = top_level_fields(text, s)
            if fl is not None:
                wanted[s] = fl
        for kind, _ in KINDS:
            s = kmap.get(kind)
            if s and s not in wanted:
                raise SystemExit("%s: struct %s not found" % (label, s))
        per_set.append((label, kmap, measure(inc, wanted)))
        print("measured", label, file=sys.stderr)
    ref_data = per_set[-1][2]

    md = []
    w = md.append
    labels = [l for l, _, _ in per_set]
    w("# CUPTI record layouts: %s against %s" % (", ".join(labels[:-1]),
                                                  ref_label))
    w("")
    w("This file is generated by `cupti-sys/tools/cupti_layouts.py`, run "
      "through `scripts/gen-cupti-sys.sh --layouts`; do not edit it by hand. "
      "Every number is what gcc printed for `offsetof`/`sizeof` on x86_64 "
      "Linux with the headers of the CUPTI wheel of that release (plus the "
      "matching CUDA runtime headers). The struct listed for a kind is the "
      "one that release's `CUpti_ActivityKind` documentation names as the "
      "record it hands out, so it is what `cuptiActivityGetNextRecord` "
      "returns when that libcupti is the one loaded.")
    w("")
    w("Cells read `offset/size` in bytes, `-` where the struct has no such "
      "field. The last column marks a field of the %s struct as `!` when its "
      "offset or size differs in an older release, `+` when an older record "
      "does not have it (either it lies past the end of the older record or "
      "in bytes that were padding there), and `~` for padding or reserved "
      "members that were only resized." % ref_label)
    w("")
    w("## Which struct each release returns")
    w("")
    w("| kind | " + " | ".join(labels) + " |")
    w("|---|" + "---|" * len(labels))
    w("| *`cuptiGetVersion`* | " + " | ".join(
        str(api_version(inc)) for _, inc in sets) + " |")
    for kind, _ in KINDS:
        w("| %s | " % kind + " | ".join(
            "`%s`" % km.get(kind, "-") for _, km, _ in per_set) + " |")
    w("")

    summary = []
    summary_at = len(md)

    def table(title, row, preferred):
        # row: list of (label, struct name, measured data or None)
        ref_l, ref_s, ref_d = row[-1]
        all_sets = [d[1] for _, _, d in row if d]
        order = ordered_fields(preferred, all_sets)
        comps = {}
        for label, s, d in row[:-1]:
            if d and ref_d:
                comps[label] = compare(d, ref_d)
        w("## %s" % title)
        w("")
        w("| field | " + " | ".join("%s `%s`" % (l, s) for l, s, _ in row)
          + " | |")
        w("|---|" + "---|" * (len(row) + 1))
        w("| *sizeof* | " + " | ".join(str(d[0]) if d else "-"
                                       for _, _, d in row) + " | |")
        for f in order:
            cells = []
            for _, _, d in row:
                if d and f in d[1]:
                    cells.append("%d/%d" % d[1][f])
                else:
                    cells.append("-")
            mark = ""
            for c in comps.values():
                if any(x[0] == f for x in c["bad"]):
                    mark = "!"
                elif not mark and any(x[0] == f for x in
                                      c["in_pad"] + c["past_end"]):
                    mark = "+"
                elif not mark and any(x[0] == f for x in c["pad_changed"]):
                    mark = "~"
            w("| %s | " % f + " | ".join(cells) + " | %s |" % mark)
        w("")
        for label, s, d in row[:-1]:
            if label not in comps:
                continue
            v = verdict_text(label, s, ref_l, ref_s, comps[label], d[0],
                             ref_d[0])
            w("- " + v)
            summary.append((title, label, comps[label], v))
        w("")

    for kind, preferred in KINDS:
        row = []
        for label, km, data in per_set:
            s = km.get(kind)
            row.append((label, s or "-", data.get(s) if s else None))
        table("CUPTI_ACTIVITY_KIND_%s" % kind, row, preferred)
    for s in EXTRA_STRUCTS:
        row = [(label, s, data.get(s)) for label, _, data in per_set]
        table(s, row, [])

    # Summary, placed right after the "which struct" table.
    sm = ["## Summary", ""]
    bad = [x for x in summary if x[2]["bad"]]
    if bad:
        sm.append("Some shared fields moved, so these records are NOT "
                  "prefix-compatible with the %s structs:" % ref_label)
        sm.append("")
        for title, label, c, _ in bad:
            sm.append("- %s on %s: %s" % (title, label, ", ".join(
                x[0] for x in c["bad"])))
    else:
        sm.append("For every kind and struct measured here, each field that "
                  "an older release's record has sits at the same offset with "
                  "the same size in the %s struct. Reading a record through "
                  "the %s struct is therefore correct for every field the "
                  "older record has. Fields the older record lacks must not "
                  "be read (they are past its end, or in what was padding):"
                  % (ref_label, ref_label))
    sm.append("")
    newer = {}
    for title, label, c, _ in summary:
        for f, o, _sz in c["in_pad"] + c["past_end"]:
            where = "padding" if (f, o, _sz) in c["in_pad"] else "past end"
            newer.setdefault((title, f, o, where), []).append(label)
    if newer:
        sm.append("| record | field (%s offset) | absent on | there it is |"
                  % ref_label)
        sm.append("|---|---|---|---|")
        for (title, f, o, where), labels in newer.items():
            sm.append("| %s | `%s` (%d) | %s | %s |" % (
                title.replace("CUPTI_ACTIVITY_KIND_", ""), f, o,
                ", ".join(labels), where))
        sm.append("")
    sm += [
        "### Reading records safely across releases",
        "",
        "- The record struct is fixed by the libcupti that is loaded, not by "
        "the headers the tracer was built with. Pick the record size from "
        "`cuptiGetVersion` (first table) and never read more than that many "
        "bytes of a record: `cupti_sys::record_size(kind, version)` encodes "
        "the table above, and `cupti_sys::copy_record` copies that many bytes "
        "into a zeroed %s struct, so fields past the end of an older record "
        "read as zero." % ref_label,
        "- Fields that took over former padding (marked *padding* above) are "
        "inside even an old record, so copying does not clear them; older "
        "releases never promised what those bytes hold. Only trust them when "
        "the loaded release is one that defines them.",
        "- When two releases share a struct name the layout can still differ "
        "in what used to be padding (see the next table), so the version, not "
        "the name, decides which fields are valid.",
        "- A release newer than %s may return a longer struct. The measured "
        "history only ever appended fields or reused padding, so reading the "
        "%s prefix of such a record is expected to keep working; that is an "
        "observation, not a promise from NVIDIA." % (ref_label, ref_label),
        "",
    ]
    # Hand-written notes on checks made on real hardware, kept beside this
    # script so that regenerating the tables keeps them.
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "hardware-check.md")
    if os.path.exists(notes):
        with open(notes, encoding="utf-8") as f:
            sm.append(f.read().rstrip("\n"))
        sm.append("")
    md[summary_at:summary_at] = sm

    # Does the reference header set define each older struct exactly as the
    # release that returns it does? If so, bindings generated from the
    # reference headers can decode older records through the older struct.
    w("## Older struct versions as defined by the %s headers" % ref_label)
    w("")
    w("Bindings generated from the %s headers still carry the older "
      "versioned structs. This compares each older release's own definition "
      "of the struct it returns with the definition of the same name in the "
      "%s headers." % (ref_label, ref_label))
    w("")
    w("| struct | release | sizeof there | sizeof in %s | verdict |"
      % ref_label)
    w("|---|---|---|---|---|")
    for label, km, data in per_set[:-1]:
        for kind, _ in KINDS:
            s = km.get(kind)
            if not s or s not in data:
                continue
            if s not in ref_data:
                w("| `%s` | %s | %d | - | not defined in %s |"
                  % (s, label, data[s][0], ref_label))
                continue
            c = compare(data[s], ref_data[s])
            same = (data[s] == ref_data[s])
            if same:
                v = "identical"
            elif c["bad"]:
                v = "DIFFERS: " + ", ".join(x[0] for x in c["bad"])
            else:
                v = "compatible; padding reused for " + ", ".join(
                    "`%s`" % x[0] for x in c["in_pad"] + c["past_end"]) \
                    if c["in_pad"] or c["past_end"] else "compatible"
            w("| `%s` | %s | %d | %d | %s |" % (s, label, data[s][0],
                                                 ref_data[s][0], v))
    w("")

    w("## Callback ids")
    w("")
    w("Values of the `CUPTI_RUNTIME_TRACE_CBID_*` and "
      "`CUPTI_DRIVER_TRACE_CBID_*` enumerators, each older release against "
      "%s. A name missing from %s is looked up by value to show what it was "
      "renamed to." % (ref_label, ref_label))
    w("")
    ref_ids = {}
    for h in CBID_HEADERS:
        ref_ids.update(read_cbids(os.path.join(sets[-1][1], h)))
    by_value = {}
    for n, v in ref_ids.items():
        by_value.setdefault((n.split("_TRACE_")[0], v), n)
    w("| release | names | same value in %s | different value | "
      "renamed in %s (same value) | gone |" % (ref_label, ref_label))
    w("|---|---|---|---|---|---|")
    for label, inc in sets[:-1]:
        ids = {}
        for h in CBID_HEADERS:
            ids.update(read_cbids(os.path.join(inc, h)))
        same = [n for n in ids if n in ref_ids and ids[n] == ref_ids[n]]
        moved = [n for n in ids if n in ref_ids and ids[n] != ref_ids[n]
                 and not n.endswith("_SIZE")]
        renamed, gone = [], []
        for n in ids:
            if n in ref_ids:
                continue
            other = by_value.get((n.split("_TRACE_")[0], ids[n]))
            (renamed if other else gone).append((n, other))
        w("| %s | %d | %d | %s | %d | %s |" % (
            label, len(ids), len(same),
            ", ".join("`%s`" % n for n in moved) or "none",
            len(renamed), ", ".join("`%s`" % n for n, _ in gone) or "none"))
    w("")
    w("(`*_SIZE`, the count of ids, naturally grows and is left out of the "
      "different-value column.)")
    w("")

    with open(args.out, "w") as f:
        f.write("\n".join(md) + "\n")
    for title, label, c, v in summary:
        if c["bad"] or c["in_pad"] or c["past_end"]:
            print("%s: %s" % (title, v))


if __name__ == "__main__":
    main()
