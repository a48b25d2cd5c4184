// Convolution pieces: im2col for convolution as im2col + GEMM (cuBLAS through nvmath-python;
// CuPy 14 has no cuDNN), and depthwise convolution as its own kernel (its GEMM would have K = KH*KW:
// all memory traffic, no reuse), with the fused epilogue.
//
// Shapes are ONNX Conv's, 2-D (N, C, H, W); ops/cuda/conv.py views 1-D convolutions as H = 1.
#include "common.cuh"

// im2col for N images, in one of two arrangements (ops/cuda/conv.py):
//   per image, col (N, C*KH*KW, OH*OW): image n, row (c, kh, kw), column (oh, ow) holds
//       x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]   (0 outside the image: the zero padding);
//     with G groups the rows of group g are [g*Cg*KH*KW, (g+1)*Cg*KH*KW): a strided batched GEMM
//     W_g (Mg, Cg*KH*KW) @ col_g gives the group's Mg output channels; with G = 1 one strided batched GEMM
//     over the N images, W (M, C*KH*KW) @ col[n], gives them all;
//   wide, col (C*KH*KW, N*OH*OW): the same value at row (c, kh, kw), column n*OH*OW + (oh, ow) -- the images
//     side by side along the GEMM's N, W (M, C*KH*KW) @ col one GEMM of N*OH*OW columns (cuBLAS runs a
//     64 x 3136 x 576 GEMM at 7.7 TFLOP/s on the H200, a 256 x 100352 x 576 one at 47); conv_unfold_f32 puts
//     its (M, N*OH*OW) result back in NCHW with the epilogue. With KH = KW = 1, stride 1 and no padding it is
//     the transpose (N, C, HW) -> (C, N*HW).
// Launch: a 3-D grid, x over the columns (oh, ow), y over the rows (c, kh, kw), z over the images (each loops
// past its grid dimension: any grid is correct). A block's row and image are uniform: (c, kh, kw) is decoded
// once per row, and a thread divides once (p / OW) per element -- the one-thread-per-element version divided
// six times and was bound by that integer arithmetic (ResNet-50 b32's layer1 3x3 convolution: 0.70 ms of
// which its GEMM was 0.22, benchmarks/gpu_profile.py on the H200).
template <bool WIDE>
__device__ __forceinline__ void im2col_grid(const float* __restrict__ x, float* __restrict__ col, int N, int C,
                                            int H, int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph,
                                            int pw, int dh, int dw) {
    const int cols = OH * OW, rows = C * KH * KW;
    const bool plain = KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OW == W && OH == H;
    for (int img = blockIdx.z; img < N; img += gridDim.z) {
        for (int row = blockIdx.y; row < rows; row += gridDim.y) {
            const int kw = row % KW, t = row / KW, kh = t % KH, c = t / KH;
            const float* __restrict__ xc = x + ((i64)img * C + c) * H * W;
            float* __restrict__ dst = WIDE ? col + ((i64)row * N + img) * cols : col + ((i64)img * rows + row) * cols;
            const int ih0 = kh * dh - ph, iw0 = kw * dw - pw;
            for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < cols; p += blockDim.x * gridDim.x) {
                if (plain) {
                    dst[p] = xc[p];
                } else {
                    const int oh = p / OW, ow = p - oh * OW;
                    const int ih = oh * sh + ih0, iw = ow * sw + iw0;
                    dst[p] = ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W) ? xc[ih * W + iw] : 0.0f;
                }
            }
        }
    }
}

extern "C" __global__ void im2col_f32(const float* __restrict__ x, float* __restrict__ col, int N, int C, int H,
                                      int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh,
                                      int dw) {
    im2col_grid<false>(x, col, N, C, H, W, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw);
}

extern "C" __global__ void im2col_wide_f32(const float* __restrict__ x, float* __restrict__ col, int N, int C, int H,
                                           int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw,
                                           int dh, int dw) {
    im2col_grid<true>(x, col, N, C, H, W, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw);
}

// y (N, M, HW) = act(t + bias[m] + z) from a wide GEMM's t (M, N*HW): y[n, m, p] reads t[m, n*HW + p].
// conv_epilogue_f32: y = act(y + bias[m] + z) in place, after the per-image GEMMs. bias (M,) or null, z y's
// shape or null. Launch: the 3-D grid of im2col, x over p, y over m, z over the images; no division.
template <bool UNFOLD>
__device__ __forceinline__ void conv_out_grid(const float* t, float* y, const float* __restrict__ bias,
                                              const float* __restrict__ z, int N, int M, i64 HW, int act,
                                              float alpha, float beta) {
    for (int img = blockIdx.z; img < N; img += gridDim.z) {
        for (int m = blockIdx.y; m < M; m += gridDim.y) {
            const i64 at = ((i64)img * M + m) * HW;
            const float* src = UNFOLD ? t + ((i64)m * N + img) * HW : y + at;
            const float b = bias ? bias[m] : 0.0f;
            for (i64 p = (i64)blockIdx.x * blockDim.x + threadIdx.x; p < HW; p += (i64)blockDim.x * gridDim.x) {
                float v = src[p];
                if (bias) v += b;  // as bias_act_f32: no + 0.0f, which would turn -0.0 into +0.0
                if (z) v += z[at + p];
                y[at + p] = activate(v, act, alpha, beta);
            }
        }
    }
}

extern "C" __global__ void conv_unfold_f32(const float* __restrict__ t, float* __restrict__ y,
                                           const float* __restrict__ bias, const float* __restrict__ z, int N, int M,
                                           i64 HW, int act, float alpha, float beta) {
    conv_out_grid<true>(t, y, bias, z, N, M, HW, act, alpha, beta);
}

extern "C" __global__ void conv_epilogue_f32(float* y, const float* __restrict__ bias, const float* __restrict__ z,
                                             int N, int M, i64 HW, int act, float alpha, float beta) {
    conv_out_grid<false>(nullptr, y, bias, z, N, M, HW, act, alpha, beta);
}

// Winograd F(2x2, 3x3) for 3x3 convolutions of stride 1, dilation 1, group 1 (Lavin & Gray, "Fast Algorithms
// for Convolutional Neural Networks", CVPR 2016): Y = A^T [U (.) V] A per 2x2 output tile, with
//   V = B^T d B of the tile's 4x4 input patch d (zero outside the image: the padding),
//   U = G g G^T of each 3x3 filter g (ops/cuda/conv.py, once per weight array and GPU),
//   B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]], G = [[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]],
//   A^T = [[1,1,1,0],[0,1,-1,-1]].
// The sum over input channels is 16 GEMMs, one per element k of the 4x4 tile: M_k (M, P) = U_k (M, C) @ V_k (C, P)
// over the P = N*TH*TW tiles of N images (one strided batched cuBLAS call): 2.25x fewer multiply-adds than
// im2col's GEMM, and V is 16/9 of the input's size per 4 outputs where im2col's columns are 9 times it.
// Launch (both): the 3-D grid of im2col, x over an image's TH*TW tiles, y over channels, z over images.

// V (16, C, P), V[k, c, n*TH*TW + t] for tile t = (th, tw) of image n, from x (N, C, H, W); the tile's patch
// starts at (2*th - ph, 2*tw - pw).
extern "C" __global__ void winograd_input_f32(const float* __restrict__ x, float* __restrict__ v, int N, int C,
                                              int H, int W, int TH, int TW, int ph, int pw) {
    const int tiles = TH * TW;
    const i64 P = (i64)N * tiles, plane = (i64)C * P;
    for (int img = blockIdx.z; img < N; img += gridDim.z) {
        for (int c = blockIdx.y; c < C; c += gridDim.y) {
            const float* __restrict__ xc = x + ((i64)img * C + c) * H * W;
            float* __restrict__ vc = v + (i64)c * P + (i64)img * tiles;
            for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < tiles; t += blockDim.x * gridDim.x) {
                const int th = t / TW, tw = t - th * TW;
                const int ih0 = 2 * th - ph, iw0 = 2 * tw - pw;
                float d[4][4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int ih = ih0 + i;
                    const bool row_in = (unsigned)ih < (unsigned)H;
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int iw = iw0 + j;
                        d[i][j] = (row_in && (unsigned)iw < (unsigned)W) ? xc[ih * W + iw] : 0.0f;
                    }
                }
                float s[4][4];  // B^T d
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    s[0][j] = d[0][j] - d[2][j];
                    s[1][j] = d[1][j] + d[2][j];
                    s[2][j] = d[2][j] - d[1][j];
                    s[3][j] = d[1][j] - d[3][j];
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {  // (B^T d) B, row i
                    vc[(4 * i + 0) * plane + t] = s[i][0] - s[i][2];
                    vc[(4 * i + 1) * plane + t] = s[i][1] + s[i][2];
                    vc[(4 * i + 2) * plane + t] = s[i][2] - s[i][1];
                    vc[(4 * i + 3) * plane + t] = s[i][1] - s[i][3];
                }
            }
        }
    }
}

// y (N, M, OH, OW) = act(A^T M_t A + bias[m] + z) for every tile t from the GEMMs' mm (16, M, P); the tile's
// 2x2 outputs at (2*th, 2*tw), those past OH or OW dropped. bias (M,) or null; z y's shape or null.
extern "C" __global__ void winograd_output_f32(const float* __restrict__ mm, float* __restrict__ y,
                                               const float* __restrict__ bias, const float* __restrict__ z, int N,
                                               int M, int OH, int OW, int TH, int TW, int act, float alpha,
                                               float beta) {
    const int tiles = TH * TW;
    const i64 P = (i64)N * tiles, plane = (i64)M * P;
    for (int img = blockIdx.z; img < N; img += gridDim.z) {
        for (int m = blockIdx.y; m < M; m += gridDim.y) {
            const float* __restrict__ src = mm + (i64)m * P + (i64)img * tiles;
            const i64 at = ((i64)img * M + m) * OH * OW;
            for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < tiles; t += blockDim.x * gridDim.x) {
                float q[16];
#pragma unroll
                for (int k = 0; k < 16; ++k) q[k] = src[k * plane + t];
                float r0[4], r1[4];  // A^T q
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    r0[j] = q[j] + q[4 + j] + q[8 + j];
                    r1[j] = q[4 + j] - q[8 + j] - q[12 + j];
                }
                float o[2][2] = {{r0[0] + r0[1] + r0[2], r0[1] - r0[2] - r0[3]},
                                 {r1[0] + r1[1] + r1[2], r1[1] - r1[2] - r1[3]}};
                const int th = t / TW, tw = t - th * TW;
#pragma unroll
                for (int a = 0; a < 2; ++a) {
                    const int oh = 2 * th + a;
#pragma unroll
                    for (int b = 0; b < 2; ++b) {
                        const int ow = 2 * tw + b;
                        if (oh < OH && ow < OW) {
                            const i64 i = at + (i64)oh * OW + ow;
                            float val = o[a][b];
                            if (bias) val += bias[m];
                            if (z) val += z[i];
                            y[i] = activate(val, act, alpha, beta);
                        }
                    }
                }
            }
        }
    }
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
