#!/usr/bin/env bash
# The whole-model suite at batch 1 and 512 tokens (224-pixel images, 1500 audio positions) in one dtype,
# as four `lamina bench --models` processes that share the GPU: they compile at once and take turns to
# measure (--measure-lock), then their records are merged into one.
#
#     bash benchmarks/models_in_parallel.sh bf16 benchmarks/results/DATE_h200_models_b1_s512_bf16.json
set -euo pipefail
dtype=$1
out=$2
parts=$(mktemp -d)
run() {  # run PART CASE...
  local part=$1; shift
  local filters=()
  for case in "$@"; do filters+=(--filter "$case"); done
  lamina bench --models "${filters[@]}" --no-per-layer --replays 100 --measure-lock "$parts/lock" \
    --out "$parts/$part.json" > "$parts/$part.txt" 2>&1 || true
}
s=b1.s512.$dtype
run 1 "llama.$s" "gemma.$s" "cnn.b1.s224.$dtype" &
run 2 "qwen3.$s" "mistral.$s" "vit.b1.s224.$dtype" &
run 3 "gpt2.$s" "bert.$s" "opt.$s" "phi3.$s" &
run 4 "t5-encoder.$s" "whisper-encoder.b1.s1500.$dtype" "qwen2.$s" "gemma2.$s" &
wait
python benchmarks/merge_model_results.py --out "$out" "$parts"/[1-4].json
