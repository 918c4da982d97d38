#!/usr/bin/env python3
"""The input sections packaging/text-order.ld gathers, one pattern a line.

    text-order-sections.py NM_OUTPUT LINK_MAP EXECUTED

NM_OUTPUT is `nm` of the profiled binary (linked with an empty order), LINK_MAP
GNU ld's map of that link, EXECUTED the names of the functions callgrind saw
run, in its order. Each function is found by its address in the input section
that holds it, so the pattern names the section the linker really sees:

- a function in a section of its own (`-ffunction-sections`, Swift's
  `-function-sections`) gives `*(.text.NAME)`, named after the section, not
  after the symbol callgrind reported: a C++ constructor runs as `C1`, an
  alias of `C2`, whose section is `.text.…C2…`;
- a function in an object compiled without them (the standard library's and
  _Concurrency's non-public code, libdispatch) gives the whole object's
  `.text`, `*ARCHIVE:MEMBER(.text)`, after all the single functions.

Both keep first-seen order. Printed to stdout; how many of each, to stderr.
"""
import bisect
import os
import re
import sys


def input_sections(map_path):
    """(start, size, section, file) of every input section of the output .text."""
    sections = []
    inside = False
    pending = None
    with open(map_path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if re.match(r"^\S", line):
                inside = re.match(r"^\.text(\s|$)", line) is not None
                pending = None
                continue
            if not inside:
                continue
            if pending is not None:
                match = re.match(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$", line)
                if match:
                    sections.append((int(match[1], 16), int(match[2], 16), pending, match[3]))
                pending = None
                continue
            match = re.match(r"^ (\.text\S*)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$", line)
            if match:
                sections.append((int(match[2], 16), int(match[3], 16), match[1], match[4]))
                continue
            match = re.match(r"^ (\.text\S*)$", line)
            if match:
                pending = match[1]
    return sorted(s for s in sections if s[1] > 0)


def object_pattern(path):
    """`*libfoo.a:member.o(.text)` for an archive member, `*file.o(.text)` otherwise."""
    match = re.match(r"^(.*)\((.*)\)$", path)
    if match:
        return f"*{os.path.basename(match[1])}:{match[2]}(.text)"
    return f"*{os.path.basename(path)}(.text)"


def main(nm_path, map_path, executed_path):
    address_of = {}
    with open(nm_path) as nm:
        for line in nm:
            fields = line.split()
            if len(fields) == 3 and fields[1] in "tTwW":
                address_of.setdefault(fields[2], int(fields[0], 16))
    sections = input_sections(map_path)
    starts = [s[0] for s in sections]
    functions, objects, seen = [], [], set()
    with open(executed_path) as executed:
        for name in executed:
            address = address_of.get(name.strip())
            if address is None:
                continue
            index = bisect.bisect_right(starts, address) - 1
            if index < 0:
                continue
            start, size, section, path = sections[index]
            if not start <= address < start + size:
                continue
            pattern = f"*({section})" if section != ".text" else object_pattern(path)
            if pattern in seen:
                continue
            seen.add(pattern)
            (functions if section != ".text" else objects).append(pattern)
    for pattern in functions + objects:
        print(f"    {pattern}")
    sys.stdout.flush()
    print(f"{len(functions)} functions, {len(objects)} whole objects", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:4])
