#!/usr/bin/env bash
# tests/tools/check_test_packages.sh - every Debian package a test skips without (its skip message names it:
# "Debian: P", "Debian package P", "apt-get install P", "P-x is not installed", "P-x is missing") is one that
# `tools/ddp test` installs (`tools/ddp packages test`), so that on a fresh machine the README's test command
# runs every test it can. A package named through a constant (kMobyDickPackage) is looked up in runtime/.
# Run by ctest as Docs.TestCommandInstallsWhatTheTestsSkipWithout.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
installed=" $(bash "$ROOT/tools/ddp" packages test) "
PKG='[a-z0-9][a-z0-9.+-]*[a-z0-9]'

# The skip messages of the CPU tests (tests/gpu skips without a GPU, not a package), one per line.
skips="$(grep -rhE 'GTEST_SKIP|missing|not installed' --include='*.cpp' --include='*.h' "$ROOT/tests" |
         grep -v '^\s*//' | grep -v "$ROOT/tests/gpu")"
# Package constants (constexpr const char* kXPackage = "P") the messages use.
for k in $(grep -ohE 'k[A-Za-z]+Package' <<<"$skips" | sort -u); do
  value="$(grep -rhE "$k = \"$PKG\"" "$ROOT/runtime" | grep -oE "\"$PKG\"" | tr -d '"' | head -1)"
  skips+=$'\n'"Debian package $value"
done
needed="$( { grep -oE "Debian: $PKG|Debian package $PKG|apt-get install $PKG|Debian's $PKG is not installed" <<<"$skips" |
             awk '{print $NF == "installed" ? $2 : $NF}'
           grep -oE "[a-z0-9]+-$PKG is (not installed|missing)" <<<"$skips" | awk '{print $1}'; } |
           sed "s/^Debian's //" | sort -u)"

failed=0
for p in $needed; do
  if [[ "$installed" == *" $p "* ]]; then
    echo "ok   $p"
  else
    echo "FAIL $p: a test skips without it, and tools/ddp test does not install it"; failed=1
  fi
done
[ -n "$needed" ] || { echo "FAIL: no package found in the tests' skip messages (has their wording changed?)"; failed=1; }
exit $failed
