# The pure logic builds everywhere, so it is tested everywhere; only the code
# that calls libibverbs is conditional (linked by path, not an imported
# target, so the installed package needs nothing beyond what it finds).
target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/link_fsm.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/wr_plan.cpp)
if(KVROOM_HAVE_VERBS)
  target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/verbs_backend.cpp)
  target_link_libraries(kvroom_transport PRIVATE kvroom_deps::ibverbs)
  target_compile_definitions(kvroom_transport PRIVATE KVROOM_HAVE_VERBS)
endif()
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/verbs_row.cpp PROPERTIES
  COMPILE_DEFINITIONS "KVROOM_VERBS_REASON=\"${KVROOM_VERBS_REASON}\"")
