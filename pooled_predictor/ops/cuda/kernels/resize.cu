// Resize over (N, C, H, W) floats, the two innermost axes (ops/cuda/resize.py reduces ONNX Resize
// and Upsample with N, C unscaled to this).
//
// The source coordinate of output index o along an axis is  o * a + b  (the host folds the
// coordinate_transformation_mode -- half_pixel, asymmetric, align_corners, pytorch_half_pixel,
// tf_half_pixel_for_nn -- and the scale into a, b per axis).
#include "common.cuh"

// nearest_mode: 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil (ONNX Resize-11+).
__device__ __forceinline__ i64 nearest_index(float c, int mode, i64 size) {
    float f;
    switch (mode) {
    case 0: f = (c == floorf(c) + 0.5f) ? floorf(c) : rintf(c); break;
    case 1: f = (c == floorf(c) + 0.5f) ? ceilf(c) : rintf(c); break;
    case 2: f = floorf(c); break;
    default: f = ceilf(c); break;
    }
    i64 k = (i64)f;
    return k < 0 ? 0 : (k >= size ? size - 1 : k);
}

extern "C" __global__ void resize_nearest_f32(const float* __restrict__ x, float* __restrict__ y, i64 NC, int H,
                                              int W, int OH, int OW, float ah, float bh, float aw, float bw,
                                              int nearest_mode) {
    i64 n = NC * OH * OW;
    GRID_STRIDE(i, n) {
        int ow = (int)(i % OW), oh = (int)((i / OW) % OH);
        i64 nc = i / ((i64)OW * OH);
        i64 ih = nearest_index(oh * ah + bh, nearest_mode, H), iw = nearest_index(ow * aw + bw, nearest_mode, W);
        y[i] = x[(nc * H + ih) * W + iw];
    }
}

// Bilinear (mode "linear" on the two axes): source coordinates clamped to [0, size - 1], as
// onnxruntime's upsample. An axis of size 1 reads its one element.
extern "C" __global__ void resize_linear_f32(const float* __restrict__ x, float* __restrict__ y, i64 NC, int H,
                                             int W, int OH, int OW, float ah, float bh, float aw, float bw) {
    i64 n = NC * OH * OW;
    GRID_STRIDE(i, n) {
        int ow = (int)(i % OW), oh = (int)((i / OW) % OH);
        i64 nc = i / ((i64)OW * OH);
        float ch = fminf(fmaxf(oh * ah + bh, 0.0f), (float)(H - 1));
        float cw = fminf(fmaxf(ow * aw + bw, 0.0f), (float)(W - 1));
        int h0 = (int)floorf(ch), w0 = (int)floorf(cw);
        int h1 = h0 + 1 < H ? h0 + 1 : h0, w1 = w0 + 1 < W ? w0 + 1 : w0;
        float fh = ch - h0, fw = cw - w0;
        const float* xc = x + nc * H * W;
        float top = xc[(i64)h0 * W + w0] * (1.0f - fw) + xc[(i64)h0 * W + w1] * fw;
        float bot = xc[(i64)h1 * W + w0] * (1.0f - fw) + xc[(i64)h1 * W + w1] * fw;
        y[i] = top * (1.0f - fh) + bot * fh;
    }
}
