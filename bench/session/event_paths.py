#!/usr/bin/env python3
"""The path a failure takes, as the event log tells it, for comparing two builds of hardy.

Runs fault scenarios through their CTest tests (which build and check them), keeps every
events.jsonl they wrote, and prints each as one line per event: its name and the fields that say
what happened, without times, durations, process ids, run ids or ports. Run it once per build and
diff the outputs: a change that only moves code leaves the paths as they were.

    bench/session/event_paths.py [--build build] [--tests REGEX] > paths.txt

The default scenarios: a rank killed at a fixed step (resilience/fault_rank with a fixed
HARDY_FAULT_SEED), a node crash on the emulated cluster (cluster/node_crash), a lost fault domain
(resilience/domains_leader) and a hung rank (resilience/hang_stop).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_TESTS = "^(resilience/fault_rank|cluster/node_crash|resilience/domains_leader|resilience/hang_stop)$"
# Fields that differ from run to run whatever the code does.
VOLATILE = re.compile(r"(^time$|unix_time|_s$|seconds|^pid$|pids|run_id|launch|latency|address|port|"
                      r"^path$|^files$|directory|bytes|gb_per_s|digest|^error$|^reason$|stuck_in|hosts?$|"
                      r"^model$|^run_dir$|store$|loss|mae|iou|token|from$|rate|fraction|^attempts?$)")

# Installed as sitecustomize: a test's temporary directory leaves its event logs behind.
KEEPER = '''
import os, shutil, tempfile
_exit = tempfile.TemporaryDirectory.__exit__
def _keep(self, *args):
    keep = os.environ.get("HARDY_KEEP_EVENTS")
    if keep:
        for root, _, files in os.walk(self.name):
            for name in files:
                if name == "events.jsonl":
                    source = os.path.join(root, name)
                    target = os.path.join(keep, os.path.basename(self.name),
                                          os.path.relpath(source, self.name))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy(source, target)
    return _exit(self, *args)
tempfile.TemporaryDirectory.__exit__ = _keep
'''


def normalised(record):
    fields = {k: v for k, v in record.items() if k != "event" and not VOLATILE.search(k)}
    return f"{record.get('event')} {json.dumps(fields, sort_keys=True)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--tests", default=DEFAULT_TESTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hardy-event-paths-") as work:
        hooks, kept = Path(work, "hooks"), Path(work, "kept")
        hooks.mkdir()
        kept.mkdir()
        (hooks / "sitecustomize.py").write_text(KEEPER)
        env = dict(os.environ, HARDY_KEEP_EVENTS=str(kept), HARDY_FAULT_SEED="7",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])))
        status = subprocess.run(["ctest", "--output-on-failure", "-R", args.tests], cwd=args.build,
                                env=env, stdout=sys.stderr).returncode
        for log in sorted(kept.rglob("events.jsonl")):
            scenario = re.sub(r"-?[a-z0-9_]{8}$", "", log.relative_to(kept).parts[0])
            print(f"== {scenario}/{'/'.join(log.relative_to(kept).parts[1:])}")
            records = []
            for line in log.read_text().splitlines():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    records.append({"event": "(a line that is not JSON)"})
            # Each domain's leader writes its own events: their order between domains is the
            # scheduler's, within one domain it is the code's.
            for record in sorted(records, key=lambda r: r.get("domain", -1)):
                print(normalised(record))
        return status


if __name__ == "__main__":
    sys.exit(main())
