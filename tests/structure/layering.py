#!/usr/bin/env python3
"""Checks that every #include points down hardy's layering, never up or sideways.

  layering.py SOURCE_DIR core-rooms   core/'s rooms: support < compute < data < nn
  layering.py SOURCE_DIR folders      the top-level folders (jobs, slurm, lsf -> resilience ->
                                      checkpoint -> comm -> core; batch under slurm, lsf, jobs)
  layering.py SOURCE_DIR comm-rooms   comm/'s rooms, one transport each: mpi/, nccl/, gloo/ and
                                      rendezvous/ under the interface (communicator, agreement,
                                      bucketing); gloo/ meets in rendezvous/; only the reducer's
                                      factory reaches a transport (nccl/)
  layering.py SOURCE_DIR core-events  core/ declares no event kind: it has the schema's mechanism
                                      (core/support/event_schema.hpp), and each layer above it
                                      declares the kinds it writes next to its code
  layering.py SOURCE_DIR resilience-rooms
                                      resilience/'s rooms, one lifetime each: domains/ (the
                                      leaders' protocol) under session/ (inside the job) and
                                      supervisor/ (outside it), which never include each other

Each layer lists what it may include besides itself. The order is the one the code has: data/
assembles batches into compute/'s tensors, nn/'s evaluation runs a model over data/'s samples,
and support/ (errors, hashes, HDF5 handles, event logs) sits under everything. A room or folder
that the table does not name fails the check too, so that a new one is placed on purpose.

Before the real tree, the checker runs against a small tree written to a temporary directory with
one include pointing up, and fails unless it finds exactly that include: the check itself is
tested on every run. Exit status 0: no arrow up; 1: the offending includes, one a line.
"""

import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from findings import report  # noqa: E402

CORE_ROOMS = {
    "support": set(),
    "compute": {"support"},
    "data": {"support", "compute"},
    "nn": {"support", "compute", "data"},
}

RESILIENCE_ROOMS = {
    "domains": set(),
    "stragglers": set(),
    "regrow": set(),
    "stalls": set(),
    "session": {"domains", "stragglers", "regrow"},
    "supervisor": {"domains"},
}

FOLDERS = {
    "core": set(),
    "comm": {"core"},
    "checkpoint": {"comm", "core"},
    "resilience": {"checkpoint", "comm", "core"},
    "batch": {"core"},
    "slurm": {"batch", "core"},
    "lsf": {"batch", "core"},
    "jobs": {"resilience", "checkpoint", "comm", "core", "batch", "slurm", "lsf"},
    # Benchmarks measure the libraries; no library may include them, and they stay off the CLI.
    "bench": {"resilience", "checkpoint", "comm", "core"},
}

SOURCE_SUFFIXES = {".hpp", ".cpp", ".h", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def sources(root):
    return sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file())


def includes(path):
    return INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace"))


def core_room_of_include(target):
    """The room an include names: "hardy/core/<room>/..." or, inside core/src, "<room>/..."."""
    parts = target.split("/")
    if parts[:2] == ["hardy", "core"] and len(parts) > 3:
        return parts[2]
    if len(parts) > 1 and parts[0] in CORE_ROOMS:
        return parts[0]
    return None


def core_room_of_file(core_dir, path):
    relative = path.relative_to(core_dir).parts
    if relative[:3] == ("include", "hardy", "core"):
        return relative[3] if len(relative) > 4 else None
    if relative[0] == "src":
        return relative[1] if len(relative) > 2 else None
    return None


def check_rooms(source_dir, label, rooms, files):
    """Every file of `files` ((path, its room, the room each include names) triples) is in a room
    of `rooms` and includes only from its own room and the ones `rooms` lets it."""
    problems = []
    for path, room, used_rooms in files:
        where = path.relative_to(source_dir)
        if room not in rooms:
            problems.append(f"{where}: in no declared room of {label} (add it to the table)")
            continue
        for target, used in used_rooms:
            if used is None or used == room:
                continue
            if used not in rooms:
                problems.append(f'{where}: includes "{target}", from an undeclared room {used}/')
            elif used not in rooms[room]:
                problems.append(f'{where}: includes "{target}": {room}/ may not include {used}/')
    return problems


def check_core_rooms(source_dir):
    core_dir = source_dir / "core"
    files = [(path, core_room_of_file(core_dir, path),
              [(target, core_room_of_include(target)) for target in includes(path)])
             for path in sources(core_dir)]
    return check_rooms(source_dir, "core/", CORE_ROOMS, files)


def check_folders(source_dir):
    problems = []
    for folder, allowed in FOLDERS.items():
        if not (source_dir / folder).is_dir():
            problems.append(f"{folder}/: declared in FOLDERS but missing")
            continue
        for path in sources(source_dir / folder):
            where = path.relative_to(source_dir)
            for target in includes(path):
                parts = target.split("/")
                if len(parts) < 3 or parts[0] != "hardy" or parts[1] == folder:
                    continue
                if parts[1] not in FOLDERS:
                    problems.append(f'{where}: includes "{target}" from an undeclared folder')
                elif parts[1] not in allowed:
                    problems.append(f'{where}: includes "{target}": {folder}/ may not include {parts[1]}/')
    return problems


def check_resilience_rooms(source_dir):
    src = source_dir / "resilience" / "src"

    def room_of_include(target):
        parts = target.split("/")
        return None if parts[0] == "hardy" or len(parts) < 2 else parts[0]

    files = [(path, path.relative_to(src).parts[0] if len(path.relative_to(src).parts) > 1 else None,
              [(target, room_of_include(target)) for target in includes(path)])
             for path in sources(src)]
    return check_rooms(source_dir, "resilience/src", RESILIENCE_ROOMS, files)


COMM_ROOMS = {
    "interface": {"nccl"},  # GradientReducer's factory makes the NCCL reducers on a GPU
    "mpi": {"interface"},
    "nccl": {"interface"},
    "gloo": {"interface", "rendezvous"},
    "rendezvous": {"interface"},
}


def check_comm_rooms(source_dir):
    comm = source_dir / "comm"

    def room_of(parts):
        return parts[0] if len(parts) > 1 and parts[0] in COMM_ROOMS else "interface"

    def room_of_include(target):
        parts = target.split("/")
        if parts[:2] == ["hardy", "comm"]:
            return room_of(parts[2:])
        if parts[0] == "hardy":
            return None  # another folder: the folders check
        return room_of(parts)

    files = []
    for base in (comm / "src", comm / "include" / "hardy" / "comm"):
        for path in sources(base):
            parts = path.relative_to(base).parts
            room = parts[0] if len(parts) > 1 else "interface"
            files.append((path, room, [(target, room_of_include(target)) for target in includes(path)]))
    return check_rooms(source_dir, "comm", COMM_ROOMS, files)


EVENT_TABLE = re.compile(r"\bEventKind\s+(\w+)\s*\[\s*\]\s*=")


def check_core_events(source_dir):
    """Every table of event kinds (`EventKind NAME[] = {...}`) in core/: a kind of an upper layer
    declared in the engine, where a new kind would mean editing core/."""
    problems = []
    for path in sorted((source_dir / "core").rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h", ".cu", ".cuh") or not path.is_file():
            continue
        for match in EVENT_TABLE.finditer(path.read_text(errors="replace")):
            problems.append(f"{path.relative_to(source_dir)}: declares the event kinds {match.group(1)}; "
                            "declare them in the layer that writes them")
    return problems


CHECKS = {"core-rooms": check_core_rooms, "folders": check_folders, "resilience-rooms": check_resilience_rooms,
          "core-events": check_core_events, "comm-rooms": check_comm_rooms}


# Each check's self-test tree: a file the check must flag (path, text) and one it must let be.
SELF_TEST_FILES = {
    "resilience-rooms": (("resilience/src/domains/bad.cpp", '#include "session/trainer.hpp"\n'),
                         ("resilience/src/session/good.cpp",
                          '#include "domains/fault_domains.hpp"\n#include "hardy/core/nn/model.hpp"\n')),
    "comm-rooms": (("comm/src/mpi/bad.cpp", '#include "hardy/comm/gloo/communicator.hpp"\n'),
                   ("comm/src/gloo/good.cpp",
                    '#include "hardy/comm/rendezvous/store.hpp"\n#include "hardy/comm/communicator.hpp"\n')),
    "core-events": (("core/include/hardy/core/support/job_events.hpp",
                     'inline constexpr EventKind kJobEvents[] = {{"job_started", "", f}};\n'),
                    ("resilience/include/hardy/resilience/events/session_events.hpp",
                     'struct EventKind {};\ninline constexpr EventKind kSessionEvents[] = {};\n')),
    "core-rooms": (("core/src/support/bad.cpp", '#include "hardy/core/nn/model.hpp"\n'),
                   ("core/src/nn/good.cpp",
                    '#include "hardy/core/data/sample_source.hpp"\n#include "compute/cpu/x.hpp"\n')),
    "folders": (("comm/src/bad.cpp", '#include "hardy/resilience/supervisor.hpp"\n'),
                ("jobs/src/good.cpp", '#include "hardy/slurm/x.hpp"\n#include "hardy/batch/y.hpp"\n')),
}


def self_test(check_name):
    """The checker must flag one upward include in a tree made for it, and nothing else."""
    with tempfile.TemporaryDirectory(prefix="hardy-layering-") as scratch:
        root = Path(scratch)
        if check_name == "folders":
            for folder in FOLDERS:
                (root / folder).mkdir()
        (bad, bad_text), (good, good_text) = SELF_TEST_FILES[check_name]
        bad, good = root / bad, root / good
        for path, text in ((bad, bad_text), (good, good_text)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        found = CHECKS[check_name](root)
        if len(found) != 1 or str(bad.relative_to(root)) not in found[0]:
            print(f"layering self-test: expected one finding in {bad.relative_to(root)}, got {found}")
            return False
    return True


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CHECKS:
        sys.exit(f"usage: {sys.argv[0]} SOURCE_DIR {{{'|'.join(CHECKS)}}}")
    source_dir, check_name = Path(sys.argv[1]), sys.argv[2]
    if not self_test(check_name):
        return 1
    problems = CHECKS[check_name](source_dir)
    return report(problems, f"{check_name}: nothing against the layering",
                  summary=f"{len(problems)} finding(s) against the layering ({check_name}); see {sys.argv[0]}")


if __name__ == "__main__":
    sys.exit(main())
