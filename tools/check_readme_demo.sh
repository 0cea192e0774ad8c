#!/usr/bin/env bash
# tools/check_readme_demo.sh [README] [DEMO_OUTPUT] - checks that the README's excerpt of the main job's output
# (`tools/ddp demo`) still has the demo's shape: the same lines with the same fields, in the same order.
# Numbers may drift between runs and machines; lines, words and fields may not.
#
#   README       default README.md; the excerpt is the fenced block right after the line
#                '<!-- demo-block: ... -->'.
#   DEMO_OUTPUT  default docs/demo-output.md (a real run's output: its first fenced block), or the raw log of a
#                fresh run (a file without a ``` line), e.g. `tools/ddp demo 2>&1 | tee /tmp/demo.log`.
#
# Both sides are normalised before they are compared: every number (digits with an optional fraction) becomes
# N, the generated text after 'sample: ' becomes <text>, runs of blanks become one blank, trailing blanks go.
# In the README's block a line '...' stands for any number of the demo's lines (zero or more); every other line
# must equal the demo's next line. The whole demo output must be covered, so an excerpt that starts or ends
# inside it starts or ends with '...'. Exit 0 when it matches, 1 with the first README line that does not, 2 on
# bad input. ctest runs it on README.md against docs/demo-output.md (Docs.ReadmeDemoBlockMatchesDemoOutput).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
README="${1:-$ROOT/README.md}"
DEMO="${2:-$ROOT/docs/demo-output.md}"
[ $# -le 2 ] || { echo "usage: tools/check_readme_demo.sh [README] [DEMO_OUTPUT]" >&2; exit 2; }
for f in "$README" "$DEMO"; do
  [ -f "$f" ] || { echo "check_readme_demo: $f does not exist (usage: tools/check_readme_demo.sh [README] [DEMO_OUTPUT])" >&2; exit 2; }
done

# The README's block: the fenced block after the marker line. Prints "LINE_NUMBER<TAB>TEXT" per line.
readme_block() {
  awk '
    /^<!-- demo-block:/ { marker = NR; next }
    marker && !open && /^```/ { open = 1; next }
    open && /^```/ { closed = 1; exit }
    open { print NR "\t" $0 }
    END {
      if (!marker) { print "check_readme_demo: " FILENAME " has no line starting with \"<!-- demo-block:\"; put one right before the fenced block that quotes the demo output" > "/dev/stderr"; exit 2 }
      if (!closed) { print "check_readme_demo: " FILENAME ": the fenced block after line " marker " (the demo-block marker) is missing or not closed with ```" > "/dev/stderr"; exit 2 }
    }' "$README"
}

# The demo's output: a markdown file's first fenced block, or the whole file when it has no fence.
demo_lines() {
  if grep -q '^```' "$DEMO"; then
    awk '!open && /^```/ { open = 1; next } open && /^```/ { exit } open { print NR "\t" $0 }' "$DEMO"
  else
    awk '{ print NR "\t" $0 }' "$DEMO"
  fi
}

README_LINES="$(readme_block)" || exit 2
DEMO_LINES="$(demo_lines)"
[ -n "$README_LINES" ] || { echo "check_readme_demo: the demo block of $README is empty" >&2; exit 2; }
[ -n "$DEMO_LINES" ] || { echo "check_readme_demo: $DEMO has no demo output (an empty first fenced block or file)" >&2; exit 2; }

# Matching, as a glob over lines: state (i, j) = the first i README lines cover the first j demo lines.
awk -v readme="$README" -v demo="$DEMO" '
  function norm(s) {
    sub(/\r$/, "", s)
    if (match(s, /sample: /)) s = substr(s, 1, RSTART + 7) "<text>"
    gsub(/[0-9]+(\.[0-9]+)?/, "N", s)
    gsub(/[ \t]+/, " ", s)
    sub(/ $/, "", s)
    return s
  }
  FNR == 1 { part++ }
  {
    tab = index($0, "\t"); num = substr($0, 1, tab - 1); text = substr($0, tab + 1)
    if (part == 1) { m++; P[m] = norm(text); Pnum[m] = num; Praw[m] = text }
    else { n++; T[n] = norm(text); Tnum[n] = num; Traw[n] = text }
  }
  END {
    R[0, 0] = 1; deepest = 0
    for (i = 0; i < m; i++) {
      for (j = 0; j <= n; j++) {
        if (!((i, j) in R)) continue
        if (P[i + 1] == "...") { for (k = j; k <= n; k++) R[i + 1, k] = 1; break }
        if (j < n && P[i + 1] == T[j + 1]) R[i + 1, j + 1] = 1
      }
      reached = 0
      for (j = 0; j <= n; j++) if ((i + 1, j) in R) { reached = 1; break }
      if (!reached) break
      deepest = i + 1
    }
    if ((m, n) in R) exit 0
    if (deepest == m) {
      for (j = 0; j <= n; j++) if ((m, j) in R) { last = j; break }
      printf "check_readme_demo: the block in %s ends (line %s) where %s goes on (line %s: \"%s\"); end the block with a line \"...\" or quote that line too\n", readme, Pnum[m], demo, Tnum[last + 1], Traw[last + 1] > "/dev/stderr"
      exit 1
    }
    bad = deepest + 1
    # where the lines of the block got to: the first place after a gap line, else the furthest one
    after_gap = (deepest > 0 && P[deepest] == "...")
    at = -1
    for (j = 0; j <= n; j++) if ((deepest, j) in R) { if (at < 0 || !after_gap) at = j }
    printf "check_readme_demo: %s line %s does not match the demo output in %s:\n", readme, Pnum[bad], demo > "/dev/stderr"
    printf "  README:  %s\n  as read: %s\n", Praw[bad], P[bad] > "/dev/stderr"
    if (after_gap)
      printf "  no line of the demo output after its line %s has that shape\n", (at > 0 ? Tnum[at] : "0") > "/dev/stderr"
    else if (at < n)
      printf "  demo line %s: %s\n  as read: %s\n", Tnum[at + 1], Traw[at + 1], T[at + 1] > "/dev/stderr"
    else
      printf "  the demo output has ended (line %s)\n", Tnum[n] > "/dev/stderr"
    printf "Numbers may differ, lines and fields may not: regenerate docs/demo-output.md from a run and update the README block (or the demo), or mark skipped lines with \"...\".\n" > "/dev/stderr"
    exit 1
  }' <(printf '%s\n' "$README_LINES") <(printf '%s\n' "$DEMO_LINES")
