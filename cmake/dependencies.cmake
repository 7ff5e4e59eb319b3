# Imported targets for Debian packages that ship no CMake config:
#   es::sentencepiece  (libsentencepiece-dev)
#   es::blas           (libopenblas-openmp-dev: OpenMP-threaded OpenBLAS, the same thread pool as ours)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
add_library(es::sentencepiece ALIAS PkgConfig::SENTENCEPIECE)

find_path(ES_CBLAS_INCLUDE_DIR cblas.h
          PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
                /usr/include/openblas /usr/include)
find_library(ES_OPENBLAS_LIBRARY NAMES openblas
             PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
if(NOT ES_CBLAS_INCLUDE_DIR OR NOT ES_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: install libopenblas-openmp-dev (installer/setup-deps.sh does)")
endif()
add_library(es_blas INTERFACE)
target_include_directories(es_blas INTERFACE ${ES_CBLAS_INCLUDE_DIR})
target_link_libraries(es_blas INTERFACE ${ES_OPENBLAS_LIBRARY})
add_library(es::blas ALIAS es_blas)
