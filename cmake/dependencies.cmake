# Imported targets for Debian packages that ship no CMake config:
#   es::sentencepiece  (libsentencepiece-dev)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
add_library(es::sentencepiece ALIAS PkgConfig::SENTENCEPIECE)

