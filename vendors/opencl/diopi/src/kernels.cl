/* The kernels of libdiopi_impl_opencl.so, built once per (context, device).
 * Every tensor is a data pointer and a TD: its shape and strides in
 * elements and its DIOPI dtype; values are loaded into acc_t (double where
 * the device has cl_khr_fp64), computed, and stored back in the tensor's
 * dtype. float16 is stored as half and computed in float or double (no
 * cl_khr_fp16 needed); bfloat16 is stored as ushort. A TD of dtype -1 is
 * a scalar operand, passed by value. Work-item i handles output element i;
 * the global size is rounded up, so every kernel checks i < n. */

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

#define MAXD 8
typedef struct {
    long shape[MAXD];
    long stride[MAXD];
    int ndim;
    int dtype;
} TD;

#define DT_I8 0
#define DT_U8 1
#define DT_I16 2
#define DT_I32 4
#define DT_I64 6
#define DT_F16 8
#define DT_F32 9
#define DT_F64 10
#define DT_BOOL 11
#define DT_BF16 12

acc_t ld(const global void *p, int dt, long i) {
    switch (dt) {
    case DT_F32: return ((const global float *)p)[i];
    case DT_F16: return vload_half(i, (const global half *)p);
    case DT_BF16: return as_float((uint)((const global ushort *)p)[i] << 16);
#ifdef cl_khr_fp64
    case DT_F64: return ((const global double *)p)[i];
#endif
    case DT_I64: return ((const global long *)p)[i];
    case DT_I32: return ((const global int *)p)[i];
    case DT_I16: return ((const global short *)p)[i];
    case DT_I8: return ((const global char *)p)[i];
    case DT_U8: return ((const global uchar *)p)[i];
    case DT_BOOL: return ((const global uchar *)p)[i] != 0;
    }
    return 0;
}

void st(global void *p, int dt, long i, acc_t v) {
    switch (dt) {
    case DT_F32: ((global float *)p)[i] = (float)v; break;
    case DT_F16: vstore_half_rte((float)v, i, (global half *)p); break;
    case DT_BF16: {
        uint u = as_uint((float)v);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            u = (u >> 16) | 0x40u;
        } else {
            u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        }
        ((global ushort *)p)[i] = (ushort)u;
        break;
    }
#ifdef cl_khr_fp64
    case DT_F64: ((global double *)p)[i] = v; break;
#endif
    case DT_I64: ((global long *)p)[i] = (long)v; break;
    case DT_I32: ((global int *)p)[i] = (int)v; break;
    case DT_I16: ((global short *)p)[i] = (short)v; break;
    case DT_I8: ((global char *)p)[i] = (char)v; break;
    case DT_U8: ((global uchar *)p)[i] = (uchar)v; break;
    case DT_BOOL: ((global uchar *)p)[i] = v != 0; break;
    }
}

/* Offset of the element whose row-major index over dims [d0, d1) of t is i. */
long off_range(const TD *t, int d0, int d1, long i) {
    long o = 0;
    for (int d = d1 - 1; d >= d0; --d) {
        long s = t->shape[d];
        o += (i % s) * t->stride[d];
        i /= s;
    }
    return o;
}

long off(const TD *t, long i) { return off_range(t, 0, t->ndim, i); }

acc_t opnd(const global void *p, const TD *t, long i, acc_t v) {
    return t->dtype < 0 ? v : ld(p, t->dtype, off(t, i));
}

acc_t sigm(acc_t x) { return 1 / (1 + exp(-x)); }

/* Elementwise ops: x, y, z are the operands, p0 and p1 parameters. */
acc_t apply(int op, acc_t x, acc_t y, acc_t z, acc_t p0, acc_t p1) {
    switch (op) {
    case 0: return x;
    case 1: return x + p0 * y;
    case 2: return x - p0 * y;
    case 3: return x * y;
    case 4: return x / y;
    case 5: return trunc(x / y);
    case 6: return floor(x / y);
    case 7: return x > 0 ? x : (isnan(x) ? x : 0);
    case 8: return y <= p0 ? 0 : x;
    case 9: return -x;
    case 10: return x * sigm(x);
    case 11: { acc_t s = sigm(y); return x * s * (1 + y * (1 - s)); }
    case 12: return sqrt(x);
    case 13: return rsqrt(x);
    case 14: return exp(x);
    case 15: return log(x);
    case 16: return pow(x, y);
    case 17: return tanh(x);
    case 18: return sigm(x);
    case 19: return isnan(x) || isnan(y) ? x + y : (x > y ? x : y);
    case 20: return isnan(x) || isnan(y) ? x + y : (x < y ? x : y);
    case 21: return x + p0 * y * z;
    case 22: return x + p0 * y / z;
    case 23: return p0;
    case 24: return x >= y;
    case 25: return x > y;
    case 26: return x <= y;
    case 27: return x < y;
    case 28: return x == y;
    case 29: return x != y;
    case 30: return fabs(x);
    case 33: return x * (1 - y * y);
    case 34: return x * y * (1 - y);
    case 35: return x * x;
    case 36: return 1 / x;
    case 37: return x < p0 ? p0 : (x > p1 ? p1 : x);
    case 38: return x + p0 * (y - x);
    case 39: return erf(x);
    case 40: return x > 0 ? 1 : (x < 0 ? -1 : x);
    }
    return 0;
}

kernel void ew(global void *o, TD od, const global void *a, TD ad, const global void *b,
               TD bd, const global void *c, TD cd, int op, acc_t va, acc_t vb, acc_t vc,
               acc_t p0, acc_t p1, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    acc_t x = opnd(a, &ad, i, va);
    acc_t y = opnd(b, &bd, i, vb);
    acc_t z = opnd(c, &cd, i, vc);
    st(o, od.dtype, off(&od, i), apply(op, x, y, z, p0, p1));
}

/* Reductions: output element i over the inner dims [nouter, ndim) of a,
 * whose first nouter dims are the output's. op 0 sum, 1 mean, 2 max,
 * 3 min, 4 prod, 5 sum of squares. */
kernel void red(global void *o, TD od, const global void *a, TD ad, int nouter, long inner,
                int op, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long base = off_range(&ad, 0, nouter, i);
    acc_t r = op == 4 ? 1 : 0;
    for (long j = 0; j < inner; ++j) {
        acc_t v = ld(a, ad.dtype, base + off_range(&ad, nouter, ad.ndim, j));
        if (op == 2) r = (j == 0 || v > r || isnan(v)) ? v : r;
        else if (op == 3) r = (j == 0 || v < r || isnan(v)) ? v : r;
        else if (op == 4) r *= v;
        else if (op == 5) r += v * v;
        else r += v;
    }
    if (op == 1) r /= inner;
    st(o, od.dtype, off(&od, i), r);
}

/* Softmax family along the last dim of every TD (the host moves the dim
 * last). op 0 softmax(a), 1 log_softmax(a), 2 softmax backward (a the
 * gradient, b the output), 3 log_softmax backward. */
kernel void smax(global void *o, TD od, const global void *a, TD ad, const global void *b,
                 TD bd, int op, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    int last = od.ndim - 1;
    long len = od.shape[last];
    long oo = off_range(&od, 0, last, i), ao = off_range(&ad, 0, last, i);
    long os = od.stride[last], as = ad.stride[last];
    if (op < 2) {
        acc_t m = -INFINITY, s = 0;
        for (long k = 0; k < len; ++k) m = fmax(m, ld(a, ad.dtype, ao + k * as));
        for (long k = 0; k < len; ++k) s += exp(ld(a, ad.dtype, ao + k * as) - m);
        for (long k = 0; k < len; ++k) {
            acc_t x = ld(a, ad.dtype, ao + k * as) - m;
            st(o, od.dtype, oo + k * os, op == 0 ? exp(x) / s : x - log(s));
        }
    } else {
        long bo = off_range(&bd, 0, last, i), bs = bd.stride[last];
        acc_t s = 0;
        for (long k = 0; k < len; ++k) {
            acc_t g = ld(a, ad.dtype, ao + k * as);
            s += op == 2 ? g * ld(b, bd.dtype, bo + k * bs) : g;
        }
        for (long k = 0; k < len; ++k) {
            acc_t g = ld(a, ad.dtype, ao + k * as), y = ld(b, bd.dtype, bo + k * bs);
            st(o, od.dtype, oo + k * os, op == 2 ? y * (g - s) : g - exp(y) * s);
        }
    }
}

/* o[b, m, n] = alpha * sum_k a[b, m, k] * w[b, k, n] + beta * c[b, m, n]
 * (c skipped when its dtype is -1 or beta is 0), all TDs 3-D. */
kernel void gemm(global void *o, TD od, const global void *a, TD ad, const global void *w,
                 TD wd, const global void *c, TD cd, acc_t alpha, acc_t beta, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long N = od.shape[2], M = od.shape[1], K = ad.shape[2];
    long nn = i % N, m = (i / N) % M, bi = i / (N * M);
    long ab = bi * ad.stride[0] + m * ad.stride[1], wb = bi * wd.stride[0] + nn * wd.stride[2];
    acc_t acc = 0;
    for (long k = 0; k < K; ++k)
        acc += ld(a, ad.dtype, ab + k * ad.stride[2]) * ld(w, wd.dtype, wb + k * wd.stride[1]);
    acc_t r = alpha * acc;
    if (cd.dtype >= 0 && beta != 0)
        r += beta * ld(c, cd.dtype, bi * cd.stride[0] + m * cd.stride[1] + nn * cd.stride[2]);
    st(o, od.dtype, bi * od.stride[0] + m * od.stride[1] + nn * od.stride[2], r);
}

/* NLL loss over input [N, C, d...] (log-probabilities), target [N, d...],
 * weight [C] (dtype -1: ones); S is the product of the d sizes.
 * reduction 0: o[n, d...] per sample (n = N * S work-items); 1 mean,
 * 2 sum: one work-item writes o[]. */
long nll_class(const global void *t, const TD *td, long r, long S) {
    return (long)ld(t, td->dtype, (r / S) * td->stride[0] + off_range(td, 1, td->ndim, r % S));
}

acc_t nll_weight(const global void *w, const TD *wd, long c) {
    return wd->dtype < 0 ? 1 : ld(w, wd->dtype, c * wd->stride[0]);
}

kernel void nll(global void *o, TD od, const global void *x, TD xd, const global void *t,
                TD td, const global void *w, TD wd, int reduction, long ignore, long S,
                long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long R = xd.shape[0] * S, C = xd.shape[1];
    long lo = reduction == 0 ? i : 0, hi = reduction == 0 ? i + 1 : R;
    acc_t s = 0, ws = 0;
    for (long r = lo; r < hi; ++r) {
        long c = nll_class(t, &td, r, S);
        if (c == ignore || c < 0 || c >= C) continue;
        acc_t wt = nll_weight(w, &wd, c);
        s -= wt * ld(x, xd.dtype, (r / S) * xd.stride[0] + c * xd.stride[1] +
                                      off_range(&xd, 2, xd.ndim, r % S));
        ws += wt;
    }
    if (reduction == 1) s /= ws;
    st(o, od.dtype, reduction == 0 ? off(&od, i) : 0, s);
}

/* Gradient of nll: gi [N, C, d...] is zero except at each sample's target
 * class: -weight * g (g per sample for reduction 0, else g[]), divided by
 * the total weight of the kept samples for the mean. */
kernel void nll_bwd(global void *gi, TD gid, const global void *g, TD gd, const global void *t,
                    TD td, const global void *w, TD wd, int reduction, long ignore, long S,
                    long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long C = gid.shape[1], sp = i % S, col = (i / S) % C, nb = i / (S * C);
    long r = nb * S + sp;
    long c = nll_class(t, &td, r, S);
    acc_t v = 0;
    if (c == col && c != ignore) {
        acc_t go = ld(g, gd.dtype, reduction == 0 ? off(&gd, r) : 0);
        v = -nll_weight(w, &wd, c) * go;
        if (reduction == 1) {
            acc_t ws = 0;
            for (long q = 0; q < gid.shape[0] * S; ++q) {
                long cq = nll_class(t, &td, q, S);
                if (cq != ignore && cq >= 0 && cq < C) ws += nll_weight(w, &wd, cq);
            }
            v /= ws;
        }
    }
    st(gi, gid.dtype, nb * gid.stride[0] + col * gid.stride[1] + off_range(&gid, 2, gid.ndim, sp), v);
}

/* SGD on one element (torch's rule); buf is used when momentum != 0. */
kernel void sgd(global void *p, TD pd, const global void *g, TD gd, global void *b, TD bd,
                acc_t lr, acc_t momentum, acc_t dampening, acc_t wdc, int nesterov, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long po = off(&pd, i);
    acc_t pv = ld(p, pd.dtype, po);
    acc_t d = ld(g, gd.dtype, off(&gd, i)) + wdc * pv;
    if (momentum != 0) {
        long bo = off(&bd, i);
        acc_t bv = momentum * ld(b, bd.dtype, bo) + (1 - dampening) * d;
        st(b, bd.dtype, bo, bv);
        d = nesterov ? d + momentum * bv : bv;
    }
    st(p, pd.dtype, po, pv - lr * d);
}

/* Adam/AdamW on one element: p, g, m, v (and vmax with amsgrad) share a
 * shape. f: lr, beta1, beta2, eps, weight_decay, bias corrections 1 and 2. */
kernel void adam(global void *p, TD pd, const global void *g, TD gd, global void *m, TD md,
                 global void *v, TD vd, global void *vm, TD vmd, acc_t lr, acc_t b1, acc_t b2,
                 acc_t eps, acc_t wdc, acc_t bc1, acc_t bc2, int decoupled, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long po = off(&pd, i), mo = off(&md, i), vo = off(&vd, i);
    acc_t pv = ld(p, pd.dtype, po), gv = ld(g, gd.dtype, off(&gd, i));
    if (decoupled) pv *= 1 - lr * wdc;
    else gv += wdc * pv;
    acc_t mv = b1 * ld(m, md.dtype, mo) + (1 - b1) * gv;
    acc_t vv = b2 * ld(v, vd.dtype, vo) + (1 - b2) * gv * gv;
    st(m, md.dtype, mo, mv);
    st(v, vd.dtype, vo, vv);
    if (vmd.dtype >= 0) {
        long qo = off(&vmd, i);
        vv = fmax(vv, ld(vm, vmd.dtype, qo));
        st(vm, vmd.dtype, qo, vv);
    }
    acc_t denom = sqrt(vv) / sqrt(bc2) + eps;
    st(p, pd.dtype, po, pv - lr / bc1 * mv / denom);
}

/* Embedding rows: o[i, :] = weight[idx[i], :], over n = numel(idx) * D;
 * an index out of range gives NaN (never a read outside the weight). */
kernel void embed(global void *o, TD od, const global void *w, TD wd, const global void *x,
                  TD xd, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long D = wd.shape[1], r = i / D, col = i % D;
    long row = (long)ld(x, xd.dtype, off(&xd, r));
    acc_t v = row >= 0 && row < wd.shape[0] ? ld(w, wd.dtype, row * wd.stride[0] + col * wd.stride[1]) : NAN;
    st(o, od.dtype, off(&od, i), v);
}
