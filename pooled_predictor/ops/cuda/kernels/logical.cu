// Comparisons, logical ops, Where and Cast: the element types past float32 that models use around
// their float32 work (BERT's padding mask: Equal on int64 ids, Not, Cast to float).
//
// Broadcasting (ONNX's multidirectional rules, numpy's) goes through strides as in
// elementwise.cu's binary_f32: rank 0: every operand contiguous with the output's shape;
// otherwise meta (int64) holds the output's shape, then each operand's strides (elements,
// 0 on a broadcast axis). bool is one byte holding 0 or 1 (numpy's bool_).
#include "common.cuh"

typedef unsigned char u8;
typedef signed char i8;
typedef int i32;
typedef unsigned char b1;
typedef unsigned short b2;
typedef unsigned int b4;
typedef unsigned long long b8;

// The offsets of output element i in the operands of strides sa, sb, sc (sc may be unused).
__device__ __forceinline__ void broadcast_offsets(i64 i, int rank, const i64* shape, const i64* sa,
                                                  const i64* sb, const i64* sc, i64* oa, i64* ob, i64* oc) {
    i64 a = 0, b = 0, c = 0;
    for (int d = rank - 1; d >= 0; --d) {
        i64 q = i / shape[d], k = i - q * shape[d];
        a += k * sa[d];
        b += k * sb[d];
        if (sc) c += k * sc[d];
        i = q;
    }
    *oa = a;
    *ob = b;
    *oc = c;
}

// Comparison codes (ops/cuda/logical.py COMPARE). NaN compares false, as in numpy.
#define C_EQUAL 0
#define C_LESS 1
#define C_LESS_EQUAL 2
#define C_GREATER 3
#define C_GREATER_EQUAL 4

template <typename T>
__device__ __forceinline__ u8 compare_op(T a, T b, int op) {
    switch (op) {
    case C_EQUAL: return a == b;
    case C_LESS: return a < b;
    case C_LESS_EQUAL: return a <= b;
    case C_GREATER: return a > b;
    case C_GREATER_EQUAL: return a >= b;
    default: return 0;
    }
}

// y (bool) = compare(a, b) over the broadcast of a and b.
#define COMPARE(T)                                                                                        \
    extern "C" __global__ void compare_##T(const T* __restrict__ a, const T* __restrict__ b,             \
                                           u8* __restrict__ y, i64 n, int op, int rank,                  \
                                           const i64* __restrict__ meta) {                               \
        GRID_STRIDE(i, n) {                                                                               \
            i64 oa = i, ob = i, oc;                                                                       \
            if (rank) broadcast_offsets(i, rank, meta, meta + rank, meta + 2 * rank, nullptr, &oa, &ob, &oc); \
            y[i] = compare_op<T>(a[oa], b[ob], op);                                                       \
        }                                                                                                 \
    }
COMPARE(float)
COMPARE(double)
COMPARE(i64)
COMPARE(i32)
COMPARE(u8)
COMPARE(i8)

// Logical codes (ops/cuda/logical.py LOGICAL) on bools; L_NOT takes one operand.
#define L_AND 0
#define L_OR 1
#define L_XOR 2
#define L_NOT 3

extern "C" __global__ void logical_bool(const u8* __restrict__ a, const u8* __restrict__ b, u8* __restrict__ y,
                                        i64 n, int op, int rank, const i64* __restrict__ meta) {
    GRID_STRIDE(i, n) {
        if (op == L_NOT) {
            y[i] = !a[i];
            continue;
        }
        i64 oa = i, ob = i, oc;
        if (rank) broadcast_offsets(i, rank, meta, meta + rank, meta + 2 * rank, nullptr, &oa, &ob, &oc);
        bool x = a[oa] != 0, z = b[ob] != 0;
        y[i] = op == L_AND ? (x && z) : op == L_OR ? (x || z) : (x != z);
    }
}

// Where: y = cond ? x : z over the broadcast of all three (meta: shape, then the strides of cond,
// x and z), by element size (the bits copied as they are).
#define WHERE(T)                                                                                          \
    extern "C" __global__ void where_##T(const u8* __restrict__ cond, const T* __restrict__ x,           \
                                         const T* __restrict__ z, T* __restrict__ y, i64 n, int rank,    \
                                         const i64* __restrict__ meta) {                                 \
        GRID_STRIDE(i, n) {                                                                               \
            i64 oc = i, ox = i, oz = i;                                                                   \
            if (rank) broadcast_offsets(i, rank, meta, meta + rank, meta + 2 * rank, meta + 3 * rank,    \
                                        &oc, &ox, &oz);                                                   \
            y[i] = cond[oc] ? x[ox] : z[oz];                                                              \
        }                                                                                                 \
    }
WHERE(b1)
WHERE(b2)
WHERE(b4)
WHERE(b8)

// Cast between numeric types as C converts (float -> int truncates toward zero, as numpy's
// astype; an out-of-range float has no defined int, as in numpy), and to bool as v != 0
// (NaN -> true). Kernels cast_<from>_<to>, from and to among float, double, i64, i32, i8, u8,
// bool.
#define CAST(S, D)                                                                                        \
    extern "C" __global__ void cast_##S##_##D(const S* __restrict__ x, D* __restrict__ y, i64 n) {      \
        GRID_STRIDE(i, n) { y[i] = (D)x[i]; }                                                            \
    }
#define CAST_BOOL(S)                                                                                      \
    extern "C" __global__ void cast_##S##_bool(const S* __restrict__ x, u8* __restrict__ y, i64 n) {    \
        GRID_STRIDE(i, n) { y[i] = x[i] != (S)0; }                                                       \
    }                                                                                                     \
    extern "C" __global__ void cast_bool_##S(const u8* __restrict__ x, S* __restrict__ y, i64 n) {      \
        GRID_STRIDE(i, n) { y[i] = x[i] ? (S)1 : (S)0; }                                                 \
    }
#define CAST_FROM(S) CAST(S, float) CAST(S, double) CAST(S, i64) CAST(S, i32) CAST(S, i8) CAST(S, u8) CAST_BOOL(S)
CAST_FROM(float)
CAST_FROM(double)
CAST_FROM(i64)
CAST_FROM(i32)
CAST_FROM(i8)
CAST_FROM(u8)
