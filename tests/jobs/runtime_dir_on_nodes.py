#!/usr/bin/env python3
"""Every rank checks the Open MPI session directory on its own node (CTest labels `mpi`, `e2e`).

Usage: runtime_dir_on_nodes.py HARDY MPIRUN...

`hardy run` checks $TMPDIR/hardy-openmpi-UID as private (0700, the user's, no link) on the host it
runs on, and hands the path to Open MPI's daemons on the other nodes, which use a directory they
find there whoever made it (they only add the owner's bits). There, each rank checks it before
MPI starts. This stands in for another node: mpirun is given a runtime directory that passed no
check, writable by all as another user could have left it, and the job must end at once with exit
status 2 and a message naming the node and the directory, no rank left waiting; the same job in
a directory as Open MPI creates one (0700) trains.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks  # noqa: E402

hardy, mpirun = sys.argv[1], sys.argv[2:]
TRAIN = ["--synthetic", "--samples", "16", "--height", "32", "--width", "32", "--global-batch", "4", "--steps", "3",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--snapshot-every", "0"]
check = Checks()


def launch(base, run):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRTE_MCA_")}
    started = time.monotonic()
    result = subprocess.run([*mpirun, "-n", "2", "--prtemca", "prte_tmpdir_base", str(base),
                             hardy, "train", "--run-dir", str(run), *TRAIN],
                            capture_output=True, text=True, timeout=120, env=env)
    print(result.stdout[-1500:], result.stderr[-2000:], flush=True)
    return result, time.monotonic() - started


with tempfile.TemporaryDirectory(prefix="hardy-runtime-dir-") as tmp:
    tmp = Path(tmp)
    tmp.chmod(0o1777)  # shared as /tmp is
    base = tmp / f"hardy-openmpi-{os.geteuid()}"
    base.mkdir()
    base.chmod(0o777)  # what another user could have made before the job came

    result, seconds = launch(base, tmp / "refused")
    said = result.stderr + result.stdout
    check(result.returncode == 2, f"the job ends with exit status 2 (got {result.returncode})")
    check("not private to this user" in said and str(base) in said and socket.gethostname() in said,
          "the message names the node, the directory and what is wrong")
    # The first rank to refuse ends the job: Open MPI may stop the other before it checks.
    check(1 <= said.count("not private to this user") <= 2, "a rank refused it")
    check(seconds < 60, f"no rank waited for another ({seconds:.1f} s)")
    check(not (tmp / "refused" / "checkpoints").exists(), "nothing was trained")

    for entry in base.iterdir():  # what the refused launch's runtime left, if anything
        subprocess.run(["rm", "-rf", str(entry)], check=True)
    base.chmod(0o700)
    result, _ = launch(base, tmp / "trained")
    check(result.returncode == 0 and "not private" not in result.stderr,
          f"the same job trains in a directory as Open MPI makes one, 0700 (exit {result.returncode})")

check.finish("runtime directory on the nodes")
