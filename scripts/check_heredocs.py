#!/usr/bin/env python3
"""Every here-document in the shell scripts ends: each `<<'WORD'` (or <<WORD, <<-WORD) opened on a
line is followed by a line that is exactly WORD (leading tabs allowed for <<-), and no document of the same WORD opens
inside it. A lost terminator does not fail `bash -n`: the document runs on and swallows the script
after it (found once in scripts/gpu_check.sh, where a merge dropped a PY and do_fp8 became Python).

    scripts/check_heredocs.py [FILE.sh ...]     (default: every *.sh under scripts/, bench/, .ci/)

Prints FILE:LINE for each document without its end and exits 1; exits 0 when all end."""

import glob
import os
import re
import sys

OPEN = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z_0-9]*)\2")


def unterminated(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    problems = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = None if line.lstrip().startswith("#") else OPEN.search(line)
        if m is None:
            i += 1
            continue
        strip_tabs, word = m.group(1) == "-", m.group(3)
        j = i + 1
        while j < len(lines) and (lines[j].lstrip("\t") if strip_tabs else lines[j]) != word:
            inner = OPEN.search(lines[j])
            if inner is not None and inner.group(3) == word:
                # Another document of the same word opens inside this one: this one lost its end
                # and runs on to the next one's.
                problems.append(f"{path}:{i + 1}: here-document '{word}' runs on into the one "
                                f"opened at line {j + 1} (its end is missing)")
            j += 1
        if j == len(lines):
            problems.append(f"{path}:{i + 1}: here-document '{word}' never ends")
        i = j + 1
    return problems


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = sys.argv[1:] or sorted(
        f for d in ("scripts", "bench", ".ci") for f in glob.glob(os.path.join(root, d, "**", "*.sh"), recursive=True))
    files += [] if sys.argv[1:] else [os.path.join(root, ".ci", "run")]
    problems = [p for f in files if os.path.exists(f) for p in unterminated(f)]
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{len(files)} scripts, every here-document ends")
    return 0


if __name__ == "__main__":
    sys.exit(main())
