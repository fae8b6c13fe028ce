# Finds CAF 0.17 (Debian's libcaf-dev ships neither a CMake config nor a .pc).
#
# Provides CAF::core, CAF::io and CAF::openssl, and CAF_VERSION (e.g. 1706) read from
# caf/config.hpp. Set CAF_ROOT to search a non-system prefix first.
include(FindPackageHandleStandardArgs)

find_path(CAF_INCLUDE_DIR caf/config.hpp HINTS ${CAF_ROOT}/include)
find_library(CAF_CORE_LIBRARY NAMES caf_core HINTS ${CAF_ROOT}/lib)
find_library(CAF_IO_LIBRARY NAMES caf_io HINTS ${CAF_ROOT}/lib)
# TLS for the middleman (libcaf-openssl0.17): control-plane TLS.
find_library(CAF_OPENSSL_LIBRARY NAMES caf_openssl HINTS ${CAF_ROOT}/lib)

if(CAF_INCLUDE_DIR)
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" CAF_VERSION
         "${_caf_version_line}")
endif()

find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  if(CAF_VERSION LESS 1700 OR NOT CAF_VERSION LESS 1800)
    message(FATAL_ERROR "kvroom needs CAF 0.17.x, found CAF_VERSION=${CAF_VERSION}")
  endif()
  find_package(Threads REQUIRED)
  if(NOT TARGET CAF::core)
    add_library(CAF::core UNKNOWN IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(NOT TARGET CAF::io)
    add_library(CAF::io UNKNOWN IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(CAF_OPENSSL_LIBRARY AND NOT TARGET CAF::openssl)
    find_package(OpenSSL REQUIRED COMPONENTS SSL Crypto)
    add_library(CAF::openssl UNKNOWN IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL;OpenSSL::Crypto")
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
