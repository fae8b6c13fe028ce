# `cmake --install`: headers under include/kvroom/, static libraries, the
# `kvroom` command, and a CMake package so an embedding scheduler writes
#   find_package(kvroom REQUIRED)
#   target_link_libraries(app PRIVATE kvroom::kvroom)   # #include <kvroom/kvroom.hpp>
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVROOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvroom)

install(TARGETS kvroom kvroom_actors kvroom_transport kvroom_messages kvroom_api
        EXPORT kvroomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The API folder is the install set: api/*.hpp under include/kvroom/api/, its
# umbrella as <kvroom/kvroom.hpp>. Everything else (the wire messages, the
# manager and room actors, the backends, sockets and gates) stays private, as
# CAF keeps caf/detail/. Checked here, at configure time: the closure of
# kvroom.hpp's includes must be exactly api/ (an API header reaching outside
# it, or one the umbrella does not reach, is an error naming it), and
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
      set(path ${PROJECT_SOURCE_DIR}/api/kvroom.hpp)
    elseif(h MATCHES "^kvroom/api/[^/]+$")
      string(REGEX REPLACE "^kvroom/" "${PROJECT_SOURCE_DIR}/" path ${h})
    else()
      message(FATAL_ERROR "the API reaches ${h}, which is not in api/: what an embedder "
                          "needs belongs in api/, the rest behind a forward declaration")
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
  file(GLOB folder RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/api/*.hpp)
  foreach(f ${folder})
    if(NOT f STREQUAL "api/kvroom.hpp" AND NOT "kvroom/${f}" IN_LIST done)
      message(FATAL_ERROR "${f} is in the API folder but kvroom.hpp does not reach it")
    endif()
  endforeach()
  list(SORT done)
  set(${out} ${done} PARENT_SCOPE)
endfunction()

kvroom_api_closure(KVROOM_API_HEADERS)
string(REPLACE ";" "\n" api_text "${KVROOM_API_HEADERS}")
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/kvroom_api_headers.txt CONTENT "${api_text}\n")
foreach(h ${KVROOM_API_HEADERS})
  if(h STREQUAL "kvroom/kvroom.hpp")
    install(FILES ${PROJECT_SOURCE_DIR}/api/kvroom.hpp
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvroom)
  else()
    string(REGEX REPLACE "^kvroom/" "" rel ${h})
    install(FILES ${PROJECT_SOURCE_DIR}/${rel}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvroom/api)
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
