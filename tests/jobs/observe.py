#!/usr/bin/env python3
"""The ways to watch a run, through the `hardy` executable, on a run directory written here in the
format hardy writes (no training: seconds):
  - hardy report draws a PNG and an SVG, and the SVG names every failure of the event log;
    without a Python that has matplotlib it exits 2 with the reason;
  - hardy status --follow refreshes while a background writer appends steps, exits 0 with the final
    state once job_finished and supervisor_finished are logged, and exits 1 saying that the job is
    not running when its process is gone without an end;
  - hardy completion bash lists a known option of every command, and completes one in bash.
Usage: observe.py HARDY_BINARY"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks  # noqa: E402
from run_records import append, event, write_run  # noqa: E402

hardy = sys.argv[1]
check = Checks()


with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    # ---- hardy report ----
    run = tmp / "run"
    run.mkdir()
    events, metrics = write_run(run, time.time() - 100)
    append(run / "events.jsonl", events)
    append(run / "metrics.jsonl", metrics)
    for suffix in ("png", "svg"):
        out = tmp / f"report.{suffix}"
        r = subprocess.run([hardy, "report", str(run), "--out", str(out)], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and out.is_file() and out.stat().st_size > 1000,
              f"hardy report --out report.{suffix}: exit {r.returncode}, {out.stat().st_size if out.exists() else 0} "
              f"bytes {r.stderr.strip()[-300:]}")
    png = (tmp / "report.png").read_bytes() if (tmp / "report.png").exists() else b""
    check(png.startswith(b"\x89PNG"), "report.png is a PNG")
    svg = (tmp / "report.svg").read_text() if (tmp / "report.svg").exists() else ""
    labels = re.findall(r"failure \d+ at step \d+", svg)
    for number, failure in enumerate((e for e in events if e["event"] == "failure_detected"), start=1):
        label = f"failure {number} at step {failure['step']}"
        check(label in labels, f"the SVG labels '{label}' (found {sorted(set(labels))})")
    for text in ("shrink 4 -&gt; 2 ranks", "relaunch on 1 ranks", "preemption", "ckpt 30", "recovered in 20.0 ms",
                 "where the step goes", "input copy 2.00 ms",
                 "the GPU's span of forward and backward 45.00 ms"):
        check(text in svg, f"the SVG shows '{text}'")
    r = subprocess.run([hardy, "report", str(run), "--out", str(tmp / "x.png")], capture_output=True, text=True,
                       env={**os.environ, "HARDY_PYTHON": str(tmp / "no-python")}, timeout=60)
    check(r.returncode == 2 and "matplotlib" in r.stderr,
          f"without Python, hardy report exits 2 naming matplotlib (exit {r.returncode}: {r.stderr.strip()})")

    # ---- hardy status --follow on a run that a background process appends to ----
    live = tmp / "live"
    live.mkdir()
    t0 = time.time() - 30  # every record in the past, so that ages are positive
    events, metrics = write_run(live, t0)
    append(live / "events.jsonl", events[:2])

    def writer():
        # The steps in a few bursts, with each step's events, then the end.
        pending = sorted(events[2:-2], key=lambda e: e["unix_time"])
        for burst in range(6):
            chunk = metrics[burst * 10:(burst + 1) * 10]
            upto = chunk[-1]["unix_time"]
            append(live / "events.jsonl", [e for e in pending if e["unix_time"] <= upto])
            pending = [e for e in pending if e["unix_time"] > upto]
            append(live / "metrics.jsonl", chunk)
            time.sleep(0.4)
        append(live / "events.jsonl", pending + events[-2:])

    thread = threading.Thread(target=writer)
    started = time.monotonic()
    follow = subprocess.Popen([hardy, "status", str(live), "--follow", "--interval", "0.2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    thread.start()
    try:
        out, err = follow.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        follow.kill()
        out, err = follow.communicate()
    thread.join()
    steps_seen = sorted({int(s) for s in re.findall(r"^step\s+(\d+)/60", out, re.M)})
    check(follow.returncode == 0, f"status --follow exits 0 when the job completes (exit {follow.returncode}, {err.strip()})")
    check(len(steps_seen) >= 3, f"status --follow refreshed while the job ran (steps shown {steps_seen})")
    final = out.rstrip().split("\n\n")[-1]
    check("step      60/60" in final and "ended     completed at step 60" in final,
          f"the final view shows step 60 and the end:\n{final}")
    check("failure   2 of 3 at step 35 (watchdog): relaunched by hardy run" in final,
          "the final view shows the last failure and its recovery")
    check(re.search(r"ckpt      step 60, 00:00:\d\d old", final) is not None, "the final view shows the newest checkpoint")
    check("1 ranks" in final and "100.0 samples/s" in final, "the final view shows world size and samples/s")

    # A run whose process is gone and that has not written for a while: not running.
    dead = tmp / "dead"
    dead.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    append(dead / "events.jsonl", [event("job_started", t0, steps=60), event("rank_started", t0, rank=0, pid=gone.pid)])
    append(dead / "metrics.jsonl", metrics[:5])
    for name in ("events.jsonl", "metrics.jsonl"):
        os.utime(dead / name, (t0 - 120, t0 - 120))
    r = subprocess.run([hardy, "status", str(dead), "--follow", "--interval", "0.2"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 1 and "not running" in r.stdout,
          f"status --follow on a dead run exits 1 saying it is not running (exit {r.returncode}: {r.stdout[-200:]})")

    # A job id names the run directory whose scheduler.json records it; a job its scheduler does not
    # run (here LSF, whose bjobs is missing: state UNKNOWN) ends --follow at once, saying so.
    submitted = tmp / "runs" / "job-1"
    submitted.mkdir(parents=True)
    (submitted / "scheduler.json").write_text(json.dumps({"scheduler": "lsf", "job_id": "4242", "job_name": "x"}))
    append(submitted / "events.jsonl", events[:2])
    append(submitted / "metrics.jsonl", metrics[:5])
    r = subprocess.run([hardy, "status", "4242", "--runs", str(tmp / "runs"), "--json"], capture_output=True,
                       text=True, timeout=60)
    status = json.loads(r.stdout) if r.returncode == 0 else {}
    check(status.get("run_dir") == str(submitted) and status.get("step") == 5,
          f"hardy status JOB_ID finds the run directory of job 4242 (exit {r.returncode}: {r.stderr.strip()})")
    r = subprocess.run([hardy, "status", "4242", "--runs", str(tmp / "runs"), "--follow", "--interval", "0.2"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "the job is not running (UNKNOWN" in r.stdout,
          f"status --follow on a job its scheduler does not run exits 1 saying so (exit {r.returncode}: "
          f"{r.stdout[-300:]})")

    # ---- hardy completion bash ----
    script = subprocess.run([hardy, "completion", "bash"], capture_output=True, text=True, timeout=30).stdout
    known = {"train": "--global-batch", "run": "--spare-nodes", "simulate": "--from-run", "eval": "--eval-samples",
             "data generate": "--samples-per-file", "ckpt list": "--help", "ckpt inspect": "--json",
             "ckpt verify": "--help", "ckpt diff": "--json", "submit": "--scheduler", "status": "--follow",
             "cancel": "--run-dir", "report": "--out", "completion": "--shell",
             "events": "--schema"}
    for command, option in known.items():
        line = next((l for l in script.splitlines() if l.strip().startswith(f'"{command}")')), "")
        check(f" {option} " in line.replace('"', " "), f"completion lists {option} for hardy {command}")
    completion = tmp / "hardy.bash"
    completion.write_text(script)
    probe = (f'source {completion}; COMP_WORDS=(hardy status --fol); COMP_CWORD=2; _hardy; echo "${{COMPREPLY[@]}}";'
             f' COMP_WORDS=(hardy ckpt in); COMP_CWORD=2; _hardy; echo "${{COMPREPLY[@]}}";'
             f' COMP_WORDS=(hardy run --nodes 2 -- --check); COMP_CWORD=5; _hardy; echo "${{COMPREPLY[@]}}"')
    r = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    lines = r.stdout.splitlines() + ["", "", ""]
    check(lines[0] == "--follow", f"bash completes 'hardy status --fol' to --follow (got '{lines[0]}')")
    check(lines[1] == "inspect", f"bash completes 'hardy ckpt in' to inspect (got '{lines[1]}')")
    check("--checkpoint-every" in lines[2].split(), f"after 'hardy run ... --' bash completes train options (got '{lines[2]}')")
    print(f"observe: {time.monotonic() - started:.1f} s for the --follow and completion checks")

check.finish("observe")
