#!/usr/bin/env bash
# README command 1: install the Debian packages, build the `default` preset, then start the
# desktop app `expertscope` with the model loaded. Without a display ($DISPLAY / $WAYLAND_DISPLAY
# unset) it chats in the terminal through `expertscope-cli generate --chat` instead (one prompt
# per line; each answer is a fresh single-turn chat).
# The model folder: first argument, else $ES_MODEL, else the embedded default model
# resources/models/default. A second argument answers that prompt in the terminal and exits.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

if [ "${ES_SKIP_SETUP:-0}" != 1 ]; then bash installer/setup-deps.sh; fi
cmake --preset default
cmake --build --preset default -j "${ES_JOBS:-2}"

cli=build/default/app/expertscope-cli
if [ ! -x "$cli" ]; then
  echo "run: $cli was not built" >&2
  exit 1
fi

model=${1:-${ES_MODEL:-}}
if [ -z "$model" ]; then
  for candidate in resources/models/default tests/data/moe-shared; do
    if [ -f "$candidate/config.json" ]; then model=$candidate; break; fi
  done
fi
if [ -z "$model" ]; then
  cat >&2 <<'MSG'
run: no model folder. Pass one (bash installer/run.sh /path/to/ERNIE-4.5-0.3B-PT) or set ES_MODEL.
     The embedded default model resources/models/default is missing from this checkout.
MSG
  exit 2
fi
if [ ! -f "$model/config.json" ]; then
  echo "run: $model/config.json not found (expected a model folder in the hub layout)" >&2
  exit 2
fi
case "$model" in
  tests/data/*) echo "run: using the reference checkpoint $model (random weights, answers are noise); pass a real model folder or set ES_MODEL" >&2 ;;
esac

app=build/default/ui/desktop/expertscope
if [ $# -lt 2 ] && [ -x "$app" ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
  exec "$app" --model "$model"
fi

gen=("$cli" generate --model "$model" --chat --max-tokens "${ES_MAX_TOKENS:-256}")
if [ -n "${ES_SYSTEM:-}" ]; then gen+=(--system "$ES_SYSTEM"); fi

if [ $# -ge 2 ]; then
  exec "${gen[@]}" --prompt "$2"
fi
echo "Chatting with $model. One prompt per line; an empty line or Ctrl-D ends." >&2
while true; do
  if [ -t 0 ]; then printf 'You: ' >&2; fi
  IFS= read -r prompt || break
  [ -n "$prompt" ] || break
  "${gen[@]}" --prompt "$prompt" || echo "run: expertscope-cli failed (exit $?)" >&2
  echo
done
