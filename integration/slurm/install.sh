#!/usr/bin/env bash
# Install Debian's Slurm (controller, node daemon, client tools) and munge, minimal set.
# Idempotent: returns at once when every package is already installed. Needs root.
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge)

missing=()
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    echo "install.sh: already installed: ${packages[*]}"
    exit 0
fi

# The packages' postinst scripts try to start munge/slurm services. A policy-rc.d that
# exits 101 forbids that; create one only for this install if the machine has none.
policy=/usr/sbin/policy-rc.d
created_policy=false
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=true
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install.sh: installed: ${missing[*]} (temporary policy-rc.d: $created_policy)"
