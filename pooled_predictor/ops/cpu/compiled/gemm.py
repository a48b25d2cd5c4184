"""Packed-weight GEMM with the bias and activation fused: Y = act(W @ X + b), float32.

    Y[n, m, p] = act(b[m] + sum_k W[m, k] * X[n, k, p])

W is a weight (M, K), packed once at build time into tiles of MR = 6 rows
stored k-major (pack_weights), and shared read-only by every thread; X is
(N, K, P) and Y (N, M, P), rows of P contiguous (any row pitch). This is a
1x1 convolution in NCHW (K input channels, M output channels, P = H * W
pixels) and the GEMM of a column matrix.

The micro-kernel keeps an MR x 16 block of Y in 12 vector registers
(<8 x float>, one AVX2 register each) over the k loop: per k, two vector
loads of X's row, MR broadcasts of packed W and 2 * MR multiply-adds (the
register blocking of Goto & van de Geijn 2008, "Anatomy of high-performance
matrix multiplication", and of BLIS's Haswell kernel). numba has no vector
type, so the micro-kernels are written in LLVM IR (numba.extending.intrinsic),
one per tile shape (MR rows 1..6, 8 or 16 columns); the loops around them
are plain numba. Columns left over past a multiple of 8 take a scalar loop.

Blocking: a block of PB columns of Y at a time (its M x PB outputs stay in
L2 while the activation is applied), K in chunks of KC (the X strip, KC x 16
floats, stays in L1 across the row tiles; later chunks accumulate onto Y),
rows in blocks of MC (the packed W block, MC x KC floats, stays in L2).
Numerically: each output is a sequential multiply-add chain over k in
float32 (fused where the CPU has FMA, as BLAS's kernels do), then + b[m]
(added last, as numpy's GEMM followed by + B, so folding an Add into B moves
few bits): the error of BLAS's sgemm, |error| <= K u sum_k |W X| + O(u^2),
u = 2^-24 (Higham 2002, sec. 3.5). The activation is epilogue.py's (the numpy
kernels' operations), applied to each column block of Y while it is in cache.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .epilogue import activate_range
from .jit import njit

MR = 6  # rows of Y per micro-tile (12 accumulators + 2 X vectors + 1 broadcast: 15 of 16 ymm)
KC = 256  # k chunk: an X strip of KC x 16 floats (16 KiB) stays in L1
MC = 96  # row block: a packed W block of MC x KC floats (96 KiB) stays in L2
PB_BYTES = 192 << 10  # a column block of Y (M x PB floats) at most this size, to stay in L2

_F4 = ir.FloatType()
_I64 = ir.IntType(64)
_V8 = ir.VectorType(_F4, 8)


def vector_type(lanes: int = 8):
    """<lanes x float>: LLVM's generic vector type (one ymm register at 8 lanes, one zmm at 16 on
    AVX-512; LLVM splits wider vectors into the host's registers)."""
    return _V8 if lanes == 8 else ir.VectorType(_F4, lanes)


def _splat(builder, s, lanes: int = 8):
    """<lanes x float> with every lane s."""
    vt = vector_type(lanes)
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), s, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def vector_phis(builder, n: int, *incoming) -> list:
    """n vector phis (the type of the first incoming values) at the builder's position, each fed by
    every (values, block) pair of `incoming`: values a list with one per phi, or one value for all of
    them. (A loop's phis get their back edge later, through add_incoming.)"""
    first = incoming[0][0]
    vt = (first[0] if isinstance(first, list) else first).type
    out = []
    for i in range(n):
        ph = builder.phi(vt)
        for values, block in incoming:
            ph.add_incoming(values[i] if isinstance(values, list) else values, block)
        out.append(ph)
    return out


def open_loop(builder, count, name: str) -> tuple:
    """Start a counted loop at the builder's position, entered when count > 0: blocks <name>_loop (where the
    builder is left) and <name>_done. Returns (the counter phi, 0 from the entry block; the entry block; loop_bb;
    done_bb); close_loop ends it."""
    entry = builder.block
    loop_bb = builder.function.append_basic_block(f"{name}_loop")
    done_bb = builder.function.append_basic_block(f"{name}_done")
    zero = ir.Constant(count.type, 0)
    builder.cbranch(builder.icmp_signed(">", count, zero), loop_bb, done_bb)
    builder.position_at_end(loop_bb)
    counter = builder.phi(count.type)
    counter.add_incoming(zero, entry)
    return counter, entry, loop_bb, done_bb


def close_loop(builder, counter, limit, accs: list, new: list, loop_bb, done_bb, entry: tuple) -> list:
    """End a counted loop whose block loop_bb holds the accumulator phis `accs`: counter + 1 and the
    accumulators' next values `new` are fed back to their phis, the loop repeats while counter + 1 <
    limit, and done_bb, where the builder is left, starts with the results: one phi per accumulator
    of `entry` (values, block), what it holds where the loop is skipped, and of `new` from loop_bb."""
    step = builder.add(counter, ir.Constant(counter.type, 1))
    counter.add_incoming(step, loop_bb)
    for acc, value in zip(accs, new):
        acc.add_incoming(value, loop_bb)
    builder.cbranch(builder.icmp_signed("<", step, limit), loop_bb, done_bb)
    builder.position_at_end(done_bb)
    return vector_phis(builder, len(new), entry, (new, loop_bb))


def arg_pointers(context, builder, signature, args, *at) -> list:
    """In an intrinsic's codegen: for each (array index, offset index) pair of `at`, the address of
    element args[offset index] of array argument args[array index]."""
    return [builder.gep(context.make_array(signature.args[i])(context, builder, args[i]).data, [args[j]])
            for i, j in at]


def prefetch(builder, ptr) -> None:
    """llvm.prefetch of the cache line at ptr (read, keep in all levels, data): prefetcht0. Never faults,
    so ptr may lie past an array's end."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = builder.module.globals.get("llvm.prefetch.p0") or ir.Function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


def _fmuladd(builder, lanes: int = 8):
    """llvm.fmuladd on <lanes x float> (a fused multiply-add where the CPU has FMA)."""
    mod = builder.module
    name = f"llvm.fmuladd.v{lanes}f32"
    fn = mod.globals.get(name)
    if fn is None:
        vt = vector_type(lanes)
        fn = ir.Function(mod, ir.FunctionType(vt, [vt, vt, vt]), name)
    return fn


def accumulate_tile(builder, slots, mode, k_n, step, bias, z_slots, step_cold=None):
    """The register-blocked tile shared by the micro-kernels (this module's and nchwc_gemm.py's).

    Emits: the accumulators start from the Y vectors at `slots` (mode & 1) or zero; for k < k_n,
    accs = step(k, accs) (the caller's loads and multiply-adds of one k; with step_cold given and
    mode & 16, step_cold instead: a second k loop, the same sums with prefetches of what a later
    tile reads); then + bias[i] (mode & 2,
    after the sum, as a GEMM followed by + B), then + the vectors at z_slots() (mode & 4, the sum
    input, after the bias, as an Add; its addresses computed there only, off the k loop's
    registers); then ReLU (mode & 8, with mode & 2: epilogue.activate's, t = v + 0, then 0 where t < 0, the
    same bits as its pass over the stored block, which a caller then skips); stored back to `slots`. slots:
    one <L x float>* per accumulator (any lanes L); bias: one vector per accumulator; mode, k_n: i64 values.
    """
    fn = builder.function
    c = lambda v: ir.Constant(_I64, v)  # noqa: E731
    vt = slots[0].type.pointee
    zero = ir.Constant(vt, [0.0] * vt.count)
    from_y_bb = fn.append_basic_block("from_y")
    from_0_bb = fn.append_basic_block("from_zero")
    pre_bb = fn.append_basic_block("pre")
    loop_bb = fn.append_basic_block("k_loop")
    done_bb = fn.append_basic_block("k_done")
    bias_bb = fn.append_basic_block("add_bias")
    sum_bb = fn.append_basic_block("add_sum")
    store_bb = fn.append_basic_block("store")
    builder.cbranch(builder.icmp_signed("!=", builder.and_(mode, c(1)), c(0)), from_y_bb, from_0_bb)
    builder.position_at_end(from_y_bb)
    from_y = [builder.load(s, align=4) for s in slots]
    builder.branch(pre_bb)
    builder.position_at_end(from_0_bb)
    builder.branch(pre_bb)
    builder.position_at_end(pre_bb)
    start = vector_phis(builder, len(slots), (from_y, from_y_bb), (zero, from_0_bb))
    loops = [(step, loop_bb)]
    if step_cold is None:
        enter_bb = pre_bb
        builder.cbranch(builder.icmp_signed(">", k_n, c(0)), loop_bb, done_bb)
    else:
        enter_bb = fn.append_basic_block("k_enter")
        loops.append((step_cold, fn.append_basic_block("k_loop_cold")))
        builder.cbranch(builder.icmp_signed(">", k_n, c(0)), enter_bb, done_bb)
        builder.position_at_end(enter_bb)
        builder.cbranch(builder.icmp_signed("!=", builder.and_(mode, c(16)), c(0)), loops[1][1], loop_bb)
    ends = []
    for body, block in loops:
        builder.position_at_end(block)
        k = builder.phi(_I64)
        k.add_incoming(c(0), enter_bb)
        accs = vector_phis(builder, len(start), (start, enter_bb))  # phis lead the block
        new = body(k, accs)
        k_next = builder.add(k, c(1))
        k.add_incoming(k_next, block)
        for acc, value in zip(accs, new):
            acc.add_incoming(value, block)
        builder.cbranch(builder.icmp_signed("<", k_next, k_n), block, done_bb)
        ends.append((new, block))
    builder.position_at_end(done_bb)
    final = vector_phis(builder, len(start), (start, pre_bb), *ends)
    builder.cbranch(builder.icmp_signed("!=", builder.and_(mode, c(2)), c(0)), bias_bb, store_bb)
    builder.position_at_end(bias_bb)
    biased = [builder.fadd(f, bv) for f, bv in zip(final, bias)]
    builder.cbranch(builder.icmp_signed("!=", builder.and_(mode, c(4)), c(0)), sum_bb, store_bb)
    builder.position_at_end(sum_bb)
    summed = [builder.fadd(f, builder.load(zs, align=4)) for f, zs in zip(biased, z_slots())]
    builder.branch(store_bb)
    builder.position_at_end(store_bb)
    out = vector_phis(builder, len(slots), (final, done_bb), (biased, bias_bb), (summed, sum_bb))
    relu_bb = fn.append_basic_block("relu")
    write_bb = fn.append_basic_block("write")
    builder.cbranch(builder.icmp_signed("==", builder.and_(mode, c(10)), c(10)), relu_bb, write_bb)
    builder.position_at_end(relu_bb)
    relued = []
    for v in out:
        t = builder.fadd(v, zero)  # -0 -> +0, as activate's v + 0
        relued.append(builder.select(builder.fcmp_ordered("<", t, zero), zero, t))
    builder.branch(write_bb)
    builder.position_at_end(write_bb)
    out = vector_phis(builder, len(slots), (out, store_bb), (relued, relu_bb))
    for ph, s in zip(out, slots):
        builder.store(ph, s, align=4)


def _make_micro(rows: int, vectors: int):
    """The micro-kernel for a tile of `rows` x 8*`vectors` outputs.

    micro(wp, w_off, x, x_off, offs, k0, y, y_off, ldy, k_n, b, b_off, mode, z):
    y[r * ldy + c] (flat from y_off) = ((mode & 1 ? y : 0) +
    sum_{k < k_n} wp[w_off + k * rows + r] * x[x_off + offs[k0 + k] + c]) (+ b[b_off + r] if mode & 2)
    (+ z[y_off + r * ldy + c] if mode & 6 == 6), r < rows, c < 8*vectors: the bias is added after the
    sum, as a GEMM followed by + B, and the sum input Z (same layout as Y) after the bias, as an Add.
    Offsets and pitches in elements; the caller keeps every access in bounds.
    """

    @intrinsic
    def micro(typingctx, wp, w_off, x, x_off, offs, k0, y, y_off, ldy, k_n, b, b_off, mode, z):
        sig = types.void(wp, w_off, x, x_off, offs, k0, y, y_off, ldy, k_n, b, b_off, mode, z)

        def codegen(context, builder, signature, args):
            ldy_v, k_n_v, acc_v = args[8], args[9], args[12]
            c = lambda v: ir.Constant(_I64, v)  # noqa: E731
            # W, X, the offset table, Y and B at their offsets; Z (13) at Y's
            wptr, xptr, optr, yptr, bptr = arg_pointers(context, builder, signature, args,
                                                        (0, 1), (2, 3), (4, 5), (6, 7), (10, 11))
            fma = _fmuladd(builder)
            slots, bias = [], []
            for r in range(rows):
                row = builder.gep(yptr, [builder.mul(ldy_v, c(r))])
                bv = _splat(builder, builder.load(builder.gep(bptr, [c(r)])))
                for v in range(vectors):
                    slots.append(builder.bitcast(builder.gep(row, [c(8 * v)]), _V8.as_pointer()))
                    bias.append(bv)

            def step(k, accs):
                xrow = builder.gep(xptr, [builder.load(builder.gep(optr, [k]))])
                xv = [builder.load(builder.bitcast(builder.gep(xrow, [c(8 * v)]), _V8.as_pointer()), align=4)
                      for v in range(vectors)]
                wrow = builder.gep(wptr, [builder.mul(k, c(rows))])
                new = []
                for r in range(rows):
                    wb = _splat(builder, builder.load(builder.gep(wrow, [c(r)])))
                    for v in range(vectors):
                        new.append(builder.call(fma, [wb, xv[v], accs[r * vectors + v]]))
                return new

            def z_slots():
                (zptr,) = arg_pointers(context, builder, signature, args, (13, 7))
                return [builder.bitcast(builder.gep(zptr, [builder.add(builder.mul(ldy_v, c(r)), c(8 * v))]),
                                        _V8.as_pointer()) for r in range(rows) for v in range(vectors)]

            mode = builder.zext(acc_v, _I64) if acc_v.type.width < 64 else acc_v
            accumulate_tile(builder, slots, mode, k_n_v, step, bias, z_slots)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_ARGS = "wp, w_off, x, x_off, offs, k0, y, y_off, ldy, kn, b, m, mode, z"


def dispatch_rows(make, widest: int, args: str):
    """A numba function tile(<args>, rows) calling make(rows) (a micro-kernel intrinsic) for
    rows = 1..widest: the micro-kernels are specialized by tile shape, the dispatch picks one."""
    micros = {f"micro{r}": make(r) for r in range(1, widest + 1)}
    lines = [f"def tile({args}, rows):"]
    for r in range(widest, 0, -1):
        lines.append(f"    {'if' if r == widest else 'elif'} rows == {r}:" if r > 1 else "    else:")
        lines.append(f"        micro{r}({args})")
    scope = dict(micros)
    exec("\n".join(lines), scope)  # noqa: S102 -- generated dispatch over the generated kernels
    return njit(nogil=True, cache=False, error_model="numpy", inline="always")(scope["tile"])


def _dispatch(vectors: int):
    """The micro-kernel of `rows` (1..MR) rows and 8*`vectors` columns."""
    return dispatch_rows(lambda r: _make_micro(r, vectors), MR, _ARGS)


_tile16, _tile8 = _dispatch(2), _dispatch(1)


def pack_weights(w: np.ndarray, tile=MR) -> np.ndarray:
    """W (M, K) as tiles of `tile` rows, each stored k-major: flat float32, read-only.

    Tile t (rows m_t .. m_t + r_t, r_t = min(tile, M - m_t), m_t = tile * t) starts at m_t * K;
    its element (r, k) is at m_t * K + k * r_t + r. `tile` may instead be the sequence of the
    tiles' row counts r_t (summing to M). (MR: this module's micro-kernel broadcasts r_t
    elements a k; nchwc_gemm.py's tiles of 16 or 24 output channels load them as vectors.)
    """
    w = np.asarray(w, np.float32)
    m, k = w.shape
    rows = [min(tile, m - t0) for t0 in range(0, m, tile)] if isinstance(tile, int) else list(tile)
    if sum(rows) != m:
        raise ValueError(f"pack_weights: tiles of {rows} rows for {m} rows")
    out = np.empty(m * k, np.float32)
    t0 = 0
    for r in rows:
        out[t0 * k:(t0 + r) * k] = w[t0:t0 + r].T.reshape(-1)
        t0 += r
    out.flags.writeable = False
    return out


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _tile(wp, w_off, x, x_off, offs, k0, y, y_off, ldy, kn, b, m, mode, rows, wide, z):
    """One micro-tile: `rows` (1..MR) rows, 16 (wide) or 8 columns."""
    if wide:
        _tile16(wp, w_off, x, x_off, offs, k0, y, y_off, ldy, kn, b, m, mode, z, rows)
    else:
        _tile8(wp, w_off, x, x_off, offs, k0, y, y_off, ldy, kn, b, m, mode, z, rows)


_R1 = types.Array(types.float32, 1, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C")
_O1 = types.Array(types.int64, 1, "C", readonly=True)
_I = types.int64
_GEMM_SIGS = [types.void(_R1, _R1, _I, _O1, _F1, _I, _I, _I, _I, _R1, _F1, _I, types.float32, types.float32)]
_TAIL_OFFS = np.arange(KC, dtype=np.int64) * 8  # rows of the packed tail strip


def scratch_size(p_n: int) -> int:
    """Floats of workspace gemm2d needs (the zero-padded strip of the last < 8 columns and its Y tile)."""
    return KC * 8 + MR * 8 if p_n % 8 else 0


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _gemm(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, ws, act, a0, a1, zf, has_z):
    """gemm2d, with Y += Z (same layout as Y) after the bias when has_z (gemm2d_sum)."""
    k_n = offs.size
    pb = p_n if p_n <= 64 else max(16, (PB_BYTES // (4 * m_n)) // 16 * 16)
    tail_x = KC * 8  # workspace: the last columns' X strip (KC x 8), then their Y tile (MR x 8)
    for p0 in range(0, p_n, pb):
        pe = min(p_n, p0 + pb)
        vec_end = p0 + (pe - p0) // 8 * 8
        tail = pe - vec_end
        for k0 in range(0, k_n, KC):
            kn = min(KC, k_n - k0)
            acc = k0 > 0
            last = k0 + kn == k_n
            mode = (1 if acc else 0) | (2 if last else 0) | (4 if last and has_z else 0)
            if tail:  # the last < 8 columns, zero-padded to 8, so they take the vector micro-kernel too
                for k in range(kn):
                    src = x0 + offs[k0 + k] + vec_end
                    for j in range(8):
                        ws[k * 8 + j] = xf[src + j] if j < tail else 0.0
            for m0 in range(0, m_n, MC):
                me = min(m_n, m0 + MC)
                p = p0
                while p < vec_end:
                    wide = vec_end - p >= 16
                    for m in range(m0, me, MR):
                        rows = min(MR, m_n - m)
                        _tile(wp, m * k_n + k0 * rows, xf, x0 + p, offs, k0, yf, y0 + m * ldy + p, ldy,
                              kn, b, m, mode, rows, wide, zf)
                    p += 16 if wide else 8
                if tail:
                    for m in range(m0, me, MR):
                        rows = min(MR, m_n - m)
                        if acc:
                            for r in range(rows):
                                for j in range(tail):
                                    ws[tail_x + r * 8 + j] = yf[y0 + (m + r) * ldy + vec_end + j]
                        _tile(wp, m * k_n + k0 * rows, ws, 0, _TAIL_OFFS, 0, ws, tail_x, 8, kn, b, m, mode & 3, rows,
                              False, zf)
                        for r in range(rows):
                            for j in range(tail):
                                o = y0 + (m + r) * ldy + vec_end + j
                                yf[o] = ws[tail_x + r * 8 + j] + zf[o] if mode & 4 else ws[tail_x + r * 8 + j]
        if act != 0:
            for m in range(m_n):
                activate_range(yf, np.uint64(y0 + m * ldy + p0), np.uint64(pe - p0), act, a0, a1)



@njit(_GEMM_SIGS, nogil=True, cache=True, error_model="numpy")
def gemm2d(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, ws, act, a0, a1):
    """Y = act(W @ X + b), X given by an offset table (indirect GEMM).

    Args:
        wp: W (m_n, K) packed by pack_weights.
        xf, x0, offs: X[k, p] = xf[x0 + offs[k] + p] (K = offs.size; p < p_n unit-stride).
            A matrix with row pitch ld: offs = ld * arange(K). A convolution: one
            row per (channel, tap), offs = the tap's offset in the padded input, p
            running over output pixels on the input's row pitch (conv_igemm).
        yf, y0, ldy: Y[m, p] = yf[y0 + m * ldy + p].
        b: (m_n,) bias; ws: workspace of scratch_size(p_n) floats.
        act, a0, a1: activation (epilogue.py codes; activate_range's: codes.RANGE_CODES, GELU included).
    """
    _gemm(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, ws, act, a0, a1, b, False)


@njit(types.void(_R1, _R1, _I, _O1, _F1, _I, _I, _I, _I, _R1, _F1, _I, types.float32, types.float32, _R1),
      nogil=True, cache=True, error_model="numpy")
def gemm2d_sum(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, ws, act, a0, a1, zf):
    """Y = act((W @ X + b) + Z): gemm2d with a sum input Z laid out as Y (Z[m, p] = zf[y0 + m * ldy + p]),
    added to each output block after the bias, in registers, before the activation (a residual
    connection; onnxruntime's FusedConv "sum"). The same roundings as the GEMM, then + Z, then the
    activation as separate ops would do them."""
    _gemm(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, ws, act, a0, a1, zf, True)


@njit(types.void(_R1, _R1, _I, _O1, _I, _F1, _I, _I, _I, _I, _I, _I, _R1, _F1, _I, types.float32, types.float32),
      nogil=True, cache=True, error_model="numpy")
def gemm2d_rows(wp, xf, x0, offs, x_pitch, yf, y0, ldy, y_pitch, rows, m_n, p_n, b, ws, act, a0, a1):
    """gemm2d over `rows` bands of p_n columns: band r reads X from x0 + r * x_pitch and writes Y
    from y0 + r * y_pitch (row pitch ldy). A convolution whose input rows are wider than its output
    rows (the taps' reach) writes each output row straight into Y this way, with no cropping copy."""
    for r in range(rows):
        gemm2d(wp, xf, x0 + r * x_pitch, offs, yf, y0 + r * y_pitch, ldy, m_n, p_n, b, ws, act, a0, a1)


def row_offsets(k_n: int, ld: int) -> np.ndarray:
    """The offset table of a matrix with K = k_n rows `ld` elements apart (read-only int64)."""
    offs = np.arange(k_n, dtype=np.int64) * ld
    offs.flags.writeable = False
    return offs


def gemm_bias_act(wp: np.ndarray, x: np.ndarray, y: np.ndarray, b: np.ndarray, xp: np.ndarray, act: int = 0,
                  p0: float = 0.0, p1: float = 0.0) -> None:
    """y[n] = act(W @ x[n] + b) for each n, W packed by pack_weights.

    Args:
        wp: pack_weights(W), W (M, K) float32, read-only.
        x: (N, K, P) float32, C-contiguous.
        y: (N, M, P) float32 output, C-contiguous; must not overlap x.
        b: (M,) float32 bias (zeros for none), read-only.
        xp: float32 workspace of at least scratch_size(P) elements (flat, contiguous).
        act, p0, p1: activation code and parameters (compiled/epilogue.py; 0: none).
    Raises:
        ValueError: shapes, dtypes or strides that do not match.
    """
    n_b, k_n, p_n = x.shape
    m_n = y.shape[1]
    if y.shape != (n_b, m_n, p_n) or wp.size != m_n * k_n or b.shape != (m_n,):
        raise ValueError(f"gemm_bias_act: W {m_n}x{k_n} packed in {wp.size}, x {x.shape}, y {y.shape}, b {b.shape}")
    if x.dtype != np.float32 or y.dtype != np.float32 or not x.flags.c_contiguous or not y.flags.c_contiguous:
        raise ValueError("gemm_bias_act: C-contiguous float32 x and y expected")
    if xp.size < scratch_size(p_n) or xp.dtype != np.float32:
        raise ValueError(f"gemm_bias_act: workspace of {xp.size} floats < {scratch_size(p_n)}")
    offs = row_offsets(k_n, p_n)
    xf, yf = x.reshape(-1), y.reshape(-1)
    for n in range(n_b):
        gemm2d(wp, xf, n * k_n * p_n, offs, yf, n * m_n * p_n, p_n, m_n, p_n, b, xp.reshape(-1), int(act),
               np.float32(p0), np.float32(p1))
