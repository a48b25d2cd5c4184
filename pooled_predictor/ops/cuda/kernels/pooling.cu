// Pooling over (N, C, H, W): MaxPool and AveragePool (2-D windows with strides, pads and dilations;
// the output size, ceil_mode included, computed by the shape rule), and the global pools.
#include "common.cuh"

// mode 0: max; 1: average over the window's elements inside the image; 2: average counting the
// padding (count_include_pad = 1: the divisor is the window clipped to the padded image, ONNX's).
extern "C" __global__ void pool2d_f32(const float* __restrict__ x, float* __restrict__ y, int NC, int H, int W,
                                      int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                                      int pad_bottom, int pad_right, int mode) {
    i64 n = (i64)NC * OH * OW;
    GRID_STRIDE(i, n) {
        int ow = (int)(i % OW), oh = (int)((i / OW) % OH);
        i64 nc = i / ((i64)OW * OH);
        const float* xc = x + nc * H * W;
        float acc = mode == 0 ? -__int_as_float(0x7f800000) : 0.0f;
        int count = 0, padded = 0;
        for (int kh = 0; kh < KH; ++kh) {
            int ih = oh * sh - ph + kh * dh;
            bool in_h = ih >= 0 && ih < H, pad_h = ih >= -ph && ih < H + pad_bottom;
            for (int kw = 0; kw < KW; ++kw) {
                int iw = ow * sw - pw + kw * dw;
                if (pad_h && iw >= -pw && iw < W + pad_right) ++padded;
                if (!in_h || iw < 0 || iw >= W) continue;
                float v = xc[(i64)ih * W + iw];
                if (mode == 0) acc = fmaxf(acc, v); else acc += v;
                ++count;
            }
        }
        if (mode == 1) acc = count ? acc / (float)count : 0.0f;
        else if (mode == 2) acc = padded ? acc / (float)padded : 0.0f;
        y[i] = acc;
    }
}

// GlobalAveragePool / GlobalMaxPool: y[r] over the `inner` contiguous elements of row r; a block per
// row (blockDim.x a multiple of 32). mode 0: max, 1: mean.
extern "C" __global__ void global_pool_f32(const float* __restrict__ x, float* __restrict__ y, i64 rows,
                                           i64 inner, int mode) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * inner;
        float acc = mode == 0 ? -__int_as_float(0x7f800000) : 0.0f;
        for (i64 k = threadIdx.x; k < inner; k += blockDim.x) acc = mode == 0 ? fmaxf(acc, xr[k]) : acc + xr[k];
        acc = mode == 0 ? block_max(acc) : block_sum(acc);
        if (threadIdx.x == 0) y[r] = mode == 0 ? acc : acc / (float)inner;
    }
}
