#!/usr/bin/env python3
"""Slurm integration: `hardy submit`, `hardy status` and `hardy cancel` against a private
one-node Slurm (tests/slurm/local_slurm.py).

Usage: slurm_jobs.py HARDY_BINARY SOURCE_DIR SCENARIO

Scenarios with tests/slurm/fake_hardy_run.py as `hardy run` (they test the scheduler side alone):
  signal_requeue   Slurm's --signal=B:USR1@lead reaches `hardy run` through the batch script, whose
                   preempted exit status requeues the job; the second run sees SLURM_RESTART_COUNT=1
  status_cancel    hardy status shows a running job's state, step and failures; hardy cancel ends it
With the real `hardy run` (skipped, exit 77, where this build has none):
  completes        a short training job runs to completion; hardy status reports it
  requeue_resumes  a job warned before its time limit checkpoints, is requeued, and finishes from
                   that checkpoint on its next run
  rank_killed      a rank killed with SIGKILL mid-run: the job recovers and completes
Exit status 77 (skip) also where a private Slurm cannot run (not root, packages missing).
"""
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_slurm import LocalSlurm, skip_unless_available  # noqa: E402
from scheduler_test_lib import Hardy, check, job_config, read_jsonl, template_with_fake_hardy  # noqa: E402


def submit(hardy, tmp, *options, config=None, env=None):
    result = hardy("submit", "--scheduler", "slurm", "--config", config or job_config(SOURCE, tmp / "job.ini"),
                   "--run-dir", tmp / "run dir", *options, env=env)
    job_id = result.stdout.strip()
    check(job_id.isdigit(), f"hardy submit printed the job id ({job_id})")
    record = json.loads((tmp / "run dir" / "scheduler.json").read_text())
    check(record["job_id"] == job_id and record["scheduler"] == "slurm", "scheduler.json records the job")
    return job_id


def wait_for_requeue(slurm, job_id, timeout, running=True):
    """Waits until Slurm requeued the job (Restarts >= 1) and, with `running`, started it again."""
    deadline = time.monotonic() + timeout
    fields = {}
    while time.monotonic() < deadline:
        fields = slurm.job_fields(job_id)
        if int(fields.get("Restarts", "0")) >= 1 and (not running or fields.get("JobState") != "PENDING"):
            return fields
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} was not requeued within {timeout} s: {fields.get('JobState')} after "
                       f"{fields.get('RunTime')} (a job that finishes before Slurm warns it is too short)")


def job_files(run):
    """The batch script's output and hardy run's record, for a failing check's message."""
    return "\n".join(f"--- {name}:\n{(run / name).read_text()[-3000:]}" for name in
                     ("job.out", "job.err", "fake_runs.jsonl") if (run / name).exists())


def status_json(hardy, run_dir):
    return json.loads(hardy("status", run_dir, "--json").stdout)


def signal_requeue(slurm, hardy, tmp):
    env = dict(slurm.env, HARDY_FAKE_MODE="preempt")
    template = template_with_fake_hardy(hardy, "slurm", tmp / "fake.sbatch")
    # A one-minute limit warned 50 s ahead: Slurm sends SIGUSR1 10 to 50 s into the job.
    job_id = submit(hardy, tmp, "--template", template, "--time", "00:01:00", "--signal-lead", "50",
                    "--job-name", "requeue 'test'", env=env)
    wait_for_requeue(slurm, job_id, timeout=150)
    fields = slurm.wait_for_state(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=90)
    run = tmp / "run dir"
    check(fields["JobState"] == "COMPLETED", f"the requeued job completed ({fields['JobState']})",
          f"{fields}\n{job_files(run)}\n{slurm.logs()}")
    runs = read_jsonl(run / "fake_runs.jsonl")
    check(len(runs) == 2, f"hardy run was started twice ({len(runs)})")
    first, second = runs
    check(first["outcome"].startswith("SIGUSR1"), f"the first run got SIGUSR1 from the batch script ({first['outcome']})")
    check("SLURM_RESTART_COUNT" not in first["env"], "the first run is not a restart")
    check(second["env"].get("SLURM_RESTART_COUNT") == "1" and second["outcome"] == "completed",
          "the second run is restart 1 and completes")
    argv = first["argv"]
    check(argv[:1] == ["run"] and argv[argv.index("--run-dir") + 1] == str(run), "hardy run gets the run directory")
    train = argv[argv.index("--") + 1:]
    check(train == ["--config", str(run / "job.ini"), "--resume", "latest"], f"train options {train}")
    check(first["env"]["SLURM_JOB_ID"] == job_id, "the job sees its SLURM_JOB_ID")
    err = (run / "job.err").read_text()
    check("passed on to hardy run" in err and f"requeueing job {job_id}" in err,
          "job.err shows the forwarded signal and the requeue")
    check((run / "job.out").read_text().count("batch script started") == 2, "job.out keeps both runs (append)")
    status = status_json(hardy, run)["scheduler"]
    check(status["state"] == "COMPLETED" and status["restart_count"] == 1, f"hardy status: {status}")


def status_cancel(slurm, hardy, tmp):
    env = dict(slurm.env, HARDY_FAKE_MODE="sleep")
    template = template_with_fake_hardy(hardy, "slurm", tmp / "fake.sbatch")
    job_id = submit(hardy, tmp, "--template", template, "--time", "00:10:00", env=env)
    run = tmp / "run dir"
    slurm.wait_for_state(job_id, ("RUNNING",), timeout=60)
    deadline = time.monotonic() + 30
    while len(read_jsonl(run / "metrics.jsonl")) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    status = status_json(hardy, run)
    check(status["scheduler"]["state"] == "RUNNING" and status["scheduler"]["job_id"] == job_id,
          f"hardy status: job {job_id} RUNNING ({status['scheduler']})")
    check(isinstance(status["step"], int) and status["step"] >= 3, f"hardy status: step {status['step']}")
    check(status["failures"] == {"failure_detected": 1, "job_relaunched": 0, "survived": 1},
          f"hardy status: failures {status['failures']}")
    check(status["checkpoint"]["valid"] is None, "hardy status: no valid checkpoint yet")
    text = hardy("status", run).stdout
    check(f"slurm {job_id}: RUNNING" in text and "1 survived" in text, "hardy status (text)", text)
    result = hardy("cancel", run)
    check(f"cancelled slurm job {job_id}" in result.stdout, "hardy cancel reports the cancelled job")
    fields = slurm.wait_for_state(job_id, ("CANCELLED",), timeout=30)
    check(fields["JobState"] == "CANCELLED", "Slurm cancelled the job")
    check(status_json(hardy, run)["scheduler"]["state"] == "CANCELLED", "hardy status: CANCELLED")
    plain = tmp / "not submitted"
    plain.mkdir()
    check("no scheduler.json" in hardy("cancel", plain, check_status=2).stderr, "cancel without scheduler.json: exit 2")
    check(hardy("status", plain, "--json").returncode == 0, "status of a run directory never submitted")


def completes(slurm, hardy, tmp):
    hardy.skip_without_supervisor()
    config = job_config(SOURCE, tmp / "job.ini", steps=30, checkpoint_every=10, log_every=5)
    job_id = submit(hardy, tmp, "--nodes", "1", "--ranks-per-node", "2", "--time", "00:10:00", config=config)
    fields = slurm.wait_for_state(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=400)
    run = tmp / "run dir"
    check(fields["JobState"] == "COMPLETED", f"the job completed ({fields['JobState']}, exit {fields.get('ExitCode')})",
          (run / "job.err").read_text()[-3000:] if (run / "job.err").exists() else "")
    finished = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_finished"]
    check(finished and finished[-1]["status"] == "completed", "events.jsonl: job_finished completed")
    status = status_json(hardy, run)
    check(status["scheduler"]["state"] == "COMPLETED", "hardy status: COMPLETED")
    check(status["step"] == read_jsonl(run / "metrics.jsonl")[-1]["step"], f"hardy status: step {status['step']}")
    check(status["checkpoint"]["step"] is not None, f"hardy status: valid checkpoint {status['checkpoint']}")


def requeue_resumes(slurm, hardy, tmp):
    hardy.skip_without_supervisor()
    # Far more steps than the first run can do before Slurm warns it (10 to 50 s in), on any machine.
    config = job_config(SOURCE, tmp / "job.ini", steps=100000, checkpoint_every=20, log_every=10)
    job_id = submit(hardy, tmp, "--nodes", "1", "--ranks-per-node", "2", "--time", "00:01:00",
                    "--signal-lead", "50", config=config)
    run = tmp / "run dir"
    wait_for_requeue(slurm, job_id, timeout=150, running=False)
    # Each run reads RUN_DIR/job.ini afresh: the second one finishes 60 steps after the checkpoint,
    # with time enough not to be warned again.
    preempted = [e for e in read_jsonl(run / "events.jsonl") if e["event"] == "job_finished"]
    check([e["status"] for e in preempted] == ["preempted"], f"the first run stopped as preempted ({preempted})")
    total = preempted[0]["steps"] + 60
    job_config(SOURCE, run / "job.ini", steps=total, checkpoint_every=20, log_every=10)
    slurm.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=00:15:00"], check=False)
    fields = slurm.wait_for_state(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=600)
    check(fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1",
          f"completed after one requeue ({fields['JobState']}, restarts {fields.get('Restarts')})", job_files(run))
    events = read_jsonl(run / "events.jsonl")
    check("preemption_requested" in [e["event"] for e in events], "the first run was warned (preemption_requested)")
    finished = [e["status"] for e in events if e["event"] == "job_finished"]
    check(finished == ["preempted", "completed"], f"job_finished: {finished}")
    restored = [e for e in events if e["event"] == "state_restored"]
    written = [e["step"] for e in events if e["event"] == "checkpoint_written"]
    check(restored and restored[0]["source"] == "checkpoint" and restored[0]["step"] == total - 60,
          f"the second run resumed from the preemption checkpoint ({restored[:1]})")
    check(restored[0]["step"] in written, "a checkpoint the first run wrote")
    steps = [m["step"] for m in read_jsonl(run / "metrics.jsonl")]
    check(steps[-1] == total, f"the job reached its last step ({steps[-1]} of {total})")
    status = status_json(hardy, run)
    check(status["scheduler"]["restart_count"] == 1 and status["checkpoint"]["step"] is not None,
          f"hardy status: requeued once, valid checkpoint at step {status['checkpoint']['step']}")


def rank_killed(slurm, hardy, tmp):
    hardy.skip_without_supervisor()
    config = job_config(SOURCE, tmp / "job.ini", steps=200, checkpoint_every=10, log_every=1)
    # Two ranks: the private node has the machine's cores only, and Slurm gives a task at least one.
    job_id = submit(hardy, tmp, "--nodes", "1", "--ranks-per-node", "2", "--time", "00:15:00", config=config)
    run = tmp / "run dir"
    slurm.wait_for_state(job_id, ("RUNNING",), timeout=60)
    deadline = time.monotonic() + 300
    victim = None
    while time.monotonic() < deadline and victim is None:
        events = read_jsonl(run / "events.jsonl")
        started = [e for e in events if e["event"] == "rank_started" and e["rank"] == 1]
        steps = read_jsonl(run / "metrics.jsonl")
        if started and steps and steps[-1]["step"] >= 20:
            victim = started[-1]["pid"]
        time.sleep(0.5)
    check(victim is not None, "rank 1 started and the job reached step 20")
    os.kill(victim, signal.SIGKILL)
    fields = slurm.wait_for_state(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=900)
    check(fields["JobState"] == "COMPLETED", f"the job completed after the kill ({fields['JobState']})",
          (run / "job.err").read_text()[-3000:] if (run / "job.err").exists() else "")
    status = status_json(hardy, run)
    check(status["failures"]["survived"] >= 1, f"hardy status counts the failure survived ({status['failures']})")
    check(status["step"] == 200, f"the job reached its last step ({status['step']})")


SCENARIOS = {f.__name__: f for f in (signal_requeue, status_cancel, completes, requeue_resumes, rank_killed)}

if __name__ == "__main__":
    binary, SOURCE, scenario = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    skip_unless_available()
    with tempfile.TemporaryDirectory(prefix="hardy-slurm-test-") as tmp, LocalSlurm() as slurm:
        hardy = Hardy(binary, env=slurm.env, cwd=tmp)
        try:
            SCENARIOS[scenario](slurm, hardy, Path(tmp))
        except (TimeoutError, AssertionError) as e:
            print(f"FAILED: {e}\n{slurm.logs()}")
            sys.exit(1)
        except SystemExit as e:
            if e.code not in (0, 77, None):
                print(slurm.logs())
            raise
    print(f"slurm {scenario}: all checks passed")
