#!/usr/bin/env bash
# Fetch the GPU machine's wheelhouse: every pin of envs/gpu-wheels.txt as a wheel for CPython
# PYTHON_VERSION on x86_64 Linux (the GPU image: 3.12; our CI's image-shaped venv: 3.11), into DEST.
#   bash envs/fetch_gpu_wheels.sh [PYTHON_VERSION=3.12] [DEST=.whl]
# Idempotent: a pin whose wheel (right version, tags fit for PYTHON_VERSION) is already in DEST is not
# fetched again, so a second run needs no network. A wheel in DEST for a pinned name at another
# version, or for another Python, is removed (one wheel per name: bench/wheelhouse.py refuses two).
# Pins marked "sdist-only" (no wheel on PyPI) are built here with pip wheel; they must come out
# pure Python (py3-none-any), which fits every Python. PYTHON (default python3) runs pip.
set -euo pipefail

PYV="${1:-3.12}"
DEST="${2:-.whl}"
PY="${PYTHON:-python3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIST="${GPU_WHEELS:-$ROOT/envs/gpu-wheels.txt}"

[[ "$PYV" =~ ^3\.[0-9]+$ ]] || {
	echo "PYTHON_VERSION must look like 3.12, not '$PYV'" >&2
	exit 2
}
XY="${PYV/./}"
mkdir -p "$DEST"

# Wheels built for manylinux glibc 2.17 .. 2.35 fit both the GPU image (Ubuntu 24.04, glibc 2.39) and
# our CI machine (Debian 12, glibc 2.36); the older aliases cover packages that still ship them.
PLATFORMS=()
for n in $(seq 35 -1 17); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64
	--platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)

# Sort the pins: already there / to download / to build; remove superseded wheels. Stdlib only.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PY" - "$LIST" "$DEST" "$XY" "$WORK" <<'EOF'
import re, sys
from pathlib import Path

listfile, dest, xy, work = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()


def fits(tags: str) -> bool:
    pys, abis, plats = (part.split(".") for part in tags.split("-"))
    py_ok = any(p in ("py3", f"py{xy}", f"cp{xy}") for p in pys) or (
        "abi3" in abis and any(p.startswith("cp3") and int(p[3:]) <= int(xy[1:]) for p in pys)
    )
    abi_ok = any(a in ("none", "abi3", f"cp{xy}") for a in abis)
    plat_ok = any(p == "any" or (p.startswith("manylinux") and p.endswith("x86_64")) for p in plats)
    return py_ok and abi_ok and plat_ok


pins = {}
for line in Path(listfile).read_text().splitlines():
    spec = line.split("#", 1)[0].strip()
    if not spec:
        continue
    name, sep, version = spec.partition("==")
    if not sep:
        sys.exit(f"{listfile}: '{spec}' is not pinned with ==")
    pins[norm(name)] = (spec, version.strip(), "sdist-only" in line)

have = set()
for whl in sorted(dest.glob("*.whl")):
    parts = whl.name[:-4].split("-")
    name, version, tags = norm(parts[0]), parts[1], "-".join(parts[-3:])
    if name not in pins:
        print(f"note: {whl} is not in {listfile} (left in place)", file=sys.stderr)
    elif version == pins[name][1] and fits(tags) and name not in have:
        have.add(name)
    else:
        print(f"removing {whl} (superseded pin, or not for cp{xy})")
        whl.unlink()

(work / "download.txt").write_text("".join(s + "\n" for n, (s, v, b) in pins.items() if n not in have and not b))
(work / "build.txt").write_text("".join(s + "\n" for n, (s, v, b) in pins.items() if n not in have and b))
print(f"{len(pins)} pins: {len(have)} already in {dest}")
EOF

PIPQ=(-m pip --disable-pip-version-check)
if [ -s "$WORK/download.txt" ]; then
	echo "downloading $(wc -l <"$WORK/download.txt") wheels for cp$XY"
	"$PY" "${PIPQ[@]}" download --quiet --no-deps --only-binary=:all: --python-version "$PYV" \
		--implementation cp --abi "cp$XY" --abi abi3 --abi none "${PLATFORMS[@]}" \
		-d "$DEST" -r "$WORK/download.txt"
fi
if [ -s "$WORK/build.txt" ]; then
	echo "building $(wc -l <"$WORK/build.txt") sdist-only pins as wheels"
	"$PY" "${PIPQ[@]}" wheel --quiet --no-deps --no-binary=:all: -w "$WORK/built" -r "$WORK/build.txt"
	for whl in "$WORK"/built/*.whl; do
		case "$(basename "$whl")" in
		*-none-any.whl) mv "$whl" "$DEST/" ;;
		*)
			echo "$(basename "$whl") is not pure Python: it cannot be built here for cp$XY" >&2
			exit 1
			;;
		esac
	done
fi

count=$(find "$DEST" -maxdepth 1 -name '*.whl' | wc -l)
bytes=$(find "$DEST" -maxdepth 1 -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
awk -v b="$bytes" -v n="$count" -v d="$DEST" -v v="$PYV" \
	'BEGIN {printf "%s: %d wheels for CPython %s, %.1f MiB\n", d, n, v, b / 1048576}'
