#!/usr/bin/python3
"""An emulated multi-node cluster on one Linux machine, for tests (CTest label `cluster`).

Each node is a network namespace with its own hostname (a persistent UTS namespace) and one veth
on a bridge in the host namespace. The host namespace, where `mpirun` and the supervisor run,
plays the login/batch node at the bridge address. Addresses come from 198.18.0.0/15 (RFC 2544,
benchmarking), which nothing else uses: cluster C is 198.18.C.0/24, the bridge is .1, node K is
.(11+K). Names resolve through /etc/hosts lines tagged with MARKER.

Every name carries the prefix `hdy` so that leftovers of a killed test can be found:
    bridge   hdy<C>br          host-side veth  hdy<C>v<K>       netns  hdy<C>n<K>
    node interface  eth0 (inside the netns)   hostnames  hdy-node<K> (cluster 0), hdy<C>-node<K>
State (UTS namespace files, the launch agent and its node table) lives under STATE_ROOT/hdy<C>.

As a library (root only; `namespaces_available()` says why not):
    with EmulatedCluster(nodes=4) as cluster:
        env = {**os.environ, **cluster.mpi_env()}
        subprocess.run(["mpirun", "--host", ",".join(f"{h}:2" for h in cluster.hosts), ...], env=env)
        cluster.crash(1)
The launch agent (`cluster.agent`) is what `mpirun --prtemca plm_ssh_agent` calls like ssh
(`mpi_env()` sets it through PRTE_MCA_plm_ssh_agent): it skips ssh options, checks that the
node answers on the network (a TCP connection attempt from the caller's namespace: refused means
up, a timeout means unreachable) and runs the command in the node's namespaces.

From the shell:
    emulated_cluster.py up N [MODE] make a cluster (prints its hosts, agent and MPI env) and leave it
    emulated_cluster.py down        remove every cluster (same as cleanup)
    emulated_cluster.py cleanup     remove everything with the prefix: processes in the node
                                    namespaces, namespaces, links, /etc/hosts lines, mounts, state
    emulated_cluster.py cleanup --stale   only clusters whose owning process is gone
    emulated_cluster.py status      list what exists
"""
import atexit
import errno
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PREFIX = "hdy"
MARKER = "# hardy-emulated-cluster"
STATE_ROOT = Path("/run/hardy-emulated-cluster")
NETNS_DIR = Path("/run/netns")
SUBNET_BASE = "198.18"          # 198.18.<cluster>.0/24, cluster 0..255
FIRST_NODE_HOST_PART = 11
PROBE_PORT = 9                  # discard; nothing listens, so a live node answers with a reset
PROBE_TIMEOUT_S = float(os.environ.get("HARDY_CLUSTER_PROBE_TIMEOUT", "1.0"))
DETACH_AFTER_S = 1.0            # detached agent: how long it waits for the command before leaving it
SKIP = 77

NETNS_RE = re.compile(rf"^{PREFIX}(\d+)n(\d+)$")
LINK_RE = re.compile(rf"^{PREFIX}(\d+)(br|v\d+)$")

# ssh options that take an argument (OpenSSH 9); any other option is a flag.
SSH_OPTS_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")


def _ip(*args, check=True, namespace=None):
    argv = ["ip"] + (["-n", namespace] if namespace else []) + list(args)
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _proc_desc(pid):
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        state = next((line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith("State:")), "?")
    except OSError:
        return None
    return f"pid {pid} [{state}] {cmd[:160]}"


def _netns_pids(netns):
    """Live processes whose network namespace is /run/netns/NETNS (zombies have none)."""
    result = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def namespaces_available():
    """(True, "") where an emulated cluster can run here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "an emulated cluster needs root (network and UTS namespaces)"
    for tool in ("ip", "nsenter", "unshare", "mount", "umount"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            return False, f"{tool} not found (packages iproute2, util-linux, mount)"
    probe = f"{PREFIX}255n0"
    link = f"{PREFIX}255v0"
    try:
        _ip("netns", "del", probe, check=False)
        result = _ip("netns", "add", probe, check=False)
        if result.returncode != 0:
            return False, f"ip netns add failed: {result.stderr.strip()}"
        result = _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", probe, check=False)
        if result.returncode != 0:
            return False, f"cannot create a veth pair: {result.stderr.strip()}"
        result = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True)
        if result.returncode != 0:
            return False, f"unshare --uts failed: {result.stderr.strip()}"
    finally:
        _ip("link", "del", link, check=False)
        _ip("netns", "del", probe, check=False)
    return True, ""


class Node:
    def __init__(self, cluster_id, index, state_dir):
        self.index = index
        self.netns = f"{PREFIX}{cluster_id}n{index}"
        self.veth = f"{PREFIX}{cluster_id}v{index}"           # host side; the node side is eth0
        self.hostname = f"{PREFIX}-node{index}" if cluster_id == 0 else f"{PREFIX}{cluster_id}-node{index}"
        self.address = f"{SUBNET_BASE}.{cluster_id}.{FIRST_NODE_HOST_PART + index}"
        self.uts = state_dir / "uts" / self.hostname

    def nsenter(self):
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", f"--uts={self.uts}", "--"]

    def as_dict(self):
        return {"hostname": self.hostname, "address": self.address, "netns": self.netns,
                "uts": str(self.uts), "veth": self.veth}


class EmulatedCluster:
    """N nodes (network + UTS namespaces) on one bridge; a context manager that always tears down.

    agent_mode: "detached" (default: the command starts in its own session inside the node; the
    agent returns its status when it ends within DETACH_AFTER_S, else leaves it running (a
    daemon) and exits 0; PRRTE then learns of a lost node
    only through its daemon's TCP connection: "PRTE has lost communication with a remote daemon")
    or "foreground" (the agent stays in the caller's namespace until the command ends, like an
    ssh client, and exits 255 when it is killed; PRRTE then reports a crashed node as "A daemon
    failed to report back after being spawned" and mpirun exits 255)."""

    def __init__(self, nodes=4, cluster_id=None, agent_mode="detached", probe_timeout=PROBE_TIMEOUT_S):
        ok, why = namespaces_available()
        if not ok:
            raise RuntimeError(why)
        cleanup(stale_only=True)
        self.cluster_id = _free_cluster_id() if cluster_id is None else cluster_id
        self.name = f"{PREFIX}{self.cluster_id}"
        self.state_dir = STATE_ROOT / self.name
        self.bridge = f"{self.name}br"
        self.bridge_address = f"{SUBNET_BASE}.{self.cluster_id}.1"
        self.subnet = f"{SUBNET_BASE}.{self.cluster_id}.0/24"
        self.nodes = [Node(self.cluster_id, i, self.state_dir) for i in range(nodes)]
        self.agent = str(self.state_dir / "agent")
        self.agent_mode = agent_mode
        self.probe_timeout = probe_timeout
        self._down = False
        self._lock = threading.Lock()
        atexit.register(self.down)
        self._previous_handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._up()
        except BaseException:
            self.down()
            raise

    # ---- construction and teardown -------------------------------------------------------------
    def _up(self):
        _ensure_state_root()
        (self.state_dir / "uts").mkdir(parents=True, exist_ok=True)
        (self.state_dir / "owner").write_text(f"{os.getpid()}\n")
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for node in self.nodes:
            _ip("netns", "add", node.netns)
            _ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
            _ip("link", "set", node.veth, "master", self.bridge, "up")
            _ip("addr", "add", f"{node.address}/24", "dev", "eth0", namespace=node.netns)
            _ip("link", "set", "eth0", "up", namespace=node.netns)
            _ip("link", "set", "lo", "up", namespace=node.netns)
            node.uts.touch()
            subprocess.run(["unshare", f"--uts={node.uts}", "hostname", node.hostname], check=True)
        (self.state_dir / "nodes.json").write_text(json.dumps({
            "cluster": self.name, "mode": self.agent_mode, "probe_timeout": self.probe_timeout,
            "nodes": [n.as_dict() for n in self.nodes]}, indent=1))
        agent = Path(self.agent)
        agent.write_text(f"#!/bin/sh\nexec /usr/bin/python3 {shlex.quote(str(Path(__file__).resolve()))} "
                         f"agent {shlex.quote(str(self.state_dir / 'nodes.json'))} \"$@\"\n")
        agent.chmod(0o755)
        lines = [f"{self.bridge_address} {self.name}-head {MARKER} {self.name}"]
        lines += [f"{n.address} {n.hostname} {MARKER} {self.name}" for n in self.nodes]
        _edit_hosts(lambda kept: kept + lines)
        for node in self.nodes:   # every node answers before anyone uses the cluster
            deadline = time.monotonic() + 5
            while not _reachable(node.address, 0.5) and time.monotonic() < deadline:
                time.sleep(0.05)

    def down(self):
        """Remove everything this cluster made (idempotent; also atexit and on SIGTERM/INT/HUP)."""
        with self._lock:
            if self._down:
                return
            self._down = True
        _remove_cluster(self.cluster_id)
        for sig, handler in self._previous_handlers.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
        self._previous_handlers = {}

    def _on_signal(self, signum, frame):
        self.down()
        previous = self._previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    # ---- what tests use ------------------------------------------------------------------------
    @property
    def hosts(self):
        return [n.hostname for n in self.nodes]

    def node(self, node):
        """A Node from its index, hostname or Node."""
        if isinstance(node, Node):
            return node
        if isinstance(node, int):
            return self.nodes[node]
        for n in self.nodes:
            if node in (n.hostname, n.netns, n.address):
                return n
        raise KeyError(node)

    def mpi_env(self):
        """Environment for mpirun (in the host namespace) so Open MPI and PRRTE use only the
        bridge subnet and launch through the agent."""
        return {
            "PRTE_MCA_plm_ssh_agent": self.agent,
            "PRTE_MCA_oob_tcp_if_include": self.subnet,
            "OMPI_MCA_btl_tcp_if_include": self.subnet,
            "OMPI_MCA_oob_tcp_if_include": self.subnet,
            "OMPI_MCA_btl": "tcp,sm,self",
            "OMPI_MCA_mpi_yield_when_idle": "1",
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }

    def run_on(self, node, argv, **popen_kwargs):
        """Start argv on a node (its network and hostname); returns the Popen."""
        return subprocess.Popen(self.node(node).nsenter() + list(argv), **popen_kwargs)

    def pids(self, node):
        return _netns_pids(self.node(node).netns)

    def kill_pid(self, pid, sig=signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def _signal_all(self, node, sig):
        pids = self.pids(node)
        for pid in pids:
            self.kill_pid(pid, sig)
        return pids

    def crash(self, node, link_down=False):
        """SIGKILL every process on the node (the Open MPI daemon included), repeatedly until none
        is left. The node's kernel stays up, so peers' connections are reset at once; with
        link_down=True the link goes down first, as when a machine loses power (peers hear
        nothing). Returns the pids killed."""
        if link_down:
            self.partition(node)
        killed = []
        for _ in range(50):
            pids = self._signal_all(node, signal.SIGKILL)
            if not pids:
                break
            killed += pids
            time.sleep(0.02)
        return sorted(set(killed))

    def freeze(self, node):
        """A hung node: link down, then SIGSTOP every process on it."""
        self.partition(node)
        return self._signal_all(node, signal.SIGSTOP)

    def partition(self, node):
        """Cut the node's cable (its host-side veth down): its processes run but hear nothing."""
        _ip("link", "set", self.node(node).veth, "down")

    def heal(self, node):
        """Undo freeze/partition: link up, SIGCONT every process."""
        _ip("link", "set", self.node(node).veth, "up")
        self._signal_all(node, signal.SIGCONT)

    def shape_link(self, node, mbit):
        """Caps the node's link at `mbit` Mbit/s both ways (a token bucket on each end of its veth:
        the host side shapes what reaches the node, eth0 inside its namespace what leaves it), as
        a NIC that fell back to a lower rate; None removes the cap. The caps go with the veth."""
        node = self.node(node)
        for device, namespace in ((node.veth, None), ("eth0", node.netns)):
            ns = ["-n", namespace] if namespace else []
            if mbit is None:
                subprocess.run(["tc", *ns, "qdisc", "del", "dev", device, "root"], capture_output=True)
                continue
            # A burst of 32 KB: enough for the token bucket's clock, small enough that a
            # 100-KB exchange already runs at the rate.
            argv = ["tc", *ns, "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit}mbit",
                    "burst", "32kb", "latency", "100ms"]
            result = subprocess.run(argv, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")

    def reachable(self, node, timeout=None):
        return _reachable(self.node(node).address, self.probe_timeout if timeout is None else timeout)

    def wait_no_leftovers(self, timeout=10.0):
        """Poll leftovers() until none or timeout (daemons exit about 0.6 s after mpirun);
        returns what is still left."""
        deadline = time.monotonic() + timeout
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def leftovers(self):
        """Processes still alive in any node namespace, one line each (empty: none)."""
        lines = []
        for node in self.nodes:
            for pid in _netns_pids(node.netns):
                desc = _proc_desc(pid)
                if desc:
                    lines.append(f"{node.hostname}: {desc}")
        return lines


# ---- module-level helpers --------------------------------------------------------------------
def _reachable(address, timeout):
    """Does the address answer on the network? A refused TCP connection counts as an answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect((address, PROBE_PORT))
            return True
        except ConnectionRefusedError:
            return True
        except OSError:
            return False


def _ensure_state_root():
    """STATE_ROOT as a private bind mount, so that UTS namespace files can be bound in it."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    if not _is_mountpoint(STATE_ROOT):
        subprocess.run(["mount", "--bind", str(STATE_ROOT), str(STATE_ROOT)], check=True)
    subprocess.run(["mount", "--make-private", str(STATE_ROOT)], check=True)


def _mounts_under(root):
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(str(root) + "/"):
            points.append(point)
    return points


def _is_mountpoint(path):
    return str(path) in _mounts_under(path)


def _free_cluster_id():
    used = {int(m.group(1)) for m in (LINK_RE.match(l) for l in _links()) if m}
    used |= {int(m.group(1)) for m in (NETNS_RE.match(n) for n in _netns_names()) if m}
    if STATE_ROOT.exists():
        used |= {int(p.name[len(PREFIX):]) for p in STATE_ROOT.iterdir() if re.fullmatch(rf"{PREFIX}\d+", p.name)}
    for cid in range(0, 255):
        if cid not in used:
            return cid
    raise RuntimeError("no free cluster id")


def _links():
    out = _ip("-o", "link", "show", check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def _netns_names():
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _edit_hosts(change):
    """Rewrite /etc/hosts as change(its lines): by rename where possible (readers never see half
    a file), in place where /etc/hosts is a mount point."""
    path = Path("/etc/hosts")
    text = path.read_text()
    lines = text.splitlines()
    new = change(lines)
    if new == lines:
        return
    data = "\n".join(new) + "\n"
    tmp = path.with_name(f".hosts.{PREFIX}.{os.getpid()}")
    try:
        tmp.write_text(data)
        st = path.stat()
        os.chmod(tmp, st.st_mode & 0o7777)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno not in (errno.EBUSY, errno.EXDEV, errno.EPERM):
            raise
        with open(path, "w") as f:
            f.write(data)


def _remove_hosts_lines(tag=None):
    def keep(lines):
        return [l for l in lines if MARKER not in l or (tag is not None and not l.rstrip().endswith(f"{MARKER} {tag}"))]
    _edit_hosts(keep)


def _kill_netns_processes(netns):
    for _ in range(100):
        pids = _netns_pids(netns)
        if not pids:
            return True
        for pid in pids:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.02)
    return not _netns_pids(netns)


def _remove_cluster(cid):
    """Everything of cluster `cid`: processes, namespaces, links, hosts lines, mounts, state."""
    name = f"{PREFIX}{cid}"
    namespaces = [n for n in _netns_names() if (m := NETNS_RE.match(n)) and int(m.group(1)) == cid]
    for netns in namespaces:
        _kill_netns_processes(netns)
    for netns in namespaces:
        _ip("netns", "del", netns, check=False)
    for link in _links():
        m = LINK_RE.match(link)
        if m and int(m.group(1)) == cid:
            _ip("link", "del", link, check=False)
    _remove_hosts_lines(name)
    state = STATE_ROOT / name
    for point in sorted(_mounts_under(state), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if state.exists():
        subprocess.run(["rm", "-rf", str(state)], check=False)
    _release_state_root()


def _release_state_root():
    if STATE_ROOT.exists() and not any(STATE_ROOT.iterdir()):
        for point in sorted(_mounts_under(STATE_ROOT), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        try:
            STATE_ROOT.rmdir()
        except OSError:
            pass


def _cluster_ids_present():
    ids = {int(m.group(1)) for m in (NETNS_RE.match(n) for n in _netns_names()) if m}
    ids |= {int(m.group(1)) for m in (LINK_RE.match(l) for l in _links()) if m}
    if STATE_ROOT.exists():
        ids |= {int(p.name[len(PREFIX):]) for p in STATE_ROOT.iterdir() if re.fullmatch(rf"{PREFIX}\d+", p.name)}
    for line in Path("/etc/hosts").read_text().splitlines():
        m = re.search(rf"{re.escape(MARKER)} {PREFIX}(\d+)\s*$", line)
        if m:
            ids.add(int(m.group(1)))
    return ids - {255}


def _owner_alive(cid):
    try:
        owner = (STATE_ROOT / f"{PREFIX}{cid}" / "owner").read_text().strip()
    except OSError:
        return False
    if owner == "manual":                   # made by `emulated_cluster.py up`: only `down` removes it
        return True
    try:
        pid = int(owner)
    except ValueError:
        return False
    return pid != os.getpid() and _pid_alive(pid)


def cleanup(stale_only=False):
    """Remove every emulated cluster (stale_only: only those whose owning process is gone), and
    any line with MARKER in /etc/hosts. Returns the cluster ids removed."""
    removed = []
    for cid in sorted(_cluster_ids_present()):
        if stale_only and _owner_alive(cid):
            continue
        _remove_cluster(cid)
        removed.append(cid)
    for netns in _netns_names():        # the availability probe, if it was interrupted
        if netns == f"{PREFIX}255n0":
            _kill_netns_processes(netns)
            _ip("netns", "del", netns, check=False)
    if not stale_only:
        _ip("link", "del", f"{PREFIX}255v0", check=False)
        _remove_hosts_lines()
        _release_state_root()
    return removed


def remaining_resources():
    """Anything with the prefix that still exists: namespaces, links, /etc/hosts lines, mounts,
    state, processes in the namespaces. Empty list: nothing is left."""
    found = []
    for netns in _netns_names():
        if netns.startswith(PREFIX):
            found.append(f"netns {netns}")
            found += [f"process in {netns}: {d}" for d in map(_proc_desc, _netns_pids(netns)) if d]
    found += [f"link {l}" for l in _links() if l.startswith(PREFIX)]
    found += [f"/etc/hosts: {l}" for l in Path("/etc/hosts").read_text().splitlines() if MARKER in l]
    found += [f"mount {p}" for p in _mounts_under(STATE_ROOT)]
    if STATE_ROOT.exists():
        found.append(f"state dir {STATE_ROOT}")
    return found


# ---- the launch agent ------------------------------------------------------------------------
def parse_ssh_argv(argv):
    """(host, command string) from ssh's `[options] [user@]host [command...]`."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        letters = arg[1:]
        for j, letter in enumerate(letters):
            if letter in SSH_OPTS_WITH_ARG:
                if j == len(letters) - 1:
                    i += 1          # the argument is the next word
                break               # else it is attached (-p22, -oX=Y)
        i += 1
    if i >= len(argv):
        raise ValueError("no host")
    host = argv[i].rsplit("@", 1)[-1]
    return host, " ".join(argv[i + 1:])     # ssh joins the words with spaces for the remote shell


def agent_main(table_path, argv):
    table = json.loads(Path(table_path).read_text())
    try:
        host, command = parse_ssh_argv(argv)
    except ValueError:
        print("usage: agent [ssh options] host [command]", file=sys.stderr)
        return 255
    node = next((n for n in table["nodes"] if host in (n["hostname"], n["address"], n["netns"])), None)
    if node is None:
        print(f"ssh: Could not resolve hostname {host}: Name or service not known", file=sys.stderr)
        return 255
    if not _reachable(node["address"], table["probe_timeout"]):
        print(f"ssh: connect to host {host} port 22: Connection timed out", file=sys.stderr)
        return 255
    argv = ["nsenter", f"--net={NETNS_DIR / node['netns']}", f"--uts={node['uts']}", "--",
            "/bin/sh", "-c", command or "exec ${SHELL:-/bin/sh} -l"]
    if table["mode"] == "detached":
        # Its own session, the caller's stdout/stderr; a command that is still running after
        # DETACH_AFTER_S (a daemon) is left to run and the agent reports success.
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            returncode = child.wait(timeout=DETACH_AFTER_S)
        except subprocess.TimeoutExpired:
            return 0
    else:
        returncode = subprocess.run(argv).returncode
    # ssh reports a connection that died (here: the remote command killed) as 255
    return 255 if returncode < 0 else returncode


# ---- CLI -------------------------------------------------------------------------------------
def main(argv):
    if len(argv) >= 2 and argv[0] == "agent":
        return agent_main(argv[1], argv[2:])
    command = argv[0] if argv else ""
    if command in ("cleanup", "down"):
        if os.geteuid() != 0:
            print("emulated_cluster: cleanup needs root; nothing to do")
            return 0
        stale_only = "--stale" in argv[1:]
        removed = cleanup(stale_only=stale_only)
        print(f"emulated_cluster: removed cluster(s) {removed or 'none'}")
        if stale_only:
            return 0
        left = remaining_resources()
        for line in left:
            print(f"emulated_cluster: LEFT: {line}")
        return 1 if left else 0
    if command == "up":
        cluster = EmulatedCluster(nodes=int(argv[1]) if len(argv) > 1 else 4,
                                  agent_mode=argv[2] if len(argv) > 2 else "detached")
        atexit.unregister(cluster.down)
        cluster._previous_handlers = {}
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        (STATE_ROOT / cluster.name / "owner").write_text("manual\n")
        print(f"hosts: {' '.join(cluster.hosts)}\nsubnet: {cluster.subnet}\nagent: {cluster.agent}")
        print("env: " + " ".join(f"{k}={v}" for k, v in cluster.mpi_env().items()))
        return 0
    if command == "status":
        for line in remaining_resources():
            print(line)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
