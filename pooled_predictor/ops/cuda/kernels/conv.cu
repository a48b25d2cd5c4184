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
extern "C" __global__ void im2col_f32(const float* __restrict__ x, float* __restrict__ col, int N, int C, int H,
                                      int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh,
                                      int dw) {
    i64 cols = (i64)OH * OW;
    i64 rows = (i64)C * KH * KW;
    i64 n = (i64)N * rows * cols;
    GRID_STRIDE(i, n) {
        i64 img = i / (rows * cols), q = i - img * rows * cols;
        i64 row = q / cols, p = q - row * cols;
        int oh = (int)(p / OW), ow = (int)(p - (i64)oh * OW);
        int kw = (int)(row % KW), kh = (int)((row / KW) % KH), c = (int)(row / ((i64)KW * KH));
        int ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((img * C + c) * H + ih) * W + iw] : 0.0f;
    }
}

// Depthwise convolution (group = C, M = C * mult output channels; output channel m reads input
// channel m / mult), with the epilogue: y = act(conv + bias[m] + z). w (M, 1, KH, KW); bias (M,) or
// null; z y's shape or null.
extern "C" __global__ void depthwise_f32(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ bias, const float* __restrict__ z,
                                         float* __restrict__ y, int N, int C, int H, int W, int M, int OH, int OW,
                                         int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int act,
                                         float alpha, float beta) {
    i64 n = (i64)N * M * OH * OW;
    int mult = M / C;
    GRID_STRIDE(i, n) {
        int ow = (int)(i % OW);
        int oh = (int)((i / OW) % OH);
        int m = (int)((i / ((i64)OW * OH)) % M);
        int b = (int)(i / ((i64)OW * OH * M));
        const float* xc = x + ((i64)b * C + m / mult) * H * W;
        const float* wm = w + (i64)m * KH * KW;
        float acc = 0.0f;
        for (int kh = 0; kh < KH; ++kh) {
            int ih = oh * sh - ph + kh * dh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; ++kw) {
                int iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W) continue;
                acc += xc[(i64)ih * W + iw] * wm[kh * KW + kw];
            }
        }
        if (bias) acc += bias[m];
        if (z) acc += z[i];
        y[i] = activate(acc, act, alpha, beta);
    }
}
