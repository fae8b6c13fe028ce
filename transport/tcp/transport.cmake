target_sources(kvroom_transport PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tcp_backend.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/tcp_handshake.cpp)
