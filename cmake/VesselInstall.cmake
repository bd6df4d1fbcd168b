# `cmake --install` exports vessel::* so that another project can find_package(vessel).
include(CMakePackageConfigHelpers)

set(VESSEL_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/vessel")
set(VESSEL_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}/vessel")

# Installs a module's library and its public headers under include/vessel/<module>/.
function(vessel_install_module target module)
  install(TARGETS ${target} EXPORT vesselTargets
    ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    INCLUDES DESTINATION "${VESSEL_INSTALL_INCLUDEDIR}")
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${module}/" DESTINATION "${VESSEL_INSTALL_INCLUDEDIR}/${module}"
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" PATTERN "*.capnp")
endfunction()

# Called once, after every module has added its targets.
function(vessel_install_package)
  install(TARGETS vessel_all vessel_compile_options EXPORT vesselTargets)
  install(EXPORT vesselTargets NAMESPACE vessel:: DESTINATION "${VESSEL_INSTALL_CMAKEDIR}")

  configure_package_config_file(cmake/vesselConfig.cmake.in
    "${CMAKE_CURRENT_BINARY_DIR}/vesselConfig.cmake"
    INSTALL_DESTINATION "${VESSEL_INSTALL_CMAKEDIR}")
  write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/vesselConfigVersion.cmake"
    COMPATIBILITY SameMinorVersion)
  install(FILES
    "${CMAKE_CURRENT_BINARY_DIR}/vesselConfig.cmake"
    "${CMAKE_CURRENT_BINARY_DIR}/vesselConfigVersion.cmake"
    cmake/FindCAF.cmake
    DESTINATION "${VESSEL_INSTALL_CMAKEDIR}")
endfunction()
