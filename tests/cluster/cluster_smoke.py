#!/usr/bin/python3
"""The emulated cluster works: four nodes with their own hostnames that resolve everywhere, a
launch agent that Open MPI's mpirun starts its daemons through, a node crash that mpirun notices,
and a teardown that leaves nothing behind.

Usage: cluster_smoke.py [MPIRUN]   (default: mpirun on PATH). Exit 0 pass, 1 fail, 77 skipped
(not root, no namespaces, no Open MPI mpirun)."""
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "lib"))
import emulated_cluster as ec  # noqa: E402
from hardy_test import Checks  # noqa: E402


def run(argv, timeout, **kwargs):
    """(returncode or None when it timed out, output)."""
    try:
        result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=timeout, **kwargs)
        return result.returncode, result.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out


def show(output):
    for line in output.replace("\0", "").splitlines():
        print(f"    | {line}")


def main():
    ok, why = ec.namespaces_available()
    if not ok:
        print(f"SKIPPED: {why}")
        return ec.SKIP
    mpirun = sys.argv[1] if len(sys.argv) > 1 else shutil.which("mpirun")
    if not mpirun or not os.access(mpirun, os.X_OK):
        print("SKIPPED: no mpirun")
        return ec.SKIP
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" not in version and "PRRTE" not in version and "prterun" not in version:
        print(f"SKIPPED: {mpirun} is not Open MPI's (the agent is Open MPI's plm_ssh_agent)")
        return ec.SKIP

    check = Checks()
    with ec.EmulatedCluster(nodes=4) as cluster:
        name = cluster.name
        print(f"cluster {name}: {' '.join(cluster.hosts)} on {cluster.subnet}, agent {cluster.agent}")

        # Hostnames, loopback and name resolution on every node and on the host.
        names = []
        for i, node in enumerate(cluster.nodes):
            rc, out = run(node.nsenter() + ["hostname"], 10)
            names.append(out.strip())
            check(rc == 0 and out.strip() == node.hostname, f"{node.hostname}: hostname is {out.strip()!r}")
            rc, out = run(node.nsenter() + ["getent", "hosts"] + cluster.hosts, 10)
            resolved = {line.split()[1]: line.split()[0] for line in out.splitlines() if len(line.split()) > 1}
            check(rc == 0 and all(resolved.get(n.hostname) == n.address for n in cluster.nodes),
                  f"{node.hostname}: every node resolves ({resolved})")
            rc, out = run(node.nsenter() + ["ip", "-br", "link", "show", "lo"], 10)
            check(" UNKNOWN " in out or " UP " in out, f"{node.hostname}: loopback up ({out.strip()})")
        check(len(set(names)) == len(cluster.nodes), f"hostnames are distinct: {names}")
        check(all(socket.gethostbyname(n.hostname) == n.address for n in cluster.nodes),
              "the host namespace resolves every node")

        # The agent: an ssh-like probe that fails when the node cannot be reached.
        for host in cluster.hosts:
            start = time.monotonic()
            rc, out = run([cluster.agent, "-x", "-o", "BatchMode=yes", host, "true"], 10)
            check(rc == 0, f"agent probe {host}: rc {rc} in {time.monotonic() - start:.2f} s")
        cluster.partition(1)
        start = time.monotonic()
        rc, out = run([cluster.agent, cluster.hosts[1], "true"], 10)
        check(rc not in (0, None) and "timed out" in out,
              f"agent probe of partitioned {cluster.hosts[1]}: rc {rc} in {time.monotonic() - start:.2f} s: {out.strip()}")
        cluster.heal(1)
        rc, out = run([cluster.agent, cluster.hosts[1], "hostname"], 10)
        check(rc == 0 and out.strip() == cluster.hosts[1], f"agent after heal: rc {rc}, {out.strip()!r}")

        # mpirun through the agent: 8 ranks, 2 per node. Each rank lives 1 s: with programs
        # that exit at once, PRRTE 3.0.11's mpirun sometimes never returned here.
        env = {**os.environ, **cluster.mpi_env()}
        hosts = ",".join(f"{h}:2" for h in cluster.hosts)
        base = [mpirun, "--oversubscribe", "--bind-to", "none", "-n", "8", "--host", hosts]
        start = time.monotonic()
        rc, out = run(base + ["sh", "-c", "hostname; sleep 1"], 60, env=env)
        seen = sorted(line.strip() for line in out.splitlines() if line.strip() in cluster.hosts)
        check(rc == 0 and seen == sorted(cluster.hosts * 2),
              f"mpirun -n 8 over 4 nodes: rc {rc} in {time.monotonic() - start:.1f} s, ranks on {seen}")
        if rc != 0:
            show(out)
        check(not cluster.wait_no_leftovers(10), "no process left on the nodes after the job")

        # A node crash (every process of hdy-node2 killed, daemon included) under a longer job.
        victim = 2
        job = subprocess.Popen(base + ["--with-ft", "ulfm", "sleep", "60"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sleeps = [p for n in range(4) for p in cluster.pids(n)
                      if Path(f"/proc/{p}/comm").exists() and Path(f"/proc/{p}/comm").read_text().strip() == "sleep"]
            if len(sleeps) >= 8:
                break
            time.sleep(0.1)
        check(len(sleeps) >= 8, f"8 ranks running before the crash ({len(sleeps)})")
        crashed_at = time.monotonic()
        killed = cluster.crash(victim)
        try:
            out, _ = job.communicate(timeout=30)
            rc = job.returncode
        except subprocess.TimeoutExpired:
            job.kill()
            out, _ = job.communicate()
            rc = None
        took = time.monotonic() - crashed_at
        print(f"crash({cluster.hosts[victim]}) killed {len(killed)} processes; mpirun exited with {rc} "
              f"{took:.2f} s later and printed:")
        show(out)
        check(rc is not None and took < 30, "mpirun ended after the node crash")
        check("lost communication with a remote daemon" in out and f"on node {cluster.hosts[victim]}" in out,
              f"mpirun named the lost node {cluster.hosts[victim]}")
        check(not cluster.wait_no_leftovers(10), "no process left on the nodes after the crash")

    left = [line for line in ec.remaining_resources()]
    check(not left, f"teardown left nothing ({left})")
    check(not any(l.startswith(ec.PREFIX) for l in ec._netns_names()), "no network namespace with the prefix")
    check(not any(l.startswith(ec.PREFIX) for l in ec._links()), "no bridge or veth with the prefix")
    check(ec.MARKER not in Path("/etc/hosts").read_text(), "no /etc/hosts line with the marker")
    check(not ec._mounts_under(ec.STATE_ROOT / name), "no UTS namespace mount left")
    check.finish("cluster/smoke")


if __name__ == "__main__":
    sys.exit(main())
