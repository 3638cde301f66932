/* op_creation.c: the creation family: zeros, ones, full, iota, normal,
 * uniform (typing-rules 1.1).
 *
 * A created value is replicated unless its type (the TYPE argument, or the
 * annotation when TYPE is left out) says otherwise, and is created directly
 * sharded: each rank fills only its own block (iota from its block's global
 * offset, random numbers from the counter of each element's global index,
 * so values do not depend on the mesh). A type with U holds the value on the
 * first device along the U axes and zeros elsewhere (part_created).
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname

enum { CR_ZEROS, CR_ONES, CR_FULL, CR_IOTA, CR_NORMAL, CR_UNIFORM };

enum {
  IR_IOTA = IR_BASE_CREATION,   /* attr dim: value = global index along dim */
  IR_RANDOM,                    /* args: seed (i32); attr fn: 0 normal, 1 uniform */
};

static bool is_array(const Value *v) { return v->type.rank > 0; }

/* ---- typing ------------------------------------------------------------------------- */


static Type creation_type(TcCtx *c, Expr *e, Expr *targ, const Type *annot, bool *ok) {
  Type t;
  if (targ) {
    if (!tc_type_arg(c, targ, &t, tc_callee(e))) {
      *ok = false;
      return ty_error();
    }
    if (annot) {
      Type want = *annot;
      if (c->annot_v_free)
        tc_manual_states_from(c, &want, t.V, t.U, t.R);
      if (!ty_equal(&t, &want)) {
        diag_error(e->pos, c->annot_code ? c->annot_code : "E_ANNOT",
                   "%s creates %s but %s is expected; change one of them, or reshard(x, %s) afterwards", tc_callee(e),
                   TS(&t), TS(annot), TS(annot));
        *ok = false;
        return ty_error();
      }
    }
  } else if (annot) {
    t = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &t, 0, 0, 0);
  } else if (c->bad_annot == e) {
    *ok = false;
    return ty_error();
  } else if (c->bound && (c->bound->kind == TY_ARRAY || c->bound->kind == TY_STRUCT) &&
             ast_through_operators(c->bound_expr, e, true)) {
    /* let w: f32[8] = normal(seed=5) * 0.3: elementwise arithmetic keeps
     * the type, so the creation has the binding's (the same stream as
     * normal(f32[8], seed=5) * 0.3). */
    t = *c->bound;
    if (c->annot_v_free)
      tc_manual_states_from(c, &t, 0, 0, 0);
  } else if (c->bound && (c->bound->kind == TY_ARRAY || c->bound->kind == TY_STRUCT) &&
             ast_through_operators(c->bound_expr, e, false)) {
    /* let q: f32[8,8] = normal(seed=2) @ w: the binding's type does not
     * reach a creation inside a non-elementwise operation; say the type
     * the user wrote. */
    diag_error(e->pos, "E_ARG",
               "%s needs a type: the %s type %s does not reach it through the expression around it; give it "
               "here: %s(%s, ...)",
               tc_callee(e), c->bound->kind == TY_STRUCT ? "struct" : "declared", TS(c->bound), tc_callee(e),
               TS(c->bound));
    *ok = false;
    return ty_error();
  } else {
    diag_error(e->pos, "E_ARG", "%s needs a type: %s(f32[8,4], ...), or annotate the binding: let x: f32[8,4] = %s(...)",
               tc_callee(e), tc_callee(e), tc_callee(e));
    *ok = false;
    return ty_error();
  }
  if (t.V) {
    diag_error(e->pos, "E_VMA",
               "%s creates the same array on every device, so it cannot be varying (%s); create it invariant and "
               "cast it with pcast(x, %s, to=varying)",
               tc_callee(e), TS(&t), ty_axes_arg(c->mesh, t.V));
    *ok = false;
    return ty_error();
  }
  t.weak = false;
  return t;
}

static Type check_creation(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  int code = e->bi->code;
  Expr *pos[2], *kw[1];
  const char *kwn[1] = {code == CR_IOTA ? "axis" : "seed"};
  int nkw = (code == CR_IOTA || code == CR_NORMAL || code == CR_UNIFORM) ? 1 : 0;
  int n;
  bool ok = true;
  int maxpos = code == CR_FULL ? 2 : 1;
  tc_split_args(e, pos, maxpos, &n, kw, kwn, nkw, &ok);
  if (!ok)
    return ty_error();
  Expr *targ = n > 0 && pos[0]->kind == EX_TYPE ? pos[0] : NULL;
  int nval = n - (targ ? 1 : 0);
  int want_val = code == CR_FULL ? 1 : 0;
  if (nval != want_val) {
    static const char *usage[] = {[CR_ZEROS] = "zeros(TYPE)", [CR_ONES] = "ones(TYPE)",
                                  [CR_FULL] = "full(TYPE, value)", [CR_IOTA] = "iota(TYPE, axis=k)",
                                  [CR_NORMAL] = "normal(TYPE, seed=s)", [CR_UNIFORM] = "uniform(TYPE, seed=s)"};
    diag_error(e->pos, "E_ARG", "%s: wrong arguments; usage: %s (TYPE may be left out when the binding is annotated)",
               tc_callee(e), usage[code]);
    return ty_error();
  }
  Type t = creation_type(c, e, targ, annot, &ok);
  if (!ok)
    return ty_error();
  info->type = t;
  if (code == CR_FULL) {
    info->value = pos[n - 1];
    if (!tc_scalar_value(c, info->value, t.dtype, "the fill value", false))
      return ty_error();
  }
  if (code == CR_IOTA) {
    if (t.dtype == DT_BOOL) {
      diag_error(e->pos, "E_DTYPE", "iota makes numbers, not %s; make it i32, f32 or f64 and compare if you need "
                                    "bool", TS(&t));
      return ty_error();
    }
    if (t.rank == 0) {
      diag_error(e->pos, "E_SHAPE", "iota makes an array of rank 1 or more, not %s; give it a shape, e.g. "
                                    "iota(%s[8], axis=0)", TS(&t), ty_dtype_name(t.dtype));
      return ty_error();
    }
    info->dim = 0;
    if (kw[0] && !tc_dim_arg(c, kw[0], t.rank, &info->dim, "iota"))
      return ty_error();
  }
  if (code == CR_NORMAL || code == CR_UNIFORM) {
    if (!ty_is_float(t.dtype)) {
      diag_error(e->pos, "E_DTYPE", "%s makes float arrays (f32 or f64), not %s; cast the result if you need "
                                    "another dtype", tc_callee(e), TS(&t));
      return ty_error();
    }
    if (!kw[0]) {
      diag_error(e->pos, "E_ARG", "%s needs a seed: %s(TYPE, seed=1)", tc_callee(e), tc_callee(e));
      return ty_error();
    }
    info->value = kw[0];
    if (!tc_scalar_value(c, kw[0], DT_I32, "the seed", false))
      return ty_error();
  }
  return t;
}

/* ---- lowering ----------------------------------------------------------------------- */

static Value *lower_creation(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Type t = *e->ty;
  switch (e->bi->code) {
  case CR_ZEROS:
  case CR_ONES:
  case CR_FULL: {
    Value *v = e->bi->code == CR_FULL ? lower_as(L, info->value, t.dtype)
                                     : lower_const(L, e->pos, t.dtype, e->bi->code == CR_ONES ? 1 : 0);
    return lower_emit1(L, IR_FILL, e->pos, 1, &v, t);
  }
  case CR_IOTA: {
    Inst *in = lower_emit(L, IR_IOTA, e->pos, 0, NULL, t);
    in->dim = info->dim;
    return in->results[0];
  }
  default: {
    Value *seed = lower_as(L, info->value, DT_I32);
    Inst *in = lower_emit(L, IR_RANDOM, e->pos, 1, &seed, t);
    in->fn = e->bi->code == CR_UNIFORM;
    in->ival = e->ival;   /* a struct leaf's stream (tc_struct.c); 0 for an array */
    return in->results[0];
  }
  }
}

/* ---- C -------------------------------------------------------------------------------- */

static void emit_fill(Emit *e, const Inst *in) {
  const Value *r = in->results[0], *s = in->args[0];
  if (!is_array(r)) {
    emit_line(e, "%s %s = %s;", ty_dtype_c(r->type.dtype), vname(r), vname(s));
    return;
  }
  bool zero = s->def && s->def->op == IR_CONST && s->def->fval == 0;
  emit_def_array(e, r, zero);
  if (zero) {
    emit_line(e, "(void)%s;", vname(s));
    return;
  }
  emit_line(e, "for (int64_t i = 0; i < %lld; i++)", (long long)emit_local_count(e, &r->type));
  emit_line(e, "  %s[i] = %s;", vname(r), vname(s));
}

static void emit_iota(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const Type *t = &r->type;
  int64_t ls[MAX_RANK];
  ty_local_shape(emit_mesh(e), t, ls);
  int64_t inner = 1;
  for (int d = in->dim + 1; d < t->rank; d++)
    inner *= ls[d];
  emit_def_array(e, r, false);
  emit_line(e, "{");
  emit_indent(e, 2);
  if (t->spec[in->dim].n)
    emit_line(e, "int64_t off = (int64_t)shd_group_index(%s) * %lld;", emit_spec_axes_lit(t->spec[in->dim]),
         (long long)ls[in->dim]);
  else
    emit_line(e, "int64_t off = 0;");
  emit_line(e, "for (int64_t i = 0; i < %lld; i++)", (long long)emit_local_count(e, t));
  const char *x = arena_printf("(%s)(off + (i / %lld) %% %lld)", ty_dtype_c(ty_compute_dtype(t->dtype)),
                               (long long)inner, (long long)ls[in->dim]);
  emit_line(e, "  %s[i] = %s;", vname(r), emit_stored(t, x));
  emit_indent(e, -2);
  emit_line(e, "}");
}

/* The Philox key: the seed in the low word; a struct leaf's stream (a hash
 * of its path, tc_struct.c) in the high word, 0 for a plain array. */
static const char *random_key(const Inst *in) {
  if (!in->ival)
    return arena_printf("(uint64_t)(uint32_t)%s", vname(in->args[0]));
  return arena_printf("((uint64_t)%lluu << 32 | (uint32_t)%s)", (unsigned long long)(uint32_t)in->ival,
                      vname(in->args[0]));
}

static void emit_random(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const Type *t = &r->type;
  const char *fn = in->fn ? "shd_fill_uniform" : "shd_fill_normal";
  if (!is_array(r)) {
    const char *x = arena_printf("(%s)%s_at_dt(%s, 0, %s)", ty_dtype_c(ty_compute_dtype(t->dtype)),
                                 in->fn ? "shd_uniform" : "shd_normal", random_key(in), emit_dtconst(t->dtype));
    emit_line(e, "%s %s = %s;", ty_dtype_c(t->dtype), vname(r), emit_stored(t, x));
    return;
  }
  emit_def_array(e, r, false);
  emit_line(e, "%s(%s, %s, %s, %d, %s, %s, %s);", fn, vname(r), emit_dtconst(t->dtype), random_key(in), t->rank,
       emit_gshape_lit(t), emit_offset_lit(e, t), emit_shape_lit(e, t));
}

/* The transpose of a fill: the sum of the cotangent is the scalar's. */
static void vjp_fill(AD *a, Inst *in, Value *g) {
  Inst *s = ad_emit(a, IR_REDUCE, 1, &g, ty_ct(&in->args[0]->type));
  s->fn = RED_SUM;
  s->mask = (1u << g->type.rank) - 1;
  ad_add_ct(a, in->args[0], s->results[0]);
}

static void print_iota(FILE *out, const Module *mod, const Inst *in) { fprintf(out, " dim=%d", in->dim); }
static void print_random(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " %s", in->fn ? "uniform" : "normal");
  if (in->ival)
    fprintf(out, " stream=%u", (unsigned)in->ival);
}

/* ---- types from operands ---------------------------------------------------------- */

/* fill spreads a scalar of the result's dtype; iota counts along a dim of
 * the result; random draws floats from an i32 seed. The type itself is
 * the one the program declared (its out_sharding). */
static bool infer_fill(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 1 && ir_arg_is(in, 0, out->dtype) && in->args[0]->type.rank == 0;
}

static bool infer_iota(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 0 && in->dim >= 0 && in->dim < out->rank && out->dtype != DT_BOOL;
}

static bool infer_random(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 1 && ir_arg_is(in, 0, DT_I32) && in->args[0]->type.rank == 0 && ty_is_float(out->dtype);
}

static const OpDef ops[] = {
    {.op = IR_FILL, .name = "fill", .flags = OPF_RECOMPUTE, .vjp = vjp_fill, .partition = part_created, .emit = emit_fill, .infer = infer_fill},
    {.op = IR_IOTA, .name = "iota", .flags = OPF_RECOMPUTE, .print = print_iota, .partition = part_created, .emit = emit_iota, .infer = infer_iota},
    {.op = IR_RANDOM, .name = "random", .flags = OPF_RECOMPUTE, .print = print_random, .partition = part_created, .emit = emit_random, .infer = infer_random},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "zeros", .code = CR_ZEROS, .flags = BIF_ANNOT | BIF_TYPE_ARG | BIF_CREATION, .check = check_creation, .lower = lower_creation},
    {.name = "ones", .code = CR_ONES, .flags = BIF_ANNOT | BIF_TYPE_ARG | BIF_CREATION, .check = check_creation, .lower = lower_creation},
    {.name = "full", .code = CR_FULL, .flags = BIF_ANNOT | BIF_TYPE_ARG | BIF_CREATION, .check = check_creation, .lower = lower_creation},
    {.name = "iota", .code = CR_IOTA, .flags = BIF_ANNOT | BIF_TYPE_ARG, .check = check_creation, .lower = lower_creation},
    {.name = "normal", .code = CR_NORMAL, .flags = BIF_ANNOT | BIF_TYPE_ARG | BIF_CREATION | BIF_RANDOM, .check = check_creation, .lower = lower_creation},
    {.name = "uniform", .code = CR_UNIFORM, .flags = BIF_ANNOT | BIF_TYPE_ARG | BIF_CREATION | BIF_RANDOM, .check = check_creation, .lower = lower_creation},
    {0},
};

const OpFamily op_creation_family = {
    .name = "creation",
    .ops = ops,
    .builtins = builtins,
};
