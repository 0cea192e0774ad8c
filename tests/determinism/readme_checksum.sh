#!/usr/bin/env bash
# readme_checksum.sh BUILD - the README's one-line demonstration of `train --deterministic` (section "Bitwise the
# same at any world size"), run as written: the checksum printed at world 1 and at world 4 must be the same.
set -euo pipefail
BUILD="${1:?usage: readme_checksum.sh BUILD}"
cd "$(dirname "$0")/../.."
line=$(grep -m1 -- '--deterministic --micro-batches 4' README.md)
[ -n "$line" ] || { echo "readme_checksum: the README has no --deterministic demonstration line" >&2; exit 1; }
BUILD=$(cd "$BUILD" && pwd)
out=$(bash -c "${line//build\/bin\//$BUILD/bin/}" 2>&1)
echo "$out"
n=$(echo "$out" | grep -c "parameters: checksum")
[ "$n" -eq 2 ] || { echo "readme_checksum: expected 2 checksum lines, got $n" >&2; exit 1; }
[ "$(echo "$out" | grep -o 'checksum [0-9a-f]*' | sort -u | wc -l)" -eq 1 ] || { echo "readme_checksum: the checksums differ" >&2; exit 1; }
echo "readme_checksum: the same at world 1 and world 4"
