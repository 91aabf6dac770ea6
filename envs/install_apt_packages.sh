#!/usr/bin/env bash
# Install the pinned Debian packages of a list (`name=version` per line, # comments) unless every
# one is already installed at exactly that version. Needs root for the install, not for the check.
# usage: bash envs/install_apt_packages.sh envs/apt-packages.txt
set -euo pipefail
list=${1:?usage: $0 envs/apt-packages.txt}

pins=()
while read -r line; do
    line=${line%%#*}
    line=${line//[[:space:]]/}
    [[ -n $line ]] && pins+=("$line")
done < "$list"

missing=()
for pin in "${pins[@]}"; do
    pkg=${pin%%=*}
    want=${pin#*=}
    have=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$pkg" 2>/dev/null || true)
    [[ $have == "installed $want" ]] || missing+=("$pin")
done
if ((${#missing[@]} == 0)); then
    echo "apt packages: the ${#pins[@]} pinned packages of $list are installed"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "error: $list: ${missing[*]} not installed (at the pinned version), and installing needs root." >&2
    echo "       Run 'sudo make apt-packages' once, or 'make test SKIP_APT=1' to skip it (tests/workflow/test_slurm.py is then skipped, except with CI=true)." >&2
    exit 1
fi
if ! command -v apt-get > /dev/null; then
    echo "error: $list: apt-get not found; these are Debian 12 packages (${missing[*]})" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Packages must not start their services (munge, slurmd, slurmctld): the tests run their own
# daemons. Docker's Debian images already deny it in policy-rc.d; elsewhere deny it for this install.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
echo "apt packages: installing ${missing[*]}"
apt-get update -q
if ! apt-get install -y -q --no-install-recommends --allow-downgrades "${missing[@]}"; then
    echo "error: installing the pinned packages of $list failed; if a version is no longer in the archive," >&2
    echo "       update its pin from 'apt-cache policy <package>' (Debian security updates replace versions)." >&2
    exit 1
fi
