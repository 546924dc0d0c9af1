#!/usr/bin/env python3
"""An mpirun started under the tests' environment works beside what a killed launch left behind
(CTest labels `mpi`, `unit`).

Usage: launch_beside_leftovers.py MPIRUN [MPIRUN FLAGS...]

Open MPI names a launch's session directory after the launcher's pid (`$TMPDIR/ompi.PID`,
`/tmp/prted.PID` for a daemon) and removes it when it ends; a launcher killed with SIGKILL (a
test's timeout, a crashed emulated node, the supervisor giving up on a hung launch) leaves it.
Pids wrap (at 32768 on these machines), and an mpirun later given that pid fails before it starts
a rank: "The PMIx server's listener thread failed to start", exit status 213. CI failed so once.
tests/CMakeLists.txt gives each test's launches a session directory base of its own
(PRTE_MCA_prte_tmpdir_base); this test plants a leftover for the very pid its mpirun will get,
in the default place, and checks that the launch works. Needs root (the next pid is chosen
through /proc/sys/kernel/ns_last_pid), else skipped (77).
"""
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks  # noqa: E402

mpirun = sys.argv[1:]
NEXT_PID = Path("/proc/sys/kernel/ns_last_pid")
check = Checks()

if os.geteuid() != 0 or not os.access(NEXT_PID, os.W_OK):
    print("skipped: choosing the next pid needs root (/proc/sys/kernel/ns_last_pid)")
    sys.exit(77)
if "PRTE_MCA_prte_tmpdir_base" not in os.environ:
    print("note: PRTE_MCA_prte_tmpdir_base is not set; the launch below is expected to fail")


def plant_leftover(pid):
    """What a launcher with this pid, killed with SIGKILL, leaves: its session directory with the
    PMIx rendezvous files naming its pid and namespace."""
    host = socket.gethostname()
    session = Path(os.environ.get("TMPDIR", "/tmp")) / f"ompi.{pid}"
    shutil.rmtree(session, ignore_errors=True)
    session.mkdir(mode=0o700)
    for name in (f"pmix.{host}.tool", f"pmix.{host}.tool.{pid}", f"pmix.{host}.tool.prterun-{host}-{pid}@0"):
        (session / name).write_text(f"tcp4://127.0.0.1:1\nv5.0.0\n{pid}\n")
        (session / name).chmod(0o600)
    return session


PID_MAX = int(Path("/proc/sys/kernel/pid_max").read_text())

# Another process may take the pid between the write and the fork: try again a few times.
for attempt in range(20):
    target = int(NEXT_PID.read_text()) + 100
    if target >= PID_MAX:
        # Past the last pid the kernel wraps to 300 (RESERVED_PIDS); ns_last_pid refuses a value
        # beyond pid_max (a clean-clone CI run near the wrap failed so, before mpirun ran).
        target = 400
    leftover = plant_leftover(target)
    NEXT_PID.write_text(str(target - 1))
    launch = subprocess.Popen([*mpirun, "-n", "2", "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = launch.communicate(timeout=60)
    shutil.rmtree(leftover, ignore_errors=True)
    if launch.pid == target:
        break
    print(f"attempt {attempt + 1}: mpirun got pid {launch.pid}, not {target}; again")
else:
    check(False, "mpirun never got the pid the leftover was planted for")
    check.finish("launch beside leftovers")
print(output[-2000:])
check(launch.returncode == 0,
      f"mpirun with pid {target}, beside a killed launch's {leftover}: exit status {launch.returncode}")
check("listener thread failed to start" not in output, "... and PMIx started its listener")

check.finish("launch beside leftovers")
