#pragma once
// cuBLAS and cuBLASLt are opened on first use, not when the program starts.
//
// Loading libcublasLt.so costs about 0.3 s of CPU (its static initialisers and ~400,000
// relocations) and is paid by every process linked against it, even one that never touches a
// GPU: `banyan --help`, banyand on the CPU backend, every host-only test. banyan therefore does not
// link the two libraries; engine/cuda/cublas_loader.cc defines the entry points banyan calls, each
// forwarding to the function of that name in the library, which is opened (dlopen) the first time.
// The CUDA runtime stays linked: it is cheap to load and the kernels need it.
#include "absl/status/status.h"

namespace banyan::engine::cuda {

// Opens libcublas.so.N and libcublasLt.so.N (N: the cuBLAS major version banyan was built with)
// and resolves every entry point banyan uses, once per process. An error names the library and
// what the dynamic loader said (for example, that it is not on the library path). The forwarding
// functions call this too; calling it first turns a missing library into a clear error.
absl::Status LoadCublas();

}  // namespace banyan::engine::cuda
