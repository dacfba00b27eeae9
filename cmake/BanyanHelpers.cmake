# Small helpers shared by every module's CMakeLists.

function(banyan_setup_sanitizers)
  if(NOT BANYAN_SANITIZE)
    return()
  endif()
  if(NOT BANYAN_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "BANYAN_SANITIZE must be address, undefined or thread")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${BANYAN_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${BANYAN_SANITIZE})
endfunction()

# BANYAN_FUZZ: every C++ object gets ASan and UBSan, with UB fatal so that libFuzzer reports it
# as a crash, and the flag of libFuzzer's coverage instrumentation without its main
# (fuzzer-no-link). The harnesses themselves add -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt).
# Coverage is instrumented only in the code the harnesses reach (the allowlist below: text/,
# model/, common/, server/common/, the OpenAI request and response code, the gRPC translation,
# the harnesses; clang instruments a function only where both its file and its name match, so
# `fun:*`): the same tree runs the memory-safety tests, whose daemons, scheduler and CPU
# kernels would otherwise run every comparison through libFuzzer's hooks. The flag set stays
# the same on every object, so one PCH still serves them all (clang refuses a PCH built with
# another -fsanitize set).
function(banyan_setup_fuzzing)
  if(NOT BANYAN_FUZZ)
    return()
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "BANYAN_FUZZ needs clang (libFuzzer), e.g. CXX=clang++-15 "
                        "(tools/fuzz.sh sets it up); got ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(BANYAN_SANITIZE)
    message(FATAL_ERROR "BANYAN_FUZZ brings its own sanitizers; leave BANYAN_SANITIZE empty")
  endif()
  if(NOT BANYAN_TESTS)
    message(FATAL_ERROR "BANYAN_FUZZ needs BANYAN_TESTS=ON (the harnesses live in tests/fuzz)")
  endif()
  set(src ${PROJECT_SOURCE_DIR})
  set(content "\
src:${src}/text/*
src:${src}/model/*
src:${src}/common/*
src:${src}/server/common/*
src:${src}/server/http/http_log.cc
src:${src}/server/http/http_types.cc
src:${src}/server/http/http_util.cc
src:${src}/server/http/openai_*.cc
src:${src}/server/http/prompt.cc
src:${src}/server/grpc/grpc_translate.cc
src:${src}/tests/fuzz/*
fun:*
")
  # The file's name carries a hash of its lines, so that a change of the list changes every
  # object's flags and ninja recompiles them (a file named by a flag is no dependency of it).
  string(MD5 hash "${content}")
  string(SUBSTRING "${hash}" 0 12 hash)
  set(allowlist ${PROJECT_BINARY_DIR}/fuzz_coverage_allowlist_${hash}.txt)
  file(WRITE ${allowlist} "${content}")
  set(flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
            -fsanitize-coverage-allowlist=${allowlist} -fno-omit-frame-pointer)
  foreach(flag ${flags})
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${flag}>)
  endforeach()
  add_link_options(-fsanitize=address,undefined)
endfunction()

# Enables CUDA when BANYAN_CUDA is on and nvcc exists (PATH or /usr/local/cuda).
macro(banyan_setup_cuda)
  set(BANYAN_HAVE_CUDA OFF)
  if(BANYAN_CUDA)
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
      set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      # Before enable_language, which would otherwise pick nvcc's default (sm_75). Hopper only
      # by default: one architecture bounds compile time on the 2-core CI machine. Release
      # images pass more (docker/Dockerfile.cuda: 80-real;86-real;89-real;90); bf16 needs sm_80.
      # BANYAN_CUDA_PTX_ONLY: device code compiled only to check that it compiles: PTX without
      # machine code (no ptxas, a third of nvcc's time) and without NVVM's optimisations (cicc
      # -O0: a third of the rest; all 21 CUDA files, 222 -> 141 CPU-s on the 2-core machine).
      # For machines with no GPU, where nothing runs the code (tools/test.sh sets it there);
      # the GPU machine's builds compile optimised machine code (tools/gpu/run_on_gpu.sh).
      option(BANYAN_CUDA_PTX_ONLY
             "Compile CUDA code only to check it (unoptimised PTX): for machines without a GPU"
             OFF)
      set(_banyan_arch_suffix "")
      if(BANYAN_CUDA_PTX_ONLY)
        set(_banyan_arch_suffix "-virtual")
        add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcicc -O0>")
      endif()
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES 90${_banyan_arch_suffix})
      endif()
      # The targets built for one architecture: Hopper, and Hopper's architecture-specific sm_90a
      # (wgmma, the tensor-memory engine).
      set(BANYAN_CUDA_ARCH_SM90 90${_banyan_arch_suffix})
      set(BANYAN_CUDA_ARCH_SM90A 90a${_banyan_arch_suffix})
      enable_language(CUDA)
      find_package(CUDAToolkit REQUIRED)
      set(BANYAN_HAVE_CUDA ON)
    endif()
  endif()
  message(STATUS "banyan: CUDA backend ${BANYAN_HAVE_CUDA}")
endmacro()

# The compile flags of every test binary's own code, shared with the test PCHs (a PCH must be
# built with the flags of the code that uses it). Test code itself is compiled at -O1 in Release
# and RelWithDebInfo builds (level 1; RelWithDebInfo is the sanitized tree of tools/test.sh), or
# at -O0 (level 0, banyan_add_test's UNOPTIMIZED), while the libraries under test keep the
# build's own level.
set(BANYAN_TEST_LEVEL_CONFIGS Release RelWithDebInfo)
function(_banyan_test_compile_flags target level)
  list(JOIN BANYAN_TEST_LEVEL_CONFIGS "," configs)
  target_compile_options(${target} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:${configs}>>:-O${level}>)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${target} PRIVATE
    BANYAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endfunction()

# banyan_add_test(NAME name SOURCES a.cc b.cc LIBS lib... [LABELS l...] [MAIN gtest|gpu|own]
#                 [STANDALONE] [UNOPTIMIZED] [SHARDS n] [COST c])
#
# MAIN picks the binary's main(): gtest (gtest_main; the default), gpu (the default with LABELS
# gpu: tests/testing/gpu_test_main.cc, which exits 77 without a CUDA device) or own (the sources
# define main() with tests/testing/skip_main.h, e.g. to skip without an npm oracle). A binary
# skips only through that exit code, registered as SKIP_RETURN_CODE; no test output is read, so
# a test that fails beside one that GTEST_SKIPs still fails the run.
# STANDALONE compiles each source on its own, without the shared test PCH or a unity build
# (banyan_setup_fast_build): for sources that must not see the headers other sources include.
# UNOPTIMIZED compiles the binary's own code at -O0 instead of -O1 (BANYAN_TEST_LEVEL_CONFIGS):
# for binaries whose run time goes to the libraries under test, daemons and sockets, where -O1
# only made the compile of what gtest, JSON and Boost.Beast instantiate slower
# (server_http_test's first unity batch: 19 CPU-s at -O0, 30 at -O1 without the PCH). Binaries
# whose own loops do the work (kvcache, kernel references, tokenizer oracles) ran 3-10x slower
# at -O0 and stay at -O1.
# SHARDS n registers the binary as n ctest tests, name_shard_0 .. name_shard_<n-1>, each running
# every n-th test case (GoogleTest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), so that ctest runs
# a long binary on several cores.
# COST c sets ctest's COST of its tests: on a fresh tree, with no timings of its own yet, ctest
# starts the costliest first, so that a long test does not run alone at the end.
function(banyan_add_test)
  cmake_parse_arguments(T "STANDALONE;UNOPTIMIZED" "NAME;MAIN;SHARDS;COST" "SOURCES;LIBS;LABELS"
                        ${ARGN})
  if(NOT T_MAIN)
    set(T_MAIN gtest)
    if("gpu" IN_LIST T_LABELS)
      set(T_MAIN gpu)
    endif()
  endif()
  if(T_MAIN STREQUAL "gtest")
    add_executable(${T_NAME} ${T_SOURCES})
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  elseif(T_MAIN STREQUAL "gpu")
    add_executable(${T_NAME} ${T_SOURCES} ${PROJECT_SOURCE_DIR}/tests/testing/gpu_test_main.cc)
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest CUDA::cudart)
  elseif(T_MAIN STREQUAL "own")
    add_executable(${T_NAME} ${T_SOURCES})
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest)
  else()
    message(FATAL_ERROR "banyan_add_test(${T_NAME}): MAIN must be gtest, gpu or own, not ${T_MAIN}")
  endif()
  set(level 1)
  set(gpu_test OFF)
  if(T_MAIN STREQUAL "gpu" OR "CUDA::cudart" IN_LIST T_LIBS)
    set(gpu_test ON)
  endif()
  # In a build whose kernels are compiled only to check them (BANYAN_CUDA_PTX_ONLY), nothing
  # runs the GPU tests: their own code is compiled only to check it too.
  if((T_UNOPTIMIZED OR (gpu_test AND BANYAN_CUDA_PTX_ONLY))
     AND CMAKE_BUILD_TYPE IN_LIST BANYAN_TEST_LEVEL_CONFIGS)
    set(level 0)
  endif()
  _banyan_test_compile_flags(${T_NAME} ${level})
  if(T_STANDALONE)
    set_property(TARGET ${T_NAME} PROPERTY BANYAN_STANDALONE ON)
  else()
    set_property(TARGET ${T_NAME} PROPERTY BANYAN_TEST_PCH ${level})
  endif()
  # The CUDA tests run only on the GPU machine, where a unity batch that changed a call would go
  # unnoticed by CI; they keep one object per source.
  if(gpu_test)
    set_property(TARGET ${T_NAME} PROPERTY BANYAN_NO_UNITY ON)
  endif()
  set(tests ${T_NAME})
  if(T_SHARDS)
    set(tests)
    math(EXPR last "${T_SHARDS} - 1")
    foreach(i RANGE ${last})
      add_test(NAME ${T_NAME}_shard_${i} COMMAND ${T_NAME})
      set_tests_properties(${T_NAME}_shard_${i} PROPERTIES
        ENVIRONMENT "GTEST_TOTAL_SHARDS=${T_SHARDS};GTEST_SHARD_INDEX=${i}")
      list(APPEND tests ${T_NAME}_shard_${i})
    endforeach()
  else()
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  endif()
  if(T_LABELS)
    set_tests_properties(${tests} PROPERTIES LABELS "${T_LABELS}")
  endif()
  if(T_COST)
    set_tests_properties(${tests} PROPERTIES COST ${T_COST})
  endif()
  if(NOT T_MAIN STREQUAL "gtest")
    set_tests_properties(${tests} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

# banyan_setup_fast_build(): precompiled headers and unity builds, for what a from-scratch build
# costs on the 2-core CI machine. Call it once, after every add_subdirectory.
#
# - Two shared PCHs of third-party headers that most translation units include (the standard
#   library, abseil; for tests also gtest and nlohmann/json), each built once and reused
#   (REUSE_FROM) by every C++ target: banyan_pch_tests_o1 and _o0 for the banyan_add_test
#   binaries (their optimisation level and definitions), banyan_pch_libraries for the rest.
#   Project headers stay out, so that editing one rebuilds only what includes it. A header goes
#   in only when most TUs include it: GCC redoes a PCH's pending template instantiations in
#   every TU that loads it.
# - BANYAN_UNITY_BUILD (default ON): a test binary with several sources compiles them in batches
#   of 8 (CMake's UNITY_BUILD), parsing the shared headers and compiling their inline functions
#   once per batch instead of once per file. The files of a batch share one scope, so helpers in
#   their anonymous namespaces need distinct names: a clash is a compile error at best and, where
#   it only adds an overload, a silent change of which function a call picks. A source that
#   cannot share its scope sets SKIP_UNITY_BUILD_INCLUSION. Libraries are not unity-built: their
#   sources have such overload pairs (scheduler/: CeilDiv(int32_t, int32_t) in policy.cc,
#   CeilDiv(int64_t, int64_t) in engine_loop.cc). Nor are the CUDA tests (banyan_add_test).
# The holders compile only C++, so only C++ sources get a PCH. Left out of both: targets with
# CUDA sources or position-independent code (nvcc never sees the C++ PCH), the generated
# protobuf code, libFuzzer harnesses (-fsanitize=fuzzer) and STANDALONE tests.
# CMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns the PCHs off.
# - BANYAN_COLD_LEVEL (default empty): an optimisation level, 0 or 1, for the targets of
#   BANYAN_COLD_TARGETS, with a PCH of their own built at that level. These are the serving
#   shell: the HTTP and gRPC servers, the scheduler, the generated protobuf code and the two
#   programs. None of them does the CPU model's arithmetic (kernels/cpu, the CPU forward pass,
#   the sampler) and none holds code the fuzz harnesses reach (the fuzz coverage allowlist).
#   The sanitized tree of tools/test.sh builds them at -O0: under ASan, -O0 compiles in about
#   half the time of -O1 (http_connection.cc 37 against 83 CPU-s), and its tests and fuzzers
#   spend their time in the code that keeps -O1 (every library at -O0 made the memory-safety
#   tests 3.4x slower and the fuzzers 7-10x).
option(BANYAN_UNITY_BUILD "Compile the sources of each test binary in unity batches" ON)
set(BANYAN_COLD_LEVEL "" CACHE STRING
    "Optimisation level (0 or 1) of the serving shell's targets; empty: the build's own")
set(BANYAN_COLD_TARGETS banyan_http banyan_grpc banyan_proto banyan_scheduler banyand
    banyan-grpc-client banyan_grpc_test_server)

set(BANYAN_PCH_STD_HEADERS
  <algorithm> <array> <atomic> <chrono> <cmath> <cstddef> <cstdint> <cstdio> <cstdlib>
  <cstring> <deque> <filesystem> <functional> <iostream> <limits> <map> <memory> <optional>
  <set> <span> <sstream> <string> <string_view> <unordered_map> <utility> <vector>)
set(BANYAN_PCH_ABSL_HEADERS
  <absl/container/flat_hash_map.h> <absl/container/inlined_vector.h> <absl/status/status.h>
  <absl/status/statusor.h> <absl/strings/str_cat.h> <absl/strings/string_view.h>
  <absl/synchronization/mutex.h> <absl/time/time.h> <absl/types/span.h>)

function(_banyan_targets_in dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _banyan_targets_in(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(banyan_setup_fast_build)
  set(pch_dir ${PROJECT_BINARY_DIR}/pch)
  file(CONFIGURE OUTPUT ${pch_dir}/pch_holder.cc CONTENT "// Compiles the shared PCH.\n")

  # The libraries' PCH holder `name`, with `ARGN` as extra compile options.
  function(_banyan_library_pch name)
    add_library(${name} OBJECT ${pch_dir}/pch_holder.cc)
    target_compile_options(${name} PRIVATE -pthread ${ARGN})
    target_link_libraries(${name} PRIVATE absl::status absl::statusor absl::strings
                          absl::synchronization absl::time absl::flat_hash_map)
    target_precompile_headers(${name} PRIVATE ${BANYAN_PCH_STD_HEADERS}
                              ${BANYAN_PCH_ABSL_HEADERS})
  endfunction()
  _banyan_library_pch(banyan_pch_libraries)
  set(holders banyan_pch_libraries)
  if(NOT BANYAN_COLD_LEVEL STREQUAL "")
    if(NOT BANYAN_COLD_LEVEL MATCHES "^[01]$")
      message(FATAL_ERROR "BANYAN_COLD_LEVEL must be 0, 1 or empty; got ${BANYAN_COLD_LEVEL}")
    endif()
    _banyan_library_pch(banyan_pch_cold $<$<COMPILE_LANGUAGE:CXX>:-O${BANYAN_COLD_LEVEL}>)
    list(APPEND holders banyan_pch_cold)
    foreach(t IN LISTS BANYAN_COLD_TARGETS)
      if(TARGET ${t})
        # After the build type's flags on the command line, so this level is the one that holds.
        target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O${BANYAN_COLD_LEVEL}>)
      endif()
    endforeach()
  endif()
  if(BANYAN_TESTS)
    # One test PCH per optimisation level that some test binary uses (GCC refuses a PCH built
    # with another -O: __OPTIMIZE__ differs).
    set(levels 1)
    if(CMAKE_BUILD_TYPE IN_LIST BANYAN_TEST_LEVEL_CONFIGS)
      set(levels 0 1)
    endif()
    foreach(level IN LISTS levels)
      set(holder banyan_pch_tests_o${level})
      add_library(${holder} OBJECT ${pch_dir}/pch_holder.cc)
      _banyan_test_compile_flags(${holder} ${level})
      target_compile_options(${holder} PRIVATE -pthread)
      target_link_libraries(${holder} PRIVATE GTest::gtest nlohmann_json::nlohmann_json
                            absl::status absl::statusor absl::strings absl::synchronization
                            absl::time absl::flat_hash_map)
      target_precompile_headers(${holder} PRIVATE ${BANYAN_PCH_STD_HEADERS} <fstream> <random>
                                ${BANYAN_PCH_ABSL_HEADERS} <gtest/gtest.h> <nlohmann/json.hpp>)
      list(APPEND holders ${holder})
    endforeach()
  endif()

  _banyan_targets_in(${PROJECT_SOURCE_DIR} targets)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$" OR t IN_LIST holders)
      continue()
    endif()
    get_target_property(sources ${t} SOURCES)
    get_target_property(pic ${t} POSITION_INDEPENDENT_CODE)
    get_target_property(standalone ${t} BANYAN_STANDALONE)
    if(pic OR standalone OR t STREQUAL "banyan_proto" OR t MATCHES "_fuzzer$"
       OR sources MATCHES "\\.cu(;|$)")
      continue()
    endif()
    # gRPC's targets compile with -pthread, which defines _REENTRANT; GCC uses a PCH only where
    # _REENTRANT is as it was when the PCH was built, so every user of the PCHs gets -pthread.
    target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-pthread>)
    get_target_property(test_level ${t} BANYAN_TEST_PCH)
    set(is_test OFF)
    if(test_level MATCHES "^[01]$")
      set(is_test ON)
    endif()
    if(is_test AND TARGET banyan_pch_tests_o${test_level})
      target_precompile_headers(${t} REUSE_FROM banyan_pch_tests_o${test_level})
    elseif(TARGET banyan_pch_cold AND t IN_LIST BANYAN_COLD_TARGETS)
      target_precompile_headers(${t} REUSE_FROM banyan_pch_cold)
    else()
      target_precompile_headers(${t} REUSE_FROM banyan_pch_libraries)
    endif()
    get_target_property(no_unity ${t} BANYAN_NO_UNITY)
    if(BANYAN_UNITY_BUILD AND is_test AND NOT no_unity)
      set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    endif()
  endforeach()
endfunction()
