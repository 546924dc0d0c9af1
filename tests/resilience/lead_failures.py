#!/usr/bin/env python3
"""A failure of a step only the lead runs ends every rank within seconds, each with the message
(CTest labels `mpi`, `fault`).

Usage: lead_failures.py HARDY MPIRUN [MPIRUN FLAGS...]

With 2 and 4 ranks: a --run-dir that cannot be created (below a regular file, so that even root
cannot), and an explicit --resume naming a damaged checkpoint. Before the agreement that follows
each lead-only step, rank 0 threw alone and the other ranks waited in their next collective until
the job's wall time. Now every rank prints the same message and exits 2 (bad input), and the
whole job ends in seconds. With 2 ranks: a final checkpoint that rank 0 cannot write (the write
failure injection, a full disk, set for rank 0 alone) ends every rank with exit status 1 and the
message, where the other ranks used to finish and leave rank 0 failing alone.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks  # noqa: E402

hardy, mpirun = sys.argv[1], sys.argv[2:]
TRAIN = ["--synthetic", "--samples", "8", "--height", "32", "--width", "32", "--global-batch", "4", "--steps", "2",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--prefetch-batches", "0"]
LIMIT_S = 40  # a hang is what this test catches: far less than a job's wall time
check = Checks()


def train(ranks, *options, lead_env=""):
    started = time.time()
    # `lead_env` (VAR=value) for rank 0 alone, set by a shell that asks the launcher for its rank.
    program = [hardy, "train", *TRAIN, *options]
    if lead_env:
        program = ["sh", "-c", f'[ "${{OMPI_COMM_WORLD_RANK:-$PMI_RANK}}" = 0 ] && export {lead_env}; exec "$@"',
                   "lead-env", *program]
    try:
        result = subprocess.run([*mpirun, "-n", str(ranks), *program],
                                capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired as expired:
        err = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        print(err[-2000:], flush=True)
        return None, "", time.time() - started
    print(result.stderr[-2000:], flush=True)
    return result.returncode, result.stdout + result.stderr, time.time() - started


with tempfile.TemporaryDirectory(prefix="hardy-lead-failures-") as tmp:
    tmp = Path(tmp)
    blocker = tmp / "a-file"
    blocker.write_text("not a directory\n")
    damaged = tmp / "ckpt-7.h5"
    damaged.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)  # an HDF5 signature, then junk

    for ranks in (2, 4):
        status, output, seconds = train(ranks, "--run-dir", str(blocker / "run"))
        said = output.count(f"hardy train: --run-dir {blocker / 'run'}: cannot create")
        check(status == 2, f"{ranks} ranks, run directory not creatable: exit status 2 (got {status}, {seconds:.1f} s)")
        check(said == ranks, f"... every rank says why ({said} of {ranks})")
        check(seconds < 30, f"... and the job ends in seconds ({seconds:.1f} s)")

        status, output, seconds = train(ranks, "--run-dir", str(tmp / f"run-{ranks}"), "--resume", str(damaged))
        said = output.count(f"hardy train: --resume {damaged}:")
        check(status == 2, f"{ranks} ranks, a damaged --resume FILE: exit status 2 (got {status}, {seconds:.1f} s)")
        check(said == ranks, f"... every rank says why ({said} of {ranks})")
        check(seconds < 30, f"... and the job ends in seconds ({seconds:.1f} s)")

    status, output, seconds = train(2, "--run-dir", str(tmp / "final"), "--checkpoint-every", "100",
                                    lead_env="HARDY_CHECKPOINT_FAIL_AFTER_BYTES=0")
    said = output.count("hardy train: error: ")
    check(status == 1, f"a final checkpoint rank 0 cannot write: exit status 1 (got {status}, {seconds:.1f} s)")
    check(said == 2, f"... every rank says why ({said} of 2)")
    check(not (tmp / "final" / "model.h5").exists(), "... and no rank went on as if the job had completed")

check.finish("lead failures")
