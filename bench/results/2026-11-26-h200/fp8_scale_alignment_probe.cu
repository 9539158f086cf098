#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
// Which of: scale pointer offset, C==D, workspace, shape, bias makes cuBLASLt's fp8 refuse.
static int run(cublasLtHandle_t h, int m, int n, int k, int scale_off, bool inplace, bool ws, bool bias, float beta,
               cudaDataType_t btype) {
    void *a, *b, *c, *d, *s, *w, *bi;
    cudaMalloc(&a, m * k); cudaMalloc(&b, n * k); cudaMalloc(&c, m * n * 2); cudaMalloc(&d, m * n * 2);
    cudaMalloc(&s, 256); cudaMalloc(&w, 32 << 20); cudaMalloc(&bi, m * 2);
    cudaMemset(a, 0, m * k); cudaMemset(b, 0, n * k); cudaMemset(c, 0, m * n * 2); cudaMemset(bi, 0, m * 2);
    float ones[64]; for (float& x : ones) x = 1.0f;
    cudaMemcpy(s, ones, 256, cudaMemcpyHostToDevice);
    const float* as = (const float*)((char*)s + scale_off);
    const float* bs = (const float*)((char*)s + 128 + scale_off);
    cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof as);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof bs);
    if (bias) {
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bi, sizeof bi);
    }
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, btype, k, n, k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m);
    cublasLtMatmulPreference_t p; cublasLtMatmulPreferenceCreate(&p);
    uint64_t wsb = ws ? (32 << 20) : 0;
    cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    cublasLtMatmulHeuristicResult_t r[8]; int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, p, 8, r, &found);
    float alpha = 1.0f;
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < found && st != CUBLAS_STATUS_SUCCESS; ++i)
        st = cublasLtMatmul(h, op, &alpha, a, la, b, lb, &beta, inplace ? d : c, lc, d, lc, &r[i].algo, ws ? w : nullptr, wsb, 0);
    cudaError_t ce = cudaDeviceSynchronize();
    printf("m %4d n %4d k %4d scale_off %2d %s ws %d bias %d beta %.0f b %s: heuristic %d found %d -> matmul %d (cuda %d)\n",
           m, n, k, scale_off, inplace ? "C==D" : "C!=D", ws, bias, beta, btype == CUDA_R_8F_E4M3 ? "e4m3" : "e5m2",
           (int)hs, found, (int)st, (int)ce);
    cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(d); cudaFree(s); cudaFree(w); cudaFree(bi);
    return st;
}
int main() {
    cublasLtHandle_t h; cublasLtCreate(&h);
    for (int sz : {16, 256})
        for (int off : {0, 4, 16})
            for (int inplace : {1, 0})
                run(h, sz, sz, sz, off, inplace, true, false, 0.0f, CUDA_R_8F_E4M3);
    run(h, 256, 256, 256, 0, true, false, false, 0.0f, CUDA_R_8F_E4M3);
    run(h, 256, 256, 256, 0, true, true, true, 0.0f, CUDA_R_8F_E4M3);
    run(h, 256, 256, 256, 4, true, true, true, 0.0f, CUDA_R_8F_E4M3);
    run(h, 256, 256, 256, 0, true, true, false, 1.0f, CUDA_R_8F_E5M2);
    run(h, 256, 256, 256, 4, true, true, false, 1.0f, CUDA_R_8F_E5M2);
    run(h, 256, 256, 256, 0, false, true, false, 1.0f, CUDA_R_8F_E5M2);
    return 0;
}
