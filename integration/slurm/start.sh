#!/usr/bin/env bash
# Start a private Slurm cluster on this machine: one munged, one slurmctld and one slurmd
# per node (multiple-slurmd mode), all on 127.0.0.1, all state under STATE_DIR.
#
#   start.sh STATE_DIR [NODES]       NODES defaults to 4: nodes n1..nNODES, 2 CPUs each
#
# munged requires STATE_DIR and every directory above it to be world-executable.
#
# Environment (optional):
#   NVRX_SEGHEALTH_SLURMCTLD_PORT    slurmctld port (default 16817)
#   NVRX_SEGHEALTH_SLURMD_PORT       port of n1; node i listens on this + i - 1 (default 17001)
#   NVRX_SEGHEALTH_SLURM_START_TIMEOUT  seconds to wait for all nodes idle (default 30)
#
# The defaults stay clear of a system Slurm (6817/6818). On success STATE_DIR/env.sh
# exports SLURM_CONF and PATH for the client commands. On failure the daemons' log tails
# are printed, whatever was started is stopped, and the exit status is non-zero.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
PATH=$PATH:/usr/sbin:/sbin # Debian installs the daemons there; not every PATH has it
if (($# < 1 || $# > 2)); then
    echo "usage: $0 STATE_DIR [NODES]" >&2
    exit 2
fi
mkdir -p "$1"
state=$(cd "$1" && pwd)
nodes=${2:-4}
if [[ ! $nodes =~ ^[1-9][0-9]*$ ]]; then
    echo "start.sh: NODES must be a positive integer, got $nodes" >&2
    exit 2
fi
# start.sh deletes and recreates its subdirectories: refuse a directory it did not make.
if [[ -n $(ls -A "$state") && ! -e $state/etc/slurm.conf ]]; then
    echo "start.sh: $state is not empty and holds no cluster; give a new or empty directory" >&2
    exit 2
fi
ctld_port=${NVRX_SEGHEALTH_SLURMCTLD_PORT:-16817}
node_port=${NVRX_SEGHEALTH_SLURMD_PORT:-17001}
timeout=${NVRX_SEGHEALTH_SLURM_START_TIMEOUT:-30}
host=$(hostname -s)
conf=$state/etc/slurm.conf
sock=$state/run/munge.sock

for cmd in munged mungekey slurmctld slurmd sinfo; do
    if ! command -v "$cmd" >/dev/null; then
        echo "start.sh: $cmd not found; run .ci/install-debian as root" >&2
        exit 1
    fi
done
for pidfile in "$state"/run/*.pid; do
    [[ -e $pidfile ]] || continue
    echo "start.sh: $pidfile exists; run $here/stop.sh $state first" >&2
    exit 1
done

fail() {
    echo "start.sh: $*" >&2
    for log in "$state"/log/*.log; do
        [[ -e $log ]] || continue
        echo "----- tail of $log" >&2
        tail -n 20 "$log" >&2
    done
    "$here/stop.sh" "$state" >&2 || true
    exit 1
}

# Fresh state; the run dir holds the munge socket and must be world-executable (pitfall 1).
rm -rf "${state:?}"/{etc,munge,run,log,ctld,spool}
mkdir -p "$state"/{etc,run,log,ctld}
for i in $(seq 1 "$nodes"); do mkdir -p "$state/spool/n$i"; done
mkdir -m 700 "$state/munge"
chmod 755 "$state/run"
mungekey -c -k "$state/munge/munge.key"

cat >"$conf" <<CONF
ClusterName=nvrxtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
AuthType=auth/munge
AuthInfo=socket=$sock,cred_expire=10
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd-%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd-%n.log
# cgroup tracking fails here at step launch while nodes still look idle (pitfall 3).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
KillWait=5
MailProg=/bin/true
NodeName=n[1-$nodes] NodeHostname=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN \
    Port=[$node_port-$((node_port + nodes - 1))]
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

cat >"$state/env.sh" <<ENV
export SLURM_CONF=$conf
export PATH="\${PATH:+\$PATH:}$(dirname "$(command -v sinfo)"):$(dirname "$(command -v slurmd)")"
ENV

# Daemons fork into the background: give them a clean environment and no inherited
# stdio, so callers that capture output do not wait on them (pitfall 6).
daemon() {
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF="$conf" "$@" \
        </dev/null >>"$state/log/daemon-stdio.log" 2>&1 || fail "failed to start: $*"
}

daemon munged --socket="$sock" --key-file="$state/munge/munge.key" \
    --pid-file="$state/run/munged.pid" --log-file="$state/log/munged.log" \
    --seed-file="$state/munge/munged.seed"
daemon slurmctld -c
for i in $(seq 1 "$nodes"); do
    daemon slurmd -N "n$i"
done

# Wait, bounded, until every node reports idle. A daemon that dies (a port in use, a bad
# config) fails the start at once; one that never wrote its pid file fails it after 3 s.
export SLURM_CONF=$conf
started=$SECONDS
until [[ $(sinfo -h -N -t idle -o '%N' 2>/dev/null | wc -l) -eq $nodes ]]; do
    ((SECONDS - started < timeout)) ||
        fail "nodes not all idle after ${timeout}s: $(sinfo -h -N -o '%N=%t' 2>&1 | tr '\n' ' ')"
    for name in munged slurmctld $(printf 'slurmd-n%s ' $(seq 1 "$nodes")); do
        if pid=$(cat "$state/run/$name.pid" 2>/dev/null); then
            alive "$pid" || fail "$name (pid $pid) has died"
        elif ((SECONDS - started >= 3)); then
            fail "$name wrote no pid file within 3s"
        fi
    done
    sleep 0.1
done
echo "start.sh: $nodes nodes idle; source $state/env.sh"
