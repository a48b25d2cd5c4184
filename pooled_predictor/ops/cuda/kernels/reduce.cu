// Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSumExp) of floats over any set of axes.
//
// meta (int64, 4 x MAX_RANK entries used as): kept-axes shape and x-strides (out_rank each), then
// reduced-axes shape and x-strides (red_rank each). A block per output element; its threads split
// the reduced elements, then one block-wide combine.
#include "common.cuh"

#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2
#define R_MIN 3
#define R_PROD 4
#define R_L1 5
#define R_L2 6
#define R_SUM_SQUARE 7
#define R_LOG_SUM_EXP 8

__device__ __forceinline__ float block_prod(float v) {
    // product through logs would lose signs and zeros: a shared-memory tree instead
    __shared__ float buf[1024];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) buf[threadIdx.x] *= buf[threadIdx.x + s];
        __syncthreads();
    }
    float r = buf[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void reduce_f32(const float* __restrict__ x, float* __restrict__ y, i64 n_out, i64 n_red,
                                      int out_rank, int red_rank, const i64* __restrict__ meta, int op) {
    const i64* out_shape = meta;
    const i64* out_strides = meta + out_rank;
    const i64* red_shape = meta + 2 * out_rank;
    const i64* red_strides = meta + 2 * out_rank + red_rank;
    const float inf = __int_as_float(0x7f800000);
    for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        const float* base = x + strided_offset(o, out_rank, out_shape, out_strides);
        float m = 0.0f;
        if (op == R_LOG_SUM_EXP) {  // the max first, for a stable sum of exponentials
            float t = -inf;
            for (i64 k = threadIdx.x; k < n_red; k += blockDim.x)
                t = fmaxf(t, base[strided_offset(k, red_rank, red_shape, red_strides)]);
            m = block_max(t);
            if (m == -inf) m = 0.0f;
        }
        float acc = op == R_MAX ? -inf : (op == R_MIN ? inf : (op == R_PROD ? 1.0f : 0.0f));
        for (i64 k = threadIdx.x; k < n_red; k += blockDim.x) {
            float v = base[strided_offset(k, red_rank, red_shape, red_strides)];
            switch (op) {
            case R_MAX: acc = fmaxf(acc, v); break;
            case R_MIN: acc = fminf(acc, v); break;
            case R_PROD: acc *= v; break;
            case R_L1: acc += fabsf(v); break;
            case R_L2:
            case R_SUM_SQUARE: acc += v * v; break;
            case R_LOG_SUM_EXP: acc += expf(v - m); break;
            default: acc += v; break;
            }
        }
        float r;
        if (op == R_MAX) r = block_max(acc);
        else if (op == R_MIN) r = -block_max(-acc);
        else if (op == R_PROD) r = block_prod(acc);
        else r = block_sum(acc);
        if (threadIdx.x == 0) {
            if (op == R_MEAN) r /= (float)n_red;
            else if (op == R_L2) r = sqrtf(r);
            else if (op == R_LOG_SUM_EXP) r = m + logf(r);
            y[o] = r;
        }
    }
}
