#!/usr/bin/env bash
# Stop the private cluster that start.sh started in STATE_DIR, by PID, and wait until
# every process is gone.
#
#   stop.sh STATE_DIR
#
# Order: cancel jobs (so their slurmstepd and tasks end cleanly), then SIGTERM the
# daemons named by the pid files plus any slurmstepd of this cluster, then SIGKILL
# whatever is left. Each wait is bounded (NVRX_SEGHEALTH_SLURM_STOP_TIMEOUT, default 15 s).
# Exits non-zero if a process survives SIGKILL.
set -uo pipefail

if (($# != 1)); then
    echo "usage: $0 STATE_DIR" >&2
    exit 2
fi
state=$(cd "$1" 2>/dev/null && pwd) || { echo "stop.sh: no directory $1" >&2; exit 0; }
conf=$state/etc/slurm.conf
timeout=${NVRX_SEGHEALTH_SLURM_STOP_TIMEOUT:-15}

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# PIDs from the pid files whose process still runs the expected program (a stale
# pid file must not make us signal an unrelated process that reused the PID).
daemons() {
    local file pid name
    for file in "$state"/run/*.pid; do
        [[ -e $file ]] || continue
        pid=$(<"$file")
        name=$(basename "$file" .pid)
        name=${name%%-*}
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] && alive "$pid" && echo "$pid"
    done
}

# slurmstepd processes of this cluster: slurmd passes its SLURM_CONF on to them.
stepds() {
    local dir
    for dir in /proc/[0-9]*; do
        if [[ $(cat "$dir/comm" 2>/dev/null) != slurmstepd ]] || ! alive "${dir#/proc/}"; then
            continue
        fi
        tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -qxF "SLURM_CONF=$conf" &&
            echo "${dir#/proc/}"
    done
}

# wait_gone SECONDS PID...: true once none of the PIDs is alive.
wait_gone() {
    local deadline=$((SECONDS + $1)) pid
    shift
    for pid in "$@"; do
        while alive "$pid"; do
            ((SECONDS < deadline)) || return 1
            sleep 0.1
        done
    done
}

if [[ -n $(daemons) ]] && command -v squeue >/dev/null; then
    jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %A 2>/dev/null)
    if [[ -n $jobs ]]; then
        # shellcheck disable=SC2086  # one argument per job id
        SLURM_CONF=$conf timeout 10 scancel $jobs
        mapfile -t pids < <(stepds)
        wait_gone "$timeout" "${pids[@]}"
    fi
fi

mapfile -t pids < <(daemons; stepds)
if ((${#pids[@]})); then
    kill -TERM "${pids[@]}" 2>/dev/null
    if ! wait_gone "$timeout" "${pids[@]}"; then
        echo "stop.sh: SIGKILL to processes still alive after ${timeout}s" >&2
        for pid in "${pids[@]}"; do alive "$pid" && kill -KILL "$pid" 2>/dev/null; done
        if ! wait_gone "$timeout" "${pids[@]}"; then
            echo "stop.sh: processes survive SIGKILL" >&2
            exit 1
        fi
    fi
fi
rm -f "$state"/run/*.pid
echo "stop.sh: stopped ${#pids[@]} processes in $state"
