# Per-generator CPack settings (CPACK_PROJECT_CONFIG_FILE, read by cpack for each generator).
# DEB: everything under /usr. TGZ: relative paths under one top folder, so the unpacked tree runs
# from anywhere (the app finds share/expertscope next to bin/).
if(CPACK_GENERATOR STREQUAL "DEB")
  set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
  set(CPACK_COMPONENT_INCLUDE_TOPLEVEL_DIRECTORY OFF)
elseif(CPACK_GENERATOR STREQUAL "TGZ")
  set(CPACK_COMPONENT_INCLUDE_TOPLEVEL_DIRECTORY ON)
endif()
