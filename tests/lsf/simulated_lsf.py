#!/usr/bin/env python3
"""LSF without LSF: `hardy submit/status/cancel --scheduler lsf` against stand-in bsub, bjobs and
bkill commands, and the rendered #BSUB script run by bash under a simulated LSF environment
(LSB_JOBID, LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS) with its launcher replaced through
HARDY_LSF_LAUNCHER.

Usage: simulated_lsf.py HARDY_BINARY SOURCE_DIR SCENARIO [LAUNCHER]
  commands       submit, status and cancel through the stand-in commands; the script, with
                 tests/slurm/fake_hardy_run.py as `hardy run`, passes HARDY_LSF_LAUNCHER on,
                 forwards SIGUSR1 and exits with the preempted status that `bsub -Q` requeues
  job_completes  the built-in jsrun script runs a real short training job with LAUNCHER (the
                 MPI launcher of this build) in place of jsrun; skipped (77) without `hardy run`
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))
from scheduler_test_lib import Hardy, check, job_config, read_jsonl, template_with_fake_hardy  # noqa: E402

JOB_ID = "4242"
PREEMPTED = 4

# Stand-ins that answer as LSF does; bkill records its arguments.
STAND_INS = {
    "bsub": f"""cat > "$LSF_STAND_IN/bsub.stdin"
echo "Job <{JOB_ID}> is submitted to queue <normal>."
""",
    "bjobs": f"""case " $* " in
  *" {JOB_ID} "*) echo "RUN -" ;;
  *) echo "Job <$*> is not found" >&2; exit 255 ;;
esac
""",
    "bkill": f"""echo "$*" > "$LSF_STAND_IN/bkill.args"
echo "Job <{JOB_ID}> is being terminated"
""",
    "bmod": """printf '%s\\n' "$@" > "$LSF_STAND_IN/bmod.args"
echo "Parameters of job <$2> are being changed"
""",
}


def lsf_environment(tmp):
    stand_in = tmp / "lsf-bin"
    stand_in.mkdir()
    for name, body in STAND_INS.items():
        (stand_in / name).write_text("#!/bin/bash\n" + body)
        (stand_in / name).chmod(0o755)
    return dict(os.environ, PATH=f"{stand_in}:{os.environ['PATH']}", LSF_STAND_IN=str(stand_in))


def job_environment(env, tmp, **extra):
    """What LSF sets in a job on one host with two slots."""
    host_file = tmp / "hostfile"
    host_file.write_text("localhost\nlocalhost\n")
    return dict(env, LSB_JOBID=JOB_ID, LSB_DJOB_HOSTFILE=str(host_file), LSB_MCPU_HOSTS="localhost 2", **extra)


def run_script(script, env, log, usr1=False, timeout=600):
    """bash SCRIPT as LSF would start it; with usr1, LSF's -wa warning once the job is running."""
    with open(log, "w") as out:
        shell = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, env=env)
        if usr1:
            deadline = time.monotonic() + 30
            while "batch script started" not in Path(log).read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)  # the trap is set right after that line
            shell.send_signal(signal.SIGUSR1)
        return shell.wait(timeout=timeout)


def commands(hardy, tmp, _launcher):
    env = lsf_environment(tmp)
    hardy = Hardy(hardy.binary, env=env, cwd=tmp)
    template = template_with_fake_hardy(hardy, "lsf", tmp / "fake.bsub")
    run = tmp / "run dir"
    result = hardy("submit", "--scheduler", "lsf", "--template", template, "--config",
                   job_config(SOURCE, tmp / "job.ini"), "--run-dir", run, "--nodes", "1", "--ranks-per-node", "2",
                   "--time", "00:10:00", "--job-name", "lsf 'test'")
    check(result.stdout.strip() == JOB_ID, f"hardy submit printed bsub's job id ({result.stdout.strip()})")
    script = run / "job.bsub"
    check((tmp / "lsf-bin" / "bsub.stdin").read_text() == script.read_text(), "bsub read the script on stdin")
    check('#BSUB -J "lsf \'test\'"' in script.read_text(), "the job name is quoted in its directive")
    record = json.loads((run / "scheduler.json").read_text())
    check(record["scheduler"] == "lsf" and record["job_id"] == JOB_ID, "scheduler.json records the job")
    status = json.loads(hardy("status", run, "--json").stdout)["scheduler"]
    check(status["state"] == "RUN", f"hardy status shows bjobs' state ({status})")
    check("cancelled lsf job 4242" in hardy("cancel", run).stdout, "hardy cancel reports the job")
    check((tmp / "lsf-bin" / "bkill.args").read_text().split() == [JOB_ID], "bkill got the job id")

    warned = run_script(script, job_environment(env, tmp, HARDY_FAKE_MODE="preempt", HARDY_LSF_LAUNCHER="mpirun"),
                        tmp / "first.log", usr1=True)
    check(warned == PREEMPTED, f"a warned job exits {PREEMPTED}, which bsub -Q requeues ({warned})",
          (tmp / "first.log").read_text())
    first = read_jsonl(run / "fake_runs.jsonl")[-1]
    check(first["outcome"].startswith("SIGUSR1"), f"SIGUSR1 reached hardy run ({first['outcome']})")
    argv = first["argv"]
    check(argv[argv.index("--launcher") + 1] == "mpirun", "HARDY_LSF_LAUNCHER replaced the launcher")
    check(first["env"]["LSB_DJOB_HOSTFILE"] == str(tmp / "hostfile"), "hardy run sees the LSF variables")
    rerun = run_script(script, job_environment(env, tmp, HARDY_FAKE_MODE="preempt", LSB_RESTART="Y"),
                       tmp / "second.log")
    second = read_jsonl(run / "fake_runs.jsonl")[-1]
    check(rerun == 0 and second["outcome"] == "completed", "the rerun completes")
    check(second["argv"][second["argv"].index("--launcher") + 1] == "jsrun", "without the variable: jsrun")

    # Too few healthy nodes: hardy run lists the lost ones and asks for the requeue; the script
    # takes them out of the job's host selection before LSF requeues it.
    lost = run_script(script, job_environment(env, tmp, HARDY_FAKE_MODE="lost"), tmp / "lost.log")
    log = (tmp / "lost.log").read_text()
    check(lost == PREEMPTED, f"the script passes the requeue status on ({lost})", log)
    bmod = (tmp / "lsf-bin" / "bmod.args").read_text().splitlines() if (tmp / "lsf-bin" / "bmod.args").exists() else []
    check(bmod == ["-R", "select[hname!='a01n02' && hname!='a01n05']", JOB_ID],
          f"bmod leaves the lost hosts out of the requeued job: {bmod}", log)


def job_completes(hardy, tmp, launcher):
    env = lsf_environment(tmp)
    hardy = Hardy(hardy.binary, env=env, cwd=tmp)
    hardy.skip_without_supervisor()
    run = tmp / "run"
    config = job_config(SOURCE, tmp / "job.ini", steps=20, checkpoint_every=10, log_every=5)
    hardy("submit", "--scheduler", "lsf", "--config", config, "--run-dir", run, "--nodes", "1",
          "--ranks-per-node", "2", "--time", "00:10:00")
    status = run_script(run / "job.bsub", job_environment(env, tmp, HARDY_LSF_LAUNCHER=launcher), tmp / "job.log")
    check(status == 0, f"the script ran the job to completion (exit {status})", (tmp / "job.log").read_text()[-4000:])
    finished = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_finished"]
    check(finished and finished[-1]["status"] == "completed", "events.jsonl: job_finished completed")


if __name__ == "__main__":
    binary, SOURCE, scenario = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    launcher = sys.argv[4] if len(sys.argv) > 4 else "mpirun"
    with tempfile.TemporaryDirectory(prefix="hardy-lsf-test-") as tmp:
        {"commands": commands, "job_completes": job_completes}[scenario](Hardy(binary, cwd=tmp), Path(tmp), launcher)
    print(f"lsf {scenario}: all checks passed")
