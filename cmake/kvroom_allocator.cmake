# The allocator of kvroom's own programs (`kvroom`, `kvroom-bench`), never of
# the library an embedder links: a serving stack picks its process's
# allocator itself. A room's life is a few dozen small CAF messages and two
# actors, allocated on one thread and often freed on another; glibc's malloc
# spent ~12 % of a serve process's cycles on them (perf, 1P x 1D across two
# processes), and jemalloc raised that deployment's rooms/s by 15-20 %.
#
# KVROOM_ALLOCATOR: jemalloc (the default; libjemalloc-dev) or system.
# Sanitizer builds always take the system allocator, which the sanitizer
# replaces. Sets KVROOM_ALLOCATOR_USED and, for jemalloc, the target
# PkgConfig::JEMALLOC.
function(kvroom_select_allocator)
  set(used system)
  if(KVROOM_SANITIZE)
    set(used "system (sanitizer build)")
  elseif(KVROOM_ALLOCATOR STREQUAL "jemalloc")
    find_package(PkgConfig REQUIRED)
    pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET GLOBAL jemalloc)
    set(used "jemalloc ${JEMALLOC_VERSION}")
  elseif(NOT KVROOM_ALLOCATOR STREQUAL "system")
    message(FATAL_ERROR "KVROOM_ALLOCATOR must be jemalloc or system, not '${KVROOM_ALLOCATOR}'")
  endif()
  set(KVROOM_ALLOCATOR_USED "${used}" PARENT_SCOPE)
endfunction()

# Links `target` (a program) with the selected allocator.
function(kvroom_use_program_allocator target)
  if(TARGET PkgConfig::JEMALLOC)
    target_link_libraries(${target} PRIVATE PkgConfig::JEMALLOC)
  endif()
endfunction()
