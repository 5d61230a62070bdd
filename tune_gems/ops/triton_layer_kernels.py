"""Triton kernels of the population layers (`model.layer_kernel: triton`; docs/design.md "Ops and kernels"). A program
computes one tile of one group with a fixed-order K-loop and tiles chosen from the shape only, so group g's bits are
those of g alone (the P-invariance cuBLAS's batched GEMM does not give: benchmarks/RESULTS.md, session 14); group g is
member g // REPS, on the grid's slow axis (a group's tiles run side by side and share its weights in L2). No atomics,
memset or host reads: they replay in a CUDA graph. The K-loops assume a non-empty trip count (tl.assume), else ptxas
serialises the wgmma pipeline (tests/test_triton_compile.py)."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def _sum(x, axis):
    """tl.sum through the builtin tl.reduce: the kernels call builtins only, so they run on the
    interpreter whenever this module was imported under TRITON_INTERPRET=1, even after Triton's
    library jit functions were defined without it."""
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _group_offset(g, REPS: tl.constexpr, s_member, s_rep):
    """Offset of group g's block in a [P, REPS, ...] tensor."""
    return (g // REPS) * s_member + (g % REPS) * s_rep


@triton.jit
def _tile_ranges(tile, cols, BM: tl.constexpr, BN: tl.constexpr):
    """Row and column indices of output tile `tile` (tiles of BM x BN, row-major, over `cols` columns)."""
    tiles_c = (cols + BN - 1) // BN
    return (tile // tiles_c) * BM + tl.arange(0, BM), (tile % tiles_c) * BN + tl.arange(0, BN)


@triton.jit
def _weight_offsets(g, REPS: tl.constexpr, sw_p, sw_r, sfi_p, sfi_r, sfo_p, sfo_r):
    """Offsets of group g's weight (and sigma), f_in and f_out blocks."""
    return (_group_offset(g, REPS, sw_p, sw_r), _group_offset(g, REPS, sfi_p, sfi_r),
            _group_offset(g, REPS, sfo_p, sfo_r))  # fmt: skip


@triton.jit
def _dot(a, b, acc, DOT: tl.constexpr):
    """acc + a @ b at the product's precision: "ieee" (fp32), "tf32", or "bf16" (operands cast
    to bfloat16, fp32 accumulation: what autocast's bf16 matmul computes)."""
    if DOT == "bf16":
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    else:
        return tl.dot(a, b, acc, input_precision=DOT)


@triton.jit
def _weight_tile(w, w_sigma, f_in, f_out, w_off, fi_off, fo_off, ii, oo, s_i, s_o, sfi_i, sfo_o, mi, mo, NOISY: tl.constexpr):
    """The effective weight at rows ii (inputs) and columns oo (outputs) of one group, zero
    outside the masks; ii and oo broadcast to the tile's shape (a transposed tile swaps them)."""
    mask = mi & mo
    t = tl.load(w + w_off + ii * s_i + oo * s_o, mask=mask, other=0.0)
    if NOISY:
        sig = tl.load(w_sigma + w_off + ii * s_i + oo * s_o, mask=mask, other=0.0)
        fi = tl.load(f_in + fi_off + ii * sfi_i, mask=mi, other=0.0)
        fo = tl.load(f_out + fo_off + oo * sfo_o, mask=mo, other=0.0)
        t = t + sig * (fi * fo)
    return t


@triton.jit
def _relu_grad(dy, y, idx, mask, RELU: tl.constexpr):
    """dy at `idx`, times relu'(y) when the layer applied a ReLU (torch's threshold_backward:
    the gradient passes where the output is positive)."""
    d = tl.load(dy + idx, mask=mask, other=0.0)
    if RELU:
        d = tl.where(tl.load(y + idx, mask=mask, other=0.0) > 0.0, d, 0.0)
    return d


@triton.jit
def _rows_kernel(
    a, y, sa_g, sa_n, sa_k,
    w, w_sigma, sw_p, sw_r, sw_i, sw_o,
    f_in, sfi_p, sfi_r, sfi_i,
    f_out, sfo_p, sfo_r, sfo_o,
    b, b_sigma, sb_p, sb_r, sb_o,
    scale,
    out, so_g, so_n, so_c,
    N, K, O,
    BACKWARD: tl.constexpr,
    REPS: tl.constexpr, NOISY: tl.constexpr, SCALED: tl.constexpr, RELU: tl.constexpr, DOT: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    """forward: out[g] = act((x[g] @ W_eff[g]) * s[g] + b_eff[g]); BACKWARD: dx[g] = s[g] * ((dy[g] *
    relu'(y[g])) @ W_eff[g]^T), dy sharing y's strides (no bias: its operands are placeholders)."""
    g = tl.program_id(1).to(tl.int64)
    cols = K if BACKWARD else O
    inner = O if BACKWARD else K
    rn, rc = _tile_ranges(tl.program_id(0), cols, BM, BN)
    ri = tl.arange(0, BK)
    a_off = g * sa_g
    w_off, fi_off, fo_off = _weight_offsets(g, REPS, sw_p, sw_r, sfi_p, sfi_r, sfo_p, sfo_r)
    mn, mc = rn[:, None] < N, rc[None, :] < cols
    acc = tl.full((BM, BN), 0.0, tl.float32)
    tl.assume(inner > 0)
    for i0 in range(0, inner, BK):
        ii = i0 + ri
        a_mask = mn & (ii[None, :] < inner)
        a_idx = a_off + rn[:, None] * sa_n + ii[None, :] * sa_k
        if BACKWARD:  # W_eff^T's tile: inputs along the columns, outputs along the K-loop
            at = _relu_grad(a, y, a_idx, a_mask, RELU)
            wt = _weight_tile(w, w_sigma, f_in, f_out, w_off, fi_off, fo_off, rc[None, :], ii[:, None],
                              sw_i, sw_o, sfi_i, sfo_o, mc, ii[:, None] < inner, NOISY)  # fmt: skip
        else:
            at = tl.load(a + a_idx, mask=a_mask, other=0.0)
            wt = _weight_tile(w, w_sigma, f_in, f_out, w_off, fi_off, fo_off, ii[:, None], rc[None, :],
                              sw_i, sw_o, sfi_i, sfo_o, ii[:, None] < inner, mc, NOISY)  # fmt: skip
        acc = _dot(at, wt, acc, DOT)
    if SCALED:
        acc = acc * tl.load(scale + 2 * g)
    if not BACKWARD:
        b_off = _group_offset(g, REPS, sb_p, sb_r)
        bias = tl.load(b + b_off + rc * sb_o, mask=rc < O, other=0.0)
        if NOISY:
            fo = tl.load(f_out + fo_off + rc * sfo_o, mask=rc < O, other=0.0)
            bias = bias + tl.load(b_sigma + b_off + rc * sb_o, mask=rc < O, other=0.0) * fo
        acc = acc + bias[None, :]
        if RELU:
            acc = tl.where(acc < 0.0, 0.0, acc)  # NaN passes, as torch.relu's
    tl.store(out + g * so_g + rn[:, None] * so_n + rc[None, :] * so_c, acc, mask=mn & mc)


@triton.jit
def _weight_grad_kernel(
    x, sx_g, sx_n, sx_k,
    dy, y, sd_g, sd_n, sd_o,
    w, sw_p, sw_r, sw_i, sw_o,
    f_in, sfi_p, sfi_r, sfi_i,
    f_out, sfo_p, sfo_r, sfo_o,
    scale, partials,
    dw, dw_sigma, sdw_p, sdw_r, sdw_i, sdw_o,
    db, db_sigma, sdb_p, sdb_r, sdb_o,
    N, K, O,
    REPS: tl.constexpr, NOISY: tl.constexpr, SCALED: tl.constexpr, RELU: tl.constexpr, DOT: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    """G[g] = x[g]^T @ dy_pre[g] and the parameter gradients it gives, written in place (docs/design.md
    "Ops and kernels"); SCALED also writes this tile's <G, W> to `partials` for `_sigma_grad_kernel`.
    The bias sums run in the first input tile's programs, in the K-loop's fixed order."""
    g = tl.program_id(1).to(tl.int64)
    tile = tl.program_id(0)
    rk, ro = _tile_ranges(tile, O, BM, BN)
    ti = tile // ((O + BN - 1) // BN)  # the input tile: the bias sums run where it is 0
    rn = tl.arange(0, BK)
    x_off = g * sx_g
    d_off = g * sd_g
    mk, mo = rk[:, None] < K, ro[None, :] < O
    acc = tl.full((BM, BN), 0.0, tl.float32)
    bias_acc = tl.full((BN,), 0.0, tl.float32)
    tl.assume(N > 0)
    for n0 in range(0, N, BK):
        nn = n0 + rn
        xt = tl.load(x + x_off + rk[:, None] * sx_k + nn[None, :] * sx_n, mask=mk & (nn[None, :] < N), other=0.0)
        d = _relu_grad(dy, y, d_off + nn[:, None] * sd_n + ro[None, :] * sd_o, (nn[:, None] < N) & mo, RELU)
        acc = _dot(xt, d, acc, DOT)
        if ti == 0:
            bias_acc += _sum(d, axis=0)
    w_off = _group_offset(g, REPS, sw_p, sw_r)
    dw_off = _group_offset(g, REPS, sdw_p, sdw_r)
    db_off = _group_offset(g, REPS, sdb_p, sdb_r)
    out = dw_off + rk[:, None] * sdw_i + ro[None, :] * sdw_o
    if NOISY:
        fi = tl.load(f_in + _group_offset(g, REPS, sfi_p, sfi_r) + rk * sfi_i, mask=rk < K, other=0.0)
        fo = tl.load(f_out + _group_offset(g, REPS, sfo_p, sfo_r) + ro * sfo_o, mask=ro < O, other=0.0)
        tl.store(dw + out, acc, mask=mk & mo)
        tl.store(dw_sigma + out, acc * (fi[:, None] * fo[None, :]), mask=mk & mo)
        if ti == 0:
            tl.store(db + db_off + ro * sdb_o, bias_acc, mask=ro < O)
            tl.store(db_sigma + db_off + ro * sdb_o, bias_acc * fo, mask=ro < O)
    else:
        if SCALED:
            wt = tl.load(w + w_off + rk[:, None] * sw_i + ro[None, :] * sw_o, mask=mk & mo, other=0.0)
            tl.store(partials + g * tl.num_programs(0) + tile, _sum(_sum(acc * wt, axis=1), axis=0))
            acc = acc * tl.load(scale + 2 * g)
        tl.store(dw + out, acc, mask=mk & mo)
        if ti == 0:
            tl.store(db + db_off + ro * sdb_o, bias_acc, mask=ro < O)


@triton.jit
def _sigma_grad_kernel(
    dw, sdw_p, sdw_r, sdw_i, sdw_o,
    partials, scale, u, su_g, v, sv_g,
    K, O, TILES,
    REPS: tl.constexpr, TILES_P2: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """Spectral norm's term through sigma: dW[g] += <G, W>[g] * ds/dsigma[g] * v u^T, <G, W> summed
    from the partials in one fixed order (every program of a group sums the same tiles alike)."""
    g = tl.program_id(1).to(tl.int64)
    tile = tl.program_id(0)
    t = tl.arange(0, TILES_P2)
    c = _sum(tl.load(partials + g * TILES + t, mask=t < TILES, other=0.0), axis=0)
    coef = c * tl.load(scale + 2 * g + 1)
    rk, ro = _tile_ranges(tile, O, BM, BN)
    vv = tl.load(v + g * sv_g + rk, mask=rk < K, other=0.0)
    uu = tl.load(u + g * su_g + ro, mask=ro < O, other=0.0)
    mask = (rk[:, None] < K) & (ro[None, :] < O)
    ptr = dw + _group_offset(g, REPS, sdw_p, sdw_r) + rk[:, None] * sdw_i + ro[None, :] * sdw_o
    tl.store(ptr, tl.load(ptr, mask=mask, other=0.0) + coef * (vv[:, None] * uu[None, :]), mask=mask)


@triton.jit
def _matvec(w, w_off, s_rows, s_cols, vec, out, other, R, C,
            STORE: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):  # fmt: skip
    """r = M @ vec (W, or W^T by swapping the strides) in a fixed order. STORE: r goes to `out` and
    sum r^2 is returned; else r . other."""
    total = tl.full((), 0.0, tl.float32)
    for r0 in range(0, R, BR):
        rr = r0 + tl.arange(0, BR)
        acc = tl.full((BR,), 0.0, tl.float32)
        for c0 in range(0, C, BC):
            rc = c0 + tl.arange(0, BC)
            mt = tl.load(w + w_off + rr[:, None] * s_rows + rc[None, :] * s_cols, mask=(rr[:, None] < R) & (rc[None, :] < C), other=0.0)
            acc += _sum(mt * tl.load(vec + rc, mask=rc < C, other=0.0)[None, :], axis=1)
        if STORE:
            tl.store(out + rr, acc, mask=rr < R)
            total += _sum(acc * acc, axis=0)
        else:
            total += _sum(acc * tl.load(other + rr, mask=rr < R, other=0.0), axis=0)
    return total


@triton.jit
def _divide_in_place(vec, n, norm, B: tl.constexpr):
    for i0 in range(0, n, B):
        r = i0 + tl.arange(0, B)
        tl.store(vec + r, tl.div_rn(tl.load(vec + r, mask=r < n, other=0.0), norm), mask=r < n)


@triton.jit
def _spectral_kernel(
    w, sw_p, sw_r, sw_i, sw_o,
    u, su_g, v, sv_g, on, scale,
    K, O, eps,
    REPS: tl.constexpr, ITERATE: tl.constexpr, BI: tl.constexpr, BO: tl.constexpr,
):  # fmt: skip
    """Spectral norm of one group per program, as tune_gems.model.layers.PopLinear's: scale[g] =
    (1/sigma, -1/sigma^2), or (1, 0) where the switch is off. The barriers order one pass's stores before
    the next pass's loads (the program's threads share its vectors through memory)."""
    g = tl.program_id(0).to(tl.int64)
    w_off = _group_offset(g, REPS, sw_p, sw_r)
    ug, vg = u + g * su_g, v + g * sv_g
    if ITERATE:
        ss = _matvec(w, w_off, sw_i, sw_o, ug, vg, vg, K, O, True, BI, BO)
        tl.debug_barrier()
        _divide_in_place(vg, K, tl.maximum(tl.sqrt_rn(ss), eps), BI)
        tl.debug_barrier()
        ss = _matvec(w, w_off, sw_o, sw_i, vg, ug, ug, O, K, True, BO, BI)
        tl.debug_barrier()
        _divide_in_place(ug, O, tl.maximum(tl.sqrt_rn(ss), eps), BO)
        tl.debug_barrier()
    sigma = _matvec(w, w_off, sw_i, sw_o, ug, vg, vg, K, O, False, BI, BO)
    s = tl.div_rn(1.0, sigma)
    switched_on = tl.load(on + g) != 0
    tl.store(scale + 2 * g, tl.where(switched_on, s, 1.0))
    tl.store(scale + 2 * g + 1, tl.where(switched_on, -(s * s), 0.0))


@triton.jit
def _noise_factors_kernel(
    u, su_p, on,
    f_in, sfi_p, sfi_r, sfi_i,
    f_out, sfo_p, sfo_r, sfo_o,
    offset, total, size, IN, OUT,
    TWO_PI_F: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Grid (P, blocks of the layer's `size` normals): normal l of the layer is normal
    offset + l of the net, from uniforms offset + l and total + offset + l of the member's row."""
    p = tl.program_id(0).to(tl.int64)
    l = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = l < size
    row = u + p * su_p + offset + l
    r = tl.sqrt_rn(-2.0 * tl.log(tl.load(row, mask=m, other=0.5)))
    eps = r * tl.cos(TWO_PI_F * tl.load(row + total, mask=m, other=0.5))
    sign = tl.where(eps > 0.0, 1.0, tl.where(eps < 0.0, -1.0, 0.0))
    f = tl.where(tl.load(on + p) != 0, sign * tl.sqrt_rn(tl.abs(eps)), 0.0)
    rep = l // (IN + OUT)
    c = l % (IN + OUT)
    tl.store(f_in + p * sfi_p + rep * sfi_r + c * sfi_i, f, mask=m & (c < IN))
    tl.store(f_out + p * sfo_p + rep * sfo_r + (c - IN) * sfo_o, f, mask=m & (c >= IN))


@triton.jit
def _row_reduce_kernel(g, s_row, bounds, out, n, GROUPED: tl.constexpr, SQUARE: tl.constexpr, BLOCK: tl.constexpr,
                       UNIT: tl.constexpr = 1, MEAN: tl.constexpr = False):  # fmt: skip
    """Per row, the norm (SQUARE) or sum (the mean: MEAN, an IEEE division) over each column range UNIT x
    bounds[c] .. UNIT x bounds[c+1] (GROUPED; else 0 .. n): lanes accumulate in column order, then one fixed
    tree, so a row's bits are those of the row alone. UNIT 4 lets the compiler see 16-byte aligned ranges."""
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    start = 0
    if GROUPED:
        start = tl.load(bounds + c) * UNIT
        n = tl.load(bounds + c + 1) * UNIT - start
    acc = tl.full([BLOCK], 0.0, tl.float32)
    for s in range(0, n, BLOCK):
        idx = s + tl.arange(0, BLOCK)
        x = tl.load(g + r * s_row + start + idx, mask=idx < n, other=0.0).to(tl.float32)
        if SQUARE:
            acc += x * x
        else:
            acc += x
    total = _sum(acc, 0)
    if SQUARE:
        total = tl.sqrt(total)
    if MEAN:
        total = tl.div_rn(total, n * 1.0)
    tl.store(out + c * tl.num_programs(0) + r, total)


@triton.jit
def _clip_coefficient(norms, c, P, r, max_norm, clip_eps):
    """torch's (max_norm / (norm + eps)).clamp(max=1) in float32 for range c of row r: the
    reciprocal times max_norm (torch's scalar / tensor), NaN kept."""
    coef = tl.div_rn(1.0, tl.load(norms + c * P + r) + clip_eps) * max_norm
    return tl.where(coef > 1.0, 1.0, coef)


@triton.jit
def _clip_adam_kernel(
    p, g, m, v, s_row, col0, ncols,
    norms, bounds, P, max_norm, clip_eps,
    lr, corrections, hyper,
    GROUPS: tl.constexpr, UNIT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Clip each gradient element by its group's coefficient, then Adam in the operations and types of
    torch's CUDA `_fused_adam_`: float32 throughout, the moments as its two fused multiply-adds, IEEE
    division and sqrt. `hyper` = (beta1, beta2, eps); `corrections` = 1 - (beta1, beta2)^step."""
    r = tl.program_id(0).to(tl.int64)
    cols = col0 + tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < col0 + ncols
    coef = tl.full([BLOCK], 0.0, tl.float32) + _clip_coefficient(norms, 0, P, r, max_norm, clip_eps)
    for c in tl.static_range(1, GROUPS):
        coef = tl.where(cols >= tl.load(bounds + c) * UNIT, _clip_coefficient(norms, c, P, r, max_norm, clip_eps), coef)
    idx = r * s_row + cols
    grad = tl.load(g + idx, mask=mask, other=0.0) * coef
    beta1, beta2, eps = tl.load(hyper), tl.load(hyper + 1), tl.load(hyper + 2)
    exp_avg = tl.fma(beta1, tl.load(m + idx, mask=mask, other=0.0), tl.fma(-beta1, grad, grad))
    square = grad * grad
    exp_avg_sq = tl.fma(beta2, tl.load(v + idx, mask=mask, other=0.0), tl.fma(-beta2, square, square))
    step_size = tl.div_rn(tl.load(lr + r), tl.load(corrections))
    denom = tl.div_rn(tl.sqrt_rn(exp_avg_sq), tl.sqrt_rn(tl.load(corrections + 1))) + eps
    param = tl.load(p + idx, mask=mask, other=0.0) - tl.div_rn(step_size * exp_avg, denom)
    tl.store(p + idx, param, mask=mask)
    tl.store(m + idx, exp_avg, mask=mask)
    tl.store(v + idx, exp_avg_sq, mask=mask)


@triton.jit
def _mix32(x, MUL_A: tl.constexpr, MUL_B: tl.constexpr):
    """tune_gems.rng's 32-bit avalanche hash, in the same int64 operations (exact: equal bits)."""
    x = x ^ (x >> 16)
    x = (x * MUL_A) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * MUL_B) & 0xFFFFFFFF
    return x ^ (x >> 15)


@triton.jit
def _uniform_block_kernel(keys, counter, index_hash, out, n, GOLDEN: tl.constexpr, MUL_A: tl.constexpr,
                          MUL_B: tl.constexpr, U24: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """CounterRNG.draw's block [P, n] of stream 0 in one launch: member p's key mixed with the counter, then
    with each element's index hash; 24 bits to a uniform (the products and sums are exact in float32)."""
    p = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ctr = tl.load(counter) & 0xFFFFFFFF
    k = _mix32(tl.load(keys + p) ^ _mix32((ctr + GOLDEN) & 0xFFFFFFFF, MUL_A, MUL_B), MUL_A, MUL_B)
    h = tl.load(index_hash + idx, mask=idx < n, other=0)
    bits = _mix32((k ^ h) & 0xFFFFFFFF, MUL_A, MUL_B)
    tl.store(out + p * n + idx, (bits >> 8).to(tl.float32) * U24 + 0.5 * U24, mask=idx < n)


INTERPRETED = isinstance(_rows_kernel, InterpretedFunction)
"""Whether this module's kernels run on Triton's CPU interpreter (TRITON_INTERPRET=1 when it
was imported)."""

if INTERPRETED:
    # The interpreter patches triton.language once per launch; a helper called as an
    # InterpretedFunction patches it again at every call (milliseconds each, most of a small
    # kernel's time), so under the interpreter the kernels call the helpers' rewritten plain
    # functions, which run inside the launch's patch. The same code runs, only sooner.
    for _helper in (_sum, _group_offset, _tile_ranges, _weight_offsets, _dot, _weight_tile, _relu_grad, _matvec, _divide_in_place,
                    _clip_coefficient, _mix32):
        globals()[_helper.__name__] = _helper.rewrite()
