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

# The API only: the headers `kvroom.hpp` reaches, which include what an
# embedder's own data plane implements (transport/backend.hpp, factory.hpp).
# Everything else (the manager, room actors, backends, sockets, the gates)
# stays private, as CAF keeps caf/detail/. The list is computed from the
# includes themselves, and re-computed when one of those headers changes;
# install_consumer_test checks that nothing beyond it is installed.
function(kvroom_api_closure out)
  set(todo "kvroom/kvroom.hpp")
  set(done "")
  while(todo)
    list(POP_FRONT todo h)
    if(h IN_LIST done)
      continue()
    endif()
    list(APPEND done ${h})
    if(h STREQUAL "kvroom/kvroom.hpp")
      set(path ${PROJECT_SOURCE_DIR}/actors/kvroom.hpp)
    else()
      string(REGEX REPLACE "^kvroom/" "${PROJECT_SOURCE_DIR}/" path ${h})
    endif()
    if(NOT EXISTS ${path})
      message(FATAL_ERROR "the API includes ${h}, which is not in the tree")
    endif()
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
    file(STRINGS ${path} lines REGEX "#include \"kvroom/")
    foreach(l ${lines})
      string(REGEX REPLACE ".*#include \"(kvroom/[^\"]+)\".*" "\\1" inc "${l}")
      list(APPEND todo ${inc})
    endforeach()
  endwhile()
  list(SORT done)
  set(${out} ${done} PARENT_SCOPE)
endfunction()

kvroom_api_closure(KVROOM_API_HEADERS)
string(REPLACE ";" "\n" api_text "${KVROOM_API_HEADERS}")
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/kvroom_api_headers.txt CONTENT "${api_text}\n")
foreach(h ${KVROOM_API_HEADERS})
  if(h STREQUAL "kvroom/kvroom.hpp")
    install(FILES ${PROJECT_SOURCE_DIR}/actors/kvroom.hpp
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvroom)
  else()
    string(REGEX REPLACE "^kvroom/" "" rel ${h})
    get_filename_component(dir ${rel} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${rel}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvroom/${dir})
  endif()
endforeach()

install(EXPORT kvroomTargets NAMESPACE kvroom:: DESTINATION ${KVROOM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvroomConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvroomConfig.cmake INSTALL_DESTINATION ${KVROOM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvroomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvroomConfig.cmake
              ${PROJECT_BINARY_DIR}/kvroomConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${KVROOM_CMAKE_DIR})
