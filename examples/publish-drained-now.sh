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
# Exit status: 0 when the signal was sent; 1 when PIDFILE is missing or names no process.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 PIDFILE [NODES...]" >&2
    exit 2
fi
pid=$(cat "$1") || exit 1
case $pid in
'' | *[!0-9]*)
    echo "$0: $1 holds no pid" >&2
    exit 1
    ;;
esac
exec kill -USR1 "$pid"
