# banyan-grpc-client: command-line client of banyand's gRPC API (tools/grpc_client.cc).
# Included from tools/CMakeLists.txt; needs the banyan_proto target (BANYAN_SERVER=ON).
if(TARGET banyan_proto)
  add_executable(banyan-grpc-client ${CMAKE_CURRENT_LIST_DIR}/grpc_client.cc)
  target_link_libraries(banyan-grpc-client PRIVATE banyan_proto gRPC::grpc++
                        nlohmann_json::nlohmann_json)
endif()
