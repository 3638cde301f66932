/* op_io.c: the I/O family: print, save, load, load_dim, arg, clock.
 *
 * print(items...) prints on rank 0 (sharded values are gathered, pending
 * sums reduced: the partitioner reshards each value to replicated); save
 * writes the global array as .npy, each rank its own block, after reducing
 * pending sums; load reads one, typed by its annotation; load_dim reads the
 * size of one dim of a file's array at run time (to place windows in a file
 * of any length); arg reads --name=value from the program's command line;
 * clock is MPI_Wtime.
 *
 * Program text reaches the generated C only as data: every path, name and
 * print text is written as a C string literal by emit_str_lit, which
 * escapes every byte that could end the literal or mean anything else
 * (quotes, backslashes, ? of trigraphs, control and non-ASCII bytes). A
 * print's items are kept as a list (Inst.iv: the value operand's index, or
 * -1 - offset of a text in Inst.str, where the texts are stored one after
 * another, each NUL-terminated), so no byte of a text is a separator.
 *
 * Paths and defaults may be run-time strings (op_string.c): save(PATH, x)
 * and load(PATH) with PATH a str expression take it as their last operand
 * (Inst.str is then NULL), arg("name", "default") gives a str whose default
 * is its operand, and print prints str values as text.
 */
#include "shdc.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname

enum { IO_PRINT, IO_SAVE, IO_LOAD, IO_LOAD_DIM, IO_ARG, IO_CLOCK };

enum {
  IR_PRINT = IR_BASE_IO, /* args: values; str: '\x1f'-separated texts */
  IR_SAVE,               /* str: path */
  IR_LOAD,               /* str: path */
  IR_ARG,                /* str: name; fval/ival default */
  IR_CLOCK,              /* wall-clock seconds (f64), for timing steps */
  IR_LOAD_DIM,           /* str: path (or the last arg); dim: which dim; result i32 */
};

static bool is_array(const Value *v) { return v->type.rank > 0; }
static const char *str_lit(const char *s) { return emit_str_lit(s, strlen(s)); }
static bool is_str(const Value *v) { return v->type.kind == TY_STRING; }

/* A path must name a file: not empty, not a directory (ending in '/'). */
static bool path_ok(Expr *s, const char *what) {
  size_t n = strlen(s->str);
  if (n && s->str[n - 1] != '/')
    return true;
  diag_error(s->pos, "E_ARG", "%s: the path %s does not name a file; write e.g. %s(\"w.npy\"%s)", what,
             str_lit(s->str), what, !strcmp(what, "save") ? ", x" : !strcmp(what, "load_dim") ? ", 0" : "");
  return false;
}

/* A path argument: a literal (kept as Inst.str) or any str expression. */
static bool check_path(TcCtx *c, Expr *a, const char *what) {
  if (a->kind == EX_STRING)
    return tc_string_arg(c, a, what) && path_ok(a, what);
  Type t = tc_expr(c, a);
  if (t.kind == TY_ERROR)
    return false;
  if (t.kind != TY_STRING) {
    diag_error(a->pos, "E_ARG", "%s: the path must be a str (a literal like \"w.npy\" or a str expression like "
               "dir + \"/w.npy\"), not %s", what, t.kind == TY_ARRAY ? TS(&t) : "this value");
    return false;
  }
  return true;
}

/* The path operand of save/load when it is not a literal. */
static const Value *path_operand(const Inst *in) { return in->str ? NULL : in->args[in->nargs - 1]; }

static const char *path_c(const Inst *in, const char *what) {
  const Value *p = path_operand(in);
  if (!p)
    return str_lit(in->str);
  return arena_printf("shd_str_path(&%s, \"%s\", %d)", vname(p), what, in->pos.line);
}

/* .npy I/O is collective over the whole mesh and works on global arrays: a
 * manual body (per-device, maybe under a varying branch) has neither. */
static bool global_view_only(TcCtx *c, Expr *e) {
  if (!c->manual)
    return true;
  diag_error(e->pos, "E_MANUAL",
             "%s reads or writes a .npy file with every device taking part, so it is only available in the "
             "global view; %s",
             tc_callee(e), e->bi->code == IO_SAVE ? "return the value from the manual function and save it there"
                                                  : "read it in the global view and pass it as an argument");
  return false;
}

/* ---- typing ------------------------------------------------------------------------- */

static Type check_print(TcCtx *c, Expr *e, const Type *annot) {
  for (int i = 0; i < e->args.len; i++) {
    Expr *a = e->args.data[i];
    if (a->kind == EX_KWARG) {
      diag_error(a->pos, "E_ARG", "print takes no keyword arguments");
      continue;
    }
    if (a->kind == EX_STRING) {
      tc_expr(c, a);
      continue;
    }
    Type t = tc_expr(c, a);
    if (t.kind != TY_STRING && t.kind != TY_ERROR && t.kind != TY_ARRAY)
      tc_want_array(c, a, &t, "print");
  }
  return ty_void();
}

static Type check_save(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  if (!global_view_only(c, e))
    return ty_error();
  int n = tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "save(\"path.npy\", x)");
  if (n < 0 || !check_path(c, pos[0], "save"))
    return ty_error();
  Type x = tc_operand(c, pos[1], "save");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[1];
  return ty_void();
}

/* load(PATH) reads the whole array; load(PATH, (s0, s1, ...)) a window of
 * the annotated shape starting at run-time offsets s of a larger array of
 * the file (one i32 start per dim; a rank-1 window may give one start
 * without parentheses). */
static Type check_load(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  if (!global_view_only(c, e))
    return ty_error();
  int n = tc_call_args(c, e, pos, 1, 2, kw, NULL, 0, "load(\"path.npy\") or load(path, (s0, s1, ...))");
  if (n < 0 || !check_path(c, pos[0], "load"))
    return ty_error();
  if (!annot && c->bad_annot == e)
    return ty_error();
  if (!annot) {
    diag_error(e->pos, "E_ARG", "load takes its type from an annotation: let w: f32[8@X,4] = load(\"w.npy\")");
    return ty_error();
  }
  if (annot->kind != TY_ARRAY) {
    diag_error(e->pos, "E_ARG", "load reads an array or a scalar from a .npy file, not a str");
    return ty_error();
  }
  Type t = *annot;
  if (t.V) {
    diag_error(e->pos, "E_VMA", "load gives the same array on every device, so it cannot be varying (%s)", TS(&t));
    return ty_error();
  }
  info->type = t;
  if (n == 2) {
    Expr *s = pos[1];
    int ns = s->kind == EX_TUPLE || s->kind == EX_LIST ? s->args.len : 1;
    if (ns != t.rank) {
      diag_error(s->pos, "E_ARG",
                 "load: a window of %s needs one start per dim (%d), not %d: load(path, (%s))", TS(&t), t.rank, ns,
                 t.rank == 1 ? "s0," : t.rank == 2 ? "s0, s1" : "s0, s1, ...");
      return ty_error();
    }
    info->z = s;
    for (int i = 0; i < ns; i++)
      if (!tc_scalar_value(c, s->kind == EX_TUPLE || s->kind == EX_LIST ? s->args.data[i] : s, DT_I32,
                           "a window start", false))
        return ty_error();
  }
  return t;
}

/* load_dim(PATH, k): the size of dim k of the array in the .npy file PATH,
 * read when the program runs: an i32, the same on every device. With it a
 * program places windows (load(PATH, starts)) in a file whose length it was
 * not built for. */
static Type check_load_dim(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  if (!global_view_only(c, e))
    return ty_error();
  int n = tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "load_dim(\"path.npy\", k)");
  if (n < 0 || !check_path(c, pos[0], "load_dim"))
    return ty_error();
  int64_t k;
  if (!tc_const_int(c, pos[1], &k))
    return ty_error();
  if (k < 0 || k >= MAX_RANK) {
    diag_error(pos[1]->pos, "E_ARG", "load_dim: dim %lld is not a dim of any array; arrays have dims 0 to %d, "
               "e.g. load_dim(path, 0) for the length", (long long)k, MAX_RANK - 1);
    return ty_error();
  }
  info->dim = (int)k;
  return ty_scalar(DT_I32);
}

/* The program reads --NAME=VALUE: a name must be something a command line
 * can spell that way (and --help is the program's own). */
static bool arg_name_ok(Expr *s) {
  const char *why = !s->str[0] ? "is empty"
                    : strchr(s->str, '=') ? "contains '=', which ends the name on the command line"
                    : !strcmp(s->str, "help") ? "is reserved: --help lists the program's arguments"
                    : NULL;
  if (why)
    diag_error(s->pos, "E_ARG", "arg: the name %s %s; use letters, digits, '_' or '-', e.g. arg(\"steps\", 10)",
               str_lit(s->str), why);
  return !why;
}

static Type check_arg(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  int n = tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "arg(\"name\", default)");
  if (n < 0 || !tc_string_arg(c, pos[0], "arg") || !arg_name_ok(pos[0]))
    return ty_error();
  Type d = tc_expr(c, pos[1]);
  if (d.kind == TY_ERROR)
    return d;
  if (pos[1]->kind == EX_STRING) {
    /* a str argument: --name=TEXT, any text */
    info->value = pos[1];
    if (annot && annot->kind != TY_STRING) {
      diag_error(e->pos, "E_DTYPE", "arg: the default is a str but the annotation is %s; write `: str` or give a "
                 "number as the default", annot->kind == TY_ARRAY ? TS(annot) : "not a value");
      return ty_error();
    }
    info->type = ty_string();
    return ty_string();
  }
  if (d.kind != TY_ARRAY || !d.weak) {
    diag_error(pos[1]->pos, "E_ARG", "arg: the default must be a literal or a const, e.g. arg(\"steps\", 10) or "
               "arg(\"dir\", \"out\")");
    return ty_error();
  }
  info->value = pos[1];
  Type t = ty_scalar(d.dtype);
  if (annot && annot->kind == TY_STRING) {
    diag_error(pos[1]->pos, "E_DTYPE", "arg: the annotation is str but the default is %s; give a string default: "
               "arg(\"%s\", \"\")", TS(&d), pos[0]->str);
    return ty_error();
  }
  if (annot) {
    if (annot->rank || annot->U || annot->V) {
      diag_error(e->pos, "E_SHAPE", "arg gives a replicated scalar, not %s", TS(annot));
      return ty_error();
    }
    if (ty_is_float(d.dtype) && !ty_is_float(annot->dtype)) {
      diag_error(pos[1]->pos, "E_DTYPE", "arg: the default is a float but the annotation is %s", TS(annot));
      return ty_error();
    }
    t = *annot;
  }
  info->type = t;
  return t;
}

static Type check_clock(TcCtx *c, Expr *e, const Type *annot) {
  if (e->args.len) {
    diag_error(e->pos, "E_ARG", "clock() takes no arguments");
    return ty_error();
  }
  return ty_scalar(DT_F64);
}

/* ---- lowering ----------------------------------------------------------------------- */

static Value *lower_print(Lower *L, Expr *e) {
  int n = e->args.len, nvals = 0;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(n + 1));
  int64_t *items = arena_alloc(sizeof(int64_t) * (size_t)(n + 1));
  Str texts = {0};
  for (int i = 0; i < n; i++) {
    Expr *a = e->args.data[i];
    if (a->kind == EX_STRING) {
      items[i] = -1 - (int64_t)texts.len;
      str_printf(&texts, "%s", a->str);
      str_putc(&texts, '\0');
      continue;
    }
    items[i] = nvals;
    args[nvals++] = a->ty->kind == TY_STRING ? lower_expr(L, a) : lower_as(L, a, a->ty->dtype);
  }
  Inst *in = lower_emit0(L, IR_PRINT, e->pos, nvals, args);
  in->iv = items;
  in->niv = n;
  in->str = texts.len ? arena_strndup(texts.buf, texts.len) : "";
  free(texts.buf);
  return NULL;
}

static Value *lower_save(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Expr *path = e->args.data[0];
  Value *args[2] = {lower_as(L, info->x, info->x->ty->dtype), NULL};
  bool lit = path->kind == EX_STRING;
  if (!lit)
    args[1] = lower_expr(L, path);
  Inst *in = lower_emit0(L, IR_SAVE, e->pos, lit ? 1 : 2, args);
  in->str = lit ? path->str : NULL;
  return NULL;
}

/* IR_LOAD's operands: the window starts (Inst.dim of them), then the path
 * when it is not a literal (Inst.str). */
static Value *lower_load(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Expr *path = e->args.data[0], *s = info->z;
  bool lit = path->kind == EX_STRING;
  int ns = !s ? 0 : s->kind == EX_TUPLE || s->kind == EX_LIST ? s->args.len : 1;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(ns + 2));
  for (int i = 0; i < ns; i++)
    args[i] = lower_as(L, s->kind == EX_TUPLE || s->kind == EX_LIST ? s->args.data[i] : s, DT_I32);
  if (!lit)
    args[ns] = lower_expr(L, path);
  Inst *in = lower_emit(L, IR_LOAD, e->pos, ns + !lit, args, *e->ty);
  in->str = lit ? path->str : NULL;
  in->dim = ns;
  return in->results[0];
}

static Value *lower_load_dim(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Expr *path = e->args.data[0];
  bool lit = path->kind == EX_STRING;
  Value *p = lit ? NULL : lower_expr(L, path);
  Inst *in = lower_emit(L, IR_LOAD_DIM, e->pos, lit ? 0 : 1, &p, *e->ty);
  in->str = lit ? path->str : NULL;
  in->dim = info->dim;
  return in->results[0];
}

static Value *lower_arg(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  if (e->ty->kind == TY_STRING) {
    Value *def = lower_expr(L, info->value);
    Inst *in = lower_emit(L, IR_ARG, e->pos, 1, &def, *e->ty);
    in->str = ((Expr *)e->args.data[0])->str;
    return in->results[0];
  }
  Inst *in = lower_emit(L, IR_ARG, e->pos, 0, NULL, *e->ty);
  in->str = ((Expr *)e->args.data[0])->str;
  in->fval = lower_fold(L, info->value);
  in->ival = (int64_t)in->fval;
  return in->results[0];
}

static Value *lower_clock(Lower *L, Expr *e) { return lower_emit1(L, IR_CLOCK, e->pos, 0, NULL, *e->ty); }

/* ---- partitioning ------------------------------------------------------------------- */

static Type replicated(const Type *t) {
  Type r = *t;
  for (int d = 0; d < r.rank; d++)
    r.spec[d].n = 0;
  r.U = 0;
  return r;
}

static void part_print(Part *p, Inst *in, Value **args) {
  Value **na = arena_alloc(sizeof(Value *) * (size_t)(in->nargs + 1));
  for (int i = 0; i < in->nargs; i++) {
    Type want = replicated(&args[i]->type);
    na[i] = is_str(args[i]) ? args[i] : part_to(p, in->pos, args[i], &want);
  }
  part_copy(p, in, na);
}

static void part_save(Part *p, Inst *in, Value **args) {
  Type want = args[0]->type;
  want.U = 0;
  Value *na[2] = {part_to(p, in->pos, args[0], &want), in->nargs > 1 ? args[1] : NULL};
  part_copy(p, in, na);
}

/* ---- C -------------------------------------------------------------------------------- */

static void emit_print(Emit *e, const Inst *in) {
  emit_line(e, "if (shd_world_rank() == 0) {");
  emit_indent(e, 2);
  for (int k = 0; k < in->niv; k++) {
    if (k)
      emit_line(e, "shd_print_text(\" \");");
    if (in->iv[k] < 0) {
      const char *text = in->str + (-1 - in->iv[k]);
      if (*text)
        emit_line(e, "shd_print_text(%s);", str_lit(text));
      continue;
    }
    const Value *v = in->args[in->iv[k]];
    if (is_str(v))
      emit_line(e, "shd_print_text(%s.s);", vname(v));
    else if (is_array(v))
      emit_line(e, "shd_print_array(%s, %s, %d, %s);", vname(v), emit_dtconst(v->type.dtype), v->type.rank,
           emit_shape_lit(e, &v->type));
    else
      emit_line(e, "shd_print_scalar((double)%s, %s);", vname(v), emit_dtconst(v->type.dtype));
  }
  emit_line(e, "shd_print_end();");
  emit_indent(e, -2);
  emit_line(e, "}");
}

static void emit_load(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const Type *t = &r->type;
  if (!is_array(r)) {
    emit_def_scalar(e, r);
    emit_line(e, "shd_load_npy(%s, &%s, %s, 0, NULL, NULL, NULL);", path_c(in, "load"), vname(r),
              emit_dtconst(t->dtype));
    return;
  }
  emit_def_array(e, r, false);
  if (in->dim) {
    Str st = {0};
    for (int i = 0; i < in->dim; i++)
      str_printf(&st, "%s(int64_t)%s", i ? ", " : "", vname(in->args[i]));
    emit_line(e, "shd_load_npy_window(%s, %s, %s, %d, %s, %s, %s, (const int64_t[]){%s}, %d);", path_c(in, "load"),
              vname(r), emit_dtconst(t->dtype), t->rank, emit_gshape_lit(t), emit_offset_lit(e, t),
              emit_shape_lit(e, t), str_cstr(&st), in->pos.line);
    free(st.buf);
    return;
  }
  emit_line(e, "shd_load_npy(%s, %s, %s, %d, %s, %s, %s);", path_c(in, "load"), vname(r), emit_dtconst(t->dtype), t->rank,
       emit_gshape_lit(t), emit_offset_lit(e, t), emit_shape_lit(e, t));
}

static void emit_save(Emit *e, const Inst *in) {
  const Value *x = in->args[0];
  const Type *t = &x->type;
  const Mesh *m = emit_mesh(e);
  /* One copy of each block is written: by the rank at index 0 along every
   * axis the array is replicated (or varying) over. */
  AxisSet rep = ((1u << m->naxes) - 1) & ~ty_dim_axes(t);
  int axes[MAX_AXES], n = 0;
  for (int a = 0; a < m->naxes; a++)
    if (rep & (1u << a))
      axes[n++] = a;
  const char *writer = n ? arena_printf("shd_group_index(%s) == 0", emit_axes_lit(axes, n)) : "true";
  emit_line(e, "shd_save_npy(%s, %s, %s, %d, %s, %s, %s, %s);", path_c(in, "save"), emit_addr(x), emit_dtconst(t->dtype),
       t->rank, emit_gshape_lit(t), emit_offset_lit(e, t), emit_shape_lit(e, t), writer);
}

static void emit_load_dim(Emit *e, const Inst *in) {
  emit_line(e, "int32_t %s = shd_npy_dim(%s, %d, %d);", vname(in->results[0]), path_c(in, "load_dim"), in->dim,
            in->pos.line);
}

static void emit_arg(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  if (is_str(r)) {
    const Inst *d = in->args[0]->def;   /* the default: a str literal */
    emit_line(e, "shd_str %s;", vname(r));
    emit_line(e, "shd_arg_str(&%s, %s, %s, %lld);", vname(r), str_lit(in->str), emit_str_lit(d->str, (size_t)d->ival),
              (long long)d->ival);
    return;
  }
  DType dt = r->type.dtype;
  const char *get = dt == DT_I32 ? "shd_arg_i32" : dt == DT_BOOL ? "shd_arg_bool" : "shd_arg_f64";
  emit_line(e, "%s %s = (%s)%s(%s, %s);", ty_dtype_c(dt), vname(r), ty_dtype_c(dt), get, str_lit(in->str),
       dt == DT_BOOL ? (in->fval != 0 ? "true" : "false") : emit_flit(dt == DT_I32 ? DT_I32 : DT_F64, in->fval));
}

static void emit_clock(Emit *e, const Inst *in) { emit_line(e, "double %s = shd_time();", vname(in->results[0])); }

/* ---- main's table of the program's args ------------------------------------------------- */

static void collect_args(const IrBlock *b, Vec *out) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    bool seen = false;
    for (int k = 0; in->op == IR_ARG && k < out->len && !seen; k++)
      seen = !strcmp(((Inst *)out->data[k])->str, in->str);
    if (in->op == IR_ARG && !seen)
      vec_push(out, in);
    for (int r = 0; r < in->nregions; r++)
      collect_args(in->regions[r], out);
  }
}

/* Every arg of the functions main reaches, once each, as a table of data
 * (names are escaped literals) that the runtime checks the command line
 * against before the program runs. */
static const char *args_setup(Emit *e, const bool *live) {
  const Module *mod = emit_module_of(e);
  FILE *o = emit_out(e);
  Vec args = {0};
  for (int i = 0; i < mod->funcs.len; i++)
    if (live[i])
      collect_args(((Func *)mod->funcs.data[i])->body, &args);
  if (args.len) {
    fprintf(o, "\nstatic const shd_arg_spec shd_args[] = {\n");
    for (int i = 0; i < args.len; i++) {
      const Inst *in = args.data[i];
      DType dt = in->results[0]->type.dtype;
      const Inst *sdef = in->results[0]->type.kind == TY_STRING ? in->args[0]->def : NULL;   /* its literal */
      if (sdef)
        fprintf(o, "  {%s, SHD_I32, 0.0, %s, %lld},\n", emit_str_lit(in->str, strlen(in->str)),
                emit_str_lit(sdef->str, (size_t)sdef->ival), (long long)sdef->ival);
      else
        fprintf(o, "  {%s, %s, %s, NULL, 0},\n", emit_str_lit(in->str, strlen(in->str)), emit_dtconst(dt),
                emit_flit(DT_F64, dt == DT_I32 ? (double)in->ival : in->fval));
    }
    fprintf(o, "};\n");
  }
  const char *r = arena_printf("shd_args_check(%s, %d);", args.len ? "shd_args" : "NULL", args.len);
  free(args.data);
  return r;
}

/* ---- the IR text ------------------------------------------------------------------- */

/* A string in the IR text, with the escapes of the C literal. */
static void print_str(FILE *out, const Module *mod, const Inst *in) {
  if (in->str)
    fprintf(out, " %s", str_lit(in->str));
}

static void print_load_dim(FILE *out, const Module *mod, const Inst *in) {
  print_str(out, mod, in);
  fprintf(out, " dim=%d", in->dim);
}

static void print_texts(FILE *out, const Module *mod, const Inst *in) {
  fputs(" items=[", out);
  for (int k = 0; k < in->niv; k++) {
    if (k)
      fputc(',', out);
    if (in->iv[k] < 0)
      fputs(str_lit(in->str + (-1 - in->iv[k])), out);
    else
      fprintf(out, "$%lld", (long long)in->iv[k]);
  }
  fputc(']', out);
}

/* ---- the tables --------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* print and save make nothing; load's array and arg's value take the type
 * declared (load's annotation, arg's default); clock is seconds (f64) and
 * load_dim a size (i32). A path is a str; a window's starts are i32. */
static bool infer_output(const Module *mod, const Inst *in, Type *out) { return in->nresults == 0; }

static bool infer_load(const Module *mod, const Inst *in, Type *out) {
  for (int i = 0; i < in->nargs; i++)
    if (in->args[i]->type.kind != TY_STRING && !(ir_arg_is(in, i, DT_I32) && in->args[i]->type.rank == 0))
      return false;
  return out->kind == TY_ARRAY;
}

static bool infer_arg(const Module *mod, const Inst *in, Type *out) {
  return out->kind == TY_STRING || (out->kind == TY_ARRAY && out->rank == 0);
}

static bool infer_scalar_f64(const Module *mod, const Inst *in, Type *out) {
  Type s = ty_scalar(DT_F64);
  return ir_infer_shape(out, &s);
}

static bool infer_load_dim(const Module *mod, const Inst *in, Type *out) {
  Type s = ty_scalar(DT_I32);
  return ir_infer_shape(out, &s);
}

static const OpDef ops[] = {
    {.op = IR_PRINT, .name = "print", .flags = OPF_EFFECT | OPF_OUTPUT, .print = print_texts, .partition = part_print,
     .emit = emit_print, .infer = infer_output},
    {.op = IR_SAVE, .name = "save", .flags = OPF_EFFECT | OPF_OUTPUT, .print = print_str, .partition = part_save,
     .emit = emit_save, .infer = infer_output},
    {.op = IR_LOAD, .name = "load", .flags = OPF_EFFECT | OPF_RECOMPUTE, .print = print_str, .partition = part_created,
     .emit = emit_load, .infer = infer_load},
    {.op = IR_LOAD_DIM, .name = "load_dim", .flags = OPF_EFFECT | OPF_RECOMPUTE, .print = print_load_dim, .emit = emit_load_dim, .infer = infer_load_dim},
    {.op = IR_ARG, .name = "arg", .flags = OPF_RECOMPUTE, .print = print_str, .emit = emit_arg, .infer = infer_arg},
    {.op = IR_CLOCK, .name = "clock", .flags = OPF_EFFECT | OPF_RECOMPUTE, .emit = emit_clock, .infer = infer_scalar_f64},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "print", .code = IO_PRINT, .check = check_print, .lower = lower_print},
    {.name = "save", .code = IO_SAVE, .check = check_save, .lower = lower_save},
    {.name = "load", .code = IO_LOAD, .flags = BIF_ANNOT | BIF_STR_ANNOT, .check = check_load, .lower = lower_load},
    {.name = "load_dim", .code = IO_LOAD_DIM, .check = check_load_dim, .lower = lower_load_dim},
    {.name = "arg", .code = IO_ARG, .flags = BIF_ANNOT | BIF_STR_ANNOT, .check = check_arg, .lower = lower_arg},
    {.name = "clock", .code = IO_CLOCK, .check = check_clock, .lower = lower_clock},
    {0},
};

const OpFamily op_io_family = {
    .name = "io",
    .ops = ops,
    .builtins = builtins,
    .main_setup = args_setup,
};
