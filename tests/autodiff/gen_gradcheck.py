#!/usr/bin/env python3
"""Generates the gradient-check tests tests/autodiff/gc_*.shd.

Each generated file holds a few functions `fn f_CASE(...) -> f64` and a main
that, for every case, computes grad (or value_and_grad) with respect to the
listed parameters and central finite differences of the same function, one
element at a time:

    fd = fd + (f(.., x + h*e_k, ..) - f(.., x - h*e_k, ..)) / (2h) * e_k

It saves both (reduced to replicated arrays), and the file's REF lines check
ref_CASE_gI = CASE_fdI against the all-ones build; its RUN line runs the
program on meshes of 1, 2, 4 and 8 ranks, whose saved gradients must equal
the all-ones build's. TYPE lines check the cotangent types (typing-rules 4.1).

Run `python3 tests/autodiff/gen_gradcheck.py` after editing; commit the
outputs. `--check` fails when a generated file is out of date.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
H = "0.00001"          # the finite-difference step (f64)
TOL = "1e-6 1e-8"      # FD against grad, and every mesh against the 1-device build

MESH1 = ("mesh {X: 8}", "X=1 | X=2 | X=4 | X=8")
MESH2 = ("mesh {X: 2, Y: 4}", "X=1,Y=1 | X=2,Y=1 | X=1,Y=2 | X=2,Y=2 | X=2,Y=4")


def parse_type(t):
    """f64[8@X, 3]<R:X> -> (dtype, [8, 3], 'f64[8, 3]' plain, has U/R)."""
    m = re.match(r"\s*(\w+)\s*(?:\[(.*?)\])?\s*(.*)$", t)
    dt, dims, annots = m.group(1), m.group(2), m.group(3)
    shape = []
    if dims and dims.strip():
        for d in re.split(r",(?![^(]*\))", dims):
            shape.append(int(d.split("@")[0].strip()))
    plain = "%s[%s]" % (dt, ", ".join(str(s) for s in shape)) if shape else dt
    return dt, shape, plain, annots.strip()


def ct_type(t):
    """The cotangent type of 4.1: U and R swapped (in the source spelling)."""
    return t.replace("<U:", "<@@:").replace("<R:", "<U:").replace("<@@:", "<R:")


def canon(t):
    """Canonical printing (language.md 2): no spaces."""
    return t.replace(" ", "")


class Case:
    """One differentiated function. params: (name, type, initial value)
    triples; body: f's statements; wrt: a position or a tuple (grad's wrt);
    value: use value_and_grad (and check the value too); ct_types: the
    expected cotangent types (default: 4.1's mapping of the parameter types);
    mesh_dep: f's value depends on the mesh (axis_index, ppermute of blocks),
    so instead of the gradients the program saves their relative distance
    from the finite differences, which must be ~0 on every mesh."""

    def __init__(self, name, params, body, wrt=0, result="f64", helpers="", value=False, note="",
                 ct_types=None, mesh_dep=False):
        self.name, self.params, self.body, self.wrt = name, params, body, wrt
        self.result, self.helpers, self.value, self.note = result, helpers, value, note
        self.ct_types, self.mesh_dep = ct_types, mesh_dep

    def wrt_list(self):
        if self.wrt is None:        # grad(f) without wrt: position 0
            return [0]
        return list(self.wrt) if isinstance(self.wrt, tuple) else [self.wrt]

    def fn_text(self):
        ps = ", ".join("%s: %s" % (p[0], p[1]) for p in self.params)
        out = []
        if self.note:
            out += ["// " + l for l in self.note.split("\n")]
        out.append("fn f_%s(%s) -> %s {" % (self.name, ps, self.result))
        out += ["    " + l if l else "" for l in self.body.strip().split("\n")]
        out.append("}")
        return (self.helpers.strip() + "\n\n" if self.helpers.strip() else "") + "\n".join(out)

    def call(self, args):
        c = "f_%s(%s)" % (self.name, ", ".join(args))
        rdt, _, rplain, rann = parse_type(self.result)
        return "reshard(%s, %s)" % (c, rdt) if rann else c

    def main_text(self, h):
        n = self.name
        out = ["    // ---- %s" % n]
        args = []
        for i, p in enumerate(self.params):
            v = "%s_%s" % (n, p[0])
            out.append("    let %s: %s = %s" % (v, p[1], p[2]))
            args.append(v)
        wl = self.wrt_list()
        gnames = ["%s_g%d" % (n, k) for k in wl]
        kind = "value_and_grad" if self.value else "grad"
        wrt = "(%s)" % ", ".join(str(k) for k in wl) if isinstance(self.wrt, tuple) else str(self.wrt)
        lhs = ([n + "_v"] if self.value else []) + gnames
        call = "%s(f_%s, wrt=%s)(%s)" % (kind, n, wrt, ", ".join(args))
        if self.wrt is None:
            call = "%s(f_%s)(%s)" % (kind, n, ", ".join(args))
        if len(lhs) == 1:
            out.append("    let %s = %s" % (lhs[0], call))
        else:
            out.append("    let (%s) = %s" % (", ".join(lhs), call))
        if self.value:
            rdt, _, _, rann = parse_type(self.result)
            v = "reshard(%s_v, %s)" % (n, rdt) if rann else n + "_v"
            out.append('    save("%s_v.npy", %s)' % (n, v))
            out.append('    save("%s_fv.npy", %s)' % (n, self.call(args)))
        for k, g in zip(wl, gnames):
            p = self.params[k]
            dt, shape, plain, ann = parse_type(p[1])
            size = 1
            for sz in shape:
                size *= sz
            fd = "%s_fd%d" % (n, k)
            gp = "reshard(%s, %s)" % (g, plain)
            if not self.mesh_dep:
                out.append('    save("%s.npy", %s)' % (g, gp))
            out.append("    var %s: %s = zeros()" % (fd, plain))
            out.append("    for k in 0..%d {" % size)
            if shape:
                e = "reshape(cast(iota(%s[%d], axis=0) == cast(k, %s), %s), [%s])" % (
                    dt, size, dt, dt, ", ".join(str(sz) for sz in shape))
            else:
                e = "cast(k == 0, %s)" % dt
            out.append("        let e = %s" % e)
            out.append("        let es = reshard(e, %s)" % p[1])
            plus, minus = list(args), list(args)
            plus[k] = "%s + %s * es" % (args[k], h)
            minus[k] = "%s - %s * es" % (args[k], h)
            out.append("        %s = %s + (%s - %s) / %s * e" % (fd, fd, self.call(plus), self.call(minus),
                                                                  repr(2 * float(h))))
            out.append("    }")
            if self.mesh_dep:
                out.append('    save("%s_err%d.npy", max(abs(%s - %s)) / maximum(max(abs(%s)), 1.0))'
                           % (n, k, gp, fd, fd))
            else:
                out.append('    save("%s.npy", %s)' % (fd, fd))
        return "\n".join(out)

    def refs(self):
        if self.mesh_dep:
            r = ["// REF: ref_%s_err%d = np.zeros(())" % (self.name, k) for k in self.wrt_list()]
        else:
            r = ["// REF: ref_%s_g%d = %s_fd%d" % (self.name, k, self.name, k) for k in self.wrt_list()]
        if self.value:
            r.append("// REF: ref_%s_v = %s_fv" % (self.name, self.name))
        return r

    def types(self):
        r = []
        wl = self.wrt_list()
        for i, k in enumerate(wl):
            want = self.ct_types[i] if self.ct_types else ct_type(self.params[k][1])
            r.append("// TYPE: main.%s_g%d: %s" % (self.name, k, canon(want)))
        return r


def render(title, mesh, cases, extra_top="", tol=TOL, h=H, extra_bottom="", after_main=""):
    out = ["// GENERATED by tests/autodiff/gen_gradcheck.py; edit that, then run it.",
           "// " + title,
           "//",
           "// For each case: grad against central finite differences (h = %s)," % h,
           "// and the gradients on every mesh against the 1-device build.",
           mesh[0], ""]
    if extra_top:
        out += [extra_top.strip(), ""]
    for c in cases:
        out += [c.fn_text(), ""]
    out.append("fn main() {")
    out.append("\n\n".join(c.main_text(h) for c in cases))
    out.append("}")
    out.append("")
    if after_main:
        out += [after_main.strip(), ""]
    out.append("// RUN: " + mesh[1])
    out.append("// TOL: " + tol)
    for c in cases:
        out += c.refs()
    for c in cases:
        out += c.types()
    if extra_bottom:
        out.append(extra_bottom.strip())
    return "\n".join(out) + "\n"


def N(t, seed):
    return "normal(%s, seed=%d)" % (t, seed)


def POS(t, seed):
    """Values in [0.5, 1.5): for log, sqrt, division."""
    return "uniform(%s, seed=%d) + 0.5" % (t, seed)


FILES = {}

# ---- unary functions ------------------------------------------------------------------
T = "f64[8@X, 3]"
unary = []
for i, fn in enumerate(["exp", "sin", "cos", "tanh", "abs", "relu", "sigmoid"]):
    unary.append(Case(fn, [("x", T, N(T, 10 + i))], "return sum(%s(x) * x)" % fn))
unary.append(Case("log", [("x", T, POS(T, 20))], "return sum(log(x) * x)"))
unary.append(Case("sqrt", [("x", T, POS(T, 21))], "return sum(sqrt(x) * x)"))
unary.append(Case("neg", [("x", T, N(T, 22))], "return sum(-x * exp(-x))"))
# language v1 (the tanh-approximated gelu, as GPT-2's); floor and sign have
# zero derivatives almost everywhere (their cases keep x away from jumps)
for i, fn in enumerate(["erf", "gelu", "silu", "softplus", "expm1", "square"]):
    unary.append(Case(fn, [("x", T, N(T, 23 + i))], "return sum(%s(x) * x)" % fn))
unary.append(Case("rsqrt", [("x", T, POS(T, 29))], "return sum(rsqrt(x) * x)"))
unary.append(Case("log1p", [("x", T, POS(T, 60))], "return sum(log1p(x) * x)"))
unary.append(Case("floor_sign", [("x", T, "%s + 0.25" % N(T, 61))],
                  "return sum(floor(x * 0.0 + 2.5) * x + sign(x) * x * x)"))
FILES["gc_unary"] = ("Every unary function, on a sharded operand.", MESH1, unary)

# ---- binary arithmetic with broadcasting --------------------------------------------------
# x: a sharded matrix; y: rank-promoted (a row broadcast over the rows); z: a
# size-1 dim stretched; s: a scalar.
X83, Y3, Z81 = "f64[8@X, 3]", "f64[3]", "f64[8@X, 1]"
BP = [("x", X83, N(X83, 30)), ("y", Y3, N(Y3, 31)), ("z", Z81, N(Z81, 32)), ("s", "f64", "1.5")]
BPP = [("x", X83, POS(X83, 33)), ("y", Y3, POS(Y3, 34)), ("z", Z81, POS(Z81, 35)), ("s", "f64", "1.5")]
binary = [
    Case("add", BP, "let a = x + y + z + s\nreturn sum(a * a)", wrt=(0, 1, 2, 3)),
    Case("sub", BP, "let a = x - y - z - s\nlet b = s - z - y - x\nreturn sum(a * a + b * x)", wrt=(0, 1, 2, 3)),
    Case("mul", BP, "return sum(x * y * z * s * x)", wrt=(0, 1, 2, 3)),
    Case("div", BPP, "return sum(x / y / z / s + s / x + y / (z * x))", wrt=(0, 1, 2, 3)),
    Case("lit", [("x", X83, N(X83, 36))], "return sum(2.0 * x - x / 4.0 + 1.0 - 3.0 / (x * x + 1.0))"),
    Case("bcast_both", [("a", Z81, N(Z81, 37)), ("b", Y3, N(Y3, 38))], "let p = a * b\nreturn sum(p * p + a - b)",
         wrt=(0, 1)),
    # ** and % of v1: x ** y with both differentiated, literal exponents, and
    # the remainder (d/dx x % y = 1, d/dy = -floor(x / y)) away from its jumps
    Case("pow", BPP, "return sum(x ** y + z ** 2 + x ** 0.5 * s ** x)", wrt=(0, 1, 2, 3)),
    Case("mod", [("x", X83, "%s * 0.3 + 5.1" % POS(X83, 39)), ("y", Y3, "%s * 0.2 + 2.0" % POS(Y3, 47))],
         "return sum((x % y) * x + x % 1.75)", wrt=(0, 1)),
]
FILES["gc_binary"] = ("+ - * / ** % with NumPy broadcasting: rank promotion, size-1 dims, scalars, literals.",
                      MESH1, binary)

# ---- maximum, minimum, where --------------------------------------------------------------
# Ties: a = row/2 - 1 and b = col/2 meet at (2,0), (3,1), (4,2); central
# differences there give 1/2 to each side, which is JAX's even split.
TIE_A = "iota(f64[8@X, 3], axis=0) * 0.5 - 1.0"
TIE_B = "iota(f64[8@X, 3], axis=1) * 0.5"
select = [
    Case("maximum", [("a", X83, N(X83, 40)), ("b", Y3, N(Y3, 41))], "return sum(maximum(a, b) * a)", wrt=(0, 1)),
    Case("minimum", [("a", X83, N(X83, 42)), ("b", Z81, N(Z81, 43))], "return sum(minimum(a, b) * a)", wrt=(0, 1)),
    Case("max_scalar", [("a", X83, N(X83, 44)), ("s", "f64", "0.25")],
         "return sum(maximum(a, s) * a + minimum(0.5, a))", wrt=(0, 1)),
    Case("maximum_ties", [("a", X83, TIE_A), ("b", X83, TIE_B)], "return sum(maximum(a, b) * (iota(f64[8@X, 3], axis=0) + 1.0))",
         wrt=(0, 1)),
    Case("minimum_ties", [("a", X83, TIE_A), ("b", X83, TIE_B)], "return sum(minimum(a, b) * (iota(f64[8@X, 3], axis=1) + 2.0))",
         wrt=(0, 1)),
    Case("where", [("a", X83, N(X83, 45)), ("b", Y3, N(Y3, 46)), ("s", "f64", "0.75")],
         "let c = a > 0.0\nreturn sum(where(c, a * a, b * a) + where(a < b, s, a) * s)", wrt=(0, 1, 2)),
]
FILES["gc_select"] = ("maximum, minimum (ties split evenly, as JAX) and where, with broadcasting.", MESH1, select)

# ---- contractions ---------------------------------------------------------------------------
W45, B284, B243 = "f64[4, 5]", "f64[2, 8@X, 4]", "f64[2, 4, 3]"
X84 = "f64[8@X, 4]"
dots = [
    Case("matmul", [("x", X84, N(X84, 50)), ("w", W45, N(W45, 51))], "let y = x @ w\nreturn sum(y * y)",
         wrt=(0, 1)),
    Case("batched", [("a", B284, N(B284, 52)), ("b", B243, N(B243, 53))], "let y = a @ b\nreturn sum(y * y)",
         wrt=(0, 1)),
    # size-1 batch dims broadcast, as NumPy's matmul
    Case("batch_bcast", [("a", "f64[1, 8@X, 4]", N("f64[1, 8@X, 4]", 68)), ("b", B243, N(B243, 69))],
         "let y = a @ b\nreturn sum(y * sin(y))", wrt=(0, 1)),
    Case("batch_bcast2", [("a", "f64[2, 1, 8@X, 4]", N("f64[2, 1, 8@X, 4]", 85)),
                          ("b", "f64[1, 3, 4, 2]", N("f64[1, 3, 4, 2]", 86))],
         "let y = a @ b\nreturn sum(y * y * y)", wrt=(0, 1)),
    Case("vec_mat", [("v", "f64[4]", N("f64[4]", 54)), ("w", W45, N(W45, 55))], "let y = v @ w\nreturn sum(y * y)",
         wrt=(0, 1)),
    Case("mat_vec", [("x", X84, N(X84, 56)), ("v", "f64[4]", N("f64[4]", 57))],
         "let y = x @ v\nreturn sum(y * y)", wrt=(0, 1)),
    Case("vec_vec", [("u", "f64[8@X]", N("f64[8@X]", 58)), ("v", "f64[8@X]", N("f64[8@X]", 59))],
         "let d = u @ v as f64\nreturn d * d", wrt=(0, 1)),
    # contracting dims sharded on both sides: each annotation of 1.4
    Case("contract_ar", [("a", "f64[3, 8@X]", N("f64[3, 8@X]", 60)), ("b", "f64[8@X, 5]", N("f64[8@X, 5]", 61))],
         "let y: f64[3, 5] = a @ b\nreturn sum(y * y)", wrt=(0, 1)),
    Case("contract_rs", [("a", "f64[8, 8@X]", N("f64[8, 8@X]", 62)), ("b", "f64[8@X, 5]", N("f64[8@X, 5]", 63))],
         "let y: f64[8@X, 5] = a @ b\nreturn sum(y * y)", wrt=(0, 1)),
    Case("contract_u", [("a", "f64[3, 8@X]", N("f64[3, 8@X]", 64)), ("b", "f64[8@X, 5]", N("f64[8@X, 5]", 65))],
         "let y = a @ b as f64[3, 5]<U:X>\nlet r = reshard(y, f64[3, 5])\nreturn sum(r * r)", wrt=(0, 1)),
    # contracting dim sharded on one side only (the FSDP gather)
    Case("contract_one", [("x", "f64[3, 8]", N("f64[3, 8]", 66)), ("w", "f64[8@X, 5]", N("f64[8@X, 5]", 67))],
         "let y = x @ w\nreturn sum(y * y)", wrt=(0, 1)),
]
FILES["gc_matmul"] = ("@: 2-D, batched, 1-D operands; contracting dims sharded on one or both sides.", MESH1, dots)

E = "f64[8@X, 4, 3]"
einsums = [
    Case("es_transpose", [("x", X84, N(X84, 70))], 'let y = einsum("ij->ji", x)\nreturn sum(y * sin(y))'),
    Case("es_sumout", [("x", E, N(E, 71))], 'let y = einsum("ijk->ik", x)\nreturn sum(y * y)'),
    Case("es_all", [("x", X84, N(X84, 72))], 'let y = einsum("ij->", x)\nreturn y * y'),
    Case("es_bcf", [("a", "f64[8@X, 4, 3]", N("f64[8@X, 4, 3]", 73)), ("b", "f64[8@X, 3, 5]", N("f64[8@X, 3, 5]", 74))],
         'let y = einsum("bik,bkj->bij", a, b)\nreturn sum(y * y)', wrt=(0, 1)),
    Case("es_permuted", [("a", "f64[4, 8@X, 3]", N("f64[4, 8@X, 3]", 75)), ("b", "f64[5, 3]", N("f64[5, 3]", 76))],
         'let y = einsum("ibk,jk->jbi", a, b)\nreturn sum(y * cos(y))', wrt=(0, 1)),
    Case("es_outer", [("u", "f64[8@X]", N("f64[8@X]", 77)), ("v", "f64[5]", N("f64[5]", 78))],
         'let y = einsum("i,j->ij", u, v)\nreturn sum(y * y)', wrt=(0, 1)),
    Case("es_summed", [("a", "f64[8@X, 4]", N("f64[8@X, 4]", 79)), ("b", "f64[4, 5]", N("f64[4, 5]", 80))],
         'let y = einsum("ij,jk->k", a, b)\nreturn sum(y * y)', wrt=(0, 1)),
    Case("es_dot_all", [("a", X84, N(X84, 81)), ("b", X84, N(X84, 82))],
         'let y = einsum("ij,ij->", a, b) as f64\nreturn y * y', wrt=(0, 1)),
    Case("es_contract_u", [("a", "f64[3, 8@X]", N("f64[3, 8@X]", 83)), ("b", "f64[8@X, 5]", N("f64[8@X, 5]", 84))],
         'let y = einsum("ij,jk->ik", a, b) as f64[3, 5]<U:X>\nlet r = reshard(y, f64[3, 5])\nreturn sum(r * r)',
         wrt=(0, 1)),
]
FILES["gc_einsum"] = ("einsum: one and two operands, batch, contracted, free and summed-out labels.", MESH1,
                      einsums)

# ---- reductions -------------------------------------------------------------------------------
R3 = "f64[8@X, 4@Y, 6]"
reductions = [
    Case("sum_one", [("x", R3, N(R3, 90))], "let s = sum(x, axis=1)\nreturn sum(s * s)"),
    Case("sum_two", [("x", R3, N(R3, 91))], "let s = sum(x, axis=(0, 2))\nreturn sum(s * s * s)"),
    Case("sum_all", [("x", R3, N(R3, 92))], "let s = sum(x)\nreturn s * s"),
    Case("mean_one", [("x", R3, N(R3, 93))], "let s = mean(x, axis=0)\nreturn sum(s * s)"),
    Case("mean_two", [("x", R3, N(R3, 94))], "let s = mean(x, axis=(1, 2))\nreturn sum(s * s)"),
    Case("mean_all", [("x", R3, N(R3, 95))], "let s = mean(x * x)\nreturn s * s"),
    Case("max_one", [("x", R3, N(R3, 96))], "let s = max(x, axis=1)\nreturn sum(s * s)"),
    Case("max_two", [("x", R3, N(R3, 97))], "let s = max(x, axis=(0, 1))\nreturn sum(s * s)"),
    Case("max_all", [("x", R3, N(R3, 98))], "return max(x * x)"),
    Case("min_one", [("x", R3, N(R3, 99))], "let s = min(x, axis=2)\nreturn sum(s * s)"),
    Case("min_all", [("x", R3, N(R3, 100))], "return min(sin(x))"),
    # annotated results (1.5): unreduced over the reduced dims' axes, or sharded
    Case("sum_to_u", [("x", R3, N(R3, 101))],
         "let s = sum(x, axis=0) as f64[4@Y, 6]<U:X>\nlet r = reshard(s, f64[4@Y, 6])\nreturn sum(r * r)"),
    Case("sum_to_sharded", [("x", R3, N(R3, 102))],
         "let s: f64[4@Y, 6@X] = sum(x, axis=0)\nreturn sum(s * s)"),
    Case("sum_all_u", [("x", R3, N(R3, 103))], "return sum(x * x) as f64<U:X,Y>", result="f64<U:X,Y>"),
    Case("mean_u", [("x", R3, N(R3, 104))], "let s = mean(x, axis=(0, 1)) as f64[6]<U:X,Y>\nlet r = reshard(s, f64[6])\nreturn sum(r * r)"),
]
FILES["gc_reduce"] = ("sum, mean, max, min over some and all dims of a 2-D-sharded array; annotated results.",
                      MESH2, reductions)

# ---- softmax, log_softmax, logsumexp, keepdims, cumsum, argmax (the v1 reductions) -----------------
# Weights make the sums non-trivial (sum(softmax(x)) is constant); the
# reduced operands' gradients are pending sums (<U:X>) all-reduced once.
SM1, SMS, SMR = "f64[8@X, 3]", "f64[3, 8@X]", "f64[3, 4]<R:X>"
softmax1 = [
    Case("softmax_row", [("x", SM1, N(SM1, 110))], "return sum(softmax(x, axis=1) * cos(x))"),
    Case("softmax_sharded", [("x", SMS, N(SMS, 111))], "return sum(softmax(x, axis=1) * cos(x))"),
    Case("softmax_dim0", [("x", SM1, N(SM1, 112))], "return sum(softmax(x, axis=0) * sin(x))"),
    Case("log_softmax_row", [("x", SM1, N(SM1, 113))], "return sum(log_softmax(x) * cos(x))"),
    Case("log_softmax_sharded", [("x", SMS, N(SMS, 114))], "return sum(log_softmax(x, axis=-1) * cos(x))"),
    Case("logsumexp_row", [("x", SM1, N(SM1, 115))], "let l = logsumexp(x, axis=1)\nreturn sum(l * l)"),
    Case("logsumexp_sharded", [("x", SMS, N(SMS, 116))], "let l = logsumexp(x, axis=1)\nreturn sum(l * sin(l))"),
    Case("logsumexp_keep", [("x", SM1, N(SM1, 117))],
         "let l = logsumexp(x, axis=0, keepdims=true)\nreturn sum((x - l) * cos(x))"),
    Case("softmax_reduced", [("x", SMR, N(SMR, 118)), ("z", "f64[8@X, 3]", N("f64[8@X, 3]", 119))],
         "let p = softmax(x, axis=1)\nlet y = z @ p\nreturn sum(y * y)", wrt=(0, 1)),
    Case("lse_reduced", [("x", SMR, N(SMR, 120)), ("z", "f64[8@X, 3]", N("f64[8@X, 3]", 121))],
         "let l = logsumexp(x, axis=0, keepdims=true)\nlet y = z @ (x - l)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("layer_norm", [("x", SM1, N(SM1, 122)), ("w", "f64[3]", N("f64[3]", 123))],
         "let m = mean(x, axis=-1, keepdims=true)\nlet d = x - m\nlet v = sum(d * d, axis=-1, keepdims=true) / 3.0\n"
         "let y = d / sqrt(v + 0.00001) * w\nreturn sum(y * cos(y))", wrt=(0, 1)),
    Case("max_keep", [("x", SMS, N(SMS, 124))], "let m = max(x, axis=1, keepdims=true)\nreturn sum(exp(x - m) * x)"),
    Case("cumsum_rows", [("x", SM1, N(SM1, 125))], "let c = cumsum(x, axis=1)\nreturn sum(c * c * c)"),
    Case("cumsum_dim0", [("x", SMS, N(SMS, 126))], "let c = cumsum(x, axis=0)\nreturn sum(c * sin(c))"),
    Case("cumsum_reduced", [("x", SMR, N(SMR, 127)), ("z", "f64[8@X, 3]", N("f64[8@X, 3]", 128))],
         "let y = z @ cumsum(x, axis=1)\nreturn sum(y * y)", wrt=(0, 1)),
    # an index has no cotangent: the gradient is that of the rest
    Case("argmax_zero", [("x", SMS, N(SMS, 129))],
         "let i = sum(argmax(x, axis=1)) + sum(argmin(x, axis=0))\nreturn sum(x * x) + cast(i, f64)"),
]
# The gradients' communication: along the X-sharded dim the forward all-reduces
# the 3 row maxima and sums, the backward one array of row sums (softmax,
# log_softmax; logsumexp's: the sum of exp(x - y) it divides by, which takes
# out the rounding of y); 3 f64 rows on 8 ranks: 2*7*24/8 = 42.
ROWS = r"all_reduce\.(max|sum) +over \(X\) +42 bytes/rank +f64\[3\](<U:X>)? -> f64\[3\]$"
ANY1 = "all_reduce|all_gather|reduce_scatter|all_to_all|ppermute"
SM_EXPLAIN = [
    ("softmax_row", [("0", ANY1)]),
    ("softmax_sharded", [("3", ROWS), ("3", ANY1)]),
    ("log_softmax_sharded", [("3", ROWS), ("3", ANY1)]),
    ("logsumexp_row", [("0", ANY1)]),
    ("logsumexp_sharded", [("3", ROWS), ("3", ANY1)]),
    ("cumsum_rows", [("0", ANY1)]),
]
SM_BOTTOM = "\n".join("// EXPLAIN: ^fn grad\\(f_%s[,)]\n" % f + "\n".join("// EXPLAIN-COUNT: %s %s" % c for c in cs)
                       for f, cs in SM_EXPLAIN)
FILES["gc_softmax"] = dict(title="softmax, log_softmax, logsumexp (keepdims), mean/sum/max with keepdims, cumsum, "
                                 "argmax along sharded and unsharded dims, reduced operands.",
                           mesh=MESH1, cases=softmax1, extra_bottom=SM_BOTTOM)

SM2, SM2B = "f64[4@Y, 8@X]", "f64[8@(X, Y), 3]"
softmax2 = [
    Case("softmax_2d", [("x", SM2, N(SM2, 130))], "return sum(softmax(x, axis=1) * cos(x))"),
    Case("softmax_2d_dim0", [("x", SM2, N(SM2, 131))], "return sum(softmax(x, axis=0) * sin(x))"),
    Case("softmax_two_axes", [("x", SM2B, N(SM2B, 132))], "return sum(softmax(x, axis=0) * cos(x))"),
    Case("log_softmax_two_axes", [("x", SM2B, N(SM2B, 133))], "return sum(log_softmax(x, axis=0) * cos(x))"),
    Case("logsumexp_two_axes", [("x", SM2B, N(SM2B, 134))], "let l = logsumexp(x, axis=0)\nreturn sum(l * l * l)"),
    Case("logsumexp_2d", [("x", SM2, N(SM2, 135))],
         "let l = logsumexp(x, axis=1, keepdims=true)\nreturn sum((x - l) * (x - l))"),
    Case("layer_norm_2d", [("x", SM2, N(SM2, 136))],
         "let m = mean(x, axis=1, keepdims=true)\nlet d = x - m\nlet v = mean(d * d, axis=1, keepdims=true)\n"
         "return sum(d / sqrt(v + 0.00001) * cos(x))"),
    Case("cumsum_2d", [("x", SM2, N(SM2, 137))], "let c = cumsum(reshard(x, f64[4, 8@X]), axis=0)\nreturn sum(c * c * c)"),
]
FILES["gc_softmax_2d"] = ("softmax, log_softmax, logsumexp, keepdims and cumsum on a 2-D mesh, dims sharded over "
                          "one and two axes.", MESH2, softmax2)

# ---- fused attention ----------------------------------------------------------------------------
AQ, AK = "f64[2@X, 3, 4@Y, 2]", "f64[2@X, 5, 4@Y, 2]"
GQ, GK = "f64[2@X, 5, 4@Y, 2]", "f64[2@X, 4, 2, 2]"
SQ, SK = "f64[2@X, 3, 8@Y, 2]", "f64[2@X, 4, 4@Y, 2]"
RX, RZ = "f64[2, 3, 2, 2]<R:Y>", "f64[2, 8@Y]"
attention = [
    Case("attention", [("q", AQ, N(AQ, 140)), ("k", AK, N(AK, 141)), ("v", AK, N(AK, 142))],
         "let o = dot_product_attention(q, k, v)\nreturn sum(o * cos(o))", wrt=(0, 1, 2)),
    Case("attention_gqa_causal", [("q", GQ, N(GQ, 143)), ("k", GK, N(GK, 144)), ("v", GK, N(GK, 145))],
         "let o = dot_product_attention(q, k, v, causal=true, scale=0.7)\nreturn sum(o * sin(o))", wrt=(0, 1, 2),
         note="Key/value heads replicated while the query heads are split: dk, dv are partial sums over Y."),
    Case("attention_gqa_split", [("q", SQ, N(SQ, 146)), ("k", SK, N(SK, 147)), ("v", SK, N(SK, 148))],
         "let o = dot_product_attention(q, k, v, causal=true)\nreturn sum(o * cos(o))", wrt=(0, 1, 2)),
    Case("attention_reduced", [("x", RX, "reshard(%s, %s)" % (N("f64[2, 3, 2, 2]", 149), RX)), ("z", RZ, N(RZ, 150))],
         "let o = dot_product_attention(x, x, x, causal=true)\nlet y = einsum(\"btnh,bc->ctnh\", o, z)\n"
         "return sum(y * y)",
         note="A reduced operand: the cotangent stays a pending sum (no all-reduce)."),
]
FILES["gc_attention"] = dict(
    title="dot_product_attention: plain, causal with a scale, grouped-query with the key/value heads replicated or "
          "split like the query heads, a reduced operand.", mesh=MESH2, cases=attention,
    extra_bottom="// The backward communicates only where dk, dv are partial sums (replicated key heads).\n"
                 "// MESH: X=2,Y=4\n"
                 "// EXPLAIN: ^fn grad\\(f_attention[,)]\n// EXPLAIN-COUNT: 0 all_\n"
                 "// EXPLAIN: ^fn grad\\(f_attention_gqa_causal[,)]\n"
                 "// EXPLAIN-COUNT: 2 all_reduce\\.sum +over \\(Y\\) .* f64\\[1,4,2,2\\]<U:Y> -> f64\\[1,4,2,2\\]\n"
                 "// EXPLAIN: ^fn grad\\(f_attention_gqa_split[,)]\n// EXPLAIN-COUNT: 0 all_\n"
                 "// EXPLAIN: ^fn grad\\(f_attention_reduced[,)]\n// EXPLAIN-COUNT: 0 all_")

# ---- shape and representation changes ----------------------------------------------------------
S2 = "f64[8@X, 4@Y]"
shapes = [
    Case("transpose2", [("x", S2, N(S2, 110))], "let y = transpose(x)\nreturn sum(y * sin(y))"),
    Case("transpose3", [("x", R3, N(R3, 111))],
         "let y = transpose(x, perm=[2, 0, 1])\nreturn sum(y * iota(f64[6, 8@X, 4@Y], axis=0) + y * y)"),
    Case("reshape_merge", [("x", "f64[8@X, 4, 3]", N("f64[8@X, 4, 3]", 112))],
         "let y = reshape(x, [8, 12])\nreturn sum(y * sin(y))"),
    Case("reshape_split", [("x", "f64[8@X, 12]", N("f64[8@X, 12]", 113))],
         "let y = reshape(x, [8, 3, 4])\nreturn sum(y * iota(f64[8@X, 3, 4], axis=1) + y * y)"),
    Case("reshape_flat", [("x", S2, N(S2, 114))], "let y = reshape(x, [32]) as f64[32]\nreturn sum(y * y * y)"),
    Case("reshape_nonlocal", [("x", S2, N(S2, 115))],
         "let y = reshape(x, [4, 8]) as f64[4@Y, 8@X]\nreturn sum(y * iota(f64[4@Y, 8@X], axis=1) + y * y)"),
    Case("reshape_unit", [("x", S2, N(S2, 116))],
         "let y = reshape(x, [8, 1, 4])\nreturn sum(y * cos(y))"),
    Case("reshard_moves", [("x", S2, N(S2, 118))],
         "let a = reshard(x, f64[8@Y, 4@X])\nlet b = reshard(a, f64[8, 4])\nlet c = reshard(b, f64[8@(X,Y), 4])\n"
         "return sum(a * a * a) + sum(b * sin(b)) + sum(c * c)"),
    Case("reshard_r", [("x", S2, N(S2, 119))],
         "let r = reshard(x, f64[8, 4]<R:X,Y>)\nlet s = reshard(r, f64[8@Y, 4@X])\nreturn sum(s * s * s)"),
    Case("reshard_u", [("x", S2, N(S2, 120))],
         "let u = reshard(x, f64[8, 4@Y]<U:X>)\nlet s = reshard(u, f64[8@X, 4@Y])\nreturn sum(s * s * s)"),
    Case("from_r", [("x", "f64[8, 4]<R:X,Y>", N("f64[8, 4]<R:X,Y>", 121))],
         "let s = reshard(x, f64[8@X, 4])\nreturn sum(s * s * s)"),
    Case("from_u", [("x", "f64[8, 4]<U:X>", N("f64[8, 4]<U:X>", 122))],
         "let s = reshard(x, f64[8, 4@Y])\nreturn sum(s * s * s)"),
    Case("full", [("v", "f64", "0.7"), ("x", S2, N(S2, 123))],
         "let a = full(f64[8@X, 4@Y], v)\nlet b: f64[4] = full(v * v)\nreturn sum(a * x * a) + sum(b * v)",
         wrt=(0, 1)),
]
FILES["gc_shape"] = ("transpose, reshape (local and not), reshard between shardings (to and from U and R), "
                     "full(T, v) w.r.t. v.", MESH2, shapes)

# ---- cast and f32 -----------------------------------------------------------------------------
# f32 rounding makes differences noisy, so h is large and the functions are
# quadratic (central differences are then exact up to rounding).
F2 = "f32[8@X, 4@Y]"
casts = [
    Case("cast_f32", [("x", S2, N(S2, 117))],
         "let y = cast(x, f32)\nreturn cast(sum(y * y), f64) + sum(x * cast(y * 3.0, f64))"),
    Case("cast_f64", [("x", F2, N(F2, 118))],
         "let y = cast(x, f64) * 2.0\nreturn cast(sum(y * y), f32) - sum(x)", result="f32"),
    Case("f32_params", [("x", F2, N(F2, 119)), ("w", "f32[4, 5]", N("f32[4, 5]", 120))],
         "let y = reshard(x, f32[8@X, 4]) @ w\nreturn sum(y * y)", result="f32", wrt=(0, 1)),
]
FILES["gc_cast"] = dict(title="cast between f32 and f64, and gradients of f32 functions (f32 tolerance).",
                        mesh=MESH2, cases=casts, h="0.01", tol="2e-3 2e-3")

# ---- reduced weights, unreduced gradients, accumulation -------------------------------------------
XB = "f64[16@X, 4]"
MB = "f64[4, 16@X, 4]"     # 4 micro-batches
reduced = [
    # a replicated weight made <R:X>: its cotangent is <U:X>, the reshard's transpose all-reduces
    Case("weight_r", [("w", W45, N(W45, 130)), ("x", XB, N(XB, 131))],
         "let wr = reshard(w, f64[4, 5]<R:X>)\nlet y = x @ wr\nreturn sum(y * y)"),
    # an <R:X> parameter: the gradient stays <U:X> (no communication in the gradient function)
    Case("param_r", [("w", "f64[4, 5]<R:X>", N("f64[4, 5]<R:X>", 132)), ("x", XB, N(XB, 133))],
         "let y = x @ w\nreturn sum(sin(y))"),
    # <R:X> meets a scalar and itself
    Case("r_elementwise", [("w", "f64[4]<R:X>", N("f64[4]<R:X>", 134)), ("x", XB, N(XB, 135))],
         "let v = w * 2.0 + 1.0\nlet y = x @ (v * w)\nreturn sum(y * y)"),
    # gradient accumulation over micro-batches: the loop carries the weight's
    # cotangent unreduced, one all-reduce after the loop (EXPLAIN below)
    Case("accum", [("w", W45, N(W45, 136)), ("x", MB, N(MB, 137))],
         "let wr = reshard(w, f64[4, 5]<R:X>)\nvar l = zeros(f64<U:X>)\nfor m in 0..4 {\n"
         "    let pick = cast(iota(f64[4], axis=0) == cast(m, f64), f64)\n"
         "    let xm = einsum(\"m,mbd->bd\", pick, x)\n    let y = xm @ wr\n"
         "    l = l + (sum(y * y) as f64<U:X>)\n}\nreturn l", result="f64<U:X>"),
    # the same without the reshard to <R:X>: every micro-batch's weight
    # gradient is all-reduced inside the reverse loop
    Case("accum_plain", [("w", W45, N(W45, 142)), ("x", MB, N(MB, 143))],
         "var l = zeros(f64<U:X>)\nfor m in 0..4 {\n"
         "    let pick = cast(iota(f64[4], axis=0) == cast(m, f64), f64)\n"
         "    let xm = einsum(\"m,mbd->bd\", pick, x)\n    let y = xm @ w\n"
         "    l = l + (sum(y * y) as f64<U:X>)\n}\nreturn l", result="f64<U:X>"),
    # a reduced carry: its cotangent, carried by the reverse loop, is unreduced
    Case("loop_r_carry", [("w", "f64[4]", N("f64[4]", 144)), ("x", XB, N(XB, 145))],
         "var v = reshard(w, f64[4]<R:X>)\nfor i in 0..3 {\n    v = sin(v) * 1.5 + v * v * 0.25\n}\n"
         "let y = x @ v\nreturn sum(y * y)"),
    # an if (on a replicated condition) that yields pending sums
    Case("if_u", [("w", W45, N(W45, 146)), ("x", XB, N(XB, 147)), ("s", "f64", "0.5")],
         "let y = x @ w\nvar l = sum(y * y) as f64<U:X>\nif s > 0.0 {\n    l = l + (sum(sin(y)) as f64<U:X>)\n}\n"
         "return l", result="f64<U:X>", wrt=(0, 1)),
    # unreduced to reduced (typing-rules 7.10): an all-reduce; its transpose is free
    Case("u_to_r", [("w", "f64[4, 5]<U:X>", N("f64[4, 5]<U:X>", 148)), ("x", XB, N(XB, 149))],
         "let r = reshard(w, f64[4, 5]<R:X>)\nlet y = x @ r\nreturn sum(y * y)"),
    # linear operations on pending sums, with broadcasting (typing-rules D2)
    Case("u_bcast", [("a", "f64[4, 3]<U:X>", N("f64[4, 3]<U:X>", 150)), ("b", "f64[3]<U:X>", N("f64[3]<U:X>", 151)),
                     ("c", "f64[4, 1]<U:X>", N("f64[4, 1]<U:X>", 152))],
         "let u = a + b - c * 2.0\nlet r = reshard(-u, f64[4, 3])\nreturn sum(r * r * r)", wrt=(0, 1, 2)),
    Case("r_bcast", [("a", "f64[4, 3]<R:X>", N("f64[4, 3]<R:X>", 153)), ("b", "f64[3]<R:X>", N("f64[3]<R:X>", 154)),
                     ("x", "f64[16@X, 4]", N("f64[16@X, 4]", 155))],
         "let v = a * b + b\nlet y = x @ v\nreturn sum(y * y)", wrt=(0, 1)),
    # max/min reductions and maximum of reduced values
    Case("r_max", [("w", "f64[4, 3]<R:X>", N("f64[4, 3]<R:X>", 156)), ("x", "f64[16@X, 3]", N("f64[16@X, 3]", 157))],
         "let v = max(w, axis=0) + min(w * w, axis=0) + maximum(w, 0.1 * w)\nlet y = x @ transpose(v)\n"
         "return sum(y * y)"),
    # where of reduced values, on a reduced and on a replicated condition
    Case("r_where", [("w", "f64[4, 3]<R:X>", N("f64[4, 3]<R:X>", 158)), ("x", "f64[16@X, 3]", N("f64[16@X, 3]", 159))],
         "let c = iota(f64[4, 3], axis=0) > 1.0\nlet v = where(w > 0.0, w, w * w) + where(c, w * 3.0, w)\n"
         "let y = x @ transpose(v)\nreturn sum(y * y)"),
    # an unreduced scalar result; and a reduced one
    Case("ret_u", [("w", W45, N(W45, 138)), ("x", XB, N(XB, 139))],
         "let y = x @ w\nreturn sum(y * y) as f64<U:X>", result="f64<U:X>"),
    Case("ret_r", [("w", W45, N(W45, 140)), ("x", XB, N(XB, 141))],
         "let y = x @ w\nreturn reshard(sum(y * y), f64<R:X>)", result="f64<R:X>"),
]
FILES["gc_unreduced"] = dict(
    title="Reduced weights get unreduced gradients; accumulation over micro-batches reduces once.",
    mesh=MESH1, cases=reduced,
    extra_bottom="// EXPLAIN: ^fn grad\\(f_weight_r[,)]\n// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[4,5\\]<U:X> -> f64\\[4,5\\]$\n"
                 "// EXPLAIN: ^fn grad\\(f_param_r[,)]\n// EXPLAIN-COUNT: 0 all_reduce\n"
                 "// EXPLAIN: ^fn grad\\(f_r_elementwise[,)]\n// EXPLAIN-COUNT: 0 all_reduce\n"
                 "// EXPLAIN: ^fn grad\\(f_accum[,)]\n// EXPLAIN-COUNT: 1 all_reduce\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[4,5\\]<U:X> -> f64\\[4,5\\]$\n"
                 "// EXPLAIN-NOT: all_gather|reduce_scatter|all_to_all|permute\n"
                 "// EXPLAIN: ^fn grad\\(f_accum_plain[,)]\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[4,5\\]<U:X> -> f64\\[4,5\\] +\\(in the loop at line\n"
                 "// EXPLAIN: ^fn grad\\(f_u_bcast[,)]\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\n"
                 "// EXPLAIN: ^fn grad\\(f_r_bcast[,)]\n"
                 "// EXPLAIN-COUNT: 0 all_reduce\n"
                 "// EXPLAIN: ^fn grad\\(f_r_max[,)]\n"
                 "// EXPLAIN-COUNT: 0 all_reduce\n"
                 "// EXPLAIN: ^fn grad\\(f_r_where[,)]\n"
                 "// EXPLAIN-COUNT: 0 all_reduce")

# ---- control flow and calls inside f ----------------------------------------------------------------
V8 = "f64[8@X, 4]"
control = [
    Case("loop_carry", [("x", V8, N(V8, 150)), ("w", "f64[4, 4]", N("f64[4, 4]", 151))],
         "var h = x\nfor i in 0..3 {\n    h = tanh(h @ w) + h * 0.5\n}\nreturn sum(h * h)", wrt=(0, 1)),
    Case("loop_two_carries", [("x", V8, N(V8, 152)), ("s", "f64", "0.3")],
         "var a = x\nvar b = x * s\nfor i in 0..3 {\n    let t = a * b\n    a = sin(a) + b * s\n    b = t\n}\n"
         "return sum(a + b * b)", wrt=(0, 1)),
    Case("loop_index", [("x", V8, N(V8, 153))],
         "var h = x\nfor i in 1..4 {\n    h = h * cast(i, f64) * 0.5 + sin(h)\n}\nreturn sum(h)"),
    Case("loop_nested", [("x", V8, N(V8, 154)), ("w", "f64[4, 4]", N("f64[4, 4]", 155))],
         "var h = x\nfor i in 0..2 {\n    var g = h\n    for j in 0..2 {\n        g = sin(g @ w) + g\n    }\n"
         "    h = h * g * 0.5\n}\nreturn sum(h)", wrt=(0, 1)),
    Case("loop_runtime", [("x", V8, N(V8, 156)), ("n", "i32", 'arg("trips", 3)')],
         "var h = x\nfor i in 0..n {\n    h = cos(h) * h\n}\nreturn sum(h * h)"),
    Case("loop_zero_trips", [("x", V8, N(V8, 157)), ("n", "i32", 'arg("none", 0)')],
         "var h = x\nfor i in 0..n {\n    h = cos(h) * h\n}\nreturn sum(h * sin(x))"),
    Case("loop_reduce", [("x", V8, N(V8, 158))],
         "var t = 0.0 as f64\nfor i in 0..3 {\n    t = t + sum(x * x) * t + 1.0\n}\nreturn t"),
    Case("if_true", [("x", V8, N(V8, 159)), ("s", "f64", "0.4")],
         "var y = x\nif s > 0.0 {\n    y = sin(x) * s\n} else {\n    y = x * x\n}\nreturn sum(y * x)", wrt=(0, 1)),
    Case("if_false", [("x", V8, N(V8, 160)), ("s", "f64", "-0.4")],
         "var y = x\nif s > 0.0 {\n    y = sin(x) * s\n} else {\n    y = x * x * s\n}\nreturn sum(y * x)",
         wrt=(0, 1)),
    Case("if_data", [("x", V8, N(V8, 161))],
         "var y = x * 2.0\nif sum(x) > 0.0 {\n    y = y * y\n}\nreturn sum(y)"),
    Case("if_in_loop", [("x", V8, N(V8, 162))],
         "var y = x\nfor i in 0..4 {\n    if i < 2 {\n        y = sin(y)\n    } else {\n        y = y * y\n    }\n}\n"
         "return sum(y)"),
    # x is both the initial carry and read by the body
    Case("loop_init_read", [("x", V8, N(V8, 170)), ("s", "f64", "0.7")],
         "var y = x\nfor i in 0..3 {\n    y = sin(y) * s + x\n}\nreturn sum(y * y)", wrt=(0, 1)),
    Case("loop_in_if", [("x", V8, N(V8, 165)), ("s", "f64", "0.7")],
         "var y = x\nif s > 0.5 {\n    for i in 0..3 {\n        y = sin(y) * s + x\n    }\n} else {\n    y = y * s\n}\n"
         "return sum(y * y)", wrt=(0, 1)),
    Case("int_carry", [("x", V8, N(V8, 166))],
         "var k = 1\nvar y = x\nfor i in 0..4 {\n    k = k * 2\n    y = y * cast(k, f64) * 0.1 + sin(y)\n}\n"
         "return sum(y)"),
    Case("inactive_carry", [("x", V8, N(V8, 167))],
         "var c = iota(f64[8@X, 4], axis=1)\nvar y = x\nfor i in 0..3 {\n    c = c * 0.5 + 1.0\n"
         "    y = tanh(y * c)\n}\nreturn sum(y * c)"),
    Case("two_loops", [("x", V8, N(V8, 168)), ("w", "f64[4, 4]", N("f64[4, 4]", 169))],
         "var y = x\nfor i in 0..2 {\n    y = tanh(y @ w)\n}\nvar z = y\nfor j in 0..2 {\n    z = z * y + sin(z @ w)\n}\n"
         "return sum(z)", wrt=(0, 1)),
    Case("if_nested", [("x", V8, N(V8, 171)), ("s", "f64", "0.3")],
         "var y = x * s\nif s > 0.0 {\n    if s < 0.5 {\n        y = y * x + s\n    } else {\n        y = sin(y)\n    }\n"
         "    y = y * y\n}\nreturn sum(y)", wrt=(0, 1)),
    Case("call_in_loop", [("x", V8, N(V8, 172)), ("w", "f64[4, 4]", N("f64[4, 4]", 173))],
         "var h = x\nfor i in 0..2 {\n    h = looped_layer(h, w) + h\n}\nreturn sum(h * h)", wrt=(0, 1),
         helpers="fn looped_layer(x: f64[8@X, 4], w: f64[4, 4]) -> f64[8@X, 4] {\n    var y = x\n"
                 "    for j in 0..2 {\n        y = tanh(y @ w) * x\n    }\n    return y\n}"),
    # nests whose inner tapes sit beside the outer loop's (constant trip
    # counts), with a branch and a loop inside the branch; and the forms
    # that keep the inner tapes per outer iteration (a run-time bound)
    Case("nest3_branch", [("x", V8, N(V8, 174)), ("w", "f64[4, 4]", N("f64[4, 4]", 175))],
         "var h = x\nfor i in 0..3 {\n    var g = h\n    if i != 1 {\n        for j in 0..2 {\n"
         "            for k in 0..2 {\n                g = sin(g @ w) + g * 0.5\n            }\n"
         "            g = tanh(g)\n        }\n    } else {\n        g = g @ w\n    }\n    h = h * g\n}\n"
         "return sum(h)", wrt=(0, 1)),
    Case("nest_zero_inner", [("x", V8, N(V8, 176)), ("w", "f64[4, 4]", N("f64[4, 4]", 177))],
         "var h = x\nfor i in 0..2 {\n    var g = h\n    for j in 0..0 {\n        g = sin(g @ w)\n    }\n"
         "    for j in 0..2 {\n        g = cos(g @ w) * g\n    }\n    h = h + g\n}\nreturn sum(h * h)", wrt=(0, 1)),
    Case("nest_runtime_outer", [("x", V8, N(V8, 178)), ("w", "f64[4, 4]", N("f64[4, 4]", 179)),
                                ("n", "i32", 'arg("trips", 3)')],
         "var h = x\nfor i in 0..n {\n    var g = h\n    for j in 0..2 {\n        g = sin(g @ w) + g\n    }\n"
         "    h = h * g * 0.5\n}\nreturn sum(h)", wrt=(0, 1)),
    Case("nest_runtime_inner", [("x", V8, N(V8, 180)), ("w", "f64[4, 4]", N("f64[4, 4]", 181)),
                                ("n", "i32", 'arg("inner-trips", 2)')],
         "var h = x\nfor i in 0..2 {\n    var g = h\n    for j in 0..n {\n        if j == 0 {\n"
         "            g = sin(g @ w) + g\n        }\n        g = tanh(g @ w)\n    }\n    h = h * g\n}\n"
         "return sum(h)", wrt=(0, 1)),
    Case("calls", [("x", V8, N(V8, 163)), ("w", "f64[4, 4]", N("f64[4, 4]", 164))],
         "let (a, b) = two(x, w)\nreturn sum(layer(a, w) * b)", wrt=(0, 1),
         helpers="fn layer(x: f64[8@X, 4], w: f64[4, 4]) -> f64[8@X, 4] {\n    return tanh(x @ w)\n}\n\n"
                 "fn two(x: f64[8@X, 4], w: f64[4, 4]) -> (f64[8@X, 4], f64[8@X, 4]) {\n"
                 "    let h = layer(x, w)\n    return (layer(h, w), h * x)\n}"),
]
FILES["gc_control"] = ("Loops (carries, nested, run-time trip counts, zero trips), if/else, calls.", MESH1, control)

# ---- manual functions: every collective and cast ---------------------------------------------------
# mesh {X: 8}; each manual function is called from the differentiated f,
# whose weights c make every output element matter differently.
# Global types must not depend on the mesh size (the same file runs at 1 to
# 8 ranks), so values of full local size are made by local reductions over
# a sharded dim, and reduced back (psum) or kept sharded before returning.
MAN = r"""
manual(X) fn m_pvary(x: f64[8, 3], w: f64[3, 8@X]) -> f64[8, 8@X] {
    return pcast(x, X, to=varying) @ w           // I -> V; transpose: psum over X
}

manual(X) fn m_pvary_r(x: f64[8, 3]<R:X>, c: f64[8@X, 8, 3]) -> f64[8@X, 8, 3] {
    return pcast(x, X, to=varying) * c           // R -> V; transpose: V -> U
}

manual(X) fn m_to_u(x: f64[8@X, 8, 3]) -> f64[8, 3]<U:X> {
    return pcast(sum(x, axis=0), X, to=unreduced)  // V -> U; transpose: R -> V
}

manual(X) fn m_to_r(x: f64[3]) -> f64[3]<R:X> {
    return pcast(x, X, to=reduced)               // I -> R; transpose: the unreduced psum
}

manual(X) fn m_psum(x: f64[8@X, 8, 3]) -> f64[8, 3] {
    return psum(sum(x * x, axis=0), X)           // V -> I; transpose: pvary
}

manual(X) fn m_psum_u(x: f64[8, 3]<U:X>) -> f64[8, 3] {
    return psum(x, X)                            // U -> I; transpose: pcast to reduced
}

manual(X) fn m_pmean(x: f64[8@X, 8, 3], y: f64[8, 3]) -> f64[8, 3] {
    // pmean of a varying value times the axis size, and of a cast invariant one
    let n = cast(psum(1, X), f64)
    return pmean(sum(x * x, axis=0), X) * n + pmean(sin(pcast(y, X, to=varying)), X)
}

manual(X) fn m_pmax(x: f64[8@X, 8, 3]) -> f64[8, 3] {
    return pmax(max(x, axis=0), X)
}

manual(X) fn m_pmin(x: f64[8@X, 8, 3]) -> f64[8, 3] {
    return pmin(min(x, axis=0), X)
}

manual(X) fn m_pmax_tie(x: f64[8, 3]) -> f64[8, 3] {
    return pmax(pcast(x, X, to=varying), X)      // every device ties: the cotangent is shared
}

manual(X) fn m_gather(x: f64[8@X, 3], c: f64[8@X, 8, 3]) -> f64[8@X, 8, 3] {
    return all_gather(x, X, dim=0) * c           // V -> V; transpose: psum_scatter
}

manual(X) fn m_gather_i(x: f64[64@X, 3]) -> f64[64, 3] {
    return all_gather(x, X, dim=0, to=invariant) // V -> I; transpose: take own block
}

manual(X) fn m_gather_r(x: f64[64@X, 3]) -> f64[64, 3]<R:X> {
    return all_gather(x, X, dim=0, to=reduced)   // V -> R; transpose: unreduced psum_scatter
}

manual(X) fn m_scatter(x: f64[8@X, 8, 3]) -> f64[8@X, 3] {
    return psum_scatter(sum(x, axis=0), X, dim=0)  // V -> V; transpose: all_gather
}

manual(X) fn m_scatter_u(x: f64[64, 3]<U:X>) -> f64[64@X, 3] {
    return psum_scatter(x, X, dim=0)             // U -> V; transpose: all_gather to reduced
}

manual(X) fn m_a2a(x: f64[8@X, 16]) -> f64[8, 16@X] {
    return all_to_all(x, X, split=1, concat=0)   // transpose: split and concat swapped
}

manual(X) fn m_permute(x: f64[16@X, 3]) -> f64[16@X, 3] {
    return ppermute(x, X, shift=3) * ppermute(x, X, shift=-1)   // depends on the mesh
}

manual(X) fn m_ring(x: f64[16@X, 3]) -> f64[16@X, 3] {
    // an all-reduce of the column sums of x*sin(x) around a ring: the same on every mesh
    let mine = sum(x * sin(x), axis=0)
    var acc = mine
    var buf = mine
    for i in 1..psum(1, X) {
        buf = ppermute(buf, X, shift=1)
        acc = acc + buf
    }
    return x * acc
}

manual(X) fn m_index(x: f64[16@X, 3]) -> f64[16@X, 3] {
    let i = cast(axis_index(X), f64)
    return x * x * (i + 1.0) - x * i
}

manual(X) fn m_branch(x: f64[16@X, 3]) -> f64[16@X, 3] {
    var y = x
    if axis_index(X) < 3 {                       // a varying condition, no collective under it
        y = sin(x) * x
    } else {
        y = x * 2.0
    }
    return y
}

manual(X) fn m_pair(x: f64[16@X, 3], w: f64[3, 3]) -> (f64[16@X, 3], f64[3]) {
    let h = tanh(x @ pcast(w, X, to=varying))
    return (h * x, psum(sum(h, axis=0), X))
}

manual(X) fn m_loop_r(x: f64[16@X, 3], w: f64[3, 3]) -> f64[16@X, 3] {
    // w made reduced once: each iteration's cast to varying transposes to a
    // free cast to unreduced, and the gradient is all-reduced once
    let wr = pcast(w, X, to=reduced)
    var h = x
    for i in 0..3 {
        h = tanh(h @ pcast(wr, X, to=varying)) + h
    }
    return h
}

manual(X) fn m_loop(x: f64[16@X, 3], w: f64[3, 3]) -> f64[16@X, 3] {
    var h = x
    for i in 0..2 {
        h = tanh(h @ pcast(w, X, to=varying)) + psum(sum(h, axis=0), X) * 0.1
    }
    return h
}
"""
C64 = "f64[64@X, 3]"
C883 = "f64[8@X, 8, 3]"
manual = [
    Case("pvary", [("x", "f64[8, 3]", N("f64[8, 3]", 170)), ("w", "f64[3, 8@X]", N("f64[3, 8@X]", 171))],
         "let y = m_pvary(x, w)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("pvary_r", [("x", "f64[8, 3]<R:X>", N("f64[8, 3]<R:X>", 172)), ("c", C883, N(C883, 173))],
         "let y = m_pvary_r(x, c)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("to_u", [("x", C883, N(C883, 174))], "let y = reshard(m_to_u(x), f64[8, 3])\nreturn sum(y * y)"),
    Case("to_r", [("x", "f64[3]", N("f64[3]", 175)), ("z", "f64[16@X, 3]", N("f64[16@X, 3]", 176))],
         "let y = z @ m_to_r(x)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("psum", [("x", C883, N(C883, 177))], "let y = m_psum(x)\nreturn sum(y * sin(y))"),
    Case("psum_u", [("x", C883, N(C883, 178))],
         "let s = sum(x, axis=0) as f64[8, 3]<U:X>\nlet y = m_psum_u(s)\nreturn sum(y * y)"),
    Case("pmean", [("x", C883, N(C883, 179)), ("y", "f64[8, 3]", N("f64[8, 3]", 197))],
         "let z = m_pmean(x, y)\nreturn sum(z * z)", wrt=(0, 1)),
    Case("pmax", [("x", C883, N(C883, 180))], "let y = m_pmax(x)\nreturn sum(y * y * iota(f64[8, 3], axis=0))"),
    Case("pmin", [("x", C883, N(C883, 181))], "let y = m_pmin(x)\nreturn sum(y * iota(f64[8, 3], axis=1) - y * y)"),
    Case("pmax_tie", [("x", "f64[8, 3]", N("f64[8, 3]", 196))], "let y = m_pmax_tie(x)\nreturn sum(y * y)"),
    Case("gather", [("x", "f64[8@X, 3]", N("f64[8@X, 3]", 182)), ("c", C883, N(C883, 183))],
         "let y = m_gather(x, c)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("gather_i", [("x", C64, N(C64, 184))], "let y = m_gather_i(x)\nreturn sum(y * y * sin(y))"),
    Case("gather_r", [("x", C64, N(C64, 185)), ("z", "f64[16@X, 64]", N("f64[16@X, 64]", 186))],
         "let y = z @ m_gather_r(x)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("scatter", [("x", C883, N(C883, 187))],
         "let y = m_scatter(x)\nreturn sum(y * y * iota(f64[8@X, 3], axis=0))"),
    Case("scatter_u", [("a", "f64[64, 8@X]", N("f64[64, 8@X]", 188)), ("b", "f64[8@X, 3]", N("f64[8@X, 3]", 189))],
         "let u = a @ b as f64[64, 3]<U:X>\nlet y = m_scatter_u(u)\nreturn sum(y * y)", wrt=(0, 1)),
    Case("a2a", [("x", "f64[8@X, 16]", N("f64[8@X, 16]", 190))],
         "let y = m_a2a(x)\nreturn sum(y * y * iota(f64[8, 16@X], axis=0))"),
    Case("permute", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 191))],
         "let y = m_permute(x)\nreturn sum(y * iota(f64[16@X, 3], axis=0))", mesh_dep=True),
    Case("ring", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 198))],
         "let y = m_ring(x)\nreturn sum(y * y)"),
    Case("axis_index", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 192))], "return sum(m_index(x))", mesh_dep=True),
    Case("branch", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 193))], "return sum(m_branch(x) * x)",
         mesh_dep=True),
    Case("manual_in_loop", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 199)), ("w", "f64[3, 3]", N("f64[3, 3]", 200))],
         "var h = x\nvar t = iota(f64[3], axis=0)\nfor i in 0..3 {\n    let (a, b) = m_pair(h, w)\n"
         "    h = a + h * 0.5\n    t = t * 0.5 + b\n}\nreturn sum(h) + sum(t * t)", wrt=(0, 1)),
    Case("manual_loop_r", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 201)), ("w", "f64[3, 3]", N("f64[3, 3]", 202))],
         "return sum(m_loop_r(x, w) * x)", wrt=(0, 1)),
    Case("manual_loop", [("x", "f64[16@X, 3]", N("f64[16@X, 3]", 194)), ("w", "f64[3, 3]", N("f64[3, 3]", 195))],
         "return sum(m_loop(x, w) * x)", wrt=(0, 1)),
]
# The communication column of typing-rules 4.3 (docs/autodiff.md section 4):
# each gradient function's collectives, forward and backward together.
ANY = "all_reduce|all_gather|reduce_scatter|all_to_all|ppermute"
MAN_EXPLAIN = [
    ("pvary", [("1", r"all_reduce\.sum +over \(X\) .* f64\[8,3\]<V:X> -> f64\[8,3\]$"), ("1", ANY)]),
    ("pvary_r", [("0", ANY)]),
    ("to_u", [("1", r"all_reduce\.sum .* f64\[8,3\]<U:X> -> f64\[8,3\]$"), ("1", ANY)]),
    ("to_r", [("1", r"all_reduce\.sum .* f64\[3\]<U:X> -> f64\[3\]$"), ("1", ANY)]),
    ("psum", [("1", r"all_reduce\.sum .*<V:X> -> "), ("1", ANY)]),
    ("psum_u", [("1", r"all_reduce\.sum .*<U:X> -> "), ("1", ANY)]),
    ("gather", [("1", "all_gather .*<V:X> -> .*<V:X>$"), ("1", r"reduce_scatter\.sum .*<V:X> -> .*<V:X>$"),
                         ("2", ANY)]),
    ("gather_i", [("1", "all_gather"), ("1", ANY)]),
    ("gather_r", [("1", r"all_gather .* -> f64\[64,3\]<R:X>$"),
                           ("1", r"reduce_scatter\.sum .* f64\[64,3\]<U:X> -> "), ("2", ANY)]),
    ("scatter", [("1", "reduce_scatter"), ("1", "all_gather"), ("2", ANY)]),
    ("scatter_u", [("1", r"reduce_scatter\.sum .*<U:X> -> "), ("1", "all_gather .* -> .*<R:X>$"), ("2", ANY)]),
    ("a2a", [("2", "all_to_all"), ("2", ANY)]),
    ("permute", [("4", "ppermute"), ("4", ANY)]),
    ("axis_index", [("0", ANY)]),
    ("branch", [("0", ANY)]),
    # the reduced weight's gradient: one all-reduce, after the reverse loop
    ("manual_loop_r", [("1", ANY), ("1", r"all_reduce\.sum .* f64\[3,3\]<U:X> -> f64\[3,3\]$")]),
    # the invariant weight's: one all-reduce per iteration
    ("manual_loop", [("1", r"all_reduce\.sum .* f64\[3,3\]<V:X> -> f64\[3,3\] +\(in the loop")]),
]
MAN_BOTTOM = "\n".join("// EXPLAIN: ^fn grad\\(f_%s[,)]\n" % f + "\n".join("// EXPLAIN-COUNT: %s %s" % c for c in cs)
                        for f, cs in MAN_EXPLAIN)
FILES["gc_manual"] = dict(title="Manual functions: every collective and cast of typing-rules 4.3, axis_index, "
                                "branches on a varying condition, loops.",
                          mesh=MESH1, cases=manual, extra_top=MAN, extra_bottom=MAN_BOTTOM)

# ---- grad / value_and_grad forms ---------------------------------------------------------------------
AP = [("a", "f64[8@X, 4]", N("f64[8@X, 4]", 200)), ("n", "i32", "2"), ("b", "f64[4]", N("f64[4]", 201)),
      ("c", "f64", "0.5")]
ABODY = "var y = a * b\nfor i in 0..n {\n    y = sin(y) * c\n}\nreturn sum(y * a) + c * c"
api = [
    Case("wrt_default", AP, ABODY, wrt=None),
    Case("vg_default", AP, ABODY, wrt=None, value=True),
    Case("wrt_single", AP, ABODY, wrt=2),
    Case("wrt_tuple_one", AP, ABODY, wrt=(3,)),
    Case("wrt_reversed", AP, ABODY, wrt=(3, 2, 0)),
    Case("wrt_mixed", AP, ABODY, wrt=(2, 0, 3)),
    Case("vg_single", AP, ABODY, wrt=0, value=True),
    Case("vg_tuple", AP, ABODY, wrt=(3, 0), value=True),
    # a parameter that does not reach the result: a zero gradient
    Case("unused", [("a", "f64[8@X, 4]", N("f64[8@X, 4]", 206)), ("b", "f64[4]", N("f64[4]", 207))],
         "return sum(a * a)", wrt=(1, 0)),
    Case("constant", [("a", "f64[8@X, 4]", N("f64[8@X, 4]", 208))], "let z = a * 0.0\nreturn 3.0 + sum(z) * 0.0"),
    Case("vg_u", [("w", "f64[4, 5]", N("f64[4, 5]", 202)), ("x", "f64[16@X, 4]", N("f64[16@X, 4]", 203))],
         "let y = x @ w\nreturn sum(y * y) as f64<U:X>", result="f64<U:X>", wrt=(1, 0), value=True),
    Case("vg_r", [("w", "f64[4, 5]", N("f64[4, 5]", 204)), ("x", "f64[16@X, 4]", N("f64[16@X, 4]", 205))],
         "let y = x @ w\nreturn reshard(sum(sin(y)), f64<R:X>)", result="f64<R:X>", wrt=(0, 1), value=True),
]
FILES["gc_api"] = dict(title="grad and value_and_grad: wrt=K, one-element and permuted tuples, unreduced and "
                             "reduced results, parameters that do not reach the result.", mesh=MESH1, cases=api)

# ---- partial-manual functions on a 2-D mesh -------------------------------------------------------------
PMAN = r"""
// manual over Y only: X stays explicit inside (f64[8@X,...] in the body)
manual(Y) fn column(x: f64[8@X, 4], w: f64[4, 8@Y]) -> f64[8@X, 8@Y] {
    return tanh(pcast(x, Y, to=varying) @ w)
}

manual(Y) fn row(h: f64[8@X, 8@Y], w: f64[8@Y, 4]) -> f64[8@X, 4] {
    return psum(h @ w, Y)
}

manual(Y) fn gather_y(x: f64[8@X, 8@Y]) -> f64[8@X, 8] {
    return all_gather(x, Y, dim=1, to=invariant) * 2.0
}

manual(Y) fn mixed(x: f64[8@X, 8@Y]) -> f64[8@X, 8@Y] {
    // an explicit-axis reduction inside a manual body: sum over the X-sharded dim
    let s = sum(x * x, axis=0)
    return x * s
}

manual(X, Y) fn both(x: f64[8@X, 8@Y]) -> f64 {
    return psum(sum(x * sin(x)), (X, Y))
}
"""
P84, P88 = "f64[8@X, 4]", "f64[8@X, 8@Y]"
partial = [
    Case("megatron", [("x", P84, N(P84, 210)), ("w1", "f64[4, 8@Y]", N("f64[4, 8@Y]", 211)),
                      ("w2", "f64[8@Y, 4]", N("f64[8@Y, 4]", 212))],
         "let d = row(column(x, w1), w2) - x\nreturn sum(d * d)", wrt=(0, 1, 2)),
    Case("gather_y", [("x", P88, N(P88, 213))], "let y = gather_y(x)\nreturn sum(y * sin(y))"),
    Case("mixed", [("x", P88, N(P88, 214))], "let y = mixed(x)\nreturn sum(y * cos(x))"),
    Case("both_axes", [("x", P88, N(P88, 215))], "let s = both(x)\nreturn s * s"),
]
FILES["gc_partial"] = dict(title="Partial-manual functions on a 2-D mesh (manual over Y, X explicit inside), and "
                                 "a function manual over both axes.", mesh=MESH2, cases=partial, extra_top=PMAN)

# ---- second derivatives: grad of a function that calls grad ---------------------------------------------
NEST = r"""
fn smooth(x: f64[8@X, 4], w: f64[4, 4]) -> f64 {
    let y = tanh(x @ w)
    return sum(y * sin(x)) + max(x * x)
}

fn dp_loss(w: f64[4, 4], x: f64[16@X, 4]) -> f64<U:X> {
    let d = sin(x @ w) - x
    return mean(sum(d * d, axis=1))
}

manual(X) fn mega(x: f64[8, 4], w: f64[4, 8@X]) -> f64[8, 8@X] {
    return tanh(pcast(x, X, to=varying) @ w)
}

fn tp_loss(x: f64[8, 4], w: f64[4, 8@X]) -> f64 {
    let h = mega(x, w)
    return sum(h * h * h)
}

manual(X) fn gather_inv(x: f64[64@X, 3]) -> f64[64, 3] {
    return all_gather(x, X, dim=0, to=invariant)
}

fn gather_loss(x: f64[64@X, 3]) -> f64 {
    let y = gather_inv(x)
    return sum(y * y * sin(y))
}

fn branchy(x: f64[8@X, 4], s: f64) -> f64 {
    var y = x * s
    if s > 0.0 {
        y = sin(y) * x
    }
    return sum(y * y)
}
"""
NEST_AFTER = r"""
// defined after main: the inner grad's function is still built first
fn late_inner(x: f64[8@X, 4]) -> f64 {
    let (v, g) = value_and_grad(late_f)(x)
    return sum(g * g) * v
}

fn late_f(x: f64[8@X, 4]) -> f64 {
    return sum(exp(x * 0.5) * x)
}
"""
W44 = "f64[4, 4]"
nested = [
    Case("hvp", [("x", X84, N(X84, 220)), ("w", W44, N(W44, 221))],
         "let (gx, gw) = grad(smooth, wrt=(0, 1))(x, w)\nreturn sum(gx * x) + sum(gw * gw)", wrt=(0, 1)),
    Case("dp_second", [("w", W44, N(W44, 222)), ("x", "f64[16@X, 4]", N("f64[16@X, 4]", 223))],
         "let g = grad(dp_loss)(w, x)\nreturn sum(g * g)", wrt=(0, 1)),
    Case("tp_second", [("x", "f64[8, 4]", N("f64[8, 4]", 224)), ("w", "f64[4, 8@X]", N("f64[4, 8@X]", 225))],
         "let (gx, gw) = grad(tp_loss, wrt=(0, 1))(x, w)\nreturn sum(gx * gx) + sum(gw * w)", wrt=(0, 1)),
    Case("branch_second", [("x", X84, N(X84, 226)), ("s", "f64", "0.6")],
         "let (v, gx, gs) = value_and_grad(branchy, wrt=(0, 1))(x, s)\nreturn sum(gx * gx) * gs + v", wrt=(0, 1)),
    Case("late", [("x", X84, N(X84, 227))], "return late_inner(x)"),
    Case("gather_second", [("x", C64, N(C64, 228))], "let g = grad(gather_loss)(x)\nreturn sum(g * g * x)"),
]
FILES["gc_nested"] = dict(title="Second derivatives: grad of functions that call grad (through contractions, an "
                                "unreduced loss, a manual function, a branch).",
                          mesh=MESH1, cases=nested, extra_top=NEST, after_main=NEST_AFTER)


# Second derivatives through softmax, log_softmax and logsumexp: along a dim
# sharded over X (the row sums of the second derivative all-reduce) and
# along an unsharded one, with keepdims.
NEST_SM = r"""
fn sm_rows(x: f64[8@X, 4]) -> f64 {
    return sum(softmax(x, axis=0) * cos(x))
}

fn sm_cols(x: f64[8@X, 4]) -> f64 {
    return sum(softmax(x, axis=1) * x * x)
}

fn lsm_rows(x: f64[8@X, 4]) -> f64 {
    return sum(log_softmax(x, axis=0) * sin(x))
}

fn lsm_cols(x: f64[8@X, 4]) -> f64 {
    let l = log_softmax(x, axis=1)
    return sum(l * l)
}

fn lse_rows(x: f64[8@X, 4]) -> f64 {
    let l = logsumexp(x, axis=0)
    return sum(l * l * l)
}

fn lse_keep(x: f64[8@X, 4]) -> f64 {
    let l = logsumexp(x, axis=1, keepdims=true)
    return sum((x - l) * sin(x))
}
"""
nested_sm = [
    Case("softmax_rows_second", [("x", X84, N(X84, 240))], "let g = grad(sm_rows)(x)\nreturn sum(g * g * x)"),
    Case("softmax_cols_second", [("x", X84, N(X84, 241))], "let g = grad(sm_cols)(x)\nreturn sum(g * sin(x))"),
    Case("log_softmax_rows_second", [("x", X84, N(X84, 242))], "let g = grad(lsm_rows)(x)\nreturn sum(g * g)"),
    Case("log_softmax_cols_second", [("x", X84, N(X84, 243))],
         "let (v, g) = value_and_grad(lsm_cols)(x)\nreturn sum(g * cos(x)) * v"),
    Case("logsumexp_rows_second", [("x", X84, N(X84, 244))], "let g = grad(lse_rows)(x)\nreturn sum(g * g * g)"),
    Case("logsumexp_keep_second", [("x", X84, N(X84, 245))], "let g = grad(lse_keep)(x)\nreturn sum(g * x)"),
]
FILES["gc_nested_softmax"] = dict(title="Second derivatives through softmax, log_softmax and logsumexp, along a "
                                        "sharded and an unsharded dim.",
                                  mesh=MESH1, cases=nested_sm, extra_top=NEST_SM)

# ---- indexing: slices, run-time indices, pad, concatenate, split, gathers ------------------------------
def IDX(t, seed, n):
    """Indices in [0, n) (with repeats: the scatter-adds accumulate)."""
    return "cast(uniform(%s, seed=%d) * %s, i32)" % (t.replace("i32", "f64"), seed, float(n))


X163 = "f64[16@X, 3]"
SHIFT_ROWS = r"""
manual(X) fn shift_rows(x: f64[16@X, 3]) -> f64[16@X, 3] {
    // within each device's block: the next row, zeros after the last
    let a = pad(x[1:], ((0, 1), (0, 0)))
    return a * x + x[0:1] * 0.5
}
"""
index1 = [
    Case("slice", [("x", X163, N(X163, 300))], "let a = x[4:12]\nlet b = x[:, 1:]\nreturn sum(a * a * a) + sum(b * sin(b))"),
    Case("slice_moves", [("x", X163, N(X163, 301))],
         "let a = x[0:8]\nlet b = x[1:7] as f64[6, 3]\nlet c = x[5] as f64[3]\n"
         "return sum(a * sin(a)) + sum(b * b * b) + sum(c * c) + x[-1, 2] * x[0, 0]"),
    Case("dyn_index", [("x", X163, N(X163, 302)), ("k", "i32", "5")],
         "let a = x[k] as f64[3]\nlet b = x[-1 - k, 1]\nreturn sum(a * a * a) + b * b"),
    Case("dyn_slice", [("x", X163, N(X163, 303)), ("k", "i32", "3")],
         "let a = dynamic_slice(x, (k, 1), (8, 2))\nlet b = dynamic_slice(x, (k + 50, 0), (8, 3))\n"
         "return sum(a * a * a) + sum(sin(b) * b)"),
    Case("dyn_update", [("x", X163, N(X163, 304)), ("u", "f64[8@X, 2]", N("f64[8@X, 2]", 305)), ("k", "i32", "5")],
         "let y = dynamic_update_slice(x, u * u, (k, k))\nreturn sum(y * y * sin(y))", wrt=(0, 1)),
    Case("dyn_update_row", [("x", X163, N(X163, 330)), ("u", "f64[1, 3]", N("f64[1, 3]", 331)), ("k", "i32", "5")],
         "let y = dynamic_update_slice(reshard(x, f64[16, 3]), u * u, (k, 0))\nreturn sum(y * y * sin(y))", wrt=(0, 1)),
    Case("dyn_loop", [("x", X163, N(X163, 306))],
         "var t = 0.0 as f64\nfor i in 0..16 {\n    let r = x[i] as f64[3]\n    t = t + sum(r * r) * cast(i, f64)\n}\n"
         "return t"),
    Case("pad", [("x", X163, N(X163, 307))],
         "let p = pad(x, ((8, 8), (1, 0)))\nreturn sum(p * p * iota(f64[32@X, 4], axis=0))"),
    Case("concat", [("x", X163, N(X163, 308)), ("y", X163, N(X163, 309))],
         "let a = concatenate((x, y * y), axis=0)\nlet b = concatenate((x, y), axis=1)\n"
         "return sum(a * sin(a)) + sum(b * b * iota(f64[16@X, 6], axis=1))", wrt=(0, 1)),
    Case("stack", [("x", X163, N(X163, 310)), ("y", X163, N(X163, 311))],
         "let s = stack((x, y, x * y), axis=1)\nreturn sum(s * s * iota(f64[16@X, 3, 3], axis=1))", wrt=(0, 1)),
    Case("split", [("x", "f64[16@X, 6]", N("f64[16@X, 6]", 312))],
         "let (q, k, v) = split(x, 3, axis=1)\nlet (a, b) = split(x, 2, axis=0)\nreturn sum(q * k * v) + sum(a * sin(b))"),
    Case("split_unused", [("x", "f64[16@X, 6]", N("f64[16@X, 6]", 313))],
         "let (q, k, v) = split(x, 3, axis=1)\nreturn sum(k * sin(k))"),
    Case("take", [("w", "f64[10, 3]", N("f64[10, 3]", 314)), ("ids", "i32[16@X]", IDX("i32[16@X]", 315, 10))],
         "let e = take(w, ids, axis=0) as f64[16@X, 3]\nreturn sum(e * e * e)"),
    Case("take_vocab", [("w", X163, N(X163, 316)), ("ids", "i32[6]", IDX("i32[6]", 317, 16))],
         "let e = take(w, ids, axis=0) as f64[6, 3]<U:X>\nlet r = reshard(e, f64[6, 3])\nreturn sum(r * r * r)"),
    Case("take_vocab_rep", [("w", X163, N(X163, 318)), ("ids", "i32[6]", IDX("i32[6]", 319, 16))],
         "let e = take(w, ids - 16, axis=0) as f64[6, 3]\nreturn sum(e * sin(e))"),
    Case("take_inner", [("m", "f64[16@X, 10]", N("f64[16@X, 10]", 320)), ("ids", "i32[5]", IDX("i32[5]", 321, 10))],
         "let c = take(m, ids - 10, axis=1)\nreturn sum(c * c * c)"),
    Case("take_along", [("l", "f64[16@X, 10]", N("f64[16@X, 10]", 322)),
                        ("t", "i32[16@X, 1]", IDX("i32[16@X, 1]", 323, 10))],
         "let p = take_along_axis(l, t, axis=1)\nreturn sum(p * p * p) + sum(l * l)"),
    Case("take_along_vocab", [("l", "f64[4, 16@X]", N("f64[4, 16@X]", 324)), ("t", "i32[4, 2]", IDX("i32[4, 2]", 325, 16))],
         "let p = take_along_axis(l, t, axis=1) as f64[4, 2]<U:X>\nlet r = reshard(p, f64[4, 2])\nreturn sum(r * sin(r))"),
    Case("one_hot", [("w", "f64[8, 3]", N("f64[8, 3]", 326)), ("ids", "i32[16@X]", IDX("i32[16@X]", 327, 8))],
         "let o = cast(one_hot(ids, 8), f64)\nlet y = o @ w\nreturn sum(y * y * y)"),
    Case("manual_shift", [("x", X163, N(X163, 328))],
         "let y = shift_rows(x)\nreturn sum(y * y * iota(f64[16@X, 3], axis=0))", mesh_dep=True),
]
FILES["gc_index"] = dict(
    title="Indexing on a 1-D mesh: slices (rows that stay and rows that move), run-time indices from args and "
          "loop variables, dynamic_slice/update, pad, concatenate, stack, split, take (embedding and "
          "vocab-parallel), take_along_axis, one_hot, slices inside a manual body.",
    mesh=MESH1, cases=index1, extra_top=SHIFT_ROWS,
    extra_bottom="// EXPLAIN: ^fn grad\\(f_take[,)]\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[10,3\\]<U:X> -> f64\\[10,3\\]$\n"
                 "// EXPLAIN-NOT: all_gather|shift\n"
                 "// EXPLAIN: ^fn grad\\(f_take_vocab[,)]\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[6,3\\]<U:X> -> f64\\[6,3\\]$\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\n"
                 "// EXPLAIN-NOT: all_gather|shift")

X88 = "f64[8@X, 8@Y]"
index2 = [
    Case("slice2", [("x", X88, N(X88, 330))],
         "let a = x[2:6, 4:]\nlet b = x[3] as f64[8@Y]\nlet c = x[1:7, 2:6] as f64[6, 4]\n"
         "return sum(a * a * a) + sum(b * sin(b)) + sum(c * c * c)"),
    Case("dyn2", [("x", X88, N(X88, 331)), ("k", "i32", "3")],
         "let a = dynamic_slice(x, (k, k - 1), (4, 4))\nlet y = dynamic_update_slice(x, a * a, (k + 1, 8 - k))\n"
         "return sum(y * sin(y)) + sum(a * a * a)"),
    Case("pad2", [("x", X88, N(X88, 332))],
         "let p = pad(x, ((2, 6), (4, 4)))\nreturn sum(p * p * iota(f64[16@X, 16@Y], axis=1))"),
    Case("concat2", [("x", X88, N(X88, 333)), ("y", X88, N(X88, 334))],
         "let c = concatenate((x, y, x), axis=1)\nlet (a, b) = split(c, 2, axis=0)\n"
         "return sum(a * b * sin(c[0:4]))", wrt=(0, 1)),
    Case("take2", [("w", "f64[10, 8@Y]", N("f64[10, 8@Y]", 335)), ("ids", "i32[4@X, 3]", IDX("i32[4@X, 3]", 336, 10))],
         "let e = take(w, ids, axis=0) as f64[4@X, 3, 8@Y]\nreturn sum(e * e * e)"),
    Case("take2_vocab", [("w", "f64[16@Y, 4]", N("f64[16@Y, 4]", 337)), ("ids", "i32[4@X, 3]", IDX("i32[4@X, 3]", 338, 16))],
         "let e = take(w, ids, axis=0) as f64[4@X, 3, 4]<U:Y>\nlet r = reshard(e, f64[4@X, 3, 4])\n"
         "return sum(r * r * r)"),
    Case("pick2", [("l", "f64[4@X, 3, 16@Y]", N("f64[4@X, 3, 16@Y]", 339)),
                   ("t", "i32[4@X, 3, 1]", IDX("i32[4@X, 3, 1]", 340, 16))],
         "let p = take_along_axis(l, t, axis=2) as f64[4@X, 3, 1]<U:Y>\nlet r = reshard(p, f64[4@X, 3, 1])\n"
         "return sum(r * r * r) + sum(l * l)"),
    Case("multi_axis", [("x", "f64[16@(X,Y), 2]", N("f64[16@(X,Y), 2]", 341))],
         "let a = x[8:]\nlet b = x[3:11] as f64[8, 2]\nreturn sum(a * a * a) + sum(b * sin(b))"),
    Case("u_slice", [("x", X88, N(X88, 342))],
         "let u = reshard(x, f64[8@X, 8]<U:Y>)\nlet s = u[2:6, 1:5]\nlet r = reshard(s, f64[4@X, 4])\n"
         "return sum(r * r * r)"),
    Case("r_take", [("w", "f64[10, 8]<R:X,Y>", N("f64[10, 8]<R:X,Y>", 343)), ("ids", "i32[5]", IDX("i32[5]", 344, 10))],
         "let e = take(w, ids, axis=0)\nlet s = sum(e * e * e)\nreturn s", result="f64<R:X,Y>"),
]
FILES["gc_index2"] = dict(
    title="Indexing on a 2-D mesh: slices and run-time slices of dims sharded over X and Y, pads, concatenate and "
          "split of sharded dims, the embedding and vocab-parallel gathers, a dim over two axes, unreduced and "
          "reduced operands.",
    mesh=MESH2, cases=index2,
    extra_bottom="// EXPLAIN: ^fn grad\\(f_take2[,)]\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[10,2\\]<U:X> -> f64\\[10,2\\]$\n"
                 "// EXPLAIN: ^fn grad\\(f_take2_vocab[,)]\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(X\\) .* f64\\[4,4\\]<U:X> -> f64\\[4,4\\]$\n"
                 "// EXPLAIN-COUNT: 1 all_reduce\\.sum +over \\(Y\\)\n"
                 "// EXPLAIN-COUNT: 2 all_reduce\n"
                 "// EXPLAIN: ^fn grad\\(f_r_take[,)]\n"
                 "// EXPLAIN-COUNT: 0 all_reduce")


def main():
    check = "--check" in sys.argv
    stale = []
    for name, spec in FILES.items():
        text = render(**spec) if isinstance(spec, dict) else render(*spec)
        path = os.path.join(HERE, name + ".shd")
        old = None
        if os.path.exists(path):
            with open(path) as f:
                old = f.read()
        if old != text:
            if check:
                stale.append(path)
            else:
                with open(path, "w") as f:
                    f.write(text)
    if stale:
        sys.exit("out of date (run tests/autodiff/gen_gradcheck.py): " + " ".join(stale))


if __name__ == "__main__":
    main()
