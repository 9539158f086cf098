#!/usr/bin/env bash
# Do two napkin builds (or two sets of flags) train to the same numbers, bit for bit? For
# refactors that must not change arithmetic: runs the same short CPU trainings with both and
# compares every step's loss, gradient norm and learning rate, and the measured peak bytes of
# every memory category, exactly (the JSON numbers as written, compared as text by jq).
#
#   scripts/same_numbers.sh --a OLD/napkin --b NEW/napkin           # two builds
#   scripts/same_numbers.sh --a build/cli/napkin --b-flags "--overlap off"   # two flag sets
#
# Configurations: 13 single-process recipes (precisions, activation checkpointing, attention,
# optimizers, gradient accumulation), ZeRO 0-3 at world size 1, and, when mpirun is there,
# ZeRO 0-3 on 2 ranks. --only SUBSTRING runs the configurations whose name contains it. The
# peaks of the `communication` category are reported but not compared when --allow-comm-peak
# is given (overlap keeps more buffers in flight by design). Exit 0 when everything matches,
# 1 with the first differences of each configuration otherwise. Needs jq.
set -euo pipefail

a="" b="" a_flags="" b_flags="" only="" allow_comm_peak=0 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --a) a="$2"; shift 2 ;;
        --b) b="$2"; shift 2 ;;
        --a-flags) a_flags="$2"; shift 2 ;;
        --b-flags) b_flags="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --allow-comm-peak) allow_comm_peak=1; shift ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "same_numbers.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$a" ] || { echo "same_numbers.sh: --a NAPKIN is required" >&2; exit 2; }
[ -n "$b" ] || b="$a"
for bin in "$a" "$b"; do
    [ -x "$bin" ] || { echo "same_numbers.sh: $bin: not an executable" >&2; exit 2; }
done
command -v jq >/dev/null || { echo "same_numbers.sh: needs jq (apt-get install jq)" >&2; exit 2; }
[ -n "$out" ] || out="$(mktemp -d /tmp/same_numbers.XXXXXX)"
mkdir -p "$out"

mpi=""
if command -v mpirun >/dev/null; then
    mpi="env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 2 --oversubscribe"
fi

# name|launcher (empty or "mpi")|flags
configs=(
    "fp32||--precision fp32"
    "bf16-amp||--precision bf16-amp"
    "fp16-amp||--precision fp16-amp"
    "bf16||--precision bf16"
    "ckpt-full||--checkpointing full"
    "ckpt-selective||--checkpointing selective --precision bf16-amp"
    "naive||--attention naive"
    "naive-fp16||--attention naive --precision fp16-amp --checkpointing full"
    "sgd||--optimizer sgd"
    "momentum-bf16||--optimizer momentum --precision bf16-amp"
    "adam-accum||--optimizer adam --grad-accum 2"
    "rmsprop-bf16||--optimizer rmsprop --precision bf16"
    "adagrad-fp16||--optimizer adagrad --precision fp16-amp"
)
for s in 0 1 2 3; do
    configs+=("zero$s-w1||--zero $s --grad-accum 2")
    [ -n "$mpi" ] && configs+=("zero$s-w2|mpi|--zero $s --grad-accum 2")
    [ -n "$mpi" ] && configs+=("zero$s-w2-bf16|mpi|--zero $s --grad-accum 2 --precision bf16-amp")
done

# The numbers compared, one JSON document per run (rank 0's report).
numbers='{steps: [.steps[] | {step, loss, grad_norm, lr}], peaks: .measured.peak_bytes}'

failed=0
for c in "${configs[@]}"; do
    IFS='|' read -r name launcher flags <<<"$c"
    [ -z "$only" ] || [[ "$name" == *"$only"* ]] || continue
    for side in a b; do
        bin=$a; extra=$a_flags
        [ "$side" = b ] && { bin=$b; extra=$b_flags; }
        dir="$out/$name.$side"
        rm -rf "$dir"
        pre=""
        [ "$launcher" = mpi ] && pre="$mpi"
        # shellcheck disable=SC2086
        if ! $pre "$bin" train --device cpu --steps 6 --quiet $flags $extra --out "$dir" >"$dir.log" 2>&1; then
            echo "$name: the $side run failed ($dir.log):"; tail -n 3 "$dir.log"; failed=1; continue 2
        fi
        jq -S "$numbers" "$dir/report.json" >"$dir.json"
    done
    filter='.'
    [ "$allow_comm_peak" = 1 ] && filter='del(.peaks.communication)'
    if diff <(jq -S "$filter" "$out/$name.a.json") <(jq -S "$filter" "$out/$name.b.json") >"$out/$name.diff"; then
        comm_a=$(jq '.peaks.communication' "$out/$name.a.json")
        comm_b=$(jq '.peaks.communication' "$out/$name.b.json")
        note=""
        [ "$comm_a" != "$comm_b" ] && note=" (communication peak $comm_a -> $comm_b bytes)"
        echo "$name: same$note"
    else
        echo "$name: DIFFERENT"; head -n 12 "$out/$name.diff" | sed 's/^/    /'; failed=1
    fi
done
echo "runs in $out"
exit $failed
