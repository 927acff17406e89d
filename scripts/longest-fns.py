#!/usr/bin/env python3
"""The longest functions of each crate, in lines (signature to closing brace).

    scripts/longest-fns.py [ROOT] [N]      ROOT: a checkout (default .), N per crate (5)

Counts rustfmt-formatted source: a function runs from its `fn` line to the first
line after it that is a closing brace at the same indentation. Tests (`mod tests`
and tests/ directories) are left out.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
top = int(sys.argv[2]) if len(sys.argv) > 2 else 5
FN = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
for crate in ["format", "analyzer"]:
    found = []
    for d, _, files in os.walk(os.path.join(root, crate, "src")):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(d, f)
            lines = open(path).read().split("\n")
            in_tests = None
            for i, line in enumerate(lines):
                if re.match(r"^\s*mod tests", line):
                    in_tests = i
                    break
            end_at = in_tests if in_tests is not None else len(lines)
            for i in range(end_at):
                m = FN.match(lines[i])
                if not m or lines[i].rstrip().endswith(";"):
                    continue
                ind = m.group(1)
                for j in range(i + 1, end_at):
                    if lines[j] == ind + "}":
                        found.append((j - i + 1, os.path.relpath(path, root), m.group(7)))
                        break
    found.sort(reverse=True)
    print(f"{crate}:")
    for n, path, name in found[:top]:
        print(f"  {n:5}  {path}  {name}")
