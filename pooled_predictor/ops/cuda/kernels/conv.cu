// Convolution pieces: im2col for convolution as im2col + GEMM (cuBLAS through nvmath-python;
// CuPy 14 has no cuDNN), and depthwise convolution as its own kernel (its GEMM would have K = KH*KW:
// all memory traffic, no reuse), with the fused epilogue.
//
// Shapes are ONNX Conv's, 2-D (N, C, H, W); ops/cuda/conv.py views 1-D convolutions as H = 1.
#include "common.cuh"

// col (N, C*KH*KW, OH*OW) of N images x (N, C, H, W): for image n, row (c, kh, kw), column (oh, ow) holds
//     x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]   (0 outside the image: the zero padding).
// With G groups, the rows of group g are rows [g*Cg*KH*KW, (g+1)*Cg*KH*KW): a strided batched GEMM
// W_g (Mg, Cg*KH*KW) @ col_g gives the group's Mg output channels; with G = 1 one strided batched
// GEMM over the N images, W (M, C*KH*KW) @ col[n], gives them all (ops/cuda/conv.py).
template <typename I>
__device__ __forceinline__ void im2col_body(const float* __restrict__ x, float* __restrict__ col, I n, I rows,
                                            I cols, int C, int H, int W, int KH, int KW, int OW, int sh, int sw,
                                            int ph, int pw, int dh, int dw) {
    GRID_STRIDE_T(I, i, n) {
        I img = i / (rows * cols), q = i - img * rows * cols;
        I row = q / cols, p = q - row * cols;
        int oh = (int)(p / OW), ow = (int)(p - (I)oh * OW);
        int kw = (int)(row % KW), kh = (int)((row / KW) % KH), c = (int)(row / (I)(KW * KH));
        int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[(((i64)img * C + c) * H + ih) * W + iw] : 0.0f;
    }
}

extern "C" __global__ void im2col_f32(const float* __restrict__ x, float* __restrict__ col, int N, int C, int H,
                                      int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh,
                                      int dw) {
    i64 cols = (i64)OH * OW;
    i64 rows = (i64)C * KH * KW;
    i64 n = (i64)N * rows * cols;
    if (n <= SMALL_INDEX)
        im2col_body<unsigned>(x, col, (unsigned)n, (unsigned)rows, (unsigned)cols, C, H, W, KH, KW, OW, sh, sw, ph,
                              pw, dh, dw);
    else
        im2col_body<i64>(x, col, n, rows, cols, C, H, W, KH, KW, OW, sh, sw, ph, pw, dh, dw);
}

// Wide columns of N images, for one GEMM over all of them: col (C*KH*KW, N*OH*OW), row (c, kh, kw), column
// n*OH*OW + (oh, ow) holds x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] (0 outside). The images lie side by
// side along the GEMM's N: W (M, C*KH*KW) @ col is one GEMM of N*OH*OW columns (cuBLAS runs a 64 x 3136 x 576
// GEMM at 7.7 TFLOP/s on the H200, a 256 x 100352 x 576 one at 47), and conv_unfold_f32 puts its (M, N*OH*OW)
// result back in NCHW with the epilogue. With KH = KW = 1, stride 1 and no padding it is the transpose
// (N, C, HW) -> (C, N*HW) a 1x1 convolution's wide GEMM reads.
template <typename I>
__device__ __forceinline__ void im2col_wide_body(const float* __restrict__ x, float* __restrict__ col, I n, I cols,
                                                 I width, int C, int H, int W, int KH, int KW, int OW, int sh, int sw,
                                                 int ph, int pw, int dh, int dw) {
    GRID_STRIDE_T(I, i, n) {
        I row = i / width, q = i - row * width;
        I img = q / cols, p = q - img * cols;
        int oh = (int)(p / OW), ow = (int)(p - (I)oh * OW);
        int kw = (int)(row % KW), kh = (int)((row / KW) % KH), c = (int)(row / (I)(KW * KH));
        int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[(((i64)img * C + c) * H + ih) * W + iw] : 0.0f;
    }
}

extern "C" __global__ void im2col_wide_f32(const float* __restrict__ x, float* __restrict__ col, int N, int C, int H,
                                           int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw,
                                           int dh, int dw) {
    i64 cols = (i64)OH * OW;
    i64 width = (i64)N * cols;
    i64 n = (i64)C * KH * KW * width;
    if (n <= SMALL_INDEX)
        im2col_wide_body<unsigned>(x, col, (unsigned)n, (unsigned)cols, (unsigned)width, C, H, W, KH, KW, OW, sh, sw,
                                   ph, pw, dh, dw);
    else
        im2col_wide_body<i64>(x, col, n, cols, width, C, H, W, KH, KW, OW, sh, sw, ph, pw, dh, dw);
}

// y (N, M, HW) = act(t + bias[m] + z) from a wide GEMM's t (M, N*HW): y[n, m, p] reads t[m, n*HW + p]. One
// thread per output element, in y's order: the writes and, along p, the reads are coalesced.
template <typename I>
__device__ __forceinline__ void conv_unfold_body(const float* __restrict__ t, float* __restrict__ y,
                                                 const float* __restrict__ bias, const float* __restrict__ z, I n,
                                                 I N, I M, I HW, int act, float alpha, float beta) {
    GRID_STRIDE_T(I, i, n) {
        I r = i / HW, p = i - r * HW;
        I img = r / M, m = r - img * M;
        float v = t[(m * N + img) * HW + p];
        if (bias) v += bias[m];
        if (z) v += z[i];
        y[i] = activate(v, act, alpha, beta);
    }
}

extern "C" __global__ void conv_unfold_f32(const float* __restrict__ t, float* __restrict__ y,
                                           const float* __restrict__ bias, const float* __restrict__ z, int N, int M,
                                           i64 HW, int act, float alpha, float beta) {
    i64 n = (i64)N * M * HW;
    if (n <= SMALL_INDEX)
        conv_unfold_body<unsigned>(t, y, bias, z, (unsigned)n, (unsigned)N, (unsigned)M, (unsigned)HW, act, alpha,
                                   beta);
    else
        conv_unfold_body<i64>(t, y, bias, z, n, N, M, HW, act, alpha, beta);
}

// Depthwise convolution (group = C, M = C * mult output channels; output channel m reads input
// channel m / mult), with the epilogue: y = act(conv + bias[m] + z). w (M, 1, KH, KW); bias (M,) or
// null; z y's shape or null.

// Output element i of y (N, M, OH, OW) as (image b, channel m, row oh, column ow).
template <typename I>
__device__ __forceinline__ void depthwise_index(I i, int OW, int OH, int M, I& b, int& m, int& oh, int& ow) {
    I q = i / (I)OW;
    ow = (int)(i - q * (I)OW);
    I r = q / (I)OH;
    oh = (int)(q - r * (I)OH);
    b = r / (I)M;
    m = (int)(r - b * (I)M);
}

// K > 0: a K x K filter known at compile time (3x3 and 5x5, MobileNet's and EfficientNet's): the taps
// unrolled, each tap's bounds test a predicate, so a thread's K*K loads issue before the first
// multiply-add waits on one (runtime bounds kept them one after another). K = 0: KH x KW at run time.
// Either way the taps in bounds are added in (kh, kw) order: the same bits.
template <typename I, int K>
__device__ __forceinline__ void depthwise_body(const float* __restrict__ x, const float* __restrict__ w,
                                               const float* __restrict__ bias, const float* __restrict__ z,
                                               float* __restrict__ y, I n, int C, int H, int W, int M, int OH,
                                               int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh,
                                               int dw, int act, float alpha, float beta) {
    const int kh_n = K > 0 ? K : KH, kw_n = K > 0 ? K : KW;
    int mult = M / C;
    GRID_STRIDE_T(I, i, n) {
        I b;
        int m, oh, ow;
        depthwise_index<I>(i, OW, OH, M, b, m, oh, ow);
        const float* xc = x + ((i64)b * C + m / mult) * H * W;
        const float* wm = w + (i64)m * kh_n * kw_n;
        int ih0 = oh * sh - ph, iw0 = ow * sw - pw;
        float acc = 0.0f;
#pragma unroll
        for (int kh = 0; kh < kh_n; ++kh) {
            int ih = ih0 + kh * dh;
            bool row_in = ih >= 0 && ih < H;
#pragma unroll
            for (int kw = 0; kw < kw_n; ++kw) {
                int iw = iw0 + kw * dw;
                if (row_in && iw >= 0 && iw < W) acc += xc[ih * W + iw] * wm[kh * kw_n + kw];
            }
        }
        if (bias) acc += bias[m];
        if (z) acc += z[i];
        y[i] = activate(acc, act, alpha, beta);
    }
}

template <typename I>
__device__ __forceinline__ void depthwise_any(const float* __restrict__ x, const float* __restrict__ w,
                                              const float* __restrict__ bias, const float* __restrict__ z,
                                              float* __restrict__ y, I n, int C, int H, int W, int M, int OH,
                                              int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                                              int act, float alpha, float beta) {
    if (KH == 3 && KW == 3)
        depthwise_body<I, 3>(x, w, bias, z, y, n, C, H, W, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, act, alpha,
                             beta);
    else if (KH == 5 && KW == 5)
        depthwise_body<I, 5>(x, w, bias, z, y, n, C, H, W, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, act, alpha,
                             beta);
    else
        depthwise_body<I, 0>(x, w, bias, z, y, n, C, H, W, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, act, alpha,
                             beta);
}

extern "C" __global__ void depthwise_f32(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ bias, const float* __restrict__ z,
                                         float* __restrict__ y, int N, int C, int H, int W, int M, int OH, int OW,
                                         int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int act,
                                         float alpha, float beta) {
    i64 n = (i64)N * M * OH * OW;
    if (n <= SMALL_INDEX)
        depthwise_any<unsigned>(x, w, bias, z, y, (unsigned)n, C, H, W, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
                                act, alpha, beta);
    else
        depthwise_any<i64>(x, w, bias, z, y, n, C, H, W, M, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, act, alpha,
                           beta);
}
