# bench/cuda.cmake: the CUDA decode-throughput benchmark. Included from bench/CMakeLists.txt when
# BANYAN_HAVE_CUDA (paths relative to this file, so it works from any including scope).
add_executable(gpu_decode_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_decode_bench.cc)
target_link_libraries(gpu_decode_bench PRIVATE banyan_engine_cuda banyan_model absl::strings
                      CUDA::cudart)
target_include_directories(gpu_decode_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(gpu_decode_bench PRIVATE BANYAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
