# shellcheck shell=bash
# Shared by start.sh and stop.sh (sourced, not run).

# alive PID: true while /proc/PID exists and is not a zombie. PID 1 here reaps orphans
# lazily, so `kill -0` keeps succeeding for a daemon that has died (pitfall 7).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != [ZX] ]]
}
