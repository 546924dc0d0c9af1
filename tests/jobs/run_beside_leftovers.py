#!/usr/bin/env python3
"""`hardy run` launches Open MPI beside what killed launches left in /tmp (CTest labels `mpi`,
`e2e`).

Usage: run_beside_leftovers.py HARDY

Open MPI keeps a launch's session directory at $TMPDIR/ompi.PID (PID the launcher's) and removes
it when the launch ends; a launch killed with SIGKILL leaves it, and on a shared node that can be
another user's. An mpirun later given that pid stops before it starts a rank ("The PMIx server's
listener thread failed to start", exit status 213). Here $TMPDIR holds such a leftover for every
one of the next 3000 pids, so that whatever pid hardy run's mpirun gets has one: the job must
train to its end all the same, its launches having been given a directory of the user's own
($TMPDIR/hardy-openmpi-UID, 0700). A leftover of a dead process planted in that directory is
removed before the launch and named on stderr; one of a live process is kept.
"""
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl  # noqa: E402

hardy = sys.argv[1]
TRAIN = ["--synthetic", "--samples", "16", "--height", "32", "--width", "32", "--global-batch", "4", "--steps", "3",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--snapshot-every", "0"]
LEFTOVERS = 3000
check = Checks()


def leftover(session, pid):
    """A killed launch's session directory: the PMIx rendezvous files naming its pid."""
    host = socket.gethostname()
    session.mkdir(mode=0o700)
    for name in (f"pmix.{host}.tool", f"pmix.{host}.tool.{pid}", f"pmix.{host}.tool.prterun-{host}-{pid}@0"):
        (session / name).write_text(f"tcp4://127.0.0.1:1\nv5.0.0\n{pid}\n")


def next_pids(last, pid_max, count):
    """The next `count` pids the kernel hands out after `last`: past pid_max it wraps to 300
    (RESERVED_PIDS), not to 1. (A clean-clone CI run near the wrap once planted pid 1 twice, and
    the test failed before hardy ran.)"""
    pids, pid = [], last
    for _ in range(count):
        pid = pid + 1 if pid + 1 < pid_max else 300
        pids.append(pid)
    return pids


def dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


with tempfile.TemporaryDirectory(prefix="hardy-leftovers-") as tmp:
    tmp = Path(tmp)
    tmp.chmod(0o1777)  # shared as /tmp is: writable by all, sticky
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    planted = next_pids(last, pid_max, LEFTOVERS)
    for pid in planted:
        leftover(tmp / f"ompi.{pid}", pid)
    own = tmp / f"hardy-openmpi-{os.geteuid()}"
    own.mkdir(mode=0o700)
    gone = dead_pid()
    leftover(own / f"ompi.{gone}", gone)
    leftover(own / f"prted.{os.getpid()}", os.getpid())  # alive: kept
    env = {k: v for k, v in os.environ.items() if k != "PRTE_MCA_prte_tmpdir_base"}
    env["TMPDIR"] = str(tmp)
    run = tmp / "run"
    result = subprocess.run([hardy, "run", "--nodes", "1", "--ranks-per-node", "2", "--run-dir", str(run),
                             "--backoff", "0.2", "--max-restarts", "1", "--", *TRAIN],
                            capture_output=True, text=True, timeout=300, env=env)
    print(result.stdout[-1500:], result.stderr[-3000:], flush=True)
    finished = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_finished"]
    check(result.returncode == 0 and finished and finished[-1]["steps"] == 3,
          f"hardy run trains to its end beside {LEFTOVERS} leftovers in $TMPDIR (exit {result.returncode}, "
          f"{finished[-1:]})")
    check("listener thread failed to start" not in result.stderr + result.stdout,
          "... and no launch met one (no PMIx listener failure)")
    check(f"--prtemca prte_tmpdir_base {own}" in result.stderr,
          f"the launch kept its session directories in {own}")
    check(not (own / f"ompi.{gone}").exists() and f"ompi.{gone}" in result.stderr,
          f"the dead launch's ompi.{gone} there was removed before the launch, and named")
    check((own / f"prted.{os.getpid()}").exists(), "a live process's session directory was kept")
    check(oct(own.stat().st_mode & 0o777) == oct(0o700), f"{own} stays 0700")
    check(all((tmp / f"ompi.{pid}").is_dir() for pid in planted[:10]), "nothing of the others' was touched")

check.finish("run beside leftovers")
