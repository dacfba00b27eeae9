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
      # Before enable_language, which would otherwise pick nvcc's default (sm_75). Hopper only:
      # one architecture bounds compile time on the 2-core CI machine.
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

# banyan_add_test(NAME name SOURCES a.cc b.cc LIBS lib... [LABELS l...])
function(banyan_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${T_NAME} PRIVATE
    BANYAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
  if("gpu" IN_LIST T_LABELS)
    # GPU tests GTEST_SKIP() without a device: report them as skipped, not passed.
    set_tests_properties(${T_NAME} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
endfunction()
