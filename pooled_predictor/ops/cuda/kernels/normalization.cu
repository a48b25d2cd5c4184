// Normalizations: Softmax / LogSoftmax along one axis, LayerNormalization over the trailing axes,
// BatchNormalization (inference) as a per-channel affine map.
#include "common.cuh"

// x viewed as (outer, len, inner): each of the outer*inner rows (stride inner) is normalized.
// A block per row. log != 0: LogSoftmax. exp(x - max) / sum, as onnxruntime.
extern "C" __global__ void softmax_f32(const float* __restrict__ x, float* __restrict__ y, i64 outer, i64 len,
                                       i64 inner, int log) {
    i64 rows = outer * inner;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 o = r / inner, q = r - o * inner;
        const float* xr = x + o * len * inner + q;
        float* yr = y + o * len * inner + q;
        float m = -__int_as_float(0x7f800000);
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) m = fmaxf(m, xr[k * inner]);
        m = block_max(m);
        float s = 0.0f;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) s += expf(xr[k * inner] - m);
        s = block_sum(s);
        if (log) {
            float ls = logf(s);
            for (i64 k = threadIdx.x; k < len; k += blockDim.x) yr[k * inner] = xr[k * inner] - m - ls;
        } else {
            float inv = 1.0f / s;
            for (i64 k = threadIdx.x; k < len; k += blockDim.x) yr[k * inner] = expf(xr[k * inner] - m) * inv;
        }
    }
}

// LayerNormalization (opset 17): each of `rows` rows of `len` contiguous elements,
//     y = (x - mean) / sqrt(var + eps) * scale + bias     (var: the biased variance)
// scale, bias: `len` floats (bias may be null). A block per row; two passes over the row (mean,
// then the centred sum of squares: no cancellation).
extern "C" __global__ void layernorm_f32(const float* __restrict__ x, const float* __restrict__ scale,
                                         const float* __restrict__ bias, float* __restrict__ y, i64 rows, i64 len,
                                         float eps) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * len;
        float* yr = y + r * len;
        float s = 0.0f;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) s += xr[k];
        float mean = block_sum(s) / (float)len;
        float v = 0.0f;
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
            float d = xr[k] - mean;
            v += d * d;
        }
        float inv = rsqrtf(block_sum(v) / (float)len + eps);
        for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
            float o = (xr[k] - mean) * inv * scale[k];
            yr[k] = bias ? o + bias[k] : o;
        }
    }
}

// BatchNormalization in inference mode, y = x * a[c] + b[c] over (N, C, inner), with
// a = scale / sqrt(var + eps) and b = bias - mean * a computed once at setup (ops/cuda/normalization.py).
extern "C" __global__ void channel_affine_f32(const float* __restrict__ x, float* y, const float* __restrict__ a,
                                              const float* __restrict__ b, i64 n, i64 channels, i64 inner) {
    GRID_STRIDE(i, n) {
        i64 c = (i / inner) % channels;
        y[i] = x[i] * a[c] + b[c];
    }
}
