#!/usr/bin/env bash
# On a GPU machine with PyTorch and transformers: output with Hydra speculation against plain
# decoding. (1) Greedy, chains of 3 and [3,2] trees, on random-weight Hugging Face models of the
# four architectures banyan loads, each with random heads (tools/gpu/random_hf_models.py), with
# the bundled model's 512-token tokenizer; 16 prompts in one batch and one prompt alone.
# (2) The bundled model with its trained heads, greedy and sampled (see below); and the
# batch-invariant mode (--deterministic on): each prompt alone against the batch of 16, also with
# a prefix of four paragraphs shared by all 16, longer than a piece of the deterministic mode's
# attention (512 keys; on Qwen 3 and Mistral, whose head dims have the tensor-core kernels, the
# batch must have read a piece of it once: banyan's "deterministic:" line).
#   tools/gpu/speculation_identity.sh BIN_DIR [WORK_DIR]    (BIN_DIR holds a CUDA build's banyan)
# Prints one line per comparison: how many outputs are identical. Exits 1 when a comparison
# under --deterministic on (speculation against plain decoding, a prompt alone against the batch)
# is not identical in every output, or a run failed. The lines with "control:" only inform:
# without the deterministic mode a verification step runs more rows through the products than
# plain decoding, so near-ties may resolve differently (bitwise identity is promised only under
# --deterministic on).
set -uo pipefail
B=${1:?usage: speculation_identity.sh BIN_DIR [WORK_DIR]}
W=${2:-$(mktemp -d)}
mkdir -p "$W"
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -x $B/banyan ]] || { echo "speculation_identity.sh: no $B/banyan" >&2; exit 1; }
python3 "$root/tools/gpu/random_hf_models.py" "$W/hf" > "$W/models.log" 2>&1 || { tail "$W/models.log"; exit 1; }
failed=0
all_same() {  # "N of M outputs identical": N == M > 0
  local n m
  read -r n _ m _ <<<"$1"
  [[ $n == "$m" && $m -gt 0 ]] || { echo "NOT IDENTICAL: $1"; return 1; }
}
cat > "$W/prompts.txt" <<'P'
Once upon a time
The little dog ran to the park and
Lily and her mom went to the store. They
One day, a big red ball
Tom had a toy car. He liked to
Sara saw a bird in the sky. It was
The sun was hot and the children wanted to
There was a small girl named Mia who loved
Ben and his dad went fishing. They
A cat sat on the mat and
Once there was a big tree in the forest.
The princess had a shiny crown. She
Max found a box under his bed. Inside
It was a rainy day, so Anna
The boy wanted to fly like a bird. He
Mom made a cake for the party. Everyone
P
head -1 "$W/prompts.txt" > "$W/alone.txt"
SHARED="Once upon a time, there was a little dog named Max. Max liked to run in the big green park with his friend, a small bird. The bird could sing very well and Max loved to listen. Every morning they met by the old tree near the pond, where the ducks swam and the flowers were red. One day the sky was grey and the wind was cold, but Max and the bird went to the park anyway."
for a in llama3 qwen2 qwen3 mistral; do
  cp "$root/models/stories260K/tok512.model" "$W/hf/$a/tokenizer.model"
  H=(--speculative hydra --draft-heads "$W/hf/$a/heads.json" --speculation-adaptive off)
  for pf in prompts alone; do
    for mode in off chain tree; do
      case $mode in off) x=();; chain) x=("${H[@]}" --draft-tokens 3);; tree) x=("${H[@]}" --draft-tree "3,2");; esac
      "$B/banyan" generate --backend cuda --model "$W/hf/$a" --prompts-file "$W/$pf.txt" \
        --temperature 0 --max-tokens 64 "${x[@]}" > "$W/o_$mode.txt" 2> "$W/e_$mode.txt" ||
        { tail -3 "$W/e_$mode.txt"; echo "FAILED: $a, $pf: banyan generate ($mode)"; failed=1; }
    done
    for mode in chain tree; do
      r=$(python3 -c "
a=open('$W/o_off.txt',newline='').read().split('\n')[:-1];b=open('$W/o_$mode.txt',newline='').read().split('\n')[:-1]
print(sum(x==y for x,y in zip(a,b)) if len(a)==len(b) else -1, 'of', len(a), 'outputs identical')")
      echo "$a, $pf, control: $mode $r; $(grep -h speculative "$W/e_$mode.txt")"
    done
  done
  # --deterministic on: each prompt alone against the batch of 16, bitwise (not a control).
  [[ $a == qwen2 ]] && continue  # the three the batch-invariance suite names
  d=(generate --backend cuda --model "$W/hf/$a" --temperature 0 --max-tokens 64 --deterministic on)
  # det_alone_vs_batch PROMPTS TAG: the batch of PROMPTS into det_TAGbatch.txt (its stderr in
  # e_det.txt), each prompt alone into det_TAGalone.txt; r = the comparison's count.
  det_alone_vs_batch() {
    "$B/banyan" "${d[@]}" --prompts-file "$1" > "$W/det_$2batch.txt" 2> "$W/e_det.txt" ||
      { tail -3 "$W/e_det.txt"; echo "FAILED: $a: banyan generate --deterministic on ($1)"; failed=1; }
    : > "$W/det_$2alone.txt"
    while IFS= read -r line; do
      printf '%s\n' "$line" > "$W/one.txt"
      "$B/banyan" "${d[@]}" --prompts-file "$W/one.txt" 2>/dev/null >> "$W/det_$2alone.txt"
    done < "$1"
    r=$(python3 -c "
a=open('$W/det_$2alone.txt',newline='').read().split('\n')[:-1];b=open('$W/det_$2batch.txt',newline='').read().split('\n')[:-1]
print(sum(x==y for x,y in zip(a,b)) if len(a)==len(b) else -1, 'of', len(a), 'outputs identical')")
  }
  det_alone_vs_batch "$W/prompts.txt" ""
  echo "$a: --deterministic on, each prompt alone against the batch: $r"
  all_same "$r" || failed=1
  # ... and with a long prefix shared by all 16 (read once for the batch's decode rows where
  # the head dim has the tensor-core kernels: Qwen 3 and Mistral here), alone against the batch.
  sed "s/^/$SHARED $SHARED $SHARED $SHARED /" "$W/prompts.txt" > "$W/shared.txt"
  det_alone_vs_batch "$W/shared.txt" s
  reads=$(grep -h "deterministic:" "$W/e_det.txt")
  echo "$a: --deterministic on, a shared prefix, each prompt alone against the batch: $r; ${reads#\[banyan\] }"
  all_same "$r" || failed=1
  if [[ $a != llama3 && $reads != *"deterministic: "[1-9]* ]]; then
    echo "FAILED: $a: the batch never read its shared prefix once"; failed=1
  fi
  for mode in chain tree; do  # ... and speculation under it against plain decoding, bitwise
    case $mode in chain) x=("${H[@]}" --draft-tokens 3);; tree) x=("${H[@]}" --draft-tree "3,2");; esac
    "$B/banyan" "${d[@]}" --prompts-file "$W/prompts.txt" "${x[@]}" > "$W/det_$mode.txt" 2> "$W/e_det.txt" ||
      { tail -3 "$W/e_det.txt"; echo "FAILED: $a: banyan generate --deterministic on ($mode)"; failed=1; }
    r=$(python3 -c "
a=open('$W/det_batch.txt',newline='').read().split('\n')[:-1];b=open('$W/det_$mode.txt',newline='').read().split('\n')[:-1]
print(sum(x==y for x,y in zip(a,b)) if len(a)==len(b) else -1, 'of', len(a), 'outputs identical')")
    echo "$a: --deterministic on, ${mode}s against plain in the batch: $r"
    all_same "$r" || failed=1
  done
done
# The bundled model with its trained heads (acceptance, not only rejection): plain against chains
# and [4,2,2] trees, greedy and at temperature 0.8 with seed 11, in the batch of 16 and each
# prompt alone; controls: plain alone against plain in the batch, CPU against GPU.
M="$root/models/stories260K/stories260K.bin"
H=(--speculative hydra --draft-heads "$root/models/stories260K/hydra/config.json" --speculation-adaptive off)
same() {  # file file label: prints the count; a comparison that is not a control must be all
  local r
  r=$(python3 -c "
a=open('$1',newline='').read().split('\n')[:-1];b=open('$2',newline='').read().split('\n')[:-1]
print(sum(x==y for x,y in zip(a,b)) if len(a)==len(b) else -1, 'of', len(a), 'outputs identical')")
  echo "$3: $r"
  [[ $3 == *control:* ]] || all_same "$r" || failed=1
}
for t in 0 0.8; do
  g=(generate --prompts-file "$W/prompts.txt" --temperature "$t" --seed 11 --max-tokens 96 --model "$M")
  "$B/banyan" "${g[@]}" --backend cuda > "$W/b_off.txt" 2>/dev/null
  "$B/banyan" "${g[@]}" --backend cuda "${H[@]}" --draft-tokens 3 > "$W/b_chain.txt" 2>/dev/null
  "$B/banyan" "${g[@]}" --backend cuda "${H[@]}" --draft-tree "4,2,2" > "$W/b_tree.txt" 2>/dev/null
  "$B/banyan" "${g[@]}" --backend cpu > "$W/b_cpu.txt" 2>/dev/null
  : > "$W/a_off.txt"; : > "$W/a_chain.txt"
  while IFS= read -r line; do
    printf '%s\n' "$line" > "$W/one.txt"
    a=(generate --prompts-file "$W/one.txt" --temperature "$t" --seed 11 --max-tokens 96 --model "$M" --backend cuda)
    "$B/banyan" "${a[@]}" 2>/dev/null >> "$W/a_off.txt"
    "$B/banyan" "${a[@]}" "${H[@]}" --draft-tokens 3 2>/dev/null >> "$W/a_chain.txt"
  done < "$W/prompts.txt"
  same "$W/b_off.txt" "$W/b_chain.txt" "stories260K T=$t, control: batch of 16: chains"
  same "$W/b_off.txt" "$W/b_tree.txt" "stories260K T=$t, control: batch of 16: trees"
  same "$W/a_off.txt" "$W/a_chain.txt" "stories260K T=$t, control: each prompt alone: chains"
  same "$W/a_off.txt" "$W/b_off.txt" "stories260K T=$t, control: plain alone against plain in the batch"
  same "$W/b_cpu.txt" "$W/b_off.txt" "stories260K T=$t, control: plain on the CPU against the GPU"
  # --deterministic on (the batch-invariant mode): each prompt alone against the batch, bitwise.
  "$B/banyan" "${g[@]}" --backend cuda --deterministic on > "$W/d_batch.txt" 2>/dev/null
  : > "$W/d_alone.txt"
  while IFS= read -r line; do
    printf '%s\n' "$line" > "$W/one.txt"
    "$B/banyan" generate --prompts-file "$W/one.txt" --temperature "$t" --seed 11 --max-tokens 96 \
      --model "$M" --backend cuda --deterministic on 2>/dev/null >> "$W/d_alone.txt"
  done < "$W/prompts.txt"
  same "$W/d_alone.txt" "$W/d_batch.txt" "stories260K T=$t, --deterministic on: each prompt alone against the batch"
  # ... and speculation under it: chains and trees against plain decoding, bit for bit.
  "$B/banyan" "${g[@]}" --backend cuda --deterministic on "${H[@]}" --draft-tokens 3 > "$W/d_chain.txt" 2>/dev/null
  "$B/banyan" "${g[@]}" --backend cuda --deterministic on "${H[@]}" --draft-tree "4,2,2" > "$W/d_tree.txt" 2>/dev/null
  same "$W/d_batch.txt" "$W/d_chain.txt" "stories260K T=$t, --deterministic on: chains against plain in the batch"
  same "$W/d_batch.txt" "$W/d_tree.txt" "stories260K T=$t, --deterministic on: trees against plain in the batch"
  # Prompt lookup (greedy only: the second run's chains are the first run's continuations, read
  # from the prefix cache): the same bits, and it must have drafted for the line to mean anything
  # (in every step: under the governor a step with candidates of this tiny model costs more than
  # the tokens it gains, so the defaults would verify none).
  if [[ $t == 0 ]]; then
    "$B/banyan" "${g[@]}" --backend cuda --deterministic on --speculative lookup --draft-tokens 3 \
      --speculation-adaptive off > "$W/d_lookup.txt" 2> "$W/d_lookup.err"
    same "$W/d_batch.txt" "$W/d_lookup.txt" "stories260K T=$t, --deterministic on: lookup chains (second run) against plain in the batch"
    grep -q "speculative: [1-9]" "$W/d_lookup.err" ||
      { echo "FAILED: the lookup run verified no candidates"; cat "$W/d_lookup.err"; failed=1; }
  fi
done
if [[ $failed != 0 ]]; then
  echo "speculation identity: FAILED (see the lines above)"
  exit 1
fi
echo "speculation identity: under --deterministic on, every output identical (speculation against plain, alone against the batch)"
