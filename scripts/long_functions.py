#!/usr/bin/env python3
"""Lists the functions longer than a limit (default 120 lines, STYLE.md's rule) in napkin's C++.

    scripts/long_functions.py [--limit 120] [--all] [DIR...]   (default: core cli estimator
                                                                profiler viewer kernels bench)

Reads every .cpp, .h and .cu outside tests/ (the rule exempts tests and kernels' device code:
a .cu file's __global__ and __device__ functions are skipped, its host functions counted) and
finds each function body the way a reader would: with comments, strings and preprocessor lines
blanked, a `{` at namespace or class scope whose preceding code ends in a parameter list (with
const, noexcept, override, a trailing return type or a constructor's initializer list between)
opens a function, and its matching `}` closes it. Lambdas count toward the function they are in.
Prints `lines file:line name`, longest first, and exits 1 when one is over the limit; --all prints
every function of 60 lines or more (the size STYLE.md aims for). A heuristic, not a compiler:
macros that expand to a function's head are not seen.
"""

import argparse
import os
import re
import sys

# What may stand between a parameter list's ')' and the body's '{'.
TAIL = re.compile(r"\)\s*(const|noexcept(\([^()]*\))?|override|final|mutable|volatile|&|&&|\s)*"
                  r"(->\s*[\w:<>,\s*&]+)?\s*$")
INIT_LIST = re.compile(r"\)\s*(noexcept\s*)?:\s*[\w:]+\s*[({]")


def blank(text):
    """Comments, string/char literals and preprocessor lines as spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        elif c == "#" and text[text.rfind("\n", 0, i) + 1:i].strip() == "":
            j = i
            while True:  # a directive, with its continuation lines
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and text[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_bodies(code):
    """(first line, last line, head) of each function body at namespace or class scope."""
    stack = []  # per open brace: 'scope' (namespace/class/enum/extern) or 'func' or 'other'
    start_of_stmt = 0
    found = []
    for i, c in enumerate(code):
        if c == "{":
            inside_func = any(k == "func" for k, _, _ in stack)
            head = code[start_of_stmt:i]
            kind = "other"
            if not inside_func:
                flat = " ".join(head.split())
                if re.search(r"\b(namespace|class|struct|union|enum)\b[^()]*$", flat) or \
                        re.search(r'\bextern\s*""\s*$', flat):
                    kind = "scope"
                elif (TAIL.search(flat) or INIT_LIST.search(flat)) and \
                        not re.match(r"^\s*(if|for|while|switch|catch)\b", flat):
                    kind = "func"
            stack.append((kind, i, head))
            start_of_stmt = i + 1
        elif c == "}":
            if stack:
                kind, at, head = stack.pop()
                if kind == "func":
                    first = code.count("\n", 0, at - len(head.lstrip())) + 1
                    last = code.count("\n", 0, i) + 1
                    found.append((first, last, " ".join(head.split())))
            start_of_stmt = i + 1
        elif c == ";":
            start_of_stmt = i + 1
    return found


def name_of(head):
    m = re.search(r"([~\w:]+(?:operator\s*[^\s(]+)?)\s*\(", head)
    return m.group(1) if m else head[:60]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("--all", action="store_true", help="also list functions of 60 lines or more")
    ap.add_argument("dirs", nargs="*",
                    default=["core", "cli", "estimator", "profiler", "viewer", "kernels", "bench"])
    a = ap.parse_args()
    root = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
    rows = []
    for d in a.dirs:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in sorted(names):
                if not n.endswith((".cpp", ".h", ".cu", ".cuh")):
                    continue
                p = os.path.join(dirpath, n)
                code = blank(open(p, encoding="utf-8", errors="replace").read())
                for first, last, head in function_bodies(code):
                    if n.endswith((".cu", ".cuh")) and re.search(r"__(global|device)__", head):
                        continue
                    rows.append((last - first + 1, os.path.relpath(p, root), first, name_of(head)))
    rows.sort(reverse=True)
    floor = 60 if a.all else a.limit + 1
    over = 0
    for lines, p, line, name in rows:
        if lines >= floor:
            print(f"{lines:5d} {p}:{line} {name}")
        over += lines > a.limit
    print(f"{len(rows)} functions; {over} over {a.limit} lines", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
