#!/usr/bin/env bash
# ZeRO stages 0-3 on 1, 2 and 4 CPU ranks: the same model and the same global batch (ranks x
# --grad-accum = GLOBAL micro-batches per step), one `napkin train` run each, and a table read
# back from `napkin report --json` (with jq): tokens/s and step time (medians over the steps after
# the warm-up; a step lasts as long as its slowest rank), the share of the step inside
# collectives (mean over ranks), bytes sent per step per rank (measured by the ring counters /
# predicted by the estimator), and per rank the model states (parameters, master weights,
# gradients, optimizer state) and the peak of everything. docs/ZERO.md quotes its table.
#
#   bench/zero_bench.sh                       # tiny, B=4 T=64, 8 micro-batches per step, 8 steps
#   bench/zero_bench.sh --model tiny --micro-batch 4 --seq-len 64 --global 8 --steps 8 --warmup 2 \
#       --ranks "1 2 4" --stages "0 1 2 3" --overlap "off on" --napkin build/cli/napkin --out /tmp/zero_bench
#   bench/zero_bench.sh --train-flags "--finetune qlora --lora-rank 16 --precision bf16-amp"   # FSDP + QLoRA
#
# --overlap "off on" runs each configuration both ways (napkin train --overlap: gradient
# collectives started as each unit's backward ends, ZeRO-3 gathers prefetched), back to back, so
# the share of the step spent waiting on communication can be compared on the same machine state.
#
# --train-flags "..." adds flags to every `napkin train` (a recipe: precision, optimizer,
# fine-tuning); the header prints them.
#
# One rank runs without a launcher (`napkin train --zero S`, world size 1); N > 1 under
# `mpirun -n N --oversubscribe`. Each rank gets max(1, nproc / N) OpenMP threads; ranks beyond
# the core count share cores (oversubscribed: the table says so). Needs jq and, for N > 1, mpirun.
set -euo pipefail

napkin=""
model=tiny
micro_batch=4
seq_len=64
global=8
steps=8
warmup=2
ranks_list="1 2 4"
stages_list="0 1 2 3"
overlap_list="auto"
train_flags=()
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --napkin) napkin="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --micro-batch) micro_batch="$2"; shift 2 ;;
        --seq-len) seq_len="$2"; shift 2 ;;
        --global) global="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --ranks) ranks_list="$2"; shift 2 ;;
        --stages) stages_list="$2"; shift 2 ;;
        --overlap) overlap_list="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --train-flags) read -r -a train_flags <<<"$2"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "zero_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$napkin" ]; then
    for candidate in "$here/build/cli/napkin" "$here/build/napkin"; do
        if [ -x "$candidate" ]; then napkin="$candidate"; break; fi
    done
fi
if [ -z "$napkin" ] || [ ! -x "$napkin" ]; then
    echo "zero_bench.sh: --napkin: no napkin executable (build it: cmake --build build --target napkin)" >&2
    exit 2
fi
command -v jq >/dev/null || { echo "zero_bench.sh: needs jq (apt-get install jq)" >&2; exit 2; }
if [ "$steps" -le "$warmup" ]; then
    echo "zero_bench.sh: --steps $steps must exceed --warmup $warmup" >&2
    exit 2
fi
for n in $ranks_list; do
    if [ $((global % n)) -ne 0 ]; then
        echo "zero_bench.sh: --global $global is not a multiple of $n ranks" >&2
        exit 2
    fi
    if [ "$n" -gt 1 ] && ! command -v mpirun >/dev/null; then
        echo "zero_bench.sh: $n ranks need mpirun (apt-get install openmpi-bin)" >&2
        exit 2
    fi
done
for o in $overlap_list; do
    if [ "$o" != auto ] && [ "$o" != on ] && [ "$o" != off ]; then
        echo "zero_bench.sh: --overlap: expected auto, on, off or a list such as \"off on\" (got '$o')" >&2
        exit 2
    fi
done
if [ -z "$out" ]; then out="$(mktemp -d "${TMPDIR:-/tmp}/zero_bench.XXXXXX")"; fi
mkdir -p "$out"
cores=$(nproc)

echo "zero_bench: $model, B=$micro_batch T=$seq_len, $global micro-batches per step" \
     "($((global * micro_batch * seq_len)) tokens), $steps steps, medians over the last $((steps - warmup))${train_flags[*]:+; flags: ${train_flags[*]}}"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $cores cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg); $("$napkin" --version 2>/dev/null | head -1)"
echo "runs in $out"
echo

printf '%5s %5s %7s %7s %9s %9s %8s %21s %11s %9s %s\n' ranks stage overlap threads tokens/s "step ms" \
       "in comm" "sent MB/step/rank" "states MB" "peak MB" ""
printf '%5s %5s %7s %7s %9s %9s %8s %21s %11s %9s\n' "" "" "" "" "" "" "" "measured / predicted" "per rank" \
       "per rank"
for n in $ranks_list; do
    threads=$((cores / n))
    [ "$threads" -lt 1 ] && threads=1
    note=""
    [ "$n" -gt "$cores" ] && note="oversubscribed ($n ranks on $cores cores)"
    for stage in $stages_list; do
      for overlap in $overlap_list; do
        run="$out/n${n}_z${stage}_overlap_${overlap}"
        rm -rf "$run"
        args=(train --model "$model" --micro-batch "$micro_batch" --seq-len "$seq_len"
              --grad-accum $((global / n)) --steps "$steps" --zero "$stage" --overlap "$overlap" --quiet
              --out "$run" "${train_flags[@]}")
        log="$run.log"
        if [ "$n" -eq 1 ]; then
            OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$napkin" "${args[@]}" >"$log" 2>&1 ||
                { echo "zero_bench.sh: $n ranks, ZeRO-$stage failed; see $log" >&2; exit 1; }
        else
            OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 \
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
                mpirun -n "$n" --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$napkin" "${args[@]}" \
                >"$log" 2>&1 || { echo "zero_bench.sh: $n ranks, ZeRO-$stage failed; see $log" >&2; exit 1; }
        fi
        "$napkin" report --json --warmup "$warmup" "$run" >"$run.report.json"
        jq -r --arg n "$n" --arg stage "$stage" --arg overlap "$overlap" --arg threads "$threads" \
              --arg note "$note" '
            def mb: if . == null then "-" else (. / 1e6 * 1000 | round / 1000 | tostring) end;
            def pct: if . == null then "-" else ((. * 1000 | round) / 10 | tostring) + "%" end;
            .runs[0] as $r
            | ($r.ranks | map(.communication) | if any(. == null) then null else . end) as $c
            | ($r.ranks | map([.memory.parameters, .memory.master_weights, .memory.gradients,
                               .memory.optimizer_state] | map(.measured) | add) | max) as $states
            | [$n, $stage, $overlap, $threads,
               ($r.all_ranks.tokens_per_s_median | round | tostring),
               ($r.all_ranks.step_seconds_median * 1e5 | round / 100 | tostring),
               ($r.all_ranks.comm_share_mean | pct),
               (if $c == null then "-" else
                   (($c | map(.sent_bytes_per_step.measured) | max | mb) + " / " +
                    ($c | map(.sent_bytes_per_step.predicted) | max | mb)) end),
               ($states | mb), ($r.all_ranks.peak_total_bytes_max | mb), $note]
            | @tsv' "$run.report.json" |
            while IFS=$'\t' read -r c1 c2 c3 c4 c5 c6 c7 c8 c9 c10 c11; do
                printf '%5s %5s %7s %7s %9s %9s %8s %21s %11s %9s %s\n' "$c1" "$c2" "$c3" "$c4" "$c5" "$c6" \
                       "$c7" "$c8" "$c9" "$c10" "$c11"
            done
      done
    done
done
echo
echo "tokens/s: all ranks' tokens per step over the slowest rank's step time (median); in comm: time the step"
echo "spends in collectives (blocking calls, and the start and wait of overlapped ones: the exposed time;"
echo "waiting for other ranks counts) over step time, mean over ranks; overlap: napkin train --overlap; bytes:"
echo "parameter and gradient collectives by the ring formula; MB = 10^6 bytes. load average after:" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
