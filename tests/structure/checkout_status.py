#!/usr/bin/env python3
"""Tests leave the checkout as they found it.

  checkout_status.py record  SOURCE_DIR STATE_FILE   before the first test (fixture setup)
  checkout_status.py compare SOURCE_DIR STATE_FILE   after the last one (fixture cleanup)

`record` keeps `git status --porcelain` of the checkout; `compare` fails, naming the paths, when a
path is listed now that was not listed then, or is listed with another status: a file a test wrote
into the source tree, or a tracked file it changed or deleted. In a fresh clone (CI) that means
`git status` is clean after the suite; in a working copy with edits of one's own it judges only
what the tests did. Build trees, .venv/ and caches are in .gitignore and so not listed.

Exit status 77 (skipped): SOURCE_DIR is not a git checkout, or git is not installed; or, for
`compare`, no state was recorded (the setup did not run).
"""

import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from findings import report  # noqa: E402

SKIP = 77


def porcelain(source_dir):
    result = subprocess.run(["git", "-C", str(source_dir), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return None
    return sorted(line for line in result.stdout.splitlines() if line)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("record", "compare"):
        sys.exit(f"usage: {sys.argv[0]} record|compare SOURCE_DIR STATE_FILE")
    action, source_dir, state_file = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if shutil.which("git") is None:
        print("SKIPPED: no git")
        return SKIP
    now = porcelain(source_dir)
    if now is None:
        print(f"SKIPPED: {source_dir} is not a git checkout")
        return SKIP
    if action == "record":
        state_file.write_text("".join(f"{line}\n" for line in now))
        print(f"recorded {len(now)} line(s) of git status in {state_file}")
        return 0
    if not state_file.exists():
        print(f"SKIPPED: no recorded state at {state_file} (run with the checkout fixture's setup)")
        return SKIP
    before = set(state_file.read_text().splitlines())
    written = [line for line in now if line not in before]
    return report(written,
                  f"the checkout is as the tests found it ({len(now)} line(s) of git status, all there before)",
                  heading="the tests left these in the checkout (git status --porcelain); write to a temporary "
                          "directory or the build tree instead:", indent="  ")


if __name__ == "__main__":
    sys.exit(main())
