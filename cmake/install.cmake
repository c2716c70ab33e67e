# cmake --install rules (included from CMakeLists.txt). Everything goes under GNUInstallDirs' folders:
#   bin/kite, lib/libkite.a, lib/libkite.so.0.1.0 (soname libkite.so.0) and its links, include/kite.h
#   (the only public header), lib/pkgconfig/kite.pc, lib/cmake/kite/ (find_package(kite): kite::kite is
#   the shared library, kite::kite_static the static one), share/kite/models/ (the default model, its
#   README and licence). kite.pc and the CMake files find the prefix from where they are, so
#   `cmake --install build --prefix P` works for any P, not only the configured CMAKE_INSTALL_PREFIX.
include(CMakePackageConfigHelpers)

set_target_properties(kite_shared PROPERTIES EXPORT_NAME kite)
set_target_properties(kite_static PROPERTIES EXPORT_NAME kite_static)

install(TARGETS kite RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kite_shared EXPORT kiteTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kite_static EXPORT kiteStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/kite.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KITE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kite)
install(EXPORT kiteTargets NAMESPACE kite:: DESTINATION ${KITE_CMAKE_DIR})
install(EXPORT kiteStaticTargets NAMESPACE kite:: DESTINATION ${KITE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kiteConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kiteConfig.cmake INSTALL_DESTINATION ${KITE_CMAKE_DIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kiteConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kiteConfig.cmake ${PROJECT_BINARY_DIR}/kiteConfigVersion.cmake
        DESTINATION ${KITE_CMAKE_DIR})

# kite.pc: prefix relative to the .pc file's own folder (pkg-config's ${pcfiledir}).
set(KITE_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH KITE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" KITE_PC_TO_PREFIX "${KITE_PC_TO_PREFIX}")
set(KITE_PC_PREFIX "\${pcfiledir}/${KITE_PC_TO_PREFIX}")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(KITE_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(KITE_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/kite.pc.in ${PROJECT_BINARY_DIR}/kite.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kite.pc DESTINATION ${KITE_PC_DIR})

install(FILES ${PROJECT_SOURCE_DIR}/models/${KITE_DEFAULT_MODEL_FILE} ${PROJECT_SOURCE_DIR}/models/README.md
              ${PROJECT_SOURCE_DIR}/models/LICENSE
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kite/models)
