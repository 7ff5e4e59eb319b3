# Imported targets for Debian packages that ship no CMake config:
#   es::sentencepiece  (libsentencepiece-dev)
#   es::qcustomplot    (below)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
add_library(es::sentencepiece ALIAS PkgConfig::SENTENCEPIECE)


#   es::qcustomplot    (libqcustomplot-dev + libqcustomplot2.1-qt6): the profiler's charts, GUI
#   builds only. The -dev package's default libqcustomplot.so may be the Qt 5 build, and linking
#   it beside Qt 6 loads both Qts into one process, so the Qt 6 build is named explicitly.
if(ES_BUILD_GUI)
  find_package(Qt6 REQUIRED COMPONENTS Widgets PrintSupport)
  find_path(ES_QCUSTOMPLOT_INCLUDE_DIR qcustomplot.h)
  find_library(ES_QCUSTOMPLOT_QT6_LIBRARY NAMES QCustomPlotQt6 qcustomplot-qt6)
  if(NOT ES_QCUSTOMPLOT_INCLUDE_DIR OR NOT ES_QCUSTOMPLOT_QT6_LIBRARY)
    message(FATAL_ERROR "QCustomPlot for Qt 6 was not found (qcustomplot.h, libQCustomPlotQt6.so): "
                        "install libqcustomplot-dev and libqcustomplot2.1-qt6 (installer/setup-deps.sh)")
  endif()
  add_library(es::qcustomplot UNKNOWN IMPORTED)
  set_target_properties(es::qcustomplot PROPERTIES
    IMPORTED_LOCATION "${ES_QCUSTOMPLOT_QT6_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ES_QCUSTOMPLOT_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS QCUSTOMPLOT_USE_LIBRARY
    INTERFACE_LINK_LIBRARIES "Qt6::Widgets;Qt6::PrintSupport")
endif()
