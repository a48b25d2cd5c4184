// common.cuh: what every kernel file of ops/cuda/kernels shares.
//
// NVRTC has no standard headers: only builtins (expf, tanhf, erff, fmaxf...) and our own types.
// Every kernel is `extern "C"` (no name mangling: cupy.RawModule.get_function by the plain name),
// walks its elements with a grid-stride loop (any launch size is correct; ops/cuda/runtime.py
// picks one), and indexes with 64-bit integers.
#pragma once

typedef long long i64;

#define MAX_RANK 8
#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (i64)blockDim.x * gridDim.x)
// The same loop in the index type I of a templated kernel body (see SMALL_INDEX).
#define GRID_STRIDE_T(I, i, n) for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                                    i += (I)blockDim.x * gridDim.x)

// A kernel whose index arithmetic divides (i / OW, i % C...) runs its body in 32-bit unsigned integers
// when every index fits (n at most SMALL_INDEX: i + the grid's stride stays under 2^32): a 64-bit
// division is a long emulated sequence on the GPU, a 32-bit one a few instructions. Larger tensors
// run the same body in 64-bit.
#define SMALL_INDEX 2147483647LL

// Activation codes, the same numbers as ops/cuda/codes.py ACT (the fused epilogues of FusedConv /
// FusedGemm and the stand-alone activation ops). alpha, beta: the activation's parameters as
// ops/shapes/fused.py orders them (LeakyRelu [alpha], HardSigmoid [alpha, beta], Clip [min, max]).
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY_RELU 2
#define ACT_CLIP 3
#define ACT_SIGMOID 4
#define ACT_TANH 5
#define ACT_HARD_SIGMOID 6
#define ACT_HARD_SWISH 7
#define ACT_ELU 8
#define ACT_GELU 9
#define ACT_GELU_TANH 10
#define ACT_SILU 11
#define ACT_SOFTPLUS 12
#define ACT_MISH 13
#define ACT_SELU 14
#define ACT_SOFTSIGN 15

__device__ __forceinline__ float sigmoidf_(float v) { return 1.0f / (1.0f + expf(-v)); }

// softplus without overflow: log(1 + e^v) = max(v, 0) + log1p(e^-|v|)
__device__ __forceinline__ float softplusf_(float v) { return fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v))); }

__device__ __forceinline__ float activate(float v, int act, float alpha, float beta) {
    switch (act) {
    case ACT_RELU: return fmaxf(v, 0.0f);
    case ACT_LEAKY_RELU: return v >= 0.0f ? v : v * alpha;
    case ACT_CLIP: return fminf(fmaxf(v, alpha), beta);
    case ACT_SIGMOID: return sigmoidf_(v);
    case ACT_TANH: return tanhf(v);
    case ACT_HARD_SIGMOID: return fminf(fmaxf(alpha * v + beta, 0.0f), 1.0f);
    case ACT_HARD_SWISH: return v * fminf(fmaxf(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
    case ACT_ELU: return v >= 0.0f ? v : alpha * (expf(v) - 1.0f);
    case ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case ACT_GELU_TANH:  // 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
        return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case ACT_SILU: return v * sigmoidf_(v);
    case ACT_SOFTPLUS: return softplusf_(v);
    case ACT_MISH: return v * tanhf(softplusf_(v));
    case ACT_SELU: return v > 0.0f ? beta * v : beta * alpha * (expf(v) - 1.0f);  // alpha, gamma
    case ACT_SOFTSIGN: return v / (1.0f + fabsf(v));
    default: return v;
    }
}

// The offset in a strided array of the flat (row-major) index i over `shape` (rank dims).
__device__ __forceinline__ i64 strided_offset(i64 i, int rank, const i64* shape, const i64* strides) {
    i64 off = 0;
    for (int d = rank - 1; d >= 0; --d) {
        i64 q = i / shape[d];
        off += (i - q * shape[d]) * strides[d];
        i = q;
    }
    return off;
}

// Block-wide sum and max of one float per thread (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// The result is returned to every thread of the block.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
        w = warp_sum(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ float block_max(float v) {
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < (int)(blockDim.x >> 5) ? part[lane] : -__int_as_float(0x7f800000);
        w = warp_max(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}
