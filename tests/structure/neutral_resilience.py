#!/usr/bin/env python3
"""Checks that resilience/ names no launcher and no batch scheduler outside its comments.

  neutral_resilience.py SOURCE_DIR

The supervisor reaches launchers through resilience's Launcher interface (launcher.hpp) and
knows schedulers only as the name an allocation gives; the launchers and what they know of
Slurm, LSF and the MPI runtimes' messages live in jobs/ (launchers.hpp). A launcher's or
scheduler's name in resilience/'s code or strings means that knowledge is creeping back, and a
new launcher would again need the supervisor edited. Comments may name them, to say why.

Before the real tree, the checker runs against a small tree written to a temporary directory
with one such name in a string and one in a comment, and fails unless it finds exactly the
string: the check itself is tested on every run. Exit status 0: none; 1: the offending lines.
"""

import re
import sys
import tempfile
from pathlib import Path

NAMES = re.compile(r"\b(srun|mpirun|mpiexec|jsrun|prterun|prrte|prte\w*|hydra|slurm|lsf|pbs)\b",
                   re.IGNORECASE)
SOURCE_SUFFIXES = {".hpp", ".cpp", ".h", ".cu", ".cuh"}


def without_comments(text):
    """The text with its comments blanked out, lines kept where they were (strings may hold
    "//", as in a URL: a string is skipped whole before a comment is looked for)."""
    out, i = [], 0
    token = re.compile(r'"(?:\\.|[^"\\\n])*"|R"\((?:.|\n)*?\)"|//[^\n]*|/\*(?:.|\n)*?\*/')
    for match in token.finditer(text):
        out.append(text[i:match.start()])
        piece = match.group(0)
        out.append(piece if piece.startswith(('"', 'R"')) else re.sub(r"[^\n]", " ", piece))
        i = match.end()
    out.append(text[i:])
    return "".join(out)


def problems_in(source_dir):
    problems = []
    resilience = source_dir / "resilience"
    for path in sorted(p for p in resilience.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        code = without_comments(path.read_text(encoding="utf-8", errors="replace"))
        for number, line in enumerate(code.splitlines(), start=1):
            for match in NAMES.finditer(line):
                problems.append(f"{path.relative_to(source_dir)}:{number}: names {match.group(0)}")
    return problems


def self_test():
    with tempfile.TemporaryDirectory(prefix="hardy-neutral-") as scratch:
        root = Path(scratch)
        (root / "resilience" / "src").mkdir(parents=True)
        (root / "resilience" / "src" / "a.cpp").write_text(
            '// Slurm keeps a dead node\'s step RUNNING: why --overlap.\n'
            'const char* url = "http://example"; /* mpirun here is a comment */\n'
            'const char* bad = "srun";\n')
        found = problems_in(root)
        expected = ["resilience/src/a.cpp:3: names srun"]
        if found != expected:
            print(f"the checker itself is broken: found {found}, expected {expected}")
            return False
    return True


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not self_test():
        return 1
    problems = problems_in(Path(sys.argv[1]))
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
