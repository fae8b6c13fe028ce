# The pure logic builds everywhere; the code that calls the CUDA runtime only
# with the toolkit (static runtime: binaries start, and say why, on machines
# without a driver).
target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/device_route.cpp)
if(KVROOM_HAVE_CUDA)
  target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp
                                          ${CMAKE_CURRENT_LIST_DIR}/device_memory.cpp)
  target_link_libraries(kvroom_transport PRIVATE CUDA::cudart_static)
  target_compile_definitions(kvroom_transport PRIVATE KVROOM_HAVE_CUDA)
else()
  target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../device_memory_none.cpp)
endif()
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cuda_row.cpp PROPERTIES
  COMPILE_DEFINITIONS "KVROOM_CUDA_REASON=\"${KVROOM_CUDA_REASON}\"")
