# Install rules for what the executables need at run time, and CPack (DEB, TGZ).
# Included last by the top-level CMakeLists.txt, so every target exists. Components:
#   app   → package `expertscope`: both executables, the default model, desktop entry, icons,
#           AppStream metadata, man pages, copyright, changelog. Never needs CUDA.
#   cuda  → package `expertscope-cuda` (only when the target es_cuda_module exists): the CUDA
#           backend module, loaded at run time by the app; depends on NVIDIA's CUDA repository
#           packages for cuBLAS/cuBLASLt (installer/README.md says why).
# `cpack -G DEB` / `cpack -G TGZ` in the build folder; installer/test_package.sh tests the .deb.

set(ES_DATA_DIR ${CMAKE_INSTALL_DATADIR}/expertscope)
set(ES_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/expertscope)
set(ES_APP_ID invalid.example.expertscope) # AppStream ID; desktop file and metainfo are named after it
set(ES_DEB_RELEASE 1)
set(ES_DEB_VERSION ${PROJECT_VERSION}-${ES_DEB_RELEASE})
set(ES_PKG_STAGE ${CMAKE_BINARY_DIR}/installer)

# ---- Data ----------------------------------------------------------------------------------------
# The embedded default model: what load_model reads, and its NOTICE. ref_logits.npy and
# reference.json are test data (tests/engine/model/test_model_reference) and stay in the source tree.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/resources/models/default/ DESTINATION ${ES_DATA_DIR}/models/default
        COMPONENT app
        FILES_MATCHING PATTERN "*.json" PATTERN "*.safetensors" PATTERN "tokenizer.model" PATTERN "NOTICE"
        PATTERN "reference.json" EXCLUDE)
# Translations (.qm) and the built-in presets are compiled into the executable (:/i18n,
# app/storage/presets.cpp), so nothing else goes under share/expertscope.

if(TARGET expertscope)
  install(FILES ${CMAKE_SOURCE_DIR}/resources/desktop/${ES_APP_ID}.desktop
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications COMPONENT app)
  install(FILES ${CMAKE_SOURCE_DIR}/resources/desktop/${ES_APP_ID}.metainfo.xml
          DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo COMPONENT app)
  # Icons: the SVG is the source; PNGs of every hicolor size are rendered at build time.
  install(FILES ${CMAKE_SOURCE_DIR}/resources/icons/expertscope.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps COMPONENT app)
  find_program(ES_RSVG_CONVERT rsvg-convert)
  if(NOT ES_RSVG_CONVERT)
    message(FATAL_ERROR "rsvg-convert not found: install librsvg2-bin (installer/setup-deps.sh); it renders the app icon's PNG sizes")
  endif()
  set(ES_ICON_PNGS)
  foreach(size 16 22 24 32 48 64 128 256 512)
    set(png ${ES_PKG_STAGE}/icons/${size}x${size}/expertscope.png)
    add_custom_command(OUTPUT ${png}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${ES_PKG_STAGE}/icons/${size}x${size}
      COMMAND ${ES_RSVG_CONVERT} -w ${size} -h ${size} -o ${png} ${CMAKE_SOURCE_DIR}/resources/icons/expertscope.svg
      DEPENDS ${CMAKE_SOURCE_DIR}/resources/icons/expertscope.svg
      COMMENT "Rendering the ${size}x${size} app icon" VERBATIM)
    list(APPEND ES_ICON_PNGS ${png})
    install(FILES ${png} DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/${size}x${size}/apps COMPONENT app)
  endforeach()
endif()

# ---- Documentation: man pages, copyright, changelog, notices --------------------------------------
# Gzipped with -9n (maximum compression, no timestamp: reproducible, as lintian asks).
find_program(ES_GZIP gzip REQUIRED)
set(ES_GZ_FILES)
function(es_gzip_file source configured_name output)
  configure_file(${source} ${ES_PKG_STAGE}/${configured_name} @ONLY)
  add_custom_command(OUTPUT ${output}
    COMMAND ${ES_GZIP} -9nc ${ES_PKG_STAGE}/${configured_name} > ${output}
    DEPENDS ${ES_PKG_STAGE}/${configured_name} ${source}
    COMMENT "Compressing ${configured_name}" VERBATIM)
  set(ES_GZ_FILES ${ES_GZ_FILES} ${output} PARENT_SCOPE)
endfunction()
set(ES_VERSION ${PROJECT_VERSION})
set(ES_MAN_PAGES)
foreach(page expertscope-cli expertscope)
  if(TARGET ${page})
    es_gzip_file(${CMAKE_SOURCE_DIR}/installer/man/${page}.1 man/${page}.1 ${ES_PKG_STAGE}/man/${page}.1.gz)
    install(FILES ${ES_PKG_STAGE}/man/${page}.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT app)
  endif()
endforeach()
es_gzip_file(${CMAKE_SOURCE_DIR}/installer/debian/changelog changelog.Debian ${ES_PKG_STAGE}/changelog.Debian.gz)
install(FILES ${ES_PKG_STAGE}/changelog.Debian.gz DESTINATION ${ES_DOC_DIR} COMPONENT app)
install(FILES ${CMAKE_SOURCE_DIR}/installer/debian/copyright ${CMAKE_SOURCE_DIR}/THIRD_PARTY_NOTICES.md
        DESTINATION ${ES_DOC_DIR} COMPONENT app)
if(TARGET es_cuda_module)
  # expertscope-cuda carries its own copyright (the statically linked CUDA runtime) and changelog.
  install(FILES ${ES_PKG_STAGE}/changelog.Debian.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/expertscope-cuda
          COMPONENT cuda)
  install(FILES ${CMAKE_SOURCE_DIR}/installer/debian/copyright-cuda DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/expertscope-cuda
          RENAME copyright COMPONENT cuda)
endif()
# Rendered icons and compressed pages are built with `all`, so `cpack` after a build finds them.
add_custom_target(es_package_files ALL DEPENDS ${ES_GZ_FILES} ${ES_ICON_PNGS})

# ---- CPack -----------------------------------------------------------------------------------------
set(CPACK_PACKAGE_NAME expertscope)
set(CPACK_PACKAGE_VENDOR "The ExpertScope contributors")
set(CPACK_PACKAGE_CONTACT "The ExpertScope contributors <expertscope@example.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# Each package's synopsis is the first line of its CPACK_DEBIAN_<COMP>_DESCRIPTION. CPackDeb
# prepends CPACK_PACKAGE_DESCRIPTION_SUMMARY to every component's description unless it equals
# CPack's default ("<project> built using CMake"), so the default is kept on purpose (lintian:
# description-synopsis-is-duplicated otherwise, and expertscope-cuda would get the app's synopsis).
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CMAKE_PROJECT_NAME} built using CMake")
set(CPACK_PACKAGE_HOMEPAGE_URL ${PROJECT_HOMEPAGE_URL})
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_SOURCE_DIR}/LICENSE)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB TGZ)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# DEB installs under /usr; the TGZ is relocatable (bin/, share/ under one top folder: the app
# finds its model through <exe>/../share). Set per generator in the project config file.
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_SOURCE_DIR}/installer/cpack_project_config.cmake)

set(CPACK_COMPONENTS_ALL app)
if(TARGET es_cuda_module)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
endif()
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_ARCHIVE_COMPONENT_INSTALL ON)

set(CPACK_DEBIAN_PACKAGE_RELEASE ${ES_DEB_RELEASE})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${CPACK_PACKAGE_CONTACT})
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE ${PROJECT_HOMEPAGE_URL})

# expertscope: dependencies from what is linked (dpkg-shlibdeps: Qt 6, QCustomPlot for Qt 6,
# SentencePiece, libgomp, libstdc++), plus what is loaded as a plugin and so invisible to it:
# Qt's SQLite driver (which brings libsqlite3-0).
set(CPACK_DEBIAN_APP_PACKAGE_NAME expertscope)
set(CPACK_DEBIAN_APP_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_APP_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_APP_PACKAGE_DEPENDS "libqt6sql6-sqlite")
set(CPACK_DEBIAN_APP_PACKAGE_RECOMMENDS "qt6-translations-l10n, fonts-wqy-microhei | fonts-noto-cjk")
set(CPACK_DEBIAN_APP_PACKAGE_SUGGESTS "expertscope-cuda")
set(CPACK_DEBIAN_APP_PACKAGE_SECTION science)
set(CPACK_DEBIAN_APP_DESCRIPTION
    "chat with ERNIE-4.5 models and see inside them while they answer
ExpertScope runs Baidu's ERNIE-4.5 text models (dense and mixture-of-experts,
in the Hugging Face hub layout) on this machine and shows, while a reply
streams, which experts each layer routes every token to, how long every token
took and how memory is used. Conversations, presets and per-reply profiles are
stored in SQLite.
.
This package contains the Qt 6 desktop app expertscope, the command-line tool
expertscope-cli (generate, an OpenAI-compatible server, benchmarks) and a small
embedded model, and runs on the CPU. Install expertscope-cuda as well to run
models on an NVIDIA GPU.")
set(CPACK_ARCHIVE_APP_FILE_NAME expertscope-${PROJECT_VERSION}-linux-${CMAKE_SYSTEM_PROCESSOR})

if(TARGET es_cuda_module)
  # expertscope-cuda: the module links cuBLASLt dynamically and cudart statically; cuBLAS comes
  # from NVIDIA's CUDA repository (libcublas-X-Y), the driver (libcuda.so.1) from the system's
  # NVIDIA driver. dpkg-shlibdeps cannot see packages outside Debian, so it is off here and the
  # dependencies are spelt out.
  set(ES_CUDA_PKG_SUFFIX ${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR})
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME expertscope-cuda)
  set(CPACK_DEBIAN_CUDA_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS
      "expertscope (= ${ES_DEB_VERSION}), libcublas-${ES_CUDA_PKG_SUFFIX}, libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1")
  set(CPACK_DEBIAN_CUDA_PACKAGE_RECOMMENDS "cuda-drivers | nvidia-driver")
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION contrib/science)
  set(CPACK_DEBIAN_CUDA_DESCRIPTION
      "NVIDIA GPU backend of ExpertScope
The CUDA backend of ExpertScope (BF16 and FP8 weights, CUDA graphs), loaded at
run time by expertscope and expertscope-cli when present. Needs an NVIDIA GPU
with its driver and cuBLAS from NVIDIA's CUDA repository.")
  set(CPACK_ARCHIVE_CUDA_FILE_NAME expertscope-cuda-${PROJECT_VERSION}-linux-${CMAKE_SYSTEM_PROCESSOR})
endif()

include(CPack)
cpack_add_component(app DISPLAY_NAME "ExpertScope" REQUIRED)
if(TARGET es_cuda_module)
  cpack_add_component(cuda DISPLAY_NAME "ExpertScope CUDA backend" DEPENDS app)
endif()
