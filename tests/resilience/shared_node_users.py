#!/usr/bin/env python3
"""Two Unix users on one node, as on a shared cluster (CTest label `fault`; needs root: exit 77).

Usage: shared_node_users.py HARDY

The test creates two users with useradd and removes them (and what they left in /dev/shm)
afterwards, also when a check fails. Both train with the default --snapshot-dir
(/dev/shm/hardy-<uid>).

The test users cannot reach a checkout in a home directory (mode 0700, as homes usually are), so
they run a copy of what they need in a world-readable directory that the test removes at the end:
the executable and the libraries it loads from the checkout (.venv's Open MPI with the bundled
libraries beside it). So that this cannot pass only because the checkout happens to be open to
everyone, the checkout's top directory is made 0700 while the test runs (root, which runs every
other test, is not held back by that) and its mode is put back afterwards.

1. The first user's job dies and leaves its snapshots; the second user's job still gets its own
   snapshot tree (the first user's tree used to block it), and its relaunch resumes from it.
2. Neither user can read the other's snapshots: directories 0700, files 0600.
3. A job's start removes what killed MPI ranks of its user left in /dev/shm (Open MPI's
   sm_segment.* files that no process maps), and nothing of another user's.
4. The first user plants a tree where the second user's goes: world-writable, with a valid
   snapshot of step 1000 and a `.tmp` link to a file of the second user in the host directory, and
   a host directory that is a symbolic link to the second user's real checkpoints. The second user's `--resume latest` refuses the tree with a
   message naming it (snapshot_tier_refused), resumes from its own checkpoint, completes, and
   nothing in or behind the planted tree changed.
"""
import grp
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from hardy_test import Checks, read_jsonl, skip, snapshot_files, snapshot_step  # noqa: E402

built_hardy = os.path.abspath(sys.argv[1])
if os.geteuid() != 0:
    skip("creating Unix users needs root")
if not shutil.which("useradd") or not shutil.which("runuser"):
    skip("useradd and runuser are needed to create and act as users")
if not shutil.which("ldd"):
    skip("ldd is needed to find the libraries hardy loads from the checkout")
checkout = Path(__file__).resolve().parents[2]


sanitizer_options = []  # "ASAN_OPTIONS=...", naming reachable copies of the suppression files


def reachable_copy(executable, below):
    """A world-readable copy of `executable` and of the shared libraries it loads from `below`
    (with Open MPI's bundled libraries, which its RUNPATH finds in `openmpi/` beside libmpi):
    (its directory, the executable's path, the library directory for LD_LIBRARY_PATH)."""
    top = Path(tempfile.mkdtemp(prefix="hardy-shared-node-", dir="/tmp"))
    lib = top / "lib"
    (top / "bin").mkdir()
    lib.mkdir()
    copy = top / "bin" / "hardy"
    shutil.copy2(executable, copy)
    listed = subprocess.run(["ldd", executable], capture_output=True, text=True, check=True).stdout
    for line in listed.splitlines():
        words = line.split()
        if "=>" not in words or len(words) < 3 or not words[2].startswith("/"):
            continue
        path = Path(words[2]).resolve()
        if below not in path.parents:
            continue
        shutil.copy2(path, lib / words[0])
        bundled = path.parent / "openmpi"
        if bundled.is_dir() and not (lib / "openmpi").exists():
            shutil.copytree(bundled, lib / "openmpi", symlinks=True)
    # A sanitizer build's runtime reads the suppression files its options name at start: the
    # checkout's copies are out of the other users' reach too.
    sanitizers = top / "sanitizers"
    for variable in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        if variable not in os.environ:
            continue
        options = []
        for option in os.environ[variable].split(":"):
            key, _, value = option.partition("=")
            if key == "suppressions" and Path(value).is_file():
                sanitizers.mkdir(exist_ok=True)
                shutil.copy2(value, sanitizers / Path(value).name)
                option = f"suppressions={sanitizers / Path(value).name}"
            options.append(option)
        sanitizer_options.append(f"{variable}={':'.join(options)}")
    for directory, _, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = Path(directory) / name
            if not path.is_symlink():
                os.chmod(path, 0o755)
    return top, copy, lib

STEPS = 8
TRAIN = ["--synthetic", "--samples", "32", "--height", "32", "--width", "32", "--global-batch", "4",
         "--model-width", "8", "--aspp-channels", "16", "--decoder-channels", "16", "--low-level-channels", "8",
         "--aspp-rates", "1,2", "--eval-samples", "0", "--seed", "9", "--steps", str(STEPS), "--log-every", "100",
         "--snapshot-every", "1"]  # the relaunch below resumes from the step before the failure
check = Checks()
KILLED = (-9, 128 + 9)  # SIGKILL, as Python or as runuser reports it
suffix = f"{os.getpid() % 100000}"
names = [f"hardy-a{suffix}", f"hardy-b{suffix}"]
created = []


def as_user(name, command, **kwargs):
    return subprocess.run(["runuser", "-u", name, "--", "env", *sanitizer_options, *command],
                          capture_output=True, text=True, timeout=240, **kwargs)


def train(name, run, *extra):
    result = as_user(name, ["env", f"LD_LIBRARY_PATH={libraries}", hardy, "train", *TRAIN,
                            "--run-dir", str(run), *extra], cwd="/")
    print(f"[{name}]", result.stdout[-500:], result.stderr[-1200:], flush=True)
    return result


def tree_state(root):
    """Every entry below root (not following links) with its owner, mode, link target and content hash."""
    state = {}
    for path in sorted(Path(root).rglob("*")):
        info = path.lstat()
        entry = (info.st_uid, oct(info.st_mode))
        if path.is_symlink():
            entry += (os.readlink(path),)
        elif path.is_file():
            entry += (hashlib.sha256(path.read_bytes()).hexdigest(),)
        state[str(path)] = entry
    return state


checkout_mode = checkout.stat().st_mode & 0o7777
copied = None
try:
    os.chmod(checkout, 0o700)  # as a checkout in a home directory is
    copied, hardy, libraries = reachable_copy(built_hardy, checkout)
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        created.append(name)
    denied = as_user(names[0], [built_hardy, "--version"])
    check(denied.returncode != 0, f"{names[0]} cannot run the checkout's own hardy ({denied.stderr[-200:]!r}): "
          "the test would not show that the copy is needed")
    uids = [pwd.getpwnam(name).pw_uid for name in names]
    roots = [Path(f"/dev/shm/hardy-{uid}") for uid in uids]
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)

    with tempfile.TemporaryDirectory(prefix="hardy-two-users-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o755)
        homes = []
        for name, uid in zip(names, uids):
            home = tmp / name
            home.mkdir(mode=0o700)
            os.chown(home, uid, pwd.getpwnam(name).pw_gid)
            homes.append(home)
        a, b = names
        home_a, home_b = homes
        root_a, root_b = roots

        # 1. The first user's job dies, its snapshots stay; the second user's still work.
        died = train(a, home_a / "run", "--inject-failure", "rank=0@step=5")
        check(died.returncode in KILLED, f"{a}'s job was killed at step 5 ({died.returncode})")
        check(any(snapshot_files(root_a)), f"{a}'s snapshots are left in {root_a}")
        died = train(b, home_b / "run", "--checkpoint-every", "2", "--inject-failure", "rank=0@step=5")
        snapshots_b = snapshot_files(root_b)
        check(died.returncode in KILLED and snapshots_b, f"{b}'s job, after {a}'s, has its own snapshots in {root_b}")

        # 2. Private: directories 0700, files 0600, each user's own; neither reads the other's.
        for root, uid in zip(roots, uids):
            entries = [root, *root.rglob("*")]
            check(all(p.lstat().st_uid == uid for p in entries), f"everything in {root} is owned by uid {uid}")
            wrong = [f"{p} {oct(p.lstat().st_mode)}" for p in entries if not p.is_symlink()
                     and (p.lstat().st_mode & 0o777) != (0o700 if p.is_dir() else 0o600)]
            check(not wrong, f"{root}: directories 0700, files 0600 ({wrong})")
        file_a = snapshot_files(root_a)[0]
        check(as_user(b, ["cat", str(file_a)]).returncode != 0, f"{b} cannot read {a}'s snapshot")
        check(as_user(a, ["cat", str(snapshots_b[0])]).returncode != 0, f"{a} cannot read {b}'s snapshot")
        check(as_user(a, ["ls", str(root_b)]).returncode != 0, f"{a} cannot list {b}'s tree")

        # 3. Killed ranks' shared memory: an hour-old segment file of each user that nothing maps.
        orphans = [Path(f"/dev/shm/sm_segment.node{suffix}.{uid}.7e570001.0") for uid in uids]
        for orphan, name in zip(orphans, names):
            made = as_user(name, ["sh", "-c", 'head -c 8192 /dev/zero > "$1" && touch -d "1 hour ago" "$1"',
                                  "orphan", str(orphan)])
            check(made.returncode == 0, f"{name} left a segment file {orphan}: {made.stderr[-200:]}")
        relaunched = train(b, home_b / "run", "--checkpoint-every", "2", "--resume", "latest",
                           "--inject-failure", "rank=0@step=6")
        removed = [e for e in read_jsonl(home_b / "run" / "events.jsonl") if e["event"] == "mpi_segments_removed"]
        check(not orphans[1].exists() and removed and removed[-1]["files"] >= 1,
              f"{b}'s job removed {b}'s orphaned segment file at its start ({removed[-1:]})")
        check(orphans[0].exists(), f"and left {a}'s alone")
        orphans[0].unlink()
        restored = [e for e in read_jsonl(home_b / "run" / "events.jsonl") if e["event"] == "state_restored"]
        check(restored and restored[-1]["source"] == "node-local" and restored[-1]["step"] in (3, 4),
              f"{b}'s relaunch resumed from its own snapshot ({restored[-1:]})")

        # 4. The first user plants a tree where the second user's goes.
        host_dir = snapshots_b[0].parent
        key_dir = host_dir.parent
        planted_snapshot = max(snapshot_files(host_dir), key=lambda p: snapshot_step(p) or -1).read_bytes()
        shutil.rmtree(root_b)
        victim = home_b / "precious.txt"
        victim.write_text("precious")
        os.chown(victim, uids[1], -1)
        checkpoints_b = home_b / "run" / "checkpoints"
        # World-writable all the way; in the host directory a valid snapshot of b's in one slot and
        # a link to the victim's file at the other slot's name; beside it, a host directory that
        # links to b's checkpoints.
        plant = ["sh", "-c",
                 'set -e; umask 0; mkdir -m 0777 "$1" "$2" "$2/$3"; cat > "$2/$3/slot-0.snapshot"; '
                 'ln -s "$4" "$2/$3/slot-1.snapshot"; ln -s "$5" "$2/linked-host"',
                 "plant", str(root_b), str(key_dir), host_dir.name, str(victim), str(checkpoints_b)]
        planted = subprocess.run(["runuser", "-u", a, "--", *plant], input=planted_snapshot,
                                 capture_output=True, timeout=60)
        check(planted.returncode == 0, f"{a} planted a tree at {root_b}: {planted.stderr[-300:]!r}")
        planted_before = tree_state(root_b)

        attacked = train(b, home_b / "run", "--checkpoint-every", "2", "--resume", "latest")
        events = read_jsonl(home_b / "run" / "events.jsonl")
        started = max(i for i, e in enumerate(events) if e["event"] == "job_started")
        events = events[started:]
        refused = [e for e in events if e["event"] == "snapshot_tier_refused"]
        restored = [e for e in events if e["event"] == "state_restored"]
        finished = [e for e in events if e["event"] == "job_finished"]
        check(attacked.returncode == 0 and finished and finished[-1]["status"] == "completed",
              f"{b}'s job completes despite the planted tree ({attacked.returncode})")
        check(len(refused) == 1 and str(root_b) in refused[0]["reason"] and f"uid {uids[0]}" in refused[0]["reason"],
              f"snapshot_tier_refused names the tree and its owner ({refused})")
        check(f"refusing the node-local snapshot tree" in attacked.stderr and str(root_b) in attacked.stderr,
              "the refusal is on stderr with the tree's name")
        check(restored and restored[-1]["source"] == "checkpoint" and restored[-1]["step"] % 2 == 0,
              f"the planted snapshot was not restored; {b}'s own checkpoint was ({restored[-1:]})")
        check(tree_state(root_b) == planted_before, "nothing in the planted tree changed")
        check(victim.read_text() == "precious", "the file behind the planted slot link is untouched")
        kept = sorted(p.name for p in checkpoints_b.glob("ckpt-*.h5"))
        check(all(f"ckpt-{step}.h5" in kept for step in (4, 6, 8)),
              f"{b}'s real checkpoints behind the planted host link are intact, and the job wrote on ({kept})")
finally:
    os.chmod(checkout, checkout_mode)
    if copied:
        shutil.rmtree(copied, ignore_errors=True)
    for name in created:
        uid = pwd.getpwnam(name).pw_uid
        shutil.rmtree(f"/dev/shm/hardy-{uid}", ignore_errors=True)
        # What else the user's killed jobs left in node memory (Open MPI's shared-memory segments).
        for leftover in Path("/dev/shm").iterdir():
            try:
                if leftover.lstat().st_uid == uid:
                    shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
            except OSError:
                pass
        subprocess.run(["userdel", name], capture_output=True)
        try:
            grp.getgrnam(name)
            subprocess.run(["groupdel", name], capture_output=True)
        except KeyError:
            pass

check.finish("two users on one node")
