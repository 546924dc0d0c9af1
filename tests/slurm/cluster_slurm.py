#!/usr/bin/python3
"""A private Slurm spanning an emulated cluster (tests/cluster/emulated_cluster.py): munged and
slurmctld run in the host namespace, which plays the login node at the bridge address, and one
slurmd runs inside each node's network and UTS namespaces with its own NodeName, NodeAddr, spool,
pid file and log. Timeouts are short, so Slurm marks a dead node DOWN within seconds.

As a library (root only; SkipTest where it cannot run):
    with EmulatedCluster(nodes=4) as cluster, ClusterSlurm(cluster) as slurm:
        slurm.run(["srun", "-N", "4", "hostname"])
        cluster.crash(1, link_down=True)          # slurmd dies with the node
        slurm.wait_for_node_state("hdy-node1", "down")
Leave the `with` blocks in this order (Slurm first): the private jobs are cancelled and the
daemons stopped by pid, then the cluster removes its namespaces and whatever still runs in them.

From the shell (makes a cluster, runs COMMAND with SLURM_CONF and the cluster's MPI settings in
its environment, tears everything down):
    cluster_slurm.py NODES -- srun -N 4 hostname
"""
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "cluster"))
from local_slurm import PrivateSlurm, SkipTest, missing_requirements, sbin  # noqa: E402,F401
import emulated_cluster  # noqa: E402

# Seconds without an answer from a slurmd before slurmctld marks its node DOWN. slurmctld pings
# every SlurmdTimeout/3 s, so a dead node is DOWN 5 to about 13 s after it died.
SLURMD_TIMEOUT_S = 5


class ClusterSlurm(PrivateSlurm):
    """Slurm over the nodes of an EmulatedCluster, all in one partition that jobs may
    oversubscribe (every emulated node shares this machine's cores)."""

    def __init__(self, cluster, cpus_per_node=4, start_timeout=60, requeue_delay=10):
        super().__init__(start_timeout=start_timeout, requeue_delay=requeue_delay)
        self.cluster = cluster
        # config_overrides below lets a node declare more CPUs than the machine has, so that a
        # job may ask for a few tasks per node on a 2-core machine.
        self.cpus = cpus_per_node
        self._slurmd = {}  # node name -> Popen

    # -- configuration ---------------------------------------------------------------------------
    def controller_host(self):
        # Nodes reach slurmctld at the bridge address; the host's own name is kept for Slurm's
        # check that it runs on the controller.
        return f"{self.host}({self.cluster.bridge_address})"

    def node_names(self):
        return self.cluster.hosts

    def node_settings(self):
        d = self.dir
        nodes = "\n".join(f"NodeName={n.hostname} NodeAddr={n.address} CPUs={self.cpus} State=UNKNOWN"
                          for n in self.cluster.nodes)
        return f"""# One slurmd per node, each with its own files (%n is the node's name).
SlurmdSpoolDir={d / 'spool'}/%n
SlurmdPidFile={d}/slurmd-%n.pid
SlurmdLogFile={d}/slurmd-%n.log
SlurmdParameters=config_overrides
# A dead node is noticed within seconds (slurmctld pings every SlurmdTimeout/3 s).
SlurmdTimeout={SLURMD_TIMEOUT_S}
MessageTimeout=5
{nodes}"""

    def slurmd_log(self, node):
        return self.dir / f"slurmd-{node}.log"

    # -- slurmd on the nodes ---------------------------------------------------------------------
    def _start_slurmds(self):
        for node in self.cluster.nodes:
            self.start_slurmd(node.hostname, wait=False)

    def start_slurmd(self, node, wait=True):
        """Starts (or restarts, after a crash) the slurmd of a node inside its namespaces.
        nsenter rather than `ip netns exec`, which remounts /sys and hides the cgroup mounts
        slurmd reads; the UTS namespace makes the node's hostname match its NodeName."""
        node = self.cluster.node(node)
        (self.dir / "spool" / node.hostname).mkdir(mode=0o700, exist_ok=True)
        name = f"slurmd-{node.hostname}"
        self._daemons = [(n, p) for n, p in self._daemons if n != name]
        self._spawn(name, node.nsenter() + [sbin("slurmd"), "-D", "-N", node.hostname, "-f", str(self.conf)])
        if wait:
            self.wait_for_node_state(node.hostname, ("idle", "mix", "alloc"), timeout=self.start_timeout)

    def slurmd_running(self, node):
        name = f"slurmd-{self.cluster.node(node).hostname}"
        return self._running(name)

    # -- what tests read -------------------------------------------------------------------------
    def node_fields(self, node):
        """`scontrol show node -o NODE` as a dict (State, Reason, ...)."""
        result = self.run(["scontrol", "show", "node", "-o", node], check=False)
        fields = {}
        for word in result.stdout.split():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_for_node_state(self, node, states, timeout=60):
        """Waits until sinfo's compact state of the node (without the `*` of a node that does
        not answer) is one of `states`; returns the time waited, or raises TimeoutError."""
        if isinstance(states, str):
            states = (states,)
        started = time.monotonic()
        state = None
        while time.monotonic() - started < timeout:
            state = self.node_states().get(node, "")
            if state.rstrip("*~#!%$@^-") in states:
                return time.monotonic() - started
            time.sleep(0.2)
        raise TimeoutError(f"node {node} not in {states} after {timeout} s: {state}\n{self.logs()}")


def main(argv):
    if "--" not in argv or argv.index("--") != 1 or not argv[0].isdigit():
        print(__doc__)
        return 2
    command = argv[2:]
    reason = missing_requirements()
    ok, why = emulated_cluster.namespaces_available()
    if reason or not ok:
        print(f"SKIPPED: {reason or why}")
        return 77
    with emulated_cluster.EmulatedCluster(nodes=int(argv[0])) as cluster, ClusterSlurm(cluster) as slurm:
        print(f"private Slurm on {','.join(cluster.hosts)}: SLURM_CONF={slurm.env['SLURM_CONF']}", file=sys.stderr)
        return subprocess.run(command, env={**slurm.env, **cluster.mpi_env()}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
