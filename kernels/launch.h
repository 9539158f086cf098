// How every kernel is called: cpu::<op>_<dir>(args) and cuda::<op>_<dir>(args, launch), with
// args the op's argument struct (kernels/<op>.h: `<Op><Dir>Args<T>`, its tensors with their
// shapes, sizes and scalars, as llm.c spells a kernel's parameter list) and, on CUDA, the launch
// context below. The engine calls them through the list of kernels/kernel_list.h.
//
// Scratch is an argument where an op needs one, sized by the backend's own function (the CPU
// widens 16-bit GEMM operands into fp32 scratch, where cuBLASLt takes the same buffer as its
// workspace): the engine passes one GEMM scratch buffer to whichever backend it runs on.
#pragma once

struct CUstream_st;      // cudaStream_t and cublasLtHandle_t, without the CUDA headers (op
struct cublasLtContext;  // headers compile in any build)

namespace napkin::cuda {

// Where a CUDA kernel call runs: the stream its work is queued on (nullptr: the legacy default
// stream) and, for the ops built on cuBLASLt (matmul, lora, head_cross_entropy), the handle
// (matmul_create_handle, kernels/matmul.h). tf32: fp32 GEMMs on tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32, 10-bit mantissa inputs); off, fp32 GEMMs are exact fp32.
struct Launch {
    CUstream_st* stream = nullptr;
    cublasLtContext* blas = nullptr;
    bool tf32 = false;
};

}  // namespace napkin::cuda
