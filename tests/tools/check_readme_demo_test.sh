#!/usr/bin/env bash
# tests/tools/check_readme_demo_test.sh - tests of tools/check_readme_demo.sh on altered copies of README.md and
# docs/demo-output.md: numbers, column widths and the generated sample may change and still pass; a renamed
# field, a dropped, added or reordered line, an unmarked end and a raw log are told apart; bad input gets a
# clear error. Run by ctest as Docs.CheckReadmeDemoTellsShapeFromNumbers.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHECK="$ROOT/tools/check_readme_demo.sh"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FAILED=0

cp "$ROOT/README.md" "$WORK/README.md"
cp "$ROOT/docs/demo-output.md" "$WORK/demo.md"
# The demo's fenced block alone, as a fresh run's raw log would be.
awk '!open && /^```/ { open = 1; next } open && /^```/ { exit } open { print }' "$WORK/demo.md" >"$WORK/demo.log"

# expect NAME WANT_RC WANT_TEXT README DEMO: runs the check, compares the exit code and looks for WANT_TEXT in
# its error output ("" for none).
expect() {
  local name="$1" want_rc="$2" want_text="$3" readme="$4" demo="$5" rc
  bash "$CHECK" "$readme" "$demo" >"$WORK/out" 2>&1
  rc=$?
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL $name: exit $rc, want $want_rc"; sed 's/^/    /' "$WORK/out"; FAILED=1; return
  fi
  if [ -n "$want_text" ] && ! grep -qF -- "$want_text" "$WORK/out"; then
    echo "FAIL $name: the message lacks '$want_text'"; sed 's/^/    /' "$WORK/out"; FAILED=1; return
  fi
  echo "ok   $name"
}

# mutate NAME FILE SED_SCRIPT: a copy of FILE with SED_SCRIPT applied inside the demo block only (README: the
# fenced block after the marker; demo: the first fenced block).
mutate() {
  local name="$1" file="$2" script="$3" out="$WORK/$1.${2##*.}" opening='^```'
  [ "$file" = "$WORK/README.md" ] && opening='^<!-- demo-block:'
  awk -v opening="$opening" '
    state == 0 && $0 ~ opening { state = 1 }
    state == 1 && /^```/ { state = 2; print; print "@@BEGIN@@"; next }
    state == 2 && /^```/ { state = 3; print "@@END@@" }
    { print }' "$file" | sed -e '/^@@BEGIN@@$/,/^@@END@@$/ {' -e "$script" -e '}' | grep -v -e '^@@BEGIN@@$' -e '^@@END@@$' >"$out"
  # a mutation that changed nothing hands on a file that does not exist, so that its case fails (exit 2)
  if cmp -s "$file" "$out"; then echo "$WORK/unchanged-by-$name"; else echo "$out"; fi
}

R="$WORK/README.md"
D="$WORK/demo.md"
expect "the real README against the real demo output" 0 "" "$R" "$D"
expect "the real README against the raw log of the same run" 0 "" "$R" "$WORK/demo.log"

# Numbers drift, column widths with them, and the generated sample is different every run: all still match.
expect "every digit in the README block changed" 0 "" "$(mutate digits "$R" 'y/0123456789/9876543210/')" "$D"
expect "wider numbers in the demo output" 0 "" "$R" "$(mutate wider "$D" 's/\([0-9][0-9]*\)\.\([0-9]\)/1\1.\20/g')"
expect "another generated sample" 0 "" "$R" "$(mutate sample "$D" 's/sample: .*/sample: Call me Ishmael./')"
expect "one more line inside a gap" 0 "" "$R" "$(mutate gapline "$D" '/ step   100\//a\
[rank 0] step   150/1000  loss 2.4  lr 2.9e-03  tokens 40000/s  step 40.0 ms  exposed comm 5.0%')"

# A changed field name, on either side, fails and names the README line.
expect "a field renamed in the README block" 1 "throughput" "$(mutate field "$R" 's/throughput/thruput/')" "$D"
expect "a field renamed in the demo output" 1 "exposed communication" "$R" "$(mutate demofield "$D" 's/exposed communication/exposed comm/')"
expect "a unit changed" 1 "tokens/s" "$(mutate unit "$R" 's|tokens/s (median|tokens/min (median|')" "$D"
expect "a field added to a demo line" 1 "val loss" "$R" "$(mutate newfield "$D" 's/\(val loss [0-9.]* nats\/char\)$/\1, val acc 0.5/')"
expect "a trace column renamed" 1 "step_ms" "$(mutate column "$R" 's/step_ms/step_s/')" "$D"

# Lines: dropped, added, reordered, or the block running past the output without a gap.
expect "a line of the demo output missing from the block" 1 "throughput" "$(mutate dropped "$R" '/throughput /d')" "$D"
expect "a line in the block the demo does not print" 1 "extra" "$(mutate added "$R" '/throughput /a\
[rank 0]    extra line')" "$D"
expect "two lines swapped in the demo output" 1 "train loss" "$R" "$(mutate swapped "$D" '/== summary/{h;d};/   train loss/G')"
expect "a new summary line in the demo output" 1 "memory 12 MiB" "$R" "$(mutate newline "$D" '/   throughput /a\
[rank 0]    memory 12 MiB')"
# the "..." right before the block's closing fence dropped
awk '/^<!-- demo-block:/ && !mk { mk = NR } { line[NR] = $0 } END { for (i = 1; i <= NR; i++) {
       if (mk && i > mk && line[i] == "..." && line[i + 1] ~ /^```/ && !done) { done = 1; continue }; print line[i] } }' "$R" >"$WORK/nogap.md"
expect "the block's last gap removed" 1 "end the block with a line" "$WORK/nogap.md" "$D"

# Bad input: a clear error, exit 2.
sed '/^<!-- demo-block:/d' "$R" >"$WORK/nomarker.md"
expect "no marker in the README" 2 "<!-- demo-block:" "$WORK/nomarker.md" "$D"
awk '/^<!-- demo-block:/ { print; print "no fence here"; exit } { print }' "$R" >"$WORK/nofence.md"
expect "a marker without a block" 2 "missing or not closed" "$WORK/nofence.md" "$D"
expect "a missing demo file" 2 "does not exist" "$R" "$WORK/absent.log"
: >"$WORK/empty.log"
expect "an empty demo log" 2 "no demo output" "$R" "$WORK/empty.log"

exit "$FAILED"
