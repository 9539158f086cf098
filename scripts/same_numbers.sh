#!/usr/bin/env bash
# Do two napkin builds (or two sets of flags) train to the same numbers, bit for bit? For
# refactors that must not change arithmetic: runs the same short CPU trainings with both and
# compares every step's loss, gradient norm and learning rate, and the measured peak bytes of
# every memory category, exactly (the JSON numbers as written, compared as text by jq), with
# each step's loss scale and whether it was skipped (fp16-amp).
#
#   scripts/same_numbers.sh --a OLD/napkin --b NEW/napkin           # two builds
#   scripts/same_numbers.sh --a build/cli/napkin --b-flags "--overlap off"   # two flag sets
#
#   scripts/same_numbers.sh --a OLD/napkin --b NEW/napkin \
#       --a-plugin OLD/libnapkin_cuda_emu_plugin.so --b-plugin NEW/libnapkin_cuda_emu_plugin.so
#                                                   # + the CUDA engine on the emulator
#
# Configurations: single-process recipes (precisions, activation checkpointing, attention,
# optimizers, gradient accumulation, dropout, LoRA/QLoRA, 8-bit states, fp8), ZeRO 0-3 at world
# size 1, and, when mpirun is there, ZeRO 0-3 on 2 ranks; with --a-plugin/--b-plugin a few of
# them through the CUDA kernels on the emulator (slow: tiny shapes, 3 steps); and `napkin
# estimate --json` over a grid of models and recipes (compared whole). --only SUBSTRING runs the
# configurations whose name contains it. The peaks of the `communication` category are reported
# but not compared when --allow-comm-peak is given (overlap keeps more buffers in flight by
# design). Exit 0 when everything matches, 1 with the first differences of each configuration
# otherwise. Needs jq.
set -euo pipefail

a="" b="" a_flags="" b_flags="" only="" allow_comm_peak=0 out="" a_plugin="" b_plugin=""
while [ $# -gt 0 ]; do
    case "$1" in
        --a) a="$2"; shift 2 ;;
        --b) b="$2"; shift 2 ;;
        --a-flags) a_flags="$2"; shift 2 ;;
        --b-flags) b_flags="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --a-plugin) a_plugin="$2"; shift 2 ;;
        --b-plugin) b_plugin="$2"; shift 2 ;;
        --allow-comm-peak) allow_comm_peak=1; shift ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
    "fp8-amp||--precision fp8-amp"
    "adamw-8bit||--optimizer adamw-8bit --precision bf16-amp"
    "dropout-naive||--dropout 0.1 --attention naive"
    "dropout-flash-bf16||--dropout 0.1 --precision bf16-amp --checkpointing full"
    "lora||--finetune lora --lora-rank 4"
    "qlora-bf16||--finetune qlora --lora-rank 4 --precision bf16-amp"
    "selective-naive||--checkpointing selective --attention naive"
)
for s in 0 1 2 3; do
    configs+=("zero$s-w1||--zero $s --grad-accum 2")
    [ -n "$mpi" ] && configs+=("zero$s-w2|mpi|--zero $s --grad-accum 2")
    [ -n "$mpi" ] && configs+=("zero$s-w2-bf16|mpi|--zero $s --grad-accum 2 --precision bf16-amp")
done

# Through the CUDA kernels on the emulator (name|flags), when both plugins are given.
cuda_configs=(
    "cuda-fp32|--precision fp32"
    "cuda-bf16-amp|--precision bf16-amp --checkpointing full"
    "cuda-naive-dropout|--attention naive --dropout 0.1"
    "cuda-qlora|--finetune qlora --lora-rank 4 --precision bf16-amp"
    "cuda-fp8|--precision fp8-amp"
    "cuda-zero3|--zero 3 --grad-accum 2"
    "cuda-fp16-amp-accum|--precision fp16-amp --grad-accum 2"
    "cuda-adamw-8bit-accum|--optimizer adamw-8bit --grad-accum 3 --grad-clip 0.05"
)
if [ -n "$a_plugin$b_plugin" ]; then
    for p in "$a_plugin" "$b_plugin"; do
        [ -f "$p" ] || { echo "same_numbers.sh: $p: no such plugin (give both --a-plugin and --b-plugin)" >&2; exit 2; }
    done
fi

# napkin estimate --json, compared whole (name|flags).
estimates=(
    "est-default|"
    "est-gpt2-fp32|--model gpt2 --precision fp32 --micro-batch 8 --seq-len 1024"
    "est-llama3-8b-z3|--model llama3-8b --seq-len 8192 --micro-batch 1 --gpus 8 --zero 3"
    "est-70b-15t|--params 70e9 --tokens 15e12 --gpus 1024 --gpu h100-sxm --mfu 0.5"
    "est-solve-params|--solve max-params --gpus 8 --zero 3 --precision fp32 --ignore-activations"
    "est-solve-mb|--model gpt2-xl --solve max-micro-batch --checkpointing full"
    "est-qlora-70b|--model llama2-70b --finetune qlora --gpus 2 --zero 3 --checkpointing full --offload optimizer+params --gpu rtx3090 --seq-len 2048"
    "est-lora-8bit|--model llama2-7b --finetune lora --optimizer adamw-8bit --zero 2 --gpus 4"
    "est-fp8-naive|--model gpt2-medium --precision fp8-amp --attention naive --checkpointing selective"
    "est-fp16-offload|--model gpt2-large --precision fp16-amp --zero 2 --gpus 8 --offload optimizer --link ib-ndr"
    "est-sgd-bf16|--model llama3-8b --precision bf16 --optimizer sgd --grad-accum 4 --dropout 0.1"
    "est-measured|--model gpt2 --measured-tokens-per-s 180000 --micro-batch 16"
    "est-config|--config tests/data/hf_llama2_7b_config.json --seq-len 4096"
    "est-shape|--layers 4 --d-model 256 --heads 4 --kv-heads 2 --d-ff 1024 --vocab 1000 --context 512 --norm rmsnorm --mlp swiglu --positions rope"
)

# The numbers compared, one JSON document per run (rank 0's report).
numbers='{steps: [.steps[] | {step, loss, grad_norm, lr, loss_scale, skipped}], peaks: .measured.peak_bytes}'

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
for c in "${cuda_configs[@]}"; do
    [ -n "$a_plugin" ] || break
    IFS='|' read -r name flags <<<"$c"
    [ -z "$only" ] || [[ "$name" == *"$only"* ]] || continue
    for side in a b; do
        bin=$a; plugin=$a_plugin; extra=$a_flags
        [ "$side" = b ] && { bin=$b; plugin=$b_plugin; extra=$b_flags; }
        dir="$out/$name.$side"
        rm -rf "$dir"
        # shellcheck disable=SC2086
        if ! NAPKIN_CUDA_PLUGIN="$plugin" "$bin" train --device cuda --steps 3 --micro-batch 2 --seq-len 16 \
                --quiet $flags $extra --out "$dir" >"$dir.log" 2>&1; then
            echo "$name: the $side run failed ($dir.log):"; tail -n 3 "$dir.log"; failed=1; continue 2
        fi
        jq -S "$numbers" "$dir/report.json" >"$dir.json"
    done
    if diff "$out/$name.a.json" "$out/$name.b.json" >"$out/$name.diff"; then
        echo "$name: same"
    else
        echo "$name: DIFFERENT"; head -n 12 "$out/$name.diff" | sed 's/^/    /'; failed=1
    fi
done

for c in "${estimates[@]}"; do
    IFS='|' read -r name flags <<<"$c"
    [ -z "$only" ] || [[ "$name" == *"$only"* ]] || continue
    for side in a b; do
        bin=$a
        [ "$side" = b ] && bin=$b
        # shellcheck disable=SC2086
        if ! "$bin" estimate $flags --json >"$out/$name.$side.raw" 2>"$out/$name.$side.log"; then
            echo "$name: the $side estimate failed ($out/$name.$side.log):"; tail -n 3 "$out/$name.$side.log"
            failed=1; continue 2
        fi
        jq -S . "$out/$name.$side.raw" >"$out/$name.$side.json"
    done
    if diff "$out/$name.a.json" "$out/$name.b.json" >"$out/$name.diff"; then
        echo "$name: same"
    else
        echo "$name: DIFFERENT"; head -n 12 "$out/$name.diff" | sed 's/^/    /'; failed=1
    fi
done
echo "runs in $out"
exit $failed
