#!/usr/bin/env bash
# tests/tools/check_layers_test.sh - tests of tools/check_layers.py on a small made-up tree: includes down the
# layers and of a file's own folder (subfolders included) pass; an include up a layer, across one layer and of an
# unlisted folder are each named with file and line; a source folder no layer lists is an error. Run by ctest as
# House.CheckLayersCatchesUpwardIncludes.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHECK="$ROOT/tools/check_layers.py"
WORK="$(mktemp -d)"
OUT="$(mktemp)"
trap 'rm -rf "$WORK" "$OUT"' EXIT
FAILED=0

# put FILE LINE...: writes a source file of the made-up tree.
put() { local f="$WORK/$1"; shift; mkdir -p "$(dirname "$f")"; printf '%s\n' "$@" >"$f"; }
# expect NAME WANT_RC WANT_TEXT: runs the check on the tree, compares the exit code and looks for WANT_TEXT.
expect() {
  local name="$1" want_rc="$2" want_text="$3" rc
  /usr/bin/python3 "$CHECK" "$WORK" >"$OUT" 2>&1
  rc=$?
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL $name: exit $rc, want $want_rc"; sed 's/^/    /' "$OUT"; FAILED=1; return
  fi
  if [ -n "$want_text" ] && ! grep -qF -- "$want_text" "$OUT"; then
    echo "FAIL $name: the output lacks '$want_text'"; sed 's/^/    /' "$OUT"; FAILED=1; return
  fi
  echo "ok   $name"
}

put runtime/core/error.h '#pragma once'
put runtime/distributed/process_group.h '#include "runtime/core/error.h"'
put runtime/distributed/shm/shm_group.cpp '#include "runtime/distributed/process_group.h"'
put runtime/distributed/host_collectives.cpp '#include "runtime/distributed/shm/shm_group.h"'
put runtime/ddp/reducer.cpp '#include "runtime/sim/bucket_sim.h"' '#include <vector>'
put runtime/sim/bucket_sim.cpp '#include "runtime/trace/trace.h"'
put models/train.cpp '#include "runtime/ddp/sharded/sharded_data_parallel.h"'
expect "down the layers and within a folder" 0 "every include of runtime, kernels, models runs down"

put runtime/sim/bucket_sim.cpp '#include "runtime/trace/trace.h"' '// x' '#include "runtime/ddp/bucket_assignment.h"'
expect "up a layer" 1 "runtime/sim/bucket_sim.cpp:3 includes runtime/ddp/bucket_assignment.h: runtime/sim (layer 6)"
put runtime/sim/bucket_sim.cpp '#include "runtime/nn/module.h"'
expect "across one layer" 1 "runtime/sim/bucket_sim.cpp:1 includes runtime/nn/module.h"
put runtime/sim/bucket_sim.cpp '#include "runtime/gizmo/gizmo.h"'
expect "an unlisted folder included" 1 "includes runtime/gizmo/gizmo.h, in a folder no layer lists"
put runtime/sim/bucket_sim.cpp '#include "runtime/core/error.h"'
put runtime/gizmo/gizmo.cpp '#include "runtime/core/error.h"'
expect "an unlisted source folder" 1 "runtime/gizmo: a folder of sources that no layer lists"
exit $FAILED
