"""What hardy's end-to-end test scripts share: checks that count failures, the run directory's
JSON-lines logs (read once, or as a job writes them), and the audit of which samples each step
trained on."""
import json
import os
import struct
import subprocess
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path


class Checks:
    def __init__(self):
        self.failures = 0

    def __call__(self, condition, message):
        print(("ok: " if condition else "FAILED: ") + message, flush=True)
        self.failures += 0 if condition else 1

    def finish(self, name):
        print(f"{name}: {'all checks passed' if self.failures == 0 else f'{self.failures} check(s) failed'}")
        sys.exit(1 if self.failures else 0)


def on_dataset(options, root, *extra):
    """`hardy train` options with the synthetic data (--synthetic, --samples, --height, --width)
    replaced by the dataset at `root` (e.g. made by `hardy data generate --format deepcam`), and
    `extra` options after them (--stage-to DIR)."""
    synthetic = {"--synthetic": 0, "--samples": 1, "--height": 1, "--width": 1}
    kept, skip_words = [], 0
    for word in options:
        if skip_words:
            skip_words -= 1
        elif word in synthetic:
            skip_words = synthetic[word]
        else:
            kept.append(word)
    return kept + ["--dataset", str(root), *extra]


def check_private_staging(check, label, stage, events, lost_hosts=()):
    """What --stage-to must leave: no failed or refused staging, everything below `stage` this
    user's and no link, directories 0700 and files 0600, no half-copied file but on a lost node
    (`lost_hosts`: a node that crashed while its copier wrote keeps that file on its own storage,
    which on a real cluster nobody else sees; the copier replaces it if that node stages again)."""
    check(not [e for e in events if e["event"] in ("data_staging_failed", "staging_refused")],
          f"{label}: no staging failed or was refused")
    entries = [stage, *stage.rglob("*")]
    check(all(p.lstat().st_uid == os.geteuid() and not p.is_symlink() for p in entries),
          f"{label}: everything staged is this user's, and no link")
    loose = [str(p) for p in entries if p != stage and (p.lstat().st_mode & 0o077)]
    check(not loose, f"{label}: staged directories 0700 and files 0600: {loose[:3]}")
    half = [p for p in stage.rglob("*.part") if not set(p.relative_to(stage).parts) & set(lost_hosts)]
    check(not half, f"{label}: no half-copied file left but on a lost node: {[str(p) for p in half[:3]]}")


def skip(reason):
    """Ends the test as skipped: exit status 77, which CTest counts as such (SKIP_RETURN_CODE)."""
    print(f"skipped: {reason}")
    sys.exit(77)


def check_completed(check, events, steps, label):
    """The job's last job_finished event says it completed, at step `steps`."""
    finished = [e for e in events if e["event"] == "job_finished"]
    check(finished and finished[-1]["status"] == "completed" and finished[-1]["steps"] == steps,
          f"{label}: job_finished completed at step {steps}: {finished[-1:]}")


def int_option(name, default):
    """The whole number after `name` on this script's command line, or default."""
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def split_train_options(argv):
    """(the script's own arguments, the `hardy train` options after `--`) of a command line."""
    if "--" not in argv:
        return list(argv), []
    return argv[:argv.index("--")], argv[argv.index("--") + 1:]


def median_step(metrics, first, last):
    """The median step_s of the metrics lines of steps first..last."""
    return statistics.median(m["step_s"] for m in metrics if first <= m["step"] <= last)


# The fault tests' networks: a compact DeepLabv3+ of about 34,000 parameters, and a tiramisu with
# every part of the published one (dense blocks down and up, transitions, skips, dropout) on 3x3
# kernels and 6 maps per layer (inputs divide by 4).
SMALL_COMPACT = ["--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16",
                 "--low-level-channels", "8", "--aspp-rates", "1,2"]
SMALL_TIRAMISU = ["--model", "tiramisu", "--dense-layers", "1,2,2", "--growth", "6", "--first-channels", "8",
                  "--dense-kernel", "3"]
# CosmoFlow's 3-D regression network as published, on 32^3 volumes (its cube replaces the 32x32
# of the others).
SMALL_COSMOFLOW = ["--model", "cosmoflow", "--volume", "32"]


def small_job(samples, steps, global_batch, model=SMALL_COMPACT):
    """`hardy train` options of the fault tests' job: synthetic 32x32 samples (32^3 for CosmoFlow) and a small network
    that learns within a few hundred steps, every sample audited, and a node-local snapshot of
    every step (not the default, auto): the tests check that a relaunch loses at most the step in
    flight, which is what --snapshot-every 1 promises."""
    # CosmoFlow trains with SGD and momentum, as its reference does: with Adam at 0.003 its tanh
    # output saturates (the loss stays near 1.8), and at 0.001 the final loss of 8 ranks and of 6
    # differed by 6% without any failure (the reduction order alone), against 0.6% with SGD.
    volumetric = "--volume" in model
    size = [] if volumetric else ["--height", "32", "--width", "32"]
    optimizer = ["--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.005"] if volumetric else \
        ["--optimizer", "adam", "--lr", "0.003"]
    return ["--synthetic", "--samples", str(samples), *size,
            "--global-batch", str(global_batch), "--steps", str(steps), *model,
            "--eval-samples", "0", "--seed", "5", *optimizer, "--warmup-steps", "2", "--audit-samples", "--log-every", "200",
            "--snapshot-every", "1"]


def fault_job(samples, steps, fault_step, options, model=SMALL_COMPACT):
    """(steps, fault step, `hardy train` options) of an emulated cluster's fault test: small_job's
    job at a global batch of 16, then `options`. --steps and --fault-step on this script's command
    line override the defaults: the benchmarks run the same scenarios longer."""
    steps = int_option("--steps", steps)
    return steps, int_option("--fault-step", fault_step), small_job(samples, steps, 16, model) + options


def read_jsonl(path):
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_jsonl_tail(path):
    """The last complete JSON line of a file, read from its last 4 KiB (a growing metrics.jsonl)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


class Job:
    """The run directory of a job under `hardy run`, read as it grows."""

    def __init__(self, run):
        self.run = run

    def events(self, name=None):
        events = read_jsonl(self.run / "events.jsonl")
        return [e for e in events if name is None or e["event"] == name]

    def step(self):
        metrics = read_jsonl_tail(self.run / "metrics.jsonl")
        return metrics["step"] if metrics else 0

    def wait(self, condition, what, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if condition():
                return True
            time.sleep(0.02)
        print(f"timed out waiting for {what}", flush=True)
        return False

    def rank_pid(self, rank):
        started = [e for e in self.events("rank_started") if e["rank"] == rank]
        return started[-1]["pid"] if started else None


def samples_by_epoch(run):
    """{epoch: [sample, ...]} from samples.jsonl, where the last line written for a step counts
    (a step redone after a rollback is logged again)."""
    last = {}
    for line in read_jsonl(Path(run) / "samples.jsonl"):
        last[line["step"]] = line
    seen = defaultdict(list)
    for step in sorted(last):
        line = last[step]
        boundary = line.get("next_epoch_from", len(line["samples"]))
        seen[line["epoch"]] += line["samples"][:boundary]
        seen[line["epoch"] + 1] += line["samples"][boundary:]
    return sorted(last), seen


def complete_epochs_exact(run, dataset_size):
    """(complete epochs, epochs among them that do not hold every sample exactly once)."""
    _, seen = samples_by_epoch(run)
    complete = [e for e, s in seen.items() if len(s) >= dataset_size]
    wrong = [e for e in complete if sorted(seen[e]) != list(range(dataset_size))]
    return complete, wrong


def run_hardy(hardy, *args, timeout=None):
    """Runs `hardy ARGS` with its output captured; when it fails, prints the end of both streams."""
    done = subprocess.run([hardy, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:])
    return done


def run_watched(command, watch=None, timeout=None, **popen):
    """Runs command, its stdout and stderr captured together, while watch() (a fault injector)
    runs on a thread. Returns (exit status, output); the status is None when the command ran past
    timeout and was killed."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    watcher = threading.Thread(target=watch, daemon=True) if watch else None
    if watcher:
        watcher.start()
    try:
        output, _ = process.communicate(timeout=timeout)
        status = process.returncode
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        status = None
    if watcher:
        watcher.join(timeout=10)
    return status, output


def committed_steps(metrics, events):
    """The steps committed across every launch, ascending: those with a metrics line, and those a
    relaunch restored past the last line of the launch before it. A state saved at a step's
    commit (a node's snapshot) proves that step committed; its metrics line went with a lead that
    was killed between the commit and writing it."""
    steps = {m["step"] for m in metrics}
    for _, ended_at, restored_at, _ in relaunch_restores(events):
        steps.update(range(ended_at + 1, restored_at + 1))
    return sorted(steps)


def relaunch_restores(events):
    """For every launch that ended after committing steps and was followed by a restore:
    (launch, its last committed step, the step restored next, where that came from). The
    difference of the two steps is the committed work a relaunch lost."""
    restored = [e for e in events if e["event"] == "state_restored"]
    found = []
    for ended in events:
        if ended["event"] != "launch_ended" or not ended.get("last_committed_step"):
            continue
        later = [e for e in restored if e["unix_time"] > ended["unix_time"]]
        if later:
            found.append((ended["launch"], ended["last_committed_step"], later[0]["step"], later[0]["source"]))
    return found


# Node-local snapshots are two slot files per host directory (checkpoint/include/hardy/checkpoint/
# snapshot_file.hpp); the step is in the 64-byte header, valid once its completion mark is set.
SNAPSHOT_GLOB = "slot-*.snapshot"
SNAPSHOT_COMPLETE = 0x70616e732d796468


def snapshot_files(root):
    """Every node-local snapshot slot file below root."""
    return sorted(Path(root).rglob(SNAPSHOT_GLOB))


def node_state_left(root, events):
    """What a finished run left under the node-local root ROOT, as (hosts, problems): the hosts whose
    snapshot files are still there, and what is wrong. Every `hardy run` of the run has every node
    it used remove the run's tree when it ends (node_state_removed, one per supervisor_finished);
    only a node it could not reach keeps its copy, named in the event's `unreachable`, or one where
    keeping the newest snapshot as a checkpoint failed (`left`).
    Every file of the run goes when all answered."""
    problems = []
    removed = [e for e in events if e.get("event") == "node_state_removed"]
    runs = sum(1 for e in events if e.get("event") == "supervisor_finished")
    if len(removed) != runs:
        problems.append(f"{len(removed)} node_state_removed events after {runs} `hardy run`(s)")
    unreachable = {u["host"] for e in removed for u in e.get("unreachable", []) + e.get("left", [])}
    hosts = sorted({p.parent.name for p in snapshot_files(root)})
    left = [h for h in hosts if h not in unreachable]
    if left:
        problems.append(f"node-local snapshots left on {left}, which the run's cleanup reached")
    if not unreachable:
        files = sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if not p.is_dir())
        if files:
            problems.append(f"files of the run left under {root}: {files[:6]}")
    return hosts, problems


def snapshot_step(path):
    """The step a slot file's header holds, None when its write was not completed."""
    header = Path(path).read_bytes()[:64]
    if len(header) < 64 or not header.startswith(b"hardy-snapshot\0"):
        return None
    step, = struct.unpack_from("<q", header, 24)
    complete, = struct.unpack_from("<Q", header, 56)
    return step if complete == SNAPSHOT_COMPLETE else None
