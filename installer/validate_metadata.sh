#!/usr/bin/env bash
# CTest `package_metadata`: the AppStream metainfo (appstreamcli validate, no network), the
# desktop entry (desktop-file-validate) and the man pages (man --warnings) must be clean; hints
# and infos are printed but pass. Usage: validate_metadata.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: validate_metadata.sh SOURCE_DIR}
fail=0
for tool in appstreamcli desktop-file-validate man; do
  command -v "$tool" >/dev/null || { echo "validate_metadata: $tool not found; run installer/setup-deps.sh" >&2; exit 1; }
done
for f in "$src"/resources/desktop/*.metainfo.xml; do
  appstreamcli validate --no-net --no-color "$f" || { echo "validate_metadata: $f is not valid AppStream" >&2; fail=1; }
done
for f in "$src"/resources/desktop/*.desktop; do
  out=$(desktop-file-validate "$f" 2>&1) || { echo "$out"; echo "validate_metadata: $f is not a valid desktop entry" >&2; fail=1; continue; }
  [ -z "$out" ] || echo "$out"
  if grep -qE ': (error|warning):' <<<"$out"; then echo "validate_metadata: $f: warnings above" >&2; fail=1; fi
done
for f in "$src"/installer/man/*.1; do
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$f" 2>&1 >/dev/null || true)
  if [ -n "$warnings" ]; then echo "$warnings"; echo "validate_metadata: $f: groff warnings above" >&2; fail=1; fi
done
[ $fail -eq 0 ] && echo "validate_metadata: metainfo, desktop entry and man pages are valid"
exit $fail
