#!/usr/bin/env python3
"""A private one-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's
`slurm-wlm` and `munge` packages, with their own key, socket, configuration, state, spool, log
and pid files in a temporary directory and their own TCP ports, so that nothing on the machine is
touched and several clusters never collide. Slurm's commands find it through SLURM_CONF.

It installs nothing (scripts/lib/setup.sh owns apt) and needs root: slurmd runs jobs as their
submitting user and SlurmUser is root. Everything it started is stopped by pid when the `with`
block ends, also on failure; the private cluster's jobs are cancelled first, because job steps
(slurmstepd) outlive slurmd by design.

PrivateSlurm holds what every private cluster shares (munged, slurmctld, the common slurm.conf,
the helpers tests use, the teardown); LocalSlurm is this host as its one node, and
tests/slurm/cluster_slurm.py's ClusterSlurm runs a slurmd in every node of an emulated cluster.

As a library:
    with LocalSlurm() as slurm:
        subprocess.run(["sbatch", ...], env=slurm.env)
From the shell (starts the cluster, runs the command with SLURM_CONF set, stops the cluster):
    local_slurm.py -- sbatch --wrap hostname

A test that cannot run here (not root, packages missing) gets SkipTest; `skip_unless_available()`
turns that into exit status 77, CTest's SKIP_RETURN_CODE for these tests.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "scontrol", "scancel", "squeue")


class SkipTest(Exception):
    pass


def missing_requirements():
    """Why a private Slurm cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "a private Slurm needs root (slurmd runs jobs as their user)"
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    absent = [name for name in DAEMONS if shutil.which(name, path=search) is None]
    if absent:
        return f"not installed: {' '.join(absent)} (Debian packages slurm-wlm and munge)"
    return None


def skip_unless_available():
    reason = missing_requirements()
    if reason:
        print(f"SKIPPED: {reason}")
        sys.exit(SKIP)


def free_port():
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def sbin(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


class PrivateSlurm:
    """What every private cluster shares: munged with its own key and socket, slurmctld, the
    common slurm.conf, the helpers tests use, and a teardown by pid. A subclass says where the
    controller listens (`controller_host`), which nodes there are (`node_lines`, `node_names`)
    and how its slurmd daemons start (`_start_slurmds`)."""

    partition = "debug"

    def __init__(self, start_timeout=60, requeue_delay=10):
        self.start_timeout = start_timeout
        self.requeue_delay = requeue_delay
        self.host = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.dir = None
        self.env = None
        self._daemons = []  # (name, Popen), in start order

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self):
        reason = missing_requirements()
        if reason:
            raise SkipTest(reason)
        # Under /tmp, short: the munge socket path must fit in a sockaddr_un (108 bytes).
        self.dir = Path(tempfile.mkdtemp(prefix="hardy-slurm-"))
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        if self.env is not None and self._running("slurmctld"):
            self._cancel_all_jobs()
        for name, process in reversed(self._daemons):
            self._stop(name, process)
        self._daemons.clear()
        if self.dir is not None and not os.environ.get("HARDY_KEEP_SLURM_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def _start(self):
        d = self.dir
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(mode=0o700)
        key = d / "munge" / "munge.key"
        subprocess.run([sbin("mungekey"), "--create", "--keyfile", str(key)], check=True)
        os.chmod(key, 0o400)
        self.socket = d / "munge" / "socket"
        # --force: munged refuses world-writable ancestors such as /tmp without it.
        self._spawn("munged", [sbin("munged"), "--foreground", "--force", f"--key-file={key}",
                               f"--socket={self.socket}", f"--pid-file={d / 'munge' / 'pid'}",
                               f"--log-file={d / 'munge' / 'log'}", f"--seed-file={d / 'munge' / 'seed'}"])
        self._wait(lambda: self.socket.exists(), "munged to create its socket", d / "munge" / "log")

        conf = d / "slurm.conf"
        conf.write_text(self.configuration())
        self.conf = conf
        self.env = dict(os.environ, SLURM_CONF=str(conf))
        self._spawn("slurmctld", [sbin("slurmctld"), "-D", "-i", "-f", str(conf)])
        self._wait(lambda: self._query(["scontrol", "ping"]).endswith("is UP"), "slurmctld to answer",
                   d / "slurmctld.log")
        self._start_slurmds()
        self._wait(self.all_nodes_idle, f"node(s) {','.join(self.node_names())} to become idle",
                   self.slurmd_log(self.node_names()[0]))

    def configuration(self):
        d = self.dir
        return f"""# Written by tests/slurm/{type(self).__name__} ({Path(__file__).name}): a private cluster.
ClusterName=hardytest
SlurmctldHost={self.controller_host()}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
# Slurm's munge plugins talk to our munged, not the system's. cred_expire also sets how long a
# requeued job waits before it may start again (120 s by default; shorter keeps tests short).
AuthInfo=socket={self.socket},cred_expire={self.requeue_delay}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d / 'state'}
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmctldLogFile={d / 'slurmctld.log'}
# No cgroups: processes are tracked by their parent ids and tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
ReturnToService=2
# Batch jobs may be requeued (--requeue, `scontrol requeue`): hardy's restart path.
JobRequeue=1
# A requeued job becomes eligible once its begin time passes, and Slurm's main scheduling loop
# looks at pending jobs every 60 s by default: every 2 s keeps requeue tests short.
SchedulerParameters=sched_interval=2
# Seconds between SIGTERM and SIGKILL at a time limit or cancel; short keeps tests short.
KillWait=5
# Finished jobs stay visible to `scontrol show job` this long (there is no slurmdbd for sacct).
MinJobAge=600
{self.node_settings()}
PartitionName={self.partition} Default=YES Nodes={','.join(self.node_names())} OverSubscribe=FORCE MaxTime=INFINITE State=UP
"""

    # -- what a subclass provides ----------------------------------------------------------------
    def controller_host(self):
        return self.host

    def node_names(self):
        raise NotImplementedError

    def node_settings(self):
        """slurmd's paths and the NodeName lines of slurm.conf."""
        raise NotImplementedError

    def slurmd_log(self, node):
        raise NotImplementedError

    def _start_slurmds(self):
        raise NotImplementedError

    # -- helpers for tests -----------------------------------------------------------------------
    def run(self, args, check=True, **kwargs):
        """Runs a Slurm command against this cluster and returns the CompletedProcess."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 60)
        # From this Slurm's own directory: a job's default output file goes to where it was
        # submitted, and the checkout is no place for it.
        kwargs.setdefault("cwd", self.dir)
        return subprocess.run(args, env=kwargs.pop("env", self.env), check=check, **kwargs)

    def job_fields(self, job_id):
        """`scontrol show job -o` as a dict (JobState, Restarts, ExitCode, ...); {} once forgotten."""
        result = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        if result.returncode != 0:
            return {}
        fields = {}
        for word in result.stdout.split():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_for_state(self, job_id, states, timeout):
        """Waits until the job is in one of `states`; returns its fields or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        fields = {}
        while time.monotonic() < deadline:
            fields = self.job_fields(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} not in {states} after {timeout} s: {fields.get('JobState')}")

    def node_states(self):
        """{node: sinfo's compact state} (idle, alloc, mix, down*, drain, ...)."""
        out = self._query(["sinfo", "-h", "-N", "-o", "%N %t"])
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def node_idle(self, node=None):
        """True when the node runs nothing and has finished cleaning up after every job."""
        return self.node_states().get(node or self.node_names()[0]) == "idle"

    def all_nodes_idle(self):
        states = self.node_states()
        return all(states.get(node) == "idle" for node in self.node_names())

    def logs(self):
        """The daemons' logs, for a failing test's output."""
        text = []
        names = ["slurmctld.log", *(str(self.slurmd_log(n).relative_to(self.dir)) for n in self.node_names()),
                 "munge/log"]
        for name in names:
            path = self.dir / name
            if path.exists():
                text.append(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:]))
        return "\n".join(text)

    # -- internals -------------------------------------------------------------------------------
    def _spawn(self, name, args):
        log = open(self.dir / f"{name}.stdout", "w")
        # PR_SET_PDEATHSIG: a test killed by CTest's timeout takes its daemons with it.
        self._daemons.append((name, subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                                     stdin=subprocess.DEVNULL, env=self.env,
                                                     preexec_fn=_die_with_parent)))
        log.close()

    def _running(self, name):
        return any(n == name and p.poll() is None for n, p in self._daemons)

    def _query(self, args):
        try:
            return self.run(args, check=False, timeout=10).stdout.strip()
        except subprocess.TimeoutExpired:
            return ""

    def _wait(self, ready, what, log):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self._daemons if p.poll() is not None]
            if dead:
                break
            if ready():
                return
            time.sleep(0.2)
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        problem = f"{', '.join(dead)} exited" if dead else f"timed out after {self.start_timeout} s"
        raise RuntimeError(f"private Slurm: waiting for {what}: {problem}\n{tail}")

    def _cancel_all_jobs(self):
        # The cluster is private, so every job in it is ours.
        self.run(["scancel", "--full", "--partition", self.partition], check=False, timeout=20)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self._query(["squeue", "-h", "-o", "%i"]):
            time.sleep(0.5)

    @staticmethod
    def _stop(name, process):
        if process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _die_with_parent():
    """In a daemon's child before exec: SIGKILL it when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalSlurm(PrivateSlurm):
    """One node (this host, all its CPUs) in one partition, `debug`, that jobs may oversubscribe."""

    def node_names(self):
        return [self.host]

    def node_settings(self):
        d = self.dir
        return f"""SlurmdSpoolDir={d / 'spool'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmdLogFile={d / 'slurmd.log'}
NodeName={self.host} CPUs={self.cpus} State=UNKNOWN"""

    def slurmd_log(self, node):
        return self.dir / "slurmd.log"

    def _start_slurmds(self):
        self._spawn("slurmd", [sbin("slurmd"), "-D", "-f", str(self.conf)])


def main(argv):
    if "--" not in argv:
        print(__doc__)
        return 2
    command = argv[argv.index("--") + 1:]
    skip_unless_available()
    with LocalSlurm() as slurm:
        print(f"private Slurm up: SLURM_CONF={slurm.env['SLURM_CONF']}", file=sys.stderr)
        return subprocess.run(command, env=slurm.env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
