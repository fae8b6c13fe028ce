target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/local_backend.cpp)
