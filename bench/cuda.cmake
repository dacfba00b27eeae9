# bench/cuda.cmake: the CUDA decode-throughput benchmark. Included from bench/CMakeLists.txt when
# BANYAN_HAVE_CUDA (paths relative to this file, so it works from any including scope).
# The GEMM ceilings (gemm_ceiling.h) of both decode and prefill benchmarks, compiled once.
add_library(banyan_gemm_ceiling STATIC ${CMAKE_CURRENT_LIST_DIR}/gemm_ceiling.cc
            ${CMAKE_CURRENT_LIST_DIR}/tpp/bench_fill.cu)
target_link_libraries(banyan_gemm_ceiling PUBLIC banyan_engine_cuda banyan_model absl::status
                      absl::statusor CUDA::cudart)
target_include_directories(banyan_gemm_ceiling PUBLIC ${PROJECT_SOURCE_DIR})
# bench_fill.cu (random weights for the GEMM-only step) is C++17 CUDA, as in bench/tpp.
set_target_properties(banyan_gemm_ceiling PROPERTIES CUDA_ARCHITECTURES ${BANYAN_CUDA_ARCH_SM90} CUDA_STANDARD 17)
add_executable(gpu_decode_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_decode_bench.cc)
target_link_libraries(gpu_decode_bench PRIVATE banyan_gemm_ceiling absl::strings)
target_compile_definitions(gpu_decode_bench PRIVATE BANYAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The physical ceiling of prefill on this GPU, for bench/serve/prefill.sh.
add_executable(prefill_ceiling ${CMAKE_CURRENT_LIST_DIR}/prefill_ceiling.cc)
target_link_libraries(prefill_ceiling PRIVATE banyan_gemm_ceiling absl::strings)
# The prefill attention kernels alone against their FLOPs' floor.
add_executable(prefill_attention_bench ${CMAKE_CURRENT_LIST_DIR}/prefill_attention_bench.cc)
target_link_libraries(prefill_attention_bench PRIVATE banyan_gemm_ceiling banyan_kernels_cuda
                      absl::strings)
# Drafting time of Hydra heads on the GPU against the host.
add_executable(draft_heads_bench ${CMAKE_CURRENT_LIST_DIR}/draft_heads_bench.cc)
target_link_libraries(draft_heads_bench PRIVATE banyan_engine_cuda banyan_engine banyan_model
                      absl::strings CUDA::cudart)
target_include_directories(draft_heads_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(draft_heads_bench PRIVATE BANYAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The FP8 GEMV's tilings and early launch at decode shapes (needs only the CUDA toolkit).
add_executable(fp8_gemv_bench ${CMAKE_CURRENT_LIST_DIR}/fp8_gemv_bench.cu)
target_include_directories(fp8_gemv_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(fp8_gemv_bench PRIVATE CUDA::cudart)
set_target_properties(fp8_gemv_bench PROPERTIES CUDA_ARCHITECTURES ${BANYAN_CUDA_ARCH_SM90A}
                      CUDA_STANDARD 17)
