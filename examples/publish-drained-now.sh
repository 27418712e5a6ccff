#!/bin/sh
# Ask a running `nvrx-seghealth publish-drained --interval S --pid-file PIDFILE` for a pass
# now (SIGUSR1) instead of at the end of its sleep. For an operator after a drain:
#
#   scontrol update nodename=gpu017 state=drain reason="bad dimm"
#   examples/publish-drained-now.sh /run/nvrx-seghealth/publish-drained.pid
#
# and as a Slurm trigger's program, set once by SlurmUser or root on the slurmctld host
# (Slurm runs it there, as the user who set the trigger, with the nodes as its last
# argument, which it ignores: a pass looks at every node of the job):
#
#   strigger --set --node --drained --flags=PERM \
#       --program="/opt/nvrx-seghealth/publish-drained-now.sh /run/nvrx-seghealth/publish-drained.pid"
#   strigger --set --node --down --flags=PERM --program="..."   # the same program
#
# slurmctld looks at trigger events about every 15 s. Slurm 22.05 raises `--drained` only
# for a node with no running or completing job (DRAINED, not DRAINING): a drain of a node
# the job still runs on fires it when the job leaves the node, not before. Signal the
# producer yourself after such a drain (the first form above).
#
# It signals nothing but a live producer. A running producer holds an exclusive flock on
# its pid file for its whole life (the kernel drops it when the producer dies, even by
# SIGKILL), and the file holds that producer's pid from the moment it has its name. The
# file is 0600, so that no other account can hold its lock: run this script as root or as
# the producer's account. It opens PIDFILE without following a symlink or waiting on a
# FIFO, and sends SIGUSR1 only if
#   - PIDFILE is a regular file and its flock is held (free: the producer has ended, and
#     its pid may be another process's by now),
#   - the pid read from that same open file is a positive decimal number, and
#   - that process runs `publish-drained`, as the account that owns PIDFILE, and still
#     does when the signal goes (a pidfd pins it, where the kernel has pidfd_open), and
#   - it is the process that holds the lock, where /proc/locks shows the holder.
# Otherwise it signals nothing and says why on stderr. It needs python3 (3.6 or later;
# NVRX_SEGHEALTH_PYTHON names another interpreter); the producer's host has one.
#
# Run it in the producer's pid namespace. A producer in a container (its own pid
# namespace) writes the pid it has there, which names another process, or none, outside:
# the script refuses that pid (exit 3) and says so. Run it inside the container (e.g.
# `docker exec`, `nsenter --target HOLDER --pid --mount`), or start the producer in the
# host's pid namespace (`docker run --pid=host`).
#
# Exit status:
#   0  the signal was sent
#   1  no producer runs: PIDFILE is missing, or no process holds its lock (a stale file)
#   2  usage: no PIDFILE given
#   3  refused: PIDFILE is not a regular file, cannot be read or locked, holds no pid, or
#      names a process that is not a publish-drained of PIDFILE's owner, or not the
#      process that holds its lock (a producer in another pid namespace); or the signal
#      was not permitted (run this as root or as the producer's account)
#   127  no python3 on PATH
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 PIDFILE [NODES...]" >&2
    exit 2
fi
exec "${NVRX_SEGHEALTH_PYTHON:-python3}" -I -S -c '
import errno, fcntl, os, re, signal, stat, sys

NO_PRODUCER, REFUSED = 1, 3
script, path = sys.argv[1:3]


def stop(code, why):
    sys.stderr.write("%s: %s %s; nothing signalled\n" % (script, path, why))
    sys.exit(code)


try:
    seen = os.lstat(path)
except FileNotFoundError:
    stop(NO_PRODUCER, "does not exist: no producer runs with this pid file")
except OSError as error:
    stop(REFUSED, "cannot be examined (%s)" % error.strerror)
if not stat.S_ISREG(seen.st_mode):
    kinds = [(stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")]
    kind = next((name for test, name in kinds if test(seen.st_mode)), "a device")
    stop(REFUSED, "is %s, not a pid file" % kind)
flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
try:
    fd = os.open(path, flags)
    st = os.fstat(fd)
except FileNotFoundError:
    stop(NO_PRODUCER, "was removed meanwhile: no producer runs with this pid file")
except OSError as error:
    stop(REFUSED, "cannot be opened (%s)" % error.strerror)
if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
    stop(REFUSED, "was replaced while it was opened: try again")


def held():
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as error:
        stop(REFUSED, "cannot be locked (%s): keep it on a local filesystem" % error.strerror)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


if not held():
    stop(NO_PRODUCER, "is stale: no process holds its lock (its producer has ended)")
content = os.read(fd, 32)
if not re.fullmatch(b"[1-9][0-9]{0,9}\n", content):
    stop(REFUSED, "is locked but holds no pid (%r)" % content[:32])
pid = int(content)
NAMESPACE = ("a producer in another pid namespace, a container, writes the pid it has "
             "there: run this script in that namespace")


def holders():
    """The pids that /proc/locks shows holding the exclusive flock of the file opened
    (none when it cannot tell: no /proc/locks, or a holder this pid namespace cannot see)."""
    lock = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks") as stream:
            rows = [line.split() for line in stream]
    except OSError:
        return set()
    return {int(row[4]) for row in rows
            if row[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and row[5] == lock}


def another_holder():
    """Why the lock does not vouch for the pid (another process holds it), or nothing."""
    others = holders()
    if not others or pid in others:
        return ""
    return "; process %s holds its lock (%s)" % (
        " ".join(str(other) for other in sorted(others)), NAMESPACE)


def ended():
    if held():  # its producer runs: the pid is not one of this pid namespace
        stop(REFUSED, "is locked, but names process %d, which does not exist here (%s)"
             % (pid, NAMESPACE))
    stop(NO_PRODUCER, "names process %d, which has ended" % pid)


try:
    handle = os.pidfd_open(pid)
except ProcessLookupError:
    ended()
except (AttributeError, OSError):
    handle = None  # Python before 3.9 or Linux before 5.3: plain kill below
if not held():  # ended since: its pid may be another process already
    stop(NO_PRODUCER, "is stale now: its producer (pid %d) has ended" % pid)
try:
    with open("/proc/%d/cmdline" % pid, "rb") as stream:
        argv = stream.read().split(b"\0")
    owner = os.stat("/proc/%d" % pid).st_uid
except FileNotFoundError:
    ended()
except OSError as error:
    stop(REFUSED, "names process %d, which cannot be examined (%s)" % (pid, error.strerror))
if b"publish-drained" not in argv:
    stop(REFUSED, "names process %d, which is not nvrx-seghealth publish-drained%s"
         % (pid, another_holder()))
if owner != st.st_uid:
    stop(REFUSED, "names process %d of uid %d, not of the file owner (uid %d)%s"
         % (pid, owner, st.st_uid, another_holder()))
mismatch = another_holder()
if mismatch:
    stop(REFUSED, "names process %d%s" % (pid, mismatch))
try:
    if handle is None:
        os.kill(pid, signal.SIGUSR1)
    else:
        signal.pidfd_send_signal(handle, signal.SIGUSR1)
except ProcessLookupError:
    ended()
except PermissionError:
    stop(REFUSED, "names process %d, which this account may not signal" % pid)
' "$0" "$1"
