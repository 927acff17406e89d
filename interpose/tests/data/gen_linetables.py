"""Writes linetables.txt: line tables of known code, as CPython 3.9-3.13 compile it,
with the line of every instruction as the interpreter itself says (co_lines() from
3.10 on, dis.findlinestarts() on 3.9). The line-table decoders of
interpose/src/session/pystack/lines.rs are tested against it.

Run with each interpreter, appending: for v in 3.9 3.10 3.11 3.12 3.13; do
pythonV gen_linetables.py >> linetables.txt; done (after emptying the file).
One line per code object: `minor firstlineno table-hex offset:line,...`.
"""

import dis
import sys

SOURCE = '''
def simple(a, b):
    c = a + b
    return c * 2


def branches(x):
    if x > 3:
        y = 1
    elif x < -3:
        y = 2
    else:
        y = 3
    for i in range(x):
        y += i
        if y > 100:
            break
    while y > 0:
        y -= 7
    return y


def long_call(a):
    return dict(
        first=a,
        second=[a,
                a + 1,
                a + 2],
        third={"k": a},
    )


def far_lines(a):
    b = a
''' + "\n" * 300 + '''
    c = b + 1
''' + "\n" * 40 + '''
    return c


def handlers(a):
    try:
        return 1 / a
    except ZeroDivisionError:
        return 0
    finally:
        a = None


def gen(n):
    for i in range(n):
        yield i * 2


class K:
    def method(self, v):
        return [w for w in v if w]


''' + "\n".join("def f%d(x):\n    return x + %d" % (i, i) for i in range(3))


def code_objects(c):
    yield c
    for k in c.co_consts:
        if hasattr(k, "co_code"):
            yield from code_objects(k)


def lines_of(c):
    """(byte offset, line) for every instruction with a line."""
    out = []
    if hasattr(c, "co_lines"):
        for start, end, line in c.co_lines():
            if line is None:
                continue
            for off in range(start, end, 2):
                out.append((off, line))
    else:
        starts = list(dis.findlinestarts(c))
        n = len(c.co_code)
        for i, (off, line) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else n
            for o in range(off, end, 2):
                out.append((o, line))
    return out


def main():
    minor = sys.version_info[1]
    top = compile(SOURCE, "sample.py", "exec")
    for c in code_objects(top):
        table = c.co_linetable if minor >= 10 else c.co_lnotab
        pairs = ",".join("%d:%d" % p for p in lines_of(c))
        print(minor, c.co_firstlineno, table.hex() or "-", pairs or "-")


main()
