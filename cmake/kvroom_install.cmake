# `cmake --install`: headers under include/kvroom/, static libraries, the
# `kvroom` command, and a CMake package so an embedding scheduler writes
#   find_package(kvroom REQUIRED)
#   target_link_libraries(app PRIVATE kvroom::kvroom)   # #include <kvroom/kvroom.hpp>
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVROOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvroom)

install(TARGETS kvroom kvroom_actors kvroom_transport kvroom_messages
        EXPORT kvroomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# Public headers only: backends stay private to transport/.
foreach(layer messages transport actors)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvroom/${layer}
          FILES_MATCHING PATTERN "*.hpp"
          PATTERN "local" EXCLUDE PATTERN "fault" EXCLUDE
          PATTERN "shm" EXCLUDE PATTERN "tcp" EXCLUDE
          PATTERN "verbs" EXCLUDE PATTERN "cuda" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/actors/kvroom.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvroom)

install(EXPORT kvroomTargets NAMESPACE kvroom:: DESTINATION ${KVROOM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvroomConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvroomConfig.cmake INSTALL_DESTINATION ${KVROOM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvroomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvroomConfig.cmake
              ${PROJECT_BINARY_DIR}/kvroomConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${KVROOM_CMAKE_DIR})
