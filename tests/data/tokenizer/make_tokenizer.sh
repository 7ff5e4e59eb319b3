#!/usr/bin/env bash
# Trains the tiny English + Chinese SentencePiece tokenizer shared by the reference
# checkpoints (tests/data/*). Reproducible: fixed inputs from Debian packages (fortunes-min,
# fortunes-zh, base-files licenses), fixed options, one thread. Needs the `sentencepiece`
# package (spm_train). The ERNIE special tokens are user-defined pieces, as in the hub's model.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
{
  cat /usr/share/games/fortunes/fortunes.u8 2>/dev/null || cat /usr/share/games/fortunes/fortunes
  cat /usr/share/games/fortunes/tang300.u8 /usr/share/games/fortunes/song100.u8 /usr/share/games/fortunes/chinese.u8
  cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0
  printf 'User: What is a mixture of experts?\nAssistant: A router picks experts per token.\n'
  printf '【技术解析模式】\n【创意写作模式】\n'
} | grep -v '^%$' > "$tmp/corpus.txt"
spm_train --input="$tmp/corpus.txt" --model_prefix="$tmp/tok" --vocab_size=3000 \
  --model_type=bpe --character_coverage=0.98 --byte_fallback=true \
  --add_dummy_prefix=false --remove_extra_whitespaces=false --normalization_rule_name=identity \
  --split_digits=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --unk_piece='<unk>' --bos_piece='<s>' --eos_piece='</s>' \
  --user_defined_symbols='<|begin_of_sentence|>,<|end_of_sentence|>,<mask:1>,<mask:4>,<mask:5>,<mask:6>,<mask:7>' \
  --num_threads=1 --input_sentence_size=0 --shuffle_input_sentence=false --seed_sentencepiece_size=200000 \
  --minloglevel=2
cp "$tmp/tok.model" "$here/tokenizer.model"
echo "wrote $here/tokenizer.model"
