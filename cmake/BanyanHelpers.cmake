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

# BANYAN_FUZZ: every C++ object gets libFuzzer's coverage instrumentation without its main
# (fuzzer-no-link) plus ASan and UBSan, with UB fatal so that libFuzzer reports it as a crash.
# The harnesses themselves add -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt).
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
  set(flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
            -fno-omit-frame-pointer)
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
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES 90)
      endif()
      enable_language(CUDA)
      find_package(CUDAToolkit REQUIRED)
      set(BANYAN_HAVE_CUDA ON)
    endif()
  endif()
  message(STATUS "banyan: CUDA backend ${BANYAN_HAVE_CUDA}")
endmacro()

# banyan_add_test(NAME name SOURCES a.cc b.cc LIBS lib... [LABELS l...] [MAIN gtest|gpu|own])
#
# MAIN picks the binary's main(): gtest (gtest_main; the default), gpu (the default with LABELS
# gpu: tests/testing/gpu_test_main.cc, which exits 77 without a CUDA device) or own (the sources
# define main() with tests/testing/skip_main.h, e.g. to skip without an npm oracle). A binary
# skips only through that exit code, registered as SKIP_RETURN_CODE; no test output is read, so
# a test that fails beside one that GTEST_SKIPs still fails the run.
function(banyan_add_test)
  cmake_parse_arguments(T "" "NAME;MAIN" "SOURCES;LIBS;LABELS" ${ARGN})
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
  # Test code itself is compiled at -O1 in Release builds: a third less compile time for the
  # suite on the 2-core CI machine, while the libraries under test keep the build's -O3.
  target_compile_options(${T_NAME} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O1>)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${T_NAME} PRIVATE
    BANYAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
  if(NOT T_MAIN STREQUAL "gtest")
    set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()
