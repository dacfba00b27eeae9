# Sourced by tools/setup.sh and tools/gpu/run_on_gpu.sh: the C and C++ compilers of banyan's
# Release builds, as CMake arguments in BANYAN_COMPILER_ARGS.
#
# clang 15 (Debian 12's clang-15 package). On the 2-core machine it compiles banyan's C++ in a
# third of GCC 12's CPU time (the same Release targets: 3,715 job-s of objects with g++-12
# against 1,268 with clang++-15, -O3 and the shared precompiled headers both ways; GCC re-does a
# precompiled header's pending template instantiations in every file that loads it). The one cost
# measured: the CPU backend's attention loop ran slower (cpu_decode_bench on stories260K, 5,600
# against 7,100 decode tok/s at batch 1 before kernels/cpu's attention was written for both). The
# sanitized tree (tools/build_sanitized.sh) is clang 15 too. nvcc keeps its own host compiler.
# CC and CXX in the environment choose other compilers.
banyan_cc=$(command -v "${CC:-clang-15}" || true)
banyan_cxx=$(command -v "${CXX:-clang++-15}" || true)
if [[ -z $banyan_cc || -z $banyan_cxx ]]; then
  echo "banyan: compiler ${CC:-clang-15} / ${CXX:-clang++-15} not found (tools/setup.sh installs clang-15)" >&2
  exit 1
fi
BANYAN_COMPILER_ARGS=(-DCMAKE_C_COMPILER="$banyan_cc" -DCMAKE_CXX_COMPILER="$banyan_cxx")
