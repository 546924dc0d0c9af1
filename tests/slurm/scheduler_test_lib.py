"""What the Slurm and LSF integration tests share: running hardy, checks, job configurations,
and templates whose `hardy run` is tests/slurm/fake_hardy_run.py."""
import json
import shlex
import subprocess
import sys
from pathlib import Path

SKIP = 77
HERE = Path(__file__).resolve().parent
FAKE_HARDY_RUN = HERE / "fake_hardy_run.py"


def check(condition, message, details=""):
    if not condition:
        print(f"FAILED: {message}")
        if details:
            print(details)
        sys.exit(1)
    print(f"ok: {message}")


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def read_jsonl(path):
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Hardy:
    """Runs `hardy` from `cwd`: a job that `hardy submit` hands to sbatch or bsub works in the
    directory it was submitted from, and whatever the scheduler writes there by default
    (Slurm's slurm-<job id>.out) must land in the test's temporary directory, not the checkout."""

    def __init__(self, binary, env=None, cwd=None):
        self.binary = str(binary)
        self.env = env
        self.cwd = cwd

    def __call__(self, *args, check_status=0, env=None, timeout=120):
        result = subprocess.run([self.binary, *map(str, args)], capture_output=True, text=True,
                                env=env or self.env, timeout=timeout, cwd=self.cwd)
        if check_status is not None and result.returncode != check_status:
            print(f"FAILED: hardy {' '.join(map(str, args))} exited {result.returncode}, not {check_status}")
            print(result.stdout[-3000:], result.stderr[-3000:])
            sys.exit(1)
        return result

    def skip_without_supervisor(self):
        """The real-job tests need `hardy run` (the supervisor) and `hardy train --resume`."""
        run = subprocess.run([self.binary, "run", "--help"], capture_output=True, text=True, env=self.env)
        if run.returncode != 0:
            skip("`hardy run --help` fails: this build has no supervisor yet")
        train = subprocess.run([self.binary, "train", "--help"], capture_output=True, text=True, env=self.env)
        for option in ("--resume", "--checkpoint-every"):
            if option not in train.stdout:
                skip(f"`hardy train` has no {option} yet")


def job_config(source_dir, path, **overrides):
    """examples/tiny.ini with some options replaced (`name = value` lines, names with dashes)."""
    lines = []
    for line in (Path(source_dir) / "examples" / "tiny.ini").read_text().splitlines():
        name = line.split("=")[0].strip()
        if name.replace("-", "_") not in overrides:
            lines.append(line)
    lines += [f"{name.replace('_', '-')} = {value}" for name, value in overrides.items()]
    Path(path).write_text("\n".join(lines) + "\n")
    return path


def template_with_fake_hardy(hardy, scheduler, path, *extra):
    """The built-in template of `scheduler`, with tests/slurm/fake_hardy_run.py as its hardy."""
    text = hardy("submit", "--scheduler", scheduler, "--print-template", *extra).stdout
    check("{{hardy}} run" in text, f"the built-in {scheduler} template runs {{{{hardy}}}} run")
    fake = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_HARDY_RUN))}"
    Path(path).write_text(text.replace("{{hardy}}", fake))
    return path
