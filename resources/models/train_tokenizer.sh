#!/usr/bin/env bash
# Trains the default model's SentencePiece tokenizer (English + Chinese BPE, byte fallback, no
# dummy prefix, ERNIE special tokens as user-defined pieces) on the prepared chat data and the
# presets' system prompts. Needs Debian's `sentencepiece` (spm_train). One thread: reproducible.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$here/data/train.jsonl" > "$tmp/corpus.txt" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]).parent.parent))
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    print(r["user"]); print(r["assistant"])
PY
python3 -c "import sys; sys.path.insert(0,'$here'); from train_default import SYSTEM; print(SYSTEM['tech']); print(SYSTEM['creative'])" >> "$tmp/corpus.txt"
printf 'User: \nAssistant: \n' >> "$tmp/corpus.txt"
spm_train --input="$tmp/corpus.txt" --model_prefix="$tmp/tok" --vocab_size=6000 \
  --model_type=bpe --character_coverage=0.9995 --byte_fallback=true \
  --add_dummy_prefix=false --remove_extra_whitespaces=false --normalization_rule_name=identity \
  --split_digits=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --unk_piece='<unk>' --bos_piece='<s>' --eos_piece='</s>' \
  --user_defined_symbols='<|begin_of_sentence|>,<|end_of_sentence|>,<mask:1>,<mask:4>,<mask:5>,<mask:6>,<mask:7>' \
  --num_threads=1 --input_sentence_size=0 --shuffle_input_sentence=false --max_sentence_length=8192 \
  --minloglevel=2
mkdir -p "$here/default"
cp "$tmp/tok.model" "$here/default/tokenizer.model"
cp "$here/../../tests/data/tokenizer/tokenizer_config.json" "$here/../../tests/data/tokenizer/special_tokens_map.json" "$here/default/"
echo "wrote $here/default/tokenizer.model"
