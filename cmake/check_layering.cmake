# Enforces docs/STYLE.md's layering: run as
#   cmake -DROOT=<src> -DPRIVATE=<a|b|...> -P check_layering.cmake
# with PRIVATE the folders private to transport/ (transport/CMakeLists.txt:
# every transport of the table, fault, router).
#   messages/  includes only the standard library, CAF core and messages/
#   transport/ never includes actors/ and never names caf::actor
#   actors/    never includes a backend's private header
#   bench/, cli/, kit/ include public headers only (not backend folders)
#   actors/ never includes the testkit; every project include is kvroom/...
if(NOT PRIVATE)
  message(FATAL_ERROR "-DPRIVATE=<folders private to transport/> is required")
endif()
set(violations "")

function(check_folder folder regex why)
  file(GLOB_RECURSE files "${ROOT}/${folder}/*.hpp" "${ROOT}/${folder}/*.cpp")
  foreach(f ${files})
    file(STRINGS "${f}" lines REGEX "${regex}")
    foreach(l ${lines})
      file(RELATIVE_PATH rel "${ROOT}" "${f}")
      set(violations "${violations}\n  ${rel}: ${l}   (${why})")
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

check_folder(messages "#include \"kvroom/(transport|actors|kit)/" "messages/ depends on nothing above it")
check_folder(messages "#include [<\"]caf/io/" "messages/ uses CAF core only")
check_folder(transport "#include \"kvroom/(actors|kit)/" "transport/ never includes actor headers")
check_folder(transport "caf::actor[^_]" "transport/ never holds an actor")
check_folder(actors "#include \"kvroom/transport/(${PRIVATE})/" "actors/ uses the transport interface only")
check_folder(actors "#include \"kvroom/kit/" "the product never includes the testkit")
check_folder(kit "#include \"kvroom/transport/(${PRIVATE})/" "kit/ uses public headers only")
# Any project include without the kvroom/ prefix would need a top-level
# layer folder on the include path, which an embedder's own could shadow.
foreach(folder messages transport actors kit cli bench)
  check_folder(${folder} "#include \"(messages|transport|actors|kit)/" "project headers are included as kvroom/<layer>/...")
endforeach()
check_folder(bench "#include \"kvroom/transport/(${PRIVATE})/" "bench/ uses public headers only")
check_folder(cli "#include \"kvroom/transport/(${PRIVATE})/" "cli/ uses public headers only")
foreach(folder messages actors cli bench)
  check_folder(${folder} "KVROOM_HAVE_" "hardware #ifdefs live in the transports' folders only")
endforeach()

if(violations)
  message(FATAL_ERROR "layering violations:${violations}")
endif()
message(STATUS "layering ok")
