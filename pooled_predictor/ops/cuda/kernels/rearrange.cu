// Data movement, by element size (b1, b2, b4, b8: any dtype of that size, bits copied as they are):
//
//   strided_copy   y (contiguous, out_shape) [i] = x[offset + sum_d idx_d * strides_d]
//                  -- Transpose (strides permuted), Slice (start offset, strides * step, negative
//                  steps too), Expand (0 strides), a copy into a Concat's output (y_row_stride);
//   gather_axis    Gather along one axis with int64 indices (negative ones count from the end);
//   pad            Pad, modes constant / reflect / edge.
#include "common.cuh"

typedef unsigned char b1;
typedef unsigned short b2;
typedef unsigned int b4;
typedef unsigned long long b8;

// meta (int64, 2 x rank): the output's shape, then x's strides (elements). The output is written
// as rows of `row` elements spaced `y_row_stride` apart (row = y_row_stride: plain contiguous; a
// Concat input writes its slice of the output's rows).
#define STRIDED_COPY(T)                                                                                  \
    extern "C" __global__ void strided_copy_##T(const T* __restrict__ x, T* __restrict__ y, i64 n,     \
                                                int rank, const i64* __restrict__ meta, i64 offset,    \
                                                i64 row, i64 y_row_stride) {                           \
        i64 shape[MAX_RANK], st[MAX_RANK];                                                             \
        for (int d = 0; d < rank; ++d) {                                                               \
            shape[d] = meta[d];                                                                        \
            st[d] = meta[rank + d];                                                                    \
        }                                                                                              \
        GRID_STRIDE(i, n) {                                                                            \
            i64 r = i / row;                                                                           \
            y[r * y_row_stride + (i - r * row)] = x[offset + strided_offset(i, rank, shape, st)];      \
        }                                                                                              \
    }
STRIDED_COPY(b1)
STRIDED_COPY(b2)
STRIDED_COPY(b4)
STRIDED_COPY(b8)

// x viewed as (outer, axis_len, inner), indices (n_idx) -> y (outer, n_idx, inner). An index out
// of [-axis_len, axis_len) writes 0 bits (the CPU kernel raises; a kernel cannot).
#define GATHER_AXIS(T)                                                                                   \
    extern "C" __global__ void gather_axis_##T(const T* __restrict__ x, const i64* __restrict__ idx,    \
                                               T* __restrict__ y, i64 outer, i64 axis_len, i64 n_idx,   \
                                               i64 inner) {                                             \
        i64 n = outer * n_idx * inner;                                                                 \
        GRID_STRIDE(i, n) {                                                                            \
            i64 q = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);                       \
            i64 k = idx[j];                                                                            \
            if (k < 0) k += axis_len;                                                                  \
            y[i] = (k >= 0 && k < axis_len) ? x[(o * axis_len + k) * inner + q] : (T)0;                \
        }                                                                                              \
    }
GATHER_AXIS(b1)
GATHER_AXIS(b2)
GATHER_AXIS(b4)
GATHER_AXIS(b8)

// Pad: meta (int64, 3 x rank): y's shape, x's shape, the leading pads (negative: a crop). mode 0:
// constant (`value`, as T's bits), 1: reflect, 2: edge.
__device__ __forceinline__ i64 pad_source(i64 k, i64 size, int mode) {
    if (mode == 2) return k < 0 ? 0 : (k >= size ? size - 1 : k);
    if (size == 1) return 0;
    i64 period = 2 * (size - 1);  // reflect: ... 2 1 [0 1 2 ... s-1] s-2 ...
    k = k % period;
    if (k < 0) k += period;
    return k < size ? k : period - k;
}

#define PAD(T)                                                                                          \
    extern "C" __global__ void pad_##T(const T* __restrict__ x, T* __restrict__ y, i64 n, int rank,    \
                                       const i64* __restrict__ meta, int mode, T value) {              \
        GRID_STRIDE(i, n) {                                                                            \
            i64 r = i, off = 0, stride = 1;                                                            \
            bool inside = true;                                                                        \
            for (int d = rank - 1; d >= 0; --d) {                                                      \
                i64 ys = meta[d], xs = meta[rank + d];                                                 \
                i64 q = r / ys, k = r - q * ys - meta[2 * rank + d];                                   \
                r = q;                                                                                 \
                if (k < 0 || k >= xs) {                                                                \
                    if (mode == 0) { inside = false; break; }                                         \
                    k = pad_source(k, xs, mode);                                                       \
                }                                                                                      \
                off += k * stride;                                                                     \
                stride *= xs;                                                                          \
            }                                                                                          \
            y[i] = inside ? x[off] : value;                                                            \
        }                                                                                              \
    }
PAD(b1)
PAD(b2)
PAD(b4)
PAD(b8)
