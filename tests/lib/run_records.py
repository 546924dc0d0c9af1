"""A run directory's events.jsonl and metrics.jsonl written as hardy writes them, without training:
for the tests of what reads a run (hardy report, hardy status, the TensorBoard export)."""
import json
import time


def event(name, t, **fields):
    return {"event": name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), "unix_time": t, **fields}


def metric(step, t, world_size, attempt=1):
    """One committed step; a step trained again after a rollback (attempt 2) has another loss."""
    return {"step": step, "epoch": 0, "loss": 1.0 / step / attempt, "lr": 0.001 * (1 - step / 100),
            "samples_per_s": 100.0, "world_size": world_size, "global_batch": 8, "compute_s": 0.05,
            "data_wait_s": 0.001 * step, "input_copy_s": 0.002, "input_device_s": 0.004, "compute_device_s": 0.045, "allreduce_s": 0.01, "snapshot_s": 0.0, "skipped_samples": 0,
            "step_s": 0.08, "unix_time": t}


def append(path, records):
    with open(path, "a", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(record) + "\n")
            file.flush()


def write_run(run, t0, rollback=False):
    """A supervised job of 60 steps: 4 ranks, a failure at step 20 survived in the job (shrink to 2),
    a failure at 35 that killed the job and a relaunch on 1 rank, a preemption signal, checkpoints
    every 10. Without rollback the relaunched job goes on at step 35; with it, the failure ends
    step 35 unlogged and the relaunch resumes from the checkpoint at step 30, so steps 31 to 34 are
    logged twice (the second time with half the loss). Returns (events, metrics)."""
    events, metrics = [event("supervisor_started", t0, pid=1), event("job_started", t0 + 1, steps=60, world_size=4)], []
    clock = {"t": t0 + 2, "world": 4}

    def train(steps, attempt):
        for step in steps:
            clock["t"] += 0.1
            t = clock["t"]
            if step == 20 and attempt == 1:
                events.extend([event("failure_detected", t, step=20, failed_ranks=[2, 3], failed_nodes=[1],
                                     detected_by="process failure error"),
                               event("communicator_shrunk", t + 0.01, old_size=4, new_size=2, seconds=0.001),
                               event("recovery_finished", t + 0.02, step=19, seconds=0.02, attempts=1)])
                clock["world"] = 2
            if step == 35 and attempt == 1:
                events.extend([event("failure_detected", t, step=35, failed_ranks=[1], failed_nodes=[0],
                                     detected_by="watchdog", stuck_in="allreduce"),
                               event("launch_ended", t + 1, exit_status=1, how="exit status 1"),
                               event("job_relaunched", t + 2, world_size=1, excluded_nodes=["node0"])])
                clock["t"] += 3
                clock["world"] = 1
                if rollback:
                    return
            if step == 45:
                events.append(event("preemption_requested", clock["t"], step=45, signal="SIGUSR1"))
            metrics.append(metric(step, clock["t"], clock["world"], attempt))
            if step % 10 == 0:
                events.append(event("checkpoint_written", clock["t"], step=step,
                                    path=f"{run}/checkpoints/ckpt-{step}.h5"))

    train(range(1, 61), 1)
    if rollback:
        train(range(31, 61), 2)
    t = clock["t"]
    events += [event("job_finished", t + 0.1, status="completed", steps=60, failures=1, world_size=1),
               event("supervisor_finished", t + 0.2, status=0, how="completed at step 60", launches=2)]
    return events, metrics
