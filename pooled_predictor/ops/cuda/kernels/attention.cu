// ScaledDotProductAttention's middle (ops/cuda/attention.py): the scores S = Q Kt come from cuBLAS;
// this kernel turns each row of S, in place, into
//     t = op(s, scale) [+ m];  p = exp(t - max t) / sum exp(t - max t)
// op: nothing (mode 0), * scale (1), / scale (2), each rounded as the Mul / Div node it replaces,
// then the additive mask or bias m, then Softmax over the row (the CPU's softmax_rows_biased:
// ops/cpu/compiled/softmax.py). Then cuBLAS computes P V.
#include "common.cuh"

// s: rows x d scores (contiguous). m: the mask or null. Its element of score (row r, column i) is
// m[strided_offset(r, mrank, meta, meta + mrank) + i * meta[2 * mrank]]: meta (int64) holds the
// rows' shape (the scores' shape without its last axis, mrank dims), the mask's strides over
// those dims (0 on a broadcast axis), then its stride along a row (0 or 1). A block per row.
extern "C" __global__ void sdpa_softmax_f32(float* __restrict__ s, const float* __restrict__ m, i64 rows, i64 d,
                                            float scale, int mode, int mrank, const i64* __restrict__ meta) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        float* sr = s + r * d;
        const float* mr = nullptr;
        i64 step = 0;
        if (m) {
            mr = m + strided_offset(r, mrank, meta, meta + mrank);
            step = meta[2 * mrank];
        }
        float mx = -__int_as_float(0x7f800000);
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
            float t = sr[k];
            if (mode == 1) t = t * scale;
            else if (mode == 2) t = t / scale;
            if (mr) t = t + mr[k * step];
            sr[k] = t;
            mx = fmaxf(mx, t);
        }
        mx = block_max(mx);
        float sum = 0.0f;
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) {
            float e = expf(sr[k] - mx);
            sr[k] = e;
            sum += e;
        }
        sum = block_sum(sum);
        float inv = 1.0f / sum;
        for (i64 k = threadIdx.x; k < d; k += blockDim.x) sr[k] = sr[k] * inv;
    }
}
