// Element-wise kernels: unary math and activations, binary arithmetic with ONNX broadcasting
// (multidirectional, numpy's rules) through strides, and the fused epilogues of FusedConv /
// FusedGemm / MatMulAdd (bias, residual sum, activation) applied in place to a GEMM's output.
#include "common.cuh"

// Unary codes past the activations (ops/cuda/codes.py UNARY).
#define U_EXP 100
#define U_LOG 101
#define U_SQRT 102
#define U_NEG 103
#define U_ABS 104
#define U_RECIPROCAL 105
#define U_ERF 106
#define U_FLOOR 107
#define U_CEIL 108
#define U_SIN 109
#define U_COS 110
#define U_ROUND 111
#define U_SIGN 112
#define U_IDENTITY 113
#define U_SQUARE 114

__device__ __forceinline__ float unary_op(float v, int op, float alpha, float beta) {
    if (op < U_EXP) return activate(v, op, alpha, beta);
    switch (op) {
    case U_EXP: return expf(v);
    case U_LOG: return logf(v);
    case U_SQRT: return sqrtf(v);
    case U_NEG: return -v;
    case U_ABS: return fabsf(v);
    case U_RECIPROCAL: return 1.0f / v;
    case U_ERF: return erff(v);
    case U_FLOOR: return floorf(v);
    case U_CEIL: return ceilf(v);
    case U_SIN: return sinf(v);
    case U_COS: return cosf(v);
    case U_ROUND: return rintf(v);  // ONNX Round: half to even, as rint in the default rounding mode
    case U_SIGN: return (float)((v > 0.0f) - (v < 0.0f));
    case U_SQUARE: return v * v;
    default: return v;
    }
}

// y[i] = op(x[i]) over n contiguous floats (y may be x: in place).
extern "C" __global__ void unary_f32(const float* __restrict__ x, float* y, i64 n, int op, float alpha,
                                     float beta) {
    GRID_STRIDE(i, n) { y[i] = unary_op(x[i], op, alpha, beta); }
}

// Binary codes (ops/cuda/codes.py BINARY).
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_POW 4
#define B_MAX 5
#define B_MIN 6
#define B_PRELU 7  // a >= 0 ? a : a * slope(b)
#define B_FMOD 8

__device__ __forceinline__ float binary_op(float a, float b, int op) {
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return powf(a, b);
    case B_MAX: return fmaxf(a, b);
    case B_MIN: return fminf(a, b);
    case B_PRELU: return a >= 0.0f ? a : a * b;
    case B_FMOD: return fmodf(a, b);
    default: return a;
    }
}

// y = op(a, b), y contiguous of n elements. rank 0: a and b contiguous with y's shape. Otherwise
// meta (int64, 3 x rank): y's shape, then a's strides, then b's strides (in elements, 0 on a
// broadcast axis), as ops/cuda/elementwise.py computes them once per shape.
extern "C" __global__ void binary_f32(const float* __restrict__ a, const float* __restrict__ b, float* y, i64 n,
                                      int op, int rank, const i64* __restrict__ meta) {
    if (rank == 0) {
        GRID_STRIDE(i, n) { y[i] = binary_op(a[i], b[i], op); }
        return;
    }
    i64 shape[MAX_RANK], sa[MAX_RANK], sb[MAX_RANK];
    for (int d = 0; d < rank; ++d) {
        shape[d] = meta[d];
        sa[d] = meta[rank + d];
        sb[d] = meta[2 * rank + d];
    }
    GRID_STRIDE(i, n) {
        i64 r = i, oa = 0, ob = 0;
        for (int d = rank - 1; d >= 0; --d) {
            i64 q = r / shape[d], k = r - q * shape[d];
            oa += k * sa[d];
            ob += k * sb[d];
            r = q;
        }
        y[i] = binary_op(a[oa], b[ob], op);
    }
}

// The fused epilogue over a (N, C, inner) output y, in place:
//     y = act(y + bias[c] + z)      bias: C floats or null; z (the sum input): y's shape or null
// FusedConv's (ops/shapes/fused.py); also the bias + activation after a GEMM with C = 1 or inner = 1.
template <typename I>
__device__ __forceinline__ void bias_act_body(float* y, const float* __restrict__ bias, const float* __restrict__ z,
                                              I n, I channels, I inner, int act, float alpha, float beta) {
    GRID_STRIDE_T(I, i, n) {
        float v = y[i];
        if (bias) v += bias[(i / inner) % channels];
        if (z) v += z[i];
        y[i] = activate(v, act, alpha, beta);
    }
}

extern "C" __global__ void bias_act_f32(float* y, const float* __restrict__ bias, const float* __restrict__ z,
                                        i64 n, i64 channels, i64 inner, int act, float alpha, float beta) {
    if (n <= SMALL_INDEX)
        bias_act_body<unsigned>(y, bias, z, (unsigned)n, (unsigned)channels, (unsigned)inner, act, alpha, beta);
    else
        bias_act_body<i64>(y, bias, z, n, channels, inner, act, alpha, beta);
}

// The epilogue of a GEMM Y (rows, cols) += beta_c * C, C broadcast through its strides (rs, cs:
// 0 on a broadcast axis), then the activation: Gemm's / FusedGemm's / MatMulAdd's C term.
template <typename I>
__device__ __forceinline__ void gemm_epilogue_body(float* y, const float* __restrict__ c, I n, I cols, i64 rs, i64 cs,
                                                   float beta_c, int act, float alpha, float beta) {
    GRID_STRIDE_T(I, i, n) {
        float v = y[i];
        if (c) {
            I r = i / cols, k = i - r * cols;
            v += beta_c * c[(i64)r * rs + (i64)k * cs];
        }
        y[i] = activate(v, act, alpha, beta);
    }
}

extern "C" __global__ void gemm_epilogue_f32(float* y, const float* __restrict__ c, i64 rows, i64 cols, i64 rs,
                                             i64 cs, float beta_c, int act, float alpha, float beta) {
    i64 n = rows * cols;
    if (n <= SMALL_INDEX)
        gemm_epilogue_body<unsigned>(y, c, (unsigned)n, (unsigned)cols, rs, cs, beta_c, act, alpha, beta);
    else
        gemm_epilogue_body<i64>(y, c, n, cols, rs, cs, beta_c, act, alpha, beta);
}
