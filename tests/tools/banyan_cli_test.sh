#!/bin/sh
# What the README promises of the `banyan` CLI (tools/banyan_cli.cc), checked on the bundled
# stories260K:
#   banyan_cli_test.sh convert BANYAN SOURCE_DIR
#     `banyan convert` writes a Hugging Face folder that loads and greedily generates the text of
#     the model it came from (GGUF and llama2.c sources, f32; and the converted folder again),
#     with a config.json of the source's shape; --dtype bf16/f16 writes tensors of that dtype that
#     load and generate; bad arguments exit 2 naming the flag.
#   banyan_cli_test.sh prompts-file BANYAN SOURCE_DIR
#     `--prompts-file` runs one prompt per line as one batch, prints one line per prompt, and each
#     line is what the prompt gives alone (greedy; and sampled with a seed, whose streams do not
#     depend on the batch); a file of one prompt prints one line too; a missing file exits 2
#     naming --prompts-file, a bad --deterministic value names that flag.
set -u
mode=$1
banyan=$2
src=$3
models=$src/models/stories260K
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# generate ARGS...: the completion on stdout; exits the test on a non-zero exit.
generate() {
  if ! "$banyan" generate "$@" 2>"$tmp/stderr"; then
    echo "banyan generate $* failed:"; cat "$tmp/stderr"; exit 1
  fi
}

# expect_error NEEDLE ARGS...: banyan exits 2 and its message contains NEEDLE.
expect_error() {
  needle=$1
  shift
  "$banyan" "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 2 ]; then
    fail "banyan $* exited $rc, expected 2"
  elif ! grep -q -F -e "$needle" "$tmp/err"; then
    fail "banyan $*: message does not name '$needle': $(cat "$tmp/err")"
  fi
}

# safetensors_dtypes FILE: the distinct dtypes in a .safetensors header, one per line (the header
# is a JSON object after its 8-byte little-endian length).
safetensors_dtypes() {
  len=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  dd if="$1" bs=1 skip=8 count="$len" 2>/dev/null |
    grep -o '"dtype" *: *"[A-Z0-9]*"' | sed 's/.*"\([A-Z0-9]*\)"$/\1/' | sort -u
}

# config_value DIR KEY: a number or string of the folder's config.json.
config_value() {
  tr -d '\n ' <"$1/config.json" | grep -o "\"$2\":[^,}]*" | head -n 1 | cut -d: -f2 | tr -d '"'
}

prompt="Once upon a time"

case "$mode" in
convert)
  want=$(generate --model "$models/stories260K.gguf" --tokenizer "$models/tok512.model" \
    --prompt "$prompt" --max-tokens 48 --temperature 0)
  [ -n "$want" ] || fail "the GGUF source generated nothing"

  # GGUF -> HF, f32: the same greedy text, the source's shape.
  "$banyan" convert --model "$models/stories260K.gguf" --tokenizer "$models/tok512.model" \
    --out "$tmp/from-gguf" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  for f in config.json model.safetensors tokenizer.model; do
    [ -s "$tmp/from-gguf/$f" ] || fail "convert wrote no $f"
  done
  for kv in hidden_size=64 num_hidden_layers=5 num_attention_heads=8 num_key_value_heads=4 \
            vocab_size=512 model_type=llama torch_dtype=float32; do
    got=$(config_value "$tmp/from-gguf" "${kv%%=*}")
    [ "$got" = "${kv#*=}" ] || fail "config.json ${kv%%=*} is '$got', expected '${kv#*=}'"
  done
  [ "$(safetensors_dtypes "$tmp/from-gguf/model.safetensors")" = F32 ] ||
    fail "f32 conversion holds dtypes: $(safetensors_dtypes "$tmp/from-gguf/model.safetensors")"
  got=$(generate --model "$tmp/from-gguf" --prompt "$prompt" --max-tokens 48 --temperature 0)
  [ "$got" = "$want" ] || fail "converted from GGUF: '$got' != source '$want'"

  # llama2.c .bin -> HF, and the converted folder converted again.
  "$banyan" convert --model "$models/stories260K.bin" --tokenizer "$models/tok512.model" \
    --out "$tmp/from-bin" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  got=$(generate --model "$tmp/from-bin" --prompt "$prompt" --max-tokens 48 --temperature 0)
  [ "$got" = "$want" ] || fail "converted from .bin: '$got' != GGUF source '$want'"
  "$banyan" convert --model "$tmp/from-gguf" --out "$tmp/again" 2>"$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
  cmp -s "$tmp/from-gguf/model.safetensors" "$tmp/again/model.safetensors" ||
    fail "HF -> HF changed model.safetensors"
  got=$(generate --model "$tmp/again" --prompt "$prompt" --max-tokens 48 --temperature 0)
  [ "$got" = "$want" ] || fail "converted twice: '$got' != source '$want'"

  # Half precision: tensors of that dtype, a folder that loads and generates.
  for dt in bf16:BF16:bfloat16 f16:F16:float16; do
    flag=${dt%%:*}; rest=${dt#*:}; st=${rest%%:*}; torch=${rest#*:}
    "$banyan" convert --model "$models/stories260K.gguf" --tokenizer "$models/tok512.model" \
      --out "$tmp/$flag" --dtype "$flag" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    [ "$(safetensors_dtypes "$tmp/$flag/model.safetensors")" = "$st" ] ||
      fail "--dtype $flag holds dtypes: $(safetensors_dtypes "$tmp/$flag/model.safetensors")"
    [ "$(config_value "$tmp/$flag" torch_dtype)" = "$torch" ] ||
      fail "--dtype $flag: config.json torch_dtype $(config_value "$tmp/$flag" torch_dtype)"
    got=$(generate --model "$tmp/$flag" --prompt "$prompt" --max-tokens 16 --temperature 0)
    [ -n "$got" ] || fail "--dtype $flag: the converted model generated nothing"
  done

  expect_error "--out" convert --model "$models/stories260K.gguf"
  expect_error "--dtype" convert --model "$models/stories260K.gguf" --out "$tmp/x" --dtype f8
  "$banyan" convert --model "$tmp/no-such-model" --out "$tmp/y" >/dev/null 2>&1
  [ $? -ne 0 ] || fail "convert of a missing model succeeded"
  [ ! -e "$tmp/y/model.safetensors" ] || fail "convert of a missing model wrote a folder"
  ;;

prompts-file)
  printf '%s\n' "$prompt" "The little dog" "Lily and Ben went to the" >"$tmp/prompts.txt"
  for sampling in "--temperature 0" "--temperature 0.8 --seed 11"; do
    # shellcheck disable=SC2086  # $sampling is two or four words
    generate --prompts-file "$tmp/prompts.txt" --max-tokens 24 $sampling >"$tmp/batch.txt"
    lines=$(wc -l <"$tmp/batch.txt")
    [ "$lines" -eq 3 ] || fail "$sampling: $lines output lines for 3 prompts"
    i=0
    while IFS= read -r p; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      alone=$(generate --prompt "$p" --max-tokens 24 $sampling |
        sed 's/\\/\\\\/g' | awk '{ printf "%s%s", (NR > 1 ? "\\n" : ""), $0 }')
      in_batch=$(sed -n "${i}p" "$tmp/batch.txt")
      [ -n "$alone" ] || fail "$sampling: prompt $i generated nothing"
      [ "$in_batch" = "$alone" ] ||
        fail "$sampling: prompt $i in the batch '$in_batch' != alone '$alone'"
    done <"$tmp/prompts.txt"
    # A file of one prompt prints its completion on one line too, as that prompt's line of the
    # batch (scripts compare the two).
    printf '%s\n' "$prompt" >"$tmp/one.txt"
    # shellcheck disable=SC2086
    generate --prompts-file "$tmp/one.txt" --max-tokens 24 $sampling >"$tmp/one_out.txt"
    [ "$(wc -l <"$tmp/one_out.txt")" -eq 1 ] || fail "$sampling: a one-prompt file printed $(wc -l <"$tmp/one_out.txt") lines"
    [ "$(cat "$tmp/one_out.txt")" = "$(sed -n 1p "$tmp/batch.txt")" ] ||
      fail "$sampling: a one-prompt file's line differs from the batch's first line"
  done
  expect_error "--prompts-file" generate --prompts-file "$tmp/missing.txt"
  expect_error "--deterministic" generate --deterministic sometimes
  ;;

*)
  echo "usage: $0 convert|prompts-file BANYAN SOURCE_DIR" >&2
  exit 2
  ;;
esac

if [ "$failures" -ne 0 ]; then
  echo "banyan_cli_test $mode: $failures failures"
  exit 1
fi
echo "banyan_cli_test $mode: OK"
