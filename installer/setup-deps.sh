#!/usr/bin/env bash
# Installs the Debian 12 packages ExpertScope's build and tests need, and nothing else.
# Idempotent: when every package is already installed it touches nothing (no network needed);
# otherwise it runs apt-get update and installs what is missing, as root or through sudo.
# CUDA is not installed here: it is optional, and CMake finds /usr/local/cuda or nvcc on PATH.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # Qt 6 (Core, Gui, Widgets, Sql, Test, PrintSupport) and the GL headers its CMake files want
  qt6-base-dev qt6-base-dev-tools libgl-dev
  # Qt SVG: the report charts (QSvgGenerator) embedded in HTML reports
  qt6-svg-dev
  # QCustomPlot for Qt 6 (profiler charts); Debian's -dev package also pulls in qtbase5-dev
  libqcustomplot-dev libqcustomplot2.1-qt6
  # Qt Linguist tools (lupdate/lrelease) for the English and Simplified Chinese translations
  qt6-tools-dev qt6-tools-dev-tools qt6-l10n-tools qt6-translations-l10n
  # storage, JSON, command line, tokenizer (library and spm_* tools)
  libsqlite3-dev libqt6sql6-sqlite nlohmann-json3-dev libcli11-dev libsentencepiece-dev sentencepiece
  # HTTP server and client (expertscope-cli serve, serve-bench --url, download); OpenSSL for https
  # and the downloads' SHA-256 (also a dependency of libcpp-httplib-dev)
  libcpp-httplib-dev libssl-dev
  # a virtual X server for GUI tests and screenshots; a CJK font so Chinese text renders
  xvfb xauth fonts-wqy-microhei
  # report tests: PDF pages rendered with pdftoppm; JSON outputs validated against their schemas
  poppler-utils python3-jsonschema
  # the fuzz targets (tests/fuzz): clang with libFuzzer and the sanitizers' runtime, its OpenMP
  clang libclang-rt-14-dev libomp-14-dev
  # packaging (installer/packaging.cmake, test_package.sh, validate_metadata.sh): the icon's PNG
  # sizes (rsvg-convert), CPack's dependency scan (dpkg-shlibdeps, file), lintian, a fresh
  # Debian root for the install test, AppStream / desktop-entry / man-page validators
  librsvg2-bin dpkg-dev file lintian debootstrap appstream desktop-file-utils man-db
)
# Qt's SQLite driver (libqt6sql6-sqlite) is only a Recommends of libqt6sql6, so it is listed
# explicitly: --no-install-recommends would not bring it.

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup-deps: this script is for Debian 12 (apt-get and dpkg-query not found)" >&2
  exit 1
fi
if [ -r /etc/os-release ]; then
  . /etc/os-release
  if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
    echo "setup-deps: warning: written for Debian 12, this is ${PRETTY_NAME:-unknown}; package names may differ" >&2
  fi
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup-deps: missing packages (${missing[*]}) and not root, and sudo is not installed" >&2
  exit 1
fi

echo "setup-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
echo "setup-deps: done"
