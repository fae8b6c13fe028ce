# Enforces docs/STYLE.md's layering: run as
#   cmake -DROOT=<src> -DPRIVATE=<a|b|...> -P check_layering.cmake
# with PRIVATE the folders private to transport/ (transport/CMakeLists.txt:
# every transport of the table, fault, router).
#   api/       includes only the standard library, CAF core and api/ (it is
#              the install set: kvroom_install.cmake checks the closure)
#   messages/  includes only the standard library, CAF core, api/ and messages/
#   transport/ never includes actors/ and never names caf::actor
#   actors/    never includes a backend's private header
#   kit/       includes public headers only (not backend folders)
#   cli/, bench/, python/ include the API and kit/ only: what kvroom's own
#              tools use beyond the API is kit/ (kit/engine.hpp), in one place
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

check_folder(api "#include \"kvroom/(messages|transport|actors|kit)/" "the API is its own folder: it reaches nothing of the engine")
check_folder(api "#include [<\"]caf/io/" "the API uses CAF core only")
check_folder(messages "#include \"kvroom/(transport|actors|kit)/" "messages/ depends on nothing above it")
check_folder(messages "#include [<\"]caf/io/" "messages/ uses CAF core only")
check_folder(transport "#include \"kvroom/(actors|kit)/" "transport/ never includes actor headers")
check_folder(transport "caf::actor[^_]" "transport/ never holds an actor")
check_folder(actors "#include \"kvroom/transport/(${PRIVATE})/" "actors/ uses the transport interface only")
check_folder(actors "#include \"kvroom/kit/" "the product never includes the testkit")
check_folder(kit "#include \"kvroom/transport/(${PRIVATE})/" "kit/ uses public headers only")
# Any project include without the kvroom/ prefix would need a top-level
# layer folder on the include path, which an embedder's own could shadow.
foreach(folder api messages transport actors kit cli bench python)
  check_folder(${folder} "#include \"(api|messages|transport|actors|kit)/" "project headers are included as kvroom/<layer>/...")
endforeach()
foreach(folder cli bench python)
  check_folder(${folder} "#include \"kvroom/(messages|transport|actors)/" "${folder}/ uses the API and kit/ only")
endforeach()
foreach(folder api messages actors cli bench)
  check_folder(${folder} "KVROOM_HAVE_" "hardware #ifdefs live in the transports' folders only")
endforeach()

if(violations)
  message(FATAL_ERROR "layering violations:${violations}")
endif()
message(STATUS "layering ok")
