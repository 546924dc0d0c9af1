"""What the benchmark drivers under bench/ share: finding the built binaries, turning a
configuration into command-line options, running a measurement that prints one JSON line, and
stamping results with the machine and commit they were measured on."""
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_binary(name, explicit, script, builds=("build",), hint=""):
    """`explicit` when given, else the first build/bin/<name> that is executable."""
    if explicit:
        return explicit
    for build in builds:
        path = os.path.join(ROOT, build, "bin", name)
        if os.access(path, os.X_OK):
            return path
    sys.exit(f"{script}: no {name} in {', '.join(b + '/bin' for b in builds)}; "
             f"{hint or f'build the {name} target'}")


def option_list(*option_sets):
    """["--key", "value", ...] from dicts, later ones overriding earlier ones."""
    options = {}
    for option_set in option_sets:
        options.update(option_set)
    args = []
    for key, value in options.items():
        args += [f"--{key}", str(value)]
    return args


def add_round_arguments(parser, configs, default_configs, warmup):
    """--configs, --rounds, --warmup and --steps, as every model benchmark takes them."""
    parser.add_argument("--configs", default=default_configs,
                        help=f"comma-separated, from {', '.join(configs)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--steps", type=int, default=20)


def chosen_configs(parser, args, configs):
    chosen = args.configs.split(",")
    for name in chosen:
        if name not in configs:
            parser.error(f"unknown config {name}; choose from {', '.join(configs)}")
    return chosen


def run_json(command, script, env=None):
    """Runs a measurement and returns the JSON object on the last line of its output."""
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{script}: {' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_jsonl(path):
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


def git_commit(short=False):
    done = subprocess.run(["git", "-C", ROOT, "rev-parse"] + (["--short"] if short else []) + ["HEAD"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    return done.stdout.strip() or None


def machine_info():
    """What every result records of where it was measured; drivers add their own fields."""
    return {"platform": platform.platform(), "python": platform.python_version(),
            "hostname": platform.node(), "cpus_online": os.cpu_count(), "git_commit": git_commit()}


def write_results(results, out, default_name):
    """Writes results as JSON to `out`, or to bench/results/<default_name>; returns the path."""
    path = out or os.path.join(ROOT, "bench", "results", default_name)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as stream:
        json.dump(results, stream, indent=1)
    return path


def deepcam_data(hardy, root):
    """Writes a small data set in the published DeepCAM layout (128 training and 32 validation
    samples of 64x96) under `root` with `hardy data generate`; returns the `hardy train` options
    that train on it."""
    subprocess.run([hardy, "data", "generate", "--format", "deepcam", "--out", str(root), "--samples", "128",
                    "--validation-samples", "32", "--height", "64", "--width", "96", "--seed", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    return ["--dataset", str(root)]


def add_hardy_arguments(parser):
    """--hardy (the executable; build/bin/hardy when not given) and --mpirun (the checkout's Open
    MPI) for a driver that trains under mpirun."""
    parser.add_argument("--hardy", help="path of hardy (default build/bin/hardy)")
    parser.add_argument("--mpirun", default=os.path.join(ROOT, ".venv", "bin", "mpirun"))
