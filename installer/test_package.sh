#!/usr/bin/env bash
# The package test (CI, after the default build; installer/test.sh calls it):
#  1. cpack -G DEB in the build folder, then lintian on every .deb (fails on any error tag);
#  2. a fresh Debian 12 root (debootstrap --variant=minbase bookworm from deb.debian.org, cached
#     as a tarball under $ES_CI_CACHE), the package installed into it with apt in a chroot;
#  3. inside: expertscope-cli generate on the installed default model, expertscope --version and
#     an offscreen `expertscope --smoke-test` (first run: default model, welcome conversation,
#     one message and its reply, clean exit);
#  4. apt-get purge --autoremove, then no file of the package (dpkg -L before) and no path naming
#     expertscope may remain outside the user's own data.
# Needs root (debootstrap, chroot, mount) and the network to deb.debian.org on the first run;
# fails, saying which step, when it cannot do any of it.
# Usage: installer/test_package.sh [BUILD_DIR]   (default build/default, already built: test.sh
# builds it first; cpack installs what the build made)
# Environment: ES_CI_CACHE (default /var/cache/expertscope-ci), ES_DEBIAN_MIRROR
# (default http://deb.debian.org/debian), ES_KEEP_ROOT=1 keeps the test root for inspection.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
cache=${ES_CI_CACHE:-/var/cache/expertscope-ci}
mirror=${ES_DEBIAN_MIRROR:-http://deb.debian.org/debian}
step="start"
say() { echo "test_package: $*"; }
die() { echo "test_package: FAILED at '$step': $*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "test_package: FAILED at '"'"'$step'"'"' (exit $rc)" >&2' EXIT

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount); run as root or through sudo"
for tool in cpack debootstrap lintian dpkg-deb chroot; do
  command -v "$tool" >/dev/null || die "$tool not found; run installer/setup-deps.sh"
done
[ -f "$build/CMakeCache.txt" ] || die "$build is not a configured build folder (cmake --preset default first)"

# ---- 1. Build the package and check it --------------------------------------------------------------
step="cpack"
start=$(date +%s)
rm -rf "$build/packages"
(cd "$build" && cpack -G DEB) || die "cpack -G DEB failed in $build"
mapfile -t debs < <(find "$build/packages" -maxdepth 1 -name '*.deb' | sort)
[ ${#debs[@]} -gt 0 ] || die "cpack wrote no .deb under $build/packages"
main_deb=$(printf '%s\n' "${debs[@]}" | grep '/expertscope_[^/]*\.deb$' | head -n1)
[ -n "$main_deb" ] || die "no expertscope_*.deb among: ${debs[*]}"
say "built ${debs[*]}"
dpkg-deb --info "$main_deb" | sed -n '/Package:/,$p'

step="lintian"
# Tags accepted (installer/README.md says why each is acceptable); errors always fail.
lintian_rc=0
lintian_out=$(lintian --fail-on error --tag-display-limit 0 --display-info "${debs[@]}" 2>&1) || lintian_rc=$?
echo "$lintian_out"
if grep -q '^E: ' <<<"$lintian_out" || [ $lintian_rc -ne 0 ]; then
  die "lintian reported errors or could not run (exit $lintian_rc; output above)"
fi
say "lintian: no errors ($(grep -c '^W: ' <<<"$lintian_out" || true) warnings)"

# ---- 2. A fresh Debian 12 root --------------------------------------------------------------------------
step="debootstrap"
mkdir -p "$cache/apt-archives/partial"
base="$cache/bookworm-minbase.tar"
if [ ! -s "$base" ]; then
  say "creating the Debian 12 base root (debootstrap --variant=minbase bookworm $mirror; cached in $base)"
  tmp="$cache/debootstrap.$$"
  rm -rf "$tmp"
  debootstrap --variant=minbase --cache-dir="$cache/apt-archives" bookworm "$tmp" "$mirror" \
    || die "debootstrap could not build a root from $mirror (network? see the log above)"
  tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
fi
root=$(mktemp -d "$cache/root.XXXXXX")
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [ "${ES_KEEP_ROOT:-0}" = 1 ]; then echo "test_package: the test root stays in $root"; else rm -rf "$root"; fi
}
trap 'rc=$?; cleanup; [ $rc -eq 0 ] || echo "test_package: FAILED at '"'"'$step'"'"' (exit $rc)" >&2' EXIT
tar -C "$root" -xf "$base" || die "cannot unpack $base (remove it to make a new one)"
mount -t proc proc "$root/proc" || die "cannot mount /proc in the test root (a container without CAP_SYS_ADMIN?)"
mounted+=("$root/proc")
mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives" || die "cannot bind-mount the apt cache into the test root"
mounted+=("$root/var/cache/apt/archives")
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

step="apt install"
cp "$main_deb" "$root/tmp/"
deb_in_root="/tmp/$(basename "$main_deb")"
in_root apt-get update -q >/dev/null || die "apt-get update failed in the test root ($mirror)"
in_root find / -xdev -path /proc -prune -o -print 2>/dev/null | sort >"$cache/files-before.$$"
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb_in_root" \
  || die "apt-get install of $(basename "$main_deb") failed in a fresh Debian 12 root (a missing or wrong Depends?)"
in_root dpkg -L expertscope | sort >"$root/tmp/expertscope.list"
say "installed: $(wc -l <"$root/tmp/expertscope.list") paths"

# ---- 3. Run it ------------------------------------------------------------------------------------------
step="expertscope-cli generate"
model=/usr/share/expertscope/models/default
in_root expertscope-cli --version || die "expertscope-cli --version failed"
out=$(in_root expertscope-cli generate --model "$model" --chat --prompt "【技术解析模式】What does ls do?" \
  --max-tokens 32 --seed 1) || die "expertscope-cli generate on $model failed"
[ -n "${out//[[:space:]]/}" ] || die "expertscope-cli generate printed nothing"
say "expertscope-cli generate: ${out:0:120}"

step="expertscope --smoke-test"
in_root env QT_QPA_PLATFORM=offscreen expertscope --version || die "expertscope --version failed"
smoke=$(in_root env QT_QPA_PLATFORM=offscreen timeout 600 expertscope --smoke-test 2>"$root/tmp/smoke.err") || {
  cat "$root/tmp/smoke.err" >&2
  die "expertscope --smoke-test failed (stderr above)"
}
grep -q 'smoke test passed' <<<"$smoke" || die "expertscope --smoke-test exited 0 without its report: $smoke"
say "$smoke"

# ---- 4. Uninstall: nothing may remain -------------------------------------------------------------------
step="apt-get purge"
in_root env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --autoremove expertscope >/dev/null \
  || die "apt-get purge expertscope failed"
! in_root dpkg -s expertscope >/dev/null 2>&1 || die "dpkg still knows expertscope after the purge"
left=()
while IFS= read -r path; do
  [ -n "$path" ] && [ "$path" != /. ] || continue
  if [ -L "$root$path" ] || [ -f "$root$path" ]; then
    left+=("$path")
  elif [ -d "$root$path" ] && ! in_root dpkg -S "$path" >/dev/null 2>&1 \
    && ! grep -qxF "$path" "$cache/files-before.$$"; then
    left+=("$path/")
  fi
done <"$root/tmp/expertscope.list"
# Anything else naming the app, outside the user's data (~/.config, ~/.local: Debian leaves a
# user's files alone on purge) and the test's own /tmp files.
while IFS= read -r path; do left+=("$path"); done < <(in_root find / -xdev \( -path /proc -o -path /root -o -path /tmp \
  -o -path /var/cache/apt/archives \) -prune -o -iname '*expertscope*' -print 2>/dev/null)
rm -f "$cache/files-before.$$"
[ ${#left[@]} -eq 0 ] || die "left behind after the purge: ${left[*]}"
say "purge left no files behind"
step="done"
say "passed in $(($(date +%s) - start)) s"
