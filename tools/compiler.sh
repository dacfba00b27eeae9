# Sourced by tools/setup.sh and tools/gpu/run_on_gpu.sh: the C and C++ compilers of banyan's
# Release builds, as CMake arguments in BANYAN_COMPILER_ARGS.
#
# clang 15 (Debian 12's clang-15 package). On the 2-core machine it compiles banyan's C++ in a
# third of GCC 12's CPU time (the same Release targets: 3,715 job-s of objects with g++-12
# against 1,268 with clang++-15, -O3 and the shared precompiled headers both ways; GCC re-does a
# precompiled header's pending template instantiations in every file that loads it). The cost
# measured: the CPU backend is slower (cpu_decode_bench on stories260K, decode tok/s at batch 1:
# GCC 7,030-7,210, clang 5,570-5,730, and 5,960-6,040 once kernels/cpu's attention scores four
# keys at a time; at batch 64 about 0.85 of GCC's). Served by banyand on the CPU backend
# (banyan_serve_bench --workload shared-prefix --prefix-tokens 64 --suffix-tokens 16
# --output-tokens 128 --vocab 512, 128 prompts at concurrency 64, two runs each): 10,570-10,960
# output tok/s against GCC's 13,500-13,640, 0.79x. The GPU's kernels are nvcc's, and the host
# code of the CUDA sources stays with nvcc's default host compiler (GCC): clang in its place
# took longer (layer_kernels.cu, PTX only: 10.2 against 8.9 s). The sanitized tree
# (tools/build_sanitized.sh) is clang 15 too. CC and CXX in the environment choose others.
banyan_cc=$(command -v "${CC:-clang-15}" || true)
banyan_cxx=$(command -v "${CXX:-clang++-15}" || true)
if [[ -z $banyan_cc || -z $banyan_cxx ]]; then
  echo "banyan: compiler ${CC:-clang-15} / ${CXX:-clang++-15} not found (tools/setup.sh installs clang-15)" >&2
  exit 1
fi
BANYAN_COMPILER_ARGS=(-DCMAKE_C_COMPILER="$banyan_cc" -DCMAKE_CXX_COMPILER="$banyan_cxx")
