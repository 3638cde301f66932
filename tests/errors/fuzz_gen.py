"""Random well-typed .shd programs for tests/errors/test_fuzz.py.

Each program is typed by construction: the generator keeps the type of every
name in scope and builds each expression for a wanted type, out of names of
that type, literals (huge and tiny ones included), elementwise functions and
operators with NumPy broadcasting of scalars, comparisons and where, casts,
reshards between shardings, reductions, matrix products, calls of generated
helper functions, grad and value_and_grad of generated loss functions,
loops with carried vars and branches. Statements print strings of random
bytes (as \\xHH escapes), save and load arrays under names of random bytes,
and read args with random names. Version 2: a struct of random fields (one
a stacked struct), built by keyword, its fields used as values, arithmetic
and sum over it, a generic function called on arrays and on the struct,
and the struct saved to and loaded from a directory of a random name. No
program divides an integer by anything but a non-zero literal, so each one
must run to completion on every mesh.

The mesh is {X: 2}, built with --mesh X=1 and X=2; every sharded dim is a
multiple of 2.
"""
import random

FLOAT_FUNCS = ["exp", "log", "sin", "cos", "tanh", "sqrt", "abs", "relu", "sigmoid", "erf", "square", "floor",
               "log1p", "expm1", "gelu", "silu", "softplus", "sign", "rsqrt"]
INT_FUNCS = ["abs", "square", "sign"]
HUGE = ["3.4e38", "1e30", "1e-30", "1e-45", "0.0", "65504.0", "1.0e300", "2147483647.0"]
HUGE_INT = ["2147483647", "0", "1", "65536", "46340", "2147483646"]
NAME_BYTES = [b for b in range(1, 256) if b not in (ord("/"), ord("="))]


class Ty:
    def __init__(self, dt, shape, shard=False):
        self.dt, self.shape, self.shard = dt, tuple(shape), shard

    def text(self):
        if not self.shape:
            return self.dt
        dims = ["%d@X" % n if (i == 0 and self.shard) else str(n) for i, n in enumerate(self.shape)]
        return "%s[%s]" % (self.dt, ", ".join(dims))

    def key(self):
        return (self.dt, self.shape, self.shard)

    def with_(self, **kw):
        t = Ty(self.dt, self.shape, self.shard)
        for k, v in kw.items():
            setattr(t, k, v)
        return t


def esc(data):
    return '"' + "".join("\\x%02x" % b for b in data) + '"'


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.n = 0
        self.scope = []        # [(name, Ty)]
        self.funcs = []        # [(name, [Ty], Ty)]
        self.losses = []       # [(name, [Ty])]: scalar f32 functions of float arrays
        self.out = []
        self.saved = 0
        self.argnames = set()  # the arg names read so far

    # ---- version 2: a struct, a generic function ------------------------------------------

    def struct_decls(self):
        """struct In (two f32 fields) and struct St (random f32 fields and
        an In stacked twice), and the generic twice<P>; the leaves of St."""
        r = self.r
        # In's fields unsharded: stacked, a field sharded on its first dim
        # would be sharded on its second, which Ty does not express.
        self.in_fields = [(n, self.rand_ty(("f32",)).with_(shard=False)) for n in "ab"]
        self.st_fields = [("f%d" % i, self.rand_ty(("f32",))) for i in range(r.randint(1, 3))]
        decl = lambda name, fs, extra: "struct %s { %s%s }\n" % (name, ", ".join("%s: %s" % (n, t.text()) for n, t in fs),
                                                                  extra)
        self.out.append(decl("In", self.in_fields, ""))
        self.out.append(decl("St", self.st_fields, ", h: In[2]"))
        self.out.append("fn twice<P>(x: P) -> P {\n    return x + x\n}\n")
        self.structs = []      # names of St values in scope

    def struct_value(self, depth):
        """An expression of type St."""
        r = self.r
        k = r.random()
        if self.structs and k < 0.4:
            a = r.choice(self.structs)
            return r.choice(["twice(%s)" % a, "(%s * 2.0 - %s)" % (a, a), "maximum(%s, 0.5)" % a,
                             "(%s + %s)" % (a, r.choice(self.structs))])
        if k < 0.6:
            return r.choice(["zeros(St)", "ones(St)", "normal(St, seed=%d)" % r.randint(0, 9),
                             "full(St, %s)" % self.literal(Ty("f32", ()))])
        fs = ["%s=%s" % (n, self.expr(t, depth)) for n, t in self.st_fields]
        stacked = [t.with_(shape=(2,) + t.shape) for _, t in self.in_fields]
        fs.append("h=In(%s)" % ", ".join("%s=%s" % (n, self.expr(u, depth))
                                         for (n, _), u in zip(self.in_fields, stacked)))
        r.shuffle(fs)
        return "St(%s)" % ", ".join(fs)

    def struct_statement(self, lines, pad):
        r = self.r
        k = r.random()
        if k < 0.5 or not self.structs:
            name = self.fresh("s")
            lines.append("%slet %s = %s" % (pad, name, self.struct_value(3)))
            self.structs.append(name)
            for n, t in self.st_fields:
                self.scope.append(("%s.%s" % (name, n), t))
            lines.append("%sprint(\"struct\", sum(%s), %s.h[1].a)" % (pad, name, name))
        elif k < 0.7:
            name = r.choice(self.structs)
            self.saved += 1
            path = b"d" + bytes(r.choice(NAME_BYTES) for _ in range(r.randint(0, 12))) + b"_%d" % self.saved
            back = self.fresh("s")
            lines.append("%ssave(%s, %s)" % (pad, esc(path), name))
            lines.append("%slet %s: St = load(%s)" % (pad, back, esc(path)))
            lines.append("%sprint(\"loaded\", sum(%s - %s))" % (pad, back, name))
        else:
            t = self.rand_ty(("f32", "f64", "i32"))
            lines.append("%sprint(\"twice\", twice(%s))" % (pad, self.expr(t, 2)))

    def fresh(self, p="v"):
        self.n += 1
        return "%s%d" % (p, self.n)

    def rand_ty(self, dts=("f32", "f32", "f64", "i32", "bool")):
        r = self.r
        rank = r.choice([0, 1, 1, 2, 2])
        shape = [r.choice([2, 4, 6, 8]) for _ in range(rank)]
        return Ty(r.choice(dts), shape, shard=rank > 0 and r.random() < 0.5)

    def names_of(self, t):
        return [n for n, u in self.scope if u.key() == t.key()]

    def literal(self, t):
        r = self.r
        if t.dt == "bool":
            return r.choice(["true", "false"])
        if t.dt == "i32":
            return r.choice(HUGE_INT + [str(r.randint(-50, 50))])
        v = r.choice(HUGE + ["%.3f" % r.uniform(-4, 4)] * 4)
        return v if not v.startswith("-") else "(0.0 - %s)" % v[1:]

    # ---- expressions of a wanted type ------------------------------------------------

    def expr(self, t, depth):
        r = self.r
        names = self.names_of(t)
        if depth <= 0 or r.random() < 0.2:
            if names and (t.shape or r.random() < 0.7):
                return r.choice(names)
            return self.leaf(t)
        choices = [self.leaf, self.unary, self.binary, self.where_, self.cast_, self.call_]
        if t.shape:
            choices += [self.reshard_]
        if not t.shape and t.dt in ("f32", "f64"):
            choices += [self.reduce_]
        if t.dt == "f32" and len(t.shape) == 2 and not t.shard:
            choices += [self.matmul_]
        if t.dt == "f32" and self.losses:
            choices += [self.grad_]
        if t.dt == "bool":
            choices = [self.leaf, self.compare_, self.logic_]
        return r.choice(choices)(t, depth - 1)

    def leaf(self, t, depth=0):
        r = self.r
        if not t.shape:
            return self.literal(t)
        if t.dt == "bool":
            return "(%s > %s)" % (self.leaf(t.with_(dt="f32")), self.literal(Ty("f32", ())))
        kind = r.choice(["zeros", "ones", "iota", "normal", "uniform", "full"])
        if t.dt == "i32" and kind in ("normal", "uniform"):
            kind = "iota"
        if kind == "iota":
            return "iota(%s, axis=%d)" % (t.text(), r.randrange(len(t.shape)))
        if kind in ("normal", "uniform"):
            return "%s(%s, seed=%d)" % (kind, t.text(), r.randint(0, 99))
        if kind == "full":
            return "full(%s, %s)" % (t.text(), self.literal(t.with_(shape=())))
        return "%s(%s)" % (kind, t.text())

    def unary(self, t, depth):
        if t.dt == "bool":
            return "!(%s)" % self.expr(t, depth)
        f = self.r.choice(FLOAT_FUNCS if t.dt != "i32" else INT_FUNCS + ["-"])
        x = self.expr(t, depth)
        return "-(%s)" % x if f == "-" else "%s(%s)" % (f, x)

    def binary(self, t, depth):
        r = self.r
        if t.dt == "i32":
            op = r.choice(["+", "-", "*", "/", "%", "max"])
            a = self.expr(t, depth)
            if op in ("/", "%"):
                return "(%s %s %d)" % (a, op, r.choice([1, 2, 3, -7, 2147483647]))
        else:
            op = r.choice(["+", "-", "*", "/", "**", "max", "min"])
            a = self.expr(t, depth)
        # a scalar operand broadcasts against an array
        bt = t if (not t.shape or r.random() < 0.7) else t.with_(shape=(), shard=False)
        b = self.expr(bt, depth) if bt.shape or r.random() < 0.5 else self.literal(bt)
        if op == "**":
            return "(%s ** %s)" % (a, r.choice(["2", "0.5", "3.0", "2.0"]))
        if op in ("max", "min"):
            return "%s(%s, %s)" % ("maximum" if op == "max" else "minimum", a, b if bt.shape == t.shape else a)
        return "(%s %s %s)" % (a, op, b)

    def compare_(self, t, depth):
        u = t.with_(dt=self.r.choice(["f32", "f64", "i32"]))
        return "(%s %s %s)" % (self.expr(u, depth), self.r.choice(["<", "<=", ">", ">=", "==", "!="]),
                               self.expr(u, depth))

    def logic_(self, t, depth):
        return "(%s %s %s)" % (self.expr(t, depth), self.r.choice(["&", "|"]), self.expr(t, depth))

    def where_(self, t, depth):
        a, b = self.expr(t, depth), self.expr(t, depth)
        if not t.shape and t.dt != "f32":
            b = "cast(%s, %s)" % (b, t.dt)   # two literals would make where's result the default f32
        return "where(%s, %s, %s)" % (self.expr(t.with_(dt="bool"), depth), a, b)

    def cast_(self, t, depth):
        src = self.r.choice([d for d in ("f32", "f64", "i32") if d != t.dt] or ["f32"])
        x = self.expr(t.with_(dt=src), depth)
        if t.dt == "i32" and src != "i32":   # a folded float constant must fit the i32 ([E_CONST])
            x = "sin(%s)" % x
        return "cast(%s, %s)" % (x, t.dt)

    def reshard_(self, t, depth):
        return "reshard(%s, %s)" % (self.expr(t.with_(shard=not t.shard), depth), t.text())

    def reduce_(self, t, depth):
        u = self.rand_ty((t.dt,))
        if not u.shape:
            u = u.with_(shape=(4,))
        f = self.r.choice(["sum", "mean", "max", "min"])
        return "%s(%s)" % (f, self.expr(u, depth))

    def matmul_(self, t, depth):
        k = self.r.choice([2, 4, 6])
        a = self.expr(Ty("f32", (t.shape[0], k)), depth)
        b = self.expr(Ty("f32", (k, t.shape[1])), depth)
        return "(%s @ %s)" % (a, b)

    def call_(self, t, depth):
        fits = [f for f in self.funcs if f[2].key() == t.key()]
        if not fits:
            return self.leaf(t)
        name, params, _ = self.r.choice(fits)
        return "%s(%s)" % (name, ", ".join(self.expr(p, depth) for p in params))

    def grad_(self, t, depth):
        fits = [(n, ps) for n, ps in self.losses if any(p.key() == t.key() for p in ps)]
        if not fits:
            return self.leaf(t)
        name, params = self.r.choice(fits)
        k = next(i for i, p in enumerate(params) if p.key() == t.key())
        return "grad(%s, wrt=%d)(%s)" % (name, k, ", ".join(self.expr(p, depth) for p in params))

    # ---- functions and statements ------------------------------------------------------

    def function(self):
        params = [self.rand_ty(("f32", "f64", "i32")) for _ in range(self.r.randint(1, 3))]
        res = self.rand_ty(("f32", "f64", "i32"))
        name = self.fresh("f")
        saved = self.scope
        self.scope = [("p%d" % i, p) for i, p in enumerate(params)]
        body = self.expr(res, 3)
        self.scope = saved
        self.out.append("fn %s(%s) -> %s {\n    return %s\n}\n" % (
            name, ", ".join("p%d: %s" % (i, p.text()) for i, p in enumerate(params)), res.text(), body))
        self.funcs.append((name, params, res))

    def loss(self):
        params = [self.rand_ty(("f32",)) for _ in range(self.r.randint(1, 2))]
        params = [p if p.shape else p.with_(shape=(4,)) for p in params]
        name = self.fresh("loss")
        saved, saved_funcs, saved_losses = self.scope, self.funcs, self.losses
        self.scope = [("p%d" % i, p) for i, p in enumerate(params)]
        self.funcs = [f for f in self.funcs if all(x.dt == "f32" for x in f[1]) and f[2].dt == "f32"]
        self.losses = []
        terms = ["sum(%s)" % self.expr(p, 3) for p in params]
        self.scope, self.funcs, self.losses = saved, saved_funcs, saved_losses
        self.out.append("fn %s(%s) -> f32 {\n    return %s\n}\n" % (
            name, ", ".join("p%d: %s" % (i, p.text()) for i, p in enumerate(params)), " + ".join(terms)))
        self.losses.append((name, params))

    def statement(self, lines, indent):
        r = self.r
        pad = "    " * indent
        k = r.random()
        if k < 0.45:
            t = self.rand_ty()
            name = self.fresh()
            lines.append("%slet %s: %s = %s" % (pad, name, t.text(), self.expr(t, 4)))
            self.scope.append((name, t))
        elif k < 0.6 and self.scope:
            name, t = self.r.choice(self.scope)
            text = bytes(r.choice(NAME_BYTES) for _ in range(r.randint(0, 12)))
            lines.append("%sprint(%s, %s)" % (pad, esc(text), name))
        elif k < 0.7 and self.scope:
            name, t = self.r.choice(self.scope)
            self.saved += 1
            path = bytes(r.choice(NAME_BYTES) for _ in range(r.randint(1, 20))) + b".%d.npy" % self.saved
            back = self.fresh("back")
            lines.append("%ssave(%s, %s)" % (pad, esc(path), name))
            lines.append("%slet %s: %s = load(%s)" % (pad, back, t.text(), esc(path)))
            lines.append("%sprint(\"loaded\", %s == %s)" % (pad, back, name) if not t.shape else
                         "%sprint(\"loaded\", %s)" % (pad, back))
        elif k < 0.74 and self.losses:
            name, params = r.choice(self.losses)
            v, g = self.fresh("val"), self.fresh("g")
            lines.append("%slet (%s, %s) = value_and_grad(%s, wrt=0)(%s)" % (
                pad, v, g, name, ", ".join(self.expr(p, 2) for p in params)))
            self.scope += [(v, Ty("f32", ())), (g, params[0])]
            lines.append("%sprint(\"value_and_grad\", %s, %s)" % (pad, v, g))
        elif k < 0.76:
            self.struct_statement(lines, pad)
        elif k < 0.78:
            dt = r.choice(["i32", "f32", "f64", "bool"])
            name = self.fresh("a")
            argname = bytes(r.choice(NAME_BYTES) for _ in range(r.randint(1, 10)))
            if argname == b"help":
                argname = b"help2"
            while argname in self.argnames:   # a name read again must repeat its default: one each
                argname += b"_"
            self.argnames.add(argname)
            default = {"i32": str(r.randint(0, 2147483647)), "f32": "%.3g" % r.uniform(0, 3e38),
                       "f64": "%.3g" % r.uniform(0, 1e300), "bool": r.choice(["true", "false"])}[dt]
            lines.append("%slet %s: %s = arg(%s, %s)" % (pad, name, dt, esc(argname), default))
            self.scope.append((name, Ty(dt, ())))
        elif k < 0.88 and indent < 3:
            t = self.rand_ty(("f32", "f64", "i32"))
            var = self.fresh("acc")
            lines.append("%svar %s: %s = %s" % (pad, var, t.text(), self.expr(t, 2)))
            lines.append("%sfor %s in 0..%d {" % (pad, self.fresh("i"), r.randint(0, 3)))
            saved = list(self.scope)
            self.scope.append((var, t))
            lines.append("%s    %s = %s" % (pad, var, self.expr(t, 3)))
            self.scope = saved
            lines.append("%s}" % pad)
            self.scope.append((var, t))
            lines.append("%sprint(\"carried\", %s)" % (pad, var))
        elif indent < 3:
            lines.append("%sif %s {" % (pad, self.expr(Ty("bool", ()), 2)))
            saved, saved_structs = list(self.scope), list(self.structs)
            for _ in range(r.randint(1, 3)):
                self.statement(lines, indent + 1)
            self.scope, self.structs = saved, saved_structs
            lines.append("%s}" % pad)


def program(seed):
    g = Gen(seed)
    r = g.r
    g.struct_decls()
    for _ in range(r.randint(0, 3)):
        g.function()
    for _ in range(r.randint(0, 2)):
        g.loss()
    lines = ["fn main() {"]
    for _ in range(r.randint(3, 12)):
        g.statement(lines, 1)
    lines.append("    print(\"end\")")
    lines.append("}")
    return "mesh {X: 2}\n\n" + "".join(g.out) + "\n".join(lines) + "\n"
