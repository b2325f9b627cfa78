#!/usr/bin/env bash
# Checks that the deterministic figures quoted in docs/performance*.md and docs/verification.md
# are what their commands print today.
#
#   docs/check-figures.sh           run the quick commands (about a minute of CPU) and check
#   docs/check-figures.sh --full    also the slower ones: full replication in `parma
#                                   techniques` and the sensitivity rows (about 4 minutes in all)
#   docs/check-figures.sh --sweep   also `parma sim --seeds 10000` and 1,000 seeds under each
#                                   clock gate (about an hour more on two idle cores)
#   docs/check-figures.sh --print   print today's figures in the docs' format instead of
#                                   checking (with --full --sweep: every figure), to paste
#                                   into the docs
#
# PARMA=<path> uses that `parma` binary instead of building target/release/parma.
#
# How the docs and this script are tied together:
#
# - A table of command output sits between `<!-- figures: ID -->` and `<!-- /figures -->`.
#   The script knows every ID: it runs the command, builds the block the way the doc shows it
#   and compares it line by line with the doc's block. A row that differs, a row missing from
#   the doc, a row in the doc the command no longer prints and a block ID the script does not
#   know are all mismatches.
# - The block with ID `headline` at the top of each doc is the table of today's figures:
#   `| figure | value | target | command |`. For each figure the script computes, it finds the
#   row whose first cell is the figure's name and compares the value cell exactly. A headline
#   row whose command is one of the deterministic ones below but that the script does not
#   compute is a mismatch too (UNCHECKED), so a figure cannot be added without its check.
# - Deterministic commands: `parma sampling`, `parma techniques`, `parma gates`, `parma sim`
#   (simulated cluster, virtual time), `cargo bench -p parma-core --bench memory` (a counting allocator)
#   and the fuzz corpus counts. Their figures do not depend on the machine or its load.
# - Not checked: benchmark timings and their ratios (`--bench local_access`, `--bench intents`)
#   and `parma demo` (threads on real time) are noisy by nature, and test and conformance
#   results are pass counts of commands this script does not run; the docs say which run each
#   comes from, and this script lists those headline rows as `unchecked` without judging them.
#
# Figures in the docs' prose are rounded readings of these tables and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }

mode=check
full=0
sweep=0
for arg in "$@"; do
    case "$arg" in
        --print) mode=print ;;
        --full) full=1 ;;
        --sweep) sweep=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done

docs=(docs/performance.md docs/performance-simulated.md docs/performance-transports.md docs/verification.md)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "${PARMA:-}" ]; then
    cargo build --release -q -p parma-cli
    PARMA=target/release/parma
fi

# ---------------------------------------------------------------- running the commands

# run NAME CMD...: runs CMD once, keeps its output in $tmp/NAME.out.
run() {
    local name=$1
    shift
    local began=$SECONDS
    echo "running: $*" >&2
    if ! "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
        echo "command failed: $*" >&2
        tail -20 "$tmp/$name.err" >&2
        exit 2
    fi
    echo "  ($((SECONDS - began)) s)" >&2
}

# The markdown table rows of a command's output (lines starting with `|`), optionally only
# those of the section that starts with `### SECTION`.
rows() {
    local file=$1 section=${2:-}
    if [ -n "$section" ]; then
        awk -v s="### $section" '/^### /{on=($0==s); next} on && /^\|/' "$file"
    else
        grep '^|' "$file"
    fi
}

# cell N: the Nth cell (from 1) of each markdown row on stdin, trimmed.
cell() {
    awk -F'|' -v n="$1" '{c=$(n+1); gsub(/^ +| +$/, "", c); print c}'
}

# The row of a markdown table on stdin whose first cell is $1.
row_named() {
    # (reads all its input: an early exit could break the writer's pipe under pipefail)
    awk -F'|' -v k="$1" '{c=$2; gsub(/^ +| +$/, "", c); if (!f && c==k) {print; f=1}}'
}

# Formats an integer with thousands separators, as the docs do.
commas() {
    echo "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'
}

# ---------------------------------------------------------------- what the docs should say

# block ID [KEYCELLS] [SKIP]: the doc block ID should hold the lines on stdin. Rows are matched
# by their first KEYCELLS cells (default 1); doc rows whose first cell matches the regex SKIP
# are not produced by this run (quick mode) and are reported as skipped.
block() {
    local id=$1
    cat >"$tmp/block.$id"
    echo "${2:-1}" >"$tmp/keycells.$id"
    echo "${3:-}" >"$tmp/skip.$id"
    echo "$id" >>"$tmp/blocks"
}

# figure NAME VALUE: the headline row NAME should have the value VALUE.
figure() {
    printf '%s\t%s\n' "$1" "$2" >>"$tmp/figures"
}

# not_run NAME FLAG: the headline figure NAME is computed only with FLAG.
not_run() {
    printf '%s\t%s\n' "$1" "$2" >>"$tmp/figures_skipped"
}

# block_not_run ID FLAG: the block ID is produced only with FLAG.
block_not_run() {
    printf '%s\t%s\n' "$1" "$2" >>"$tmp/blocks_skipped"
}

touch "$tmp/blocks" "$tmp/figures" "$tmp/figures_skipped" "$tmp/blocks_skipped"

# --- parma sampling (docs/performance-simulated.md)
run sampling "$PARMA" sampling
rows "$tmp/sampling.out" | block sampling
bounded=$(rows "$tmp/sampling.out" | row_named bounded)
local_row=$(rows "$tmp/sampling.out" | row_named non-conform)
conform=$(rows "$tmp/sampling.out" | row_named conform)
figure "sampling: bytes for negatives, independent / pool reuse (G = 250, U = 16)" "$(echo "$bounded" | cell 7)"
figure "sampling: bytes for negatives, independent / local" "$(echo "$local_row" | cell 7)"
figure "sampling: remote accesses to sampled keys, independent / pool reuse / local" \
    "$(echo "$conform" | cell 4) / $(echo "$bounded" | cell 4) / $(echo "$local_row" | cell 4)"

# --- parma techniques (docs/performance-simulated.md)
if [ "$full" = 1 ]; then
    run techniques "$PARMA" techniques
    skip=
else
    run techniques "$PARMA" techniques \
        --technique adaptive,adaptive-no-replication,adaptive-no-relocation,static,relocation,multi-technique
    skip='^full-replication$'
fi
for task in kge mf; do
    rows "$tmp/techniques.out" "$task" | block "techniques-$task" 1 "$skip"
    ratios=$(awk -v s="### $task" '/^### /{on=($0==s); next} on' "$tmp/techniques.out")
    ratio() { echo "$ratios" | sed -n "s|^bytes(adaptive) / bytes($1) = ||p"; }
    name=$(echo "$task" | tr a-z A-Z)
    figure "techniques, $name: remote accesses under adaptive" \
        "$(rows "$tmp/techniques.out" "$task" | row_named adaptive | cell 2)"
    figure "techniques, $name: bytes, adaptive / adaptive-no-relocation" "$(ratio adaptive-no-relocation)"
    figure "techniques, $name: bytes, adaptive / static" "$(ratio static)"
    if [ "$full" = 1 ]; then
        figure "techniques, $name: bytes, adaptive / full-replication" "$(ratio full-replication)"
    else
        not_run "techniques, $name: bytes, adaptive / full-replication" --full
    fi
done

# --- cargo bench -p parma-core --bench memory (docs/performance.md)
run memory cargo bench -q -p parma-core --bench memory
{
    echo "| what | placement | keys | bytes per key | slot tables | arena spare | free lists | peak while filling |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    awk '/^what /{on=1; next} on && NF>=8 && ($(NF-6)=="hashed" || $(NF-6)=="dense") {
        w=$1; for (i=2; i<=NF-7; i++) w=w " " $i
        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", w, $(NF-6), $(NF-5), $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF
    }' "$tmp/memory.out"
    echo
    grep '^a node with no keys' "$tmp/memory.out"
} | block memory 2
mem() { # mem WHAT PLACEMENT: bytes per key of that row
    awk -v w="$1" -v p="$2" '/^what /{on=1; next} on && NF>=8 {
        x=$1; for (i=2; i<=NF-7; i++) x=x " " $i
        if (x==w && $(NF-6)==p) print $(NF-4) " B"
    }' "$tmp/memory.out"
}
figure "memory per key beyond its value: a key at its home (dense placement, 1 M keys)" "$(mem "owned, homed here" dense)"
figure "memory per key: the home's record of a key that moved away (dense)" "$(mem "away (home's record), without arenas" dense)"
figure "memory per key: a key moved in (either placement)" "$(mem "owned, moved in" dense)"
figure "memory per key: a replica, its value and unsent delta counted (either placement)" "$(mem "replica (value and delta)" dense)"
figure "memory per key: a key at its home (hashed placement, 1 M keys)" "$(mem "owned, homed here" hashed)"

# --- parma gates (docs/performance-simulated.md): the straggler experiment
gates_args=(gates --task mf --nodes 4 --steps 200 --gates async,bounded-delay:1,ssp:3,ssp:1,bsp)
for t in adaptive static; do
    run "gates-$t" "$PARMA" "${gates_args[@]}" --technique "$t"
    rows "$tmp/gates-$t.out" | block "gates-$t"
done
g() { rows "$tmp/gates-adaptive.out" | row_named "$1" | cell "$2"; }
figure "straggler (MF-like, adaptive, worker 0 3× slower): training time under ssp:3 / ssp:1 / bsp, vs async" \
    "$(g ssp:3 3) / $(g ssp:1 3) / $(g bsp 3)"
figure "straggler (MF-like, adaptive): largest read staleness in clocks, async / ssp:3 / ssp:1 / bsp" \
    "$(g async 6) / $(g ssp:3 6) / $(g ssp:1 6) / $(g bsp 6)"
hiccups=(--straggler 1 --hiccups-per-mille 50 --hiccup-factor 10)
sparse_mf=(--cols 1000000 --col-zipf 0 --cells 16)
for t in adaptive static; do
    run "gates-sparse-$t" "$PARMA" gates --task mf --nodes 4 --steps 200 --technique "$t" "${sparse_mf[@]}" \
        "${hiccups[@]}" --gates async,ssp:1,sparse-ssp:1:4,sparse-ssp:1:16,ssp:17
    rows "$tmp/gates-sparse-$t.out" | block "gates-sparse-$t"
done
run gates-zipf-hiccups "$PARMA" gates --task mf --nodes 4 --steps 200 --technique adaptive "${hiccups[@]}" \
    --gates async,ssp:1,sparse-ssp:1:16,ssp:17
rows "$tmp/gates-zipf-hiccups.out" | block gates-zipf-hiccups
gs() { rows "$tmp/gates-sparse-adaptive.out" | row_named "$1" | cell "$2"; }
figure "transient stragglers (sparse MF, adaptive, 5 % of steps 10× slower): training time under ssp:1 / sparse-ssp:1:16 / ssp:17, vs async" \
    "$(gs ssp:1 3) / $(gs sparse-ssp:1:16 3) / $(gs ssp:17 3)"

# --- parma sim (docs/verification.md)
sim_block() { # the table without its last column (wall time)
    rows "$1" | awk -F'|' '{s="|"; for (i=2; i<NF-1; i++) s=s $i "|"; print s}'
}
sim_passed() { # "P of N runs", summed over the techniques
    rows "$1" | tail -n +3 | awk -F'|' '{p+=$3; n+=$3+$4+$5} END {print p, n}'
}
run sim "$PARMA" sim --seeds 100 --determinism
sim_block "$tmp/sim.out" | block sim-100
read -r p n <<<"$(sim_passed "$tmp/sim.out")"
figure "simulation, 100 seeds per technique, each run twice: runs that pass every check" "$(commas "$p") of $(commas "$n")"
if [ "$sweep" = 1 ]; then
    run sim10000 "$PARMA" sim --seeds 10000
    sim_block "$tmp/sim10000.out" | block sim-10000
    read -r p n <<<"$(sim_passed "$tmp/sim10000.out")"
    figure "simulation, 10,000 seeds per technique: runs that pass every check" "$(commas "$p") of $(commas "$n")"
else
    not_run "simulation, 10,000 seeds per technique: runs that pass every check" --sweep
    block_not_run sim-10000 --sweep
fi
gated="simulation under clock gates, 1,000 seeds per technique each: runs that pass every check, bsp / ssp:2 / bounded-delay:1 / sparse-ssp:1:2"
if [ "$sweep" = 1 ]; then
    counts=()
    for gate in bsp ssp:2 bounded-delay:1 sparse-ssp:1:2; do
        run "sim-$gate" "$PARMA" sim --seeds 1000 --gate "$gate"
        sim_block "$tmp/sim-$gate.out" | block "sim-1000-$gate"
        read -r p n <<<"$(sim_passed "$tmp/sim-$gate.out")"
        counts+=("$(commas "$p") of $(commas "$n")")
    done
    figure "$gated" "${counts[0]} / ${counts[1]} / ${counts[2]} / ${counts[3]}"
else
    not_run "$gated" --sweep
    for gate in bsp ssp:2 bounded-delay:1 sparse-ssp:1:2; do block_not_run "sim-1000-$gate" --sweep; done
fi

# --- the fuzz entry points as ordinary tests (docs/verification.md)
# Corpus files are counted; the pseudo-random inputs are read from the tests' loops.
pseudo() { # pseudo TEST [FILE]: the N of `for i in 0..N` (or `for n in 0..Nu8`) in that test
    awk -v t="fn $1()" 'index($0, t){on=1} on && /for [a-z]+ in 0\.\./ {
        s=$0; sub(/.*in 0\.\./, "", s); sub(/[^0-9_].*/, "", s); gsub(/_/, "", s); print s; exit}' "${2:-core/src/fuzzing/tests.rs}"
}
{
    echo "| target | corpus files | further inputs |"
    echo "| --- | --- | --- |"
    short=$(pseudo round_trip_of_short_and_empty_inputs)
    for t in wire_decode wire_round_trip node_ops cluster_schedule session_ops; do
        files=$(find "fuzz/corpus/$t" -maxdepth 1 -type f | wc -l)
        case $t in
            wire_*) more="$short short inputs (0, 1, 2, … bytes)" ;;
            session_ops) more="$(commas "$(pseudo "${t}_pseudo_random" core/src/fuzzing/session_ops.rs)") pseudo-random inputs" ;;
            *) more="$(commas "$(pseudo "${t}_pseudo_random")") pseudo-random inputs" ;;
        esac
        echo "| \`$t\` | $files | $more |"
    done
} | block fuzz-tests

# --- the sensitivity rows (--full)
if [ "$full" = 1 ]; then
    # techniques: adaptive, adaptive-no-relocation and static under one changed option
    {
        echo "| task, change | adaptive | adaptive-no-relocation | static | adaptive / no-relocation | adaptive / static | remote accesses under adaptive |"
        echo "| --- | --- | --- | --- | --- | --- | --- |"
        i=0
        for spec in "kge|" "kge|--rounds-per-sec 0" "kge|--ahead 4" "kge|--ahead 64" \
            "mf|" "mf|--rounds-per-sec 0" "mf|--cols 16"; do
            task=${spec%%|*}
            opt=${spec#*|}
            i=$((i + 1))
            # shellcheck disable=SC2086 # $opt is an option and its value
            run "tsens$i" "$PARMA" techniques --task "$task" \
                --technique adaptive,adaptive-no-relocation,static $opt
            out="$tmp/tsens$i.out"
            b() { rows "$out" "$task" | row_named "$1" | cell 4; }
            r() { sed -n "s|^bytes(adaptive) / bytes($1) = ||p" "$out"; }
            label="$(echo "$task" | tr a-z A-Z), ${opt:+\`$opt\`}"
            [ -n "$opt" ] || label="${label}defaults"
            echo "| $label | $(b adaptive) | $(b adaptive-no-relocation) | $(b static) | $(r adaptive-no-relocation) | $(r static) | $(rows "$out" "$task" | row_named adaptive | cell 2) |"
        done
    } | block techniques-sensitivity
    # sampling: the cost of each scheme under one changed option
    {
        echo "| change | independent: bytes for negatives | pool reuse: bytes for negatives | independent / pool reuse | local: bytes for negatives | remote accesses to sampled keys: independent / pool reuse / local | samples postponed (long-term) |"
        echo "| --- | --- | --- | --- | --- | --- | --- |"
        i=0
        for opt in "" "--reuse 1" "--reuse 4" "--reuse 64" "--pool 1000" "--ahead 1" \
            "--technique static" "--technique relocation"; do
            i=$((i + 1))
            if [ -z "$opt" ]; then
                out="$tmp/sampling.out"
            else
                # shellcheck disable=SC2086
                run "ssens$i" "$PARMA" sampling $opt
                out="$tmp/ssens$i.out"
            fi
            s() { rows "$out" | row_named "$1" | cell "$2"; }
            label="${opt:+\`$opt\`}"
            [ -n "$opt" ] || label="defaults (adaptive, G = 250, U = 16)"
            echo "| $label | $(s conform 6) | $(s bounded 6) | $(s bounded 7) | $(s non-conform 6) | $(s conform 4) / $(s bounded 4) / $(s non-conform 4) | $(s long-term 11) |"
        done
    } | block sampling-sensitivity
else
    block_not_run techniques-sensitivity --full
    block_not_run sampling-sensitivity --full
fi

# ---------------------------------------------------------------- --print

if [ "$mode" = print ]; then
    while read -r id; do
        echo "<!-- figures: $id -->"
        cat "$tmp/block.$id"
        echo "<!-- /figures -->"
        echo
    done <"$tmp/blocks"
    echo "headline figures (name | value):"
    while IFS=$'\t' read -r name value; do
        echo "| $name | $value |"
    done <"$tmp/figures"
    exit 0
fi

# ---------------------------------------------------------------- checking

status=0
ok() { printf 'OK        %s\n' "$*"; }
bad() { printf 'MISMATCH  %s\n' "$*"; status=1; }
skipped() { printf 'skipped   %s\n' "$*"; }

# The lines of block ID in FILE (empty if absent).
doc_block() {
    awk -v id="$2" '$0=="<!-- figures: " id " -->"{on=1; next} on && $0=="<!-- /figures -->"{exit} on' "$1"
}

# The file that holds block ID; fails on none or several.
block_file() {
    local id=$1 found=() f
    for f in "${docs[@]}"; do
        grep -qxF -- "<!-- figures: $id -->" "$f" && found+=("$f")
    done
    [ "${#found[@]}" = 1 ] && echo "${found[0]}"
}

# The key of a line: its first K cells for a table row, the line itself otherwise.
key() {
    awk -F'|' -v k="$1" '/^\|/ {s=""; for (i=2; i<=k+1 && i<NF; i++) s=s "|" $i; print s; next} {print}'
}

# A row's key as printed: its cells without the bars.
shown() {
    echo "$1" | sed 's/^| *//; s/ *$//; s/ *| */, /g'
}

check_block() {
    local id=$1 file keycells skip
    keycells=$(cat "$tmp/keycells.$id")
    skip=$(cat "$tmp/skip.$id")
    if ! file=$(block_file "$id"); then
        bad "[$id] no single block <!-- figures: $id --> in ${docs[*]}"
        return
    fi
    doc_block "$file" "$id" >"$tmp/doc.$id"
    paste -d '\t' <(key "$keycells" <"$tmp/block.$id") "$tmp/block.$id" >"$tmp/want.$id"
    paste -d '\t' <(key "$keycells" <"$tmp/doc.$id") "$tmp/doc.$id" >"$tmp/have.$id"
    # Every line the command gives must be in the doc, as it is.
    while IFS=$'\t' read -r k line; do
        [ -n "$line" ] || continue
        if grep -qxF -- "$line" "$tmp/doc.$id"; then
            ok "[$id] $(shown "$k")"
        else
            local have
            have=$(awk -F'\t' -v k="$k" '$1==k {print $2; exit}' "$tmp/have.$id")
            bad "[$id] $(shown "$k")"
            echo "          $file: ${have:-(no such row)}"
            echo "          today: $line"
        fi
    done <"$tmp/want.$id"
    # Every line of the doc's block must come from the command (or be skipped in quick mode).
    while IFS=$'\t' read -r k line; do
        [ -n "$line" ] || continue
        grep -qxF -- "$line" "$tmp/block.$id" && continue
        if awk -F'\t' -v k="$k" '$1==k {f=1} END {exit !f}' "$tmp/want.$id"; then
            continue # reported above as a mismatch
        fi
        local first
        first=$(echo "$line" | cell 1)
        if [ -n "$skip" ] && [[ "$first" =~ $skip ]]; then
            skipped "[$id] $(shown "$k") (only with --full)"
        else
            bad "[$id] $file has a line the command does not print: $line"
        fi
    done <"$tmp/have.$id"
}

while read -r id; do
    check_block "$id"
done <"$tmp/blocks"
while IFS=$'\t' read -r id flag; do
    skipped "[$id] (only with $flag)"
done <"$tmp/blocks_skipped"

# Blocks in the docs that nothing produces.
{ cat "$tmp/blocks"; cut -f1 "$tmp/blocks_skipped"; } >"$tmp/known_blocks"
for f in "${docs[@]}"; do
    while read -r id; do
        [ "$id" = headline ] && continue
        grep -qxF -- "$id" "$tmp/known_blocks" || bad "[$id] $f has a block this script does not produce"
    done < <(sed -n 's/^<!-- figures: \(.*\) -->$/\1/p' "$f")
done

# The headline tables.
for f in "${docs[@]}"; do
    doc_block "$f" headline
done >"$tmp/headline"
while IFS=$'\t' read -r name value; do
    have=$(row_named "$name" <"$tmp/headline")
    if [ -z "$have" ]; then
        bad "[headline] no row \"$name\" in the docs' headline tables (today: $value)"
    elif [ "$(echo "$have" | cell 2)" = "$value" ]; then
        ok "[headline] $name: $value"
    else
        bad "[headline] $name: the docs say $(echo "$have" | cell 2), today $value"
    fi
done <"$tmp/figures"
deterministic='parma (sampling|techniques|sim|gates)|--bench memory|fuzz/corpus'
grep '^|' "$tmp/headline" | while IFS= read -r line; do
    name=$(echo "$line" | cell 1)
    [ "$name" = figure ] || [[ "$name" =~ ^-+$ ]] && continue
    awk -F'\t' -v n="$name" '$1==n {f=1} END {exit !f}' "$tmp/figures" && continue
    if flag=$(awk -F'\t' -v n="$name" '$1==n {print $2; f=1} END {exit !f}' "$tmp/figures_skipped"); then
        skipped "[headline] $name (only with $flag)"
    elif [[ "$line" =~ $deterministic ]]; then
        printf 'MISMATCH  [headline] UNCHECKED: "%s" cites a deterministic command, but this script does not compute it\n' "$name"
        echo 1 >"$tmp/unchecked"
    else
        printf 'unchecked [headline] %s (timed, or not run by this script)\n' "$name"
    fi
done
[ -e "$tmp/unchecked" ] && status=1

if [ "$status" = 0 ]; then
    echo "every checked figure in ${docs[*]} is what its command prints today"
else
    echo "some figures differ from what their commands print today; docs/check-figures.sh --print shows today's"
fi
exit "$status"
