#include "engine/cuda/cublas_loader.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

// Hand-written, not a library: there is no packaged loader for cuBLAS's C API, and the entry
// points are a fixed list of about twenty. Each is declared by cuBLAS's own headers, so a
// signature that drifted from the library's would not compile.

namespace banyan::engine::cuda {
namespace {

#define BANYAN_STR2(x) #x
#define BANYAN_STR(x) BANYAN_STR2(x)
constexpr const char* kCublasName = "libcublas.so." BANYAN_STR(CUBLAS_VER_MAJOR);
constexpr const char* kCublasLtName = "libcublasLt.so." BANYAN_STR(CUBLAS_VER_MAJOR);

// cublasGemmEx has a C++ overload besides the C function: the C function's type.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);

// The X-macro of every entry point: library, name, type.
#define BANYAN_TYPE(name) decltype(&::name)
#define BANYAN_CUBLAS_ENTRY_POINTS(X)                                                             \
  X(lt, cublasLtCreate, BANYAN_TYPE(cublasLtCreate))                                              \
  X(lt, cublasLtDestroy, BANYAN_TYPE(cublasLtDestroy))                                            \
  X(lt, cublasLtMatmul, BANYAN_TYPE(cublasLtMatmul))                                              \
  X(lt, cublasLtMatmulAlgoConfigGetAttribute, BANYAN_TYPE(cublasLtMatmulAlgoConfigGetAttribute))  \
  X(lt, cublasLtMatmulAlgoGetHeuristic, BANYAN_TYPE(cublasLtMatmulAlgoGetHeuristic))              \
  X(lt, cublasLtMatmulDescCreate, BANYAN_TYPE(cublasLtMatmulDescCreate))                          \
  X(lt, cublasLtMatmulDescDestroy, BANYAN_TYPE(cublasLtMatmulDescDestroy))                        \
  X(lt, cublasLtMatmulDescSetAttribute, BANYAN_TYPE(cublasLtMatmulDescSetAttribute))              \
  X(lt, cublasLtMatmulPreferenceCreate, BANYAN_TYPE(cublasLtMatmulPreferenceCreate))              \
  X(lt, cublasLtMatmulPreferenceDestroy, BANYAN_TYPE(cublasLtMatmulPreferenceDestroy))            \
  X(lt, cublasLtMatmulPreferenceSetAttribute, BANYAN_TYPE(cublasLtMatmulPreferenceSetAttribute))  \
  X(lt, cublasLtMatrixLayoutCreate, BANYAN_TYPE(cublasLtMatrixLayoutCreate))                      \
  X(lt, cublasLtMatrixLayoutDestroy, BANYAN_TYPE(cublasLtMatrixLayoutDestroy))                    \
  X(blas, cublasCreate_v2, BANYAN_TYPE(cublasCreate_v2))                                          \
  X(blas, cublasDestroy_v2, BANYAN_TYPE(cublasDestroy_v2))                                        \
  X(blas, cublasGemmEx, GemmExFn)                                                                 \
  X(blas, cublasGetStatusName, BANYAN_TYPE(cublasGetStatusName))                                  \
  X(blas, cublasGetStatusString, BANYAN_TYPE(cublasGetStatusString))                              \
  X(blas, cublasSetStream_v2, BANYAN_TYPE(cublasSetStream_v2))                                    \
  X(blas, cublasSetWorkspace_v2, BANYAN_TYPE(cublasSetWorkspace_v2))

struct Table {
  absl::Status status;
#define BANYAN_FIELD(lib, name, type) type name = nullptr;
  BANYAN_CUBLAS_ENTRY_POINTS(BANYAN_FIELD)
#undef BANYAN_FIELD
};

Table Load() {
  Table t;
  void* lt = dlopen(kCublasLtName, RTLD_NOW | RTLD_LOCAL);
  void* blas = lt != nullptr ? dlopen(kCublasName, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (lt == nullptr || blas == nullptr) {
    const char* err = dlerror();
    t.status = absl::FailedPreconditionError(absl::StrCat(
        "cannot load ", lt == nullptr ? kCublasLtName : kCublasName, " (the CUDA backend's GEMMs): ",
        err != nullptr ? err : "unknown error",
        "; it comes with the CUDA toolkit or the cuBLAS runtime package and must be on the "
        "library path (LD_LIBRARY_PATH or ld.so.conf)"));
    return t;
  }
#define BANYAN_RESOLVE(library, name, type)                                       \
  t.name = reinterpret_cast<type>(dlsym(library, #name));                         \
  if (t.name == nullptr) {                                                        \
    t.status = absl::FailedPreconditionError(absl::StrCat(                        \
        #name " is missing from ", (library) == lt ? kCublasLtName : kCublasName, \
        " (banyan was built against cuBLAS " BANYAN_STR(CUBLAS_VER_MAJOR) ")"));  \
    return t;                                                                     \
  }
  BANYAN_CUBLAS_ENTRY_POINTS(BANYAN_RESOLVE)
#undef BANYAN_RESOLVE
  return t;
}

const Table& Loaded() {
  static const Table table = Load();  // thread-safe, once per process
  return table;
}

}  // namespace

absl::Status LoadCublas() { return Loaded().status; }

}  // namespace banyan::engine::cuda

// The entry points, with cuBLAS's own declarations. Until the libraries load, each returns
// CUBLAS_STATUS_NOT_INITIALIZED (CudaBackend::Create calls LoadCublas first and reports why).
namespace {
using banyan::engine::cuda::Loaded;
template <typename... P, typename... A>
cublasStatus_t Call(cublasStatus_t (*fn)(P...), A... args) {
  return fn != nullptr ? fn(args...) : CUBLAS_STATUS_NOT_INITIALIZED;
}
}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* h) {
  return Call(Loaded().cublasLtCreate, h);
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t h) {
  return Call(Loaded().cublasLtDestroy, h);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* a,
                                           cublasLtMatrixLayout_t a_desc, const void* b,
                                           cublasLtMatrixLayout_t b_desc, const void* beta,
                                           const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                                           cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  return Call(Loaded().cublasLtMatmul, h, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d,
              d_desc, algo, workspace, workspace_bytes, stream);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
    size_t bytes, size_t* written) {
  return Call(Loaded().cublasLtMatmulAlgoConfigGetAttribute, algo, attr, buf, bytes, written);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  return Call(Loaded().cublasLtMatmulAlgoGetHeuristic, h, desc, a_desc, b_desc, c_desc, d_desc,
              pref, requested, results, returned);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  return Call(Loaded().cublasLtMatmulDescCreate, desc, compute, scale);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return Call(Loaded().cublasLtMatmulDescDestroy, desc);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  return Call(Loaded().cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return Call(Loaded().cublasLtMatmulPreferenceCreate, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return Call(Loaded().cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  return Call(Loaded().cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  return Call(Loaded().cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return Call(Loaded().cublasLtMatrixLayoutDestroy, layout);
}
cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* h) {
  return Call(Loaded().cublasCreate_v2, h);
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t h) {
  return Call(Loaded().cublasDestroy_v2, h);
}
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* a, cudaDataType a_type,
                                         int lda, const void* b, cudaDataType b_type, int ldb,
                                         const void* beta, void* c, cudaDataType c_type, int ldc,
                                         cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return Call(Loaded().cublasGemmEx, h, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type,
              ldb, beta, c, c_type, ldc, compute, algo);
}
const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  auto fn = Loaded().cublasGetStatusName;
  return fn != nullptr ? fn(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  auto fn = Loaded().cublasGetStatusString;
  return fn != nullptr ? fn(status) : "the cuBLAS libraries could not be loaded";
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t h, cudaStream_t stream) {
  return Call(Loaded().cublasSetStream_v2, h, stream);
}
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t h, void* workspace,
                                                  size_t bytes) {
  return Call(Loaded().cublasSetWorkspace_v2, h, workspace, bytes);
}

}  // extern "C"
