/* op_io.c: the I/O family: print, metrics, save, load, load_dim, arg, clock,
 * exists, stop_requested, and the directories of a long run: mkdir,
 * keep_last, manifest.
 *
 * print(items...) prints on rank 0 (sharded values are gathered, pending
 * sums reduced: the partitioner reshards each value to replicated);
 * metrics(key=value, ...) appends one JSON object to the file of the
 * program's --metrics=FILE flag, on rank 0 (its scalars replicated as
 * print's; runtime/metrics.c writes valid JSON whatever they hold);
 * manifest(PATH, key=value, ...) writes one JSON file recording the run
 * (program, shdc, mesh, consts, args) and the keys; mkdir(PATH) creates a
 * directory (and parents) and checks it is writable; keep_last(DIR,
 * PREFIX, N) removes all but the last N entries of DIR named PREFIX...
 * (runtime/fs.c); all three are collective, rank 0 acting; save
 * writes the global array as .npy, each rank its own block, after reducing
 * pending sums; load reads one, typed by its annotation; load_dim reads the
 * size of one dim of a file's array at run time (to place windows in a file
 * of any length); arg reads --name=value (or --name value) from the
 * program's command line, with a help text for --help; clock is MPI_Wtime;
 * stop_requested() tells whether the job was asked to stop (SIGTERM, as a
 * scheduler sends at its time limit, or SIGUSR1/2), agreed by every rank
 * (an all-reduce of one int), so that a program can checkpoint and end its
 * loop on every rank at the same step. The C's main installs the handlers
 * (shd_stop_init) only when the program calls it: a program that never
 * asks keeps the default of stopping at once. exists(PATH) asks rank 0
 * whether PATH exists.
 *
 * A struct is saved to a directory, one .npy per leaf, replaced as a whole
 * (language.md §9.5): tc_struct.c gives save(DIR, p) one save per leaf into
 * a fresh directory that save_begin makes beside DIR, then save_commit,
 * which swaps it into DIR's place (runtime/savedir.c); load(DIR) of a
 * struct is one load per leaf.
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
#include <ctype.h>

#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname

enum { IO_PRINT, IO_SAVE, IO_LOAD, IO_LOAD_DIM, IO_ARG, IO_CLOCK, IO_EXISTS, IO_STOP, IO_METRICS, IO_MANIFEST,
       IO_MKDIR, IO_KEEP_LAST };

enum {
  IR_PRINT = IR_BASE_IO, /* args: values; str: '\x1f'-separated texts */
  IR_SAVE,               /* str: path */
  IR_LOAD,               /* str: path */
  IR_ARG,                /* str: name, NUL, help text; fval/ival default */
  IR_CLOCK,              /* wall-clock seconds (f64), for timing steps */
  IR_LOAD_DIM,           /* str: path (or the last arg); dim: which dim; result i32 */
  IR_SAVE_BEGIN,         /* args: DIR (str); result: a fresh directory beside it (str) */
  IR_SAVE_COMMIT,        /* args: the fresh directory, DIR: swapped into DIR's place */
  IR_EXISTS,             /* str: path (or the arg); result bool */
  IR_STOP_REQUESTED,     /* bool, the same on every rank: SIGTERM/SIGUSR1/SIGUSR2 arrived */
  IR_METRICS,            /* args: values; str: their keys, each NUL-terminated (niv) */
  IR_MANIFEST,           /* args: path, values; str: the keys as IR_METRICS */
  IR_MKDIR,              /* args: path */
  IR_KEEP_LAST,          /* args: dir, prefix, count */
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

/* .npy I/O is collective over the whole mesh and works on global arrays,
 * and a metrics line is the program's: a manual body (per-device, maybe
 * under a varying branch) has neither. */
static bool global_view_only(TcCtx *c, Expr *e) {
  if (!c->manual)
    return true;
  if (e->bi->code == IO_METRICS || e->bi->code == IO_MANIFEST)
    diag_error(e->pos, "E_MANUAL", "%s writes for the whole program from rank 0, so it is only available in the "
               "global view; return the value from the manual function and report it there", tc_callee(e));
  else if (e->bi->code == IO_MKDIR || e->bi->code == IO_KEEP_LAST)
    diag_error(e->pos, "E_MANUAL", "%s changes the file system for the whole program, with every device taking "
               "part, so it is only available in the global view; call it there", tc_callee(e));
  else
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

/* The two halves of a struct save (below): rows of no table, which save's
 * check hands to tc_struct_save for the calls it builds. */
static const BuiltinDef save_begin_row, save_commit_row;

/* The key=value arguments from..len of a metrics or manifest call: each
 * key once (and none of `reserved`), each value a str or a scalar that is
 * the same on every device (a pending sum is reduced, as print does). */
static bool check_keyed(TcCtx *c, Expr *e, int from, const char *const *reserved) {
  const char *what = tc_callee(e);
  bool ok = true;
  for (int i = from; i < e->args.len; i++) {
    Expr *a = e->args.data[i];
    if (a->kind != EX_KWARG) {
      diag_error(a->pos, "E_ARG", "%s takes key=value arguments, each value named by its key: %s, not %s(%s%s)",
                 what, from ? "manifest(path, step=step)" : "metrics(step=step, loss=l)", what,
                 from ? "path, " : "", tc_expr_text(a));
      ok = false;
      continue;
    }
    for (int k = from; k < i; k++) {
      Expr *b = e->args.data[k];
      if (b->kind == EX_KWARG && !strcmp(b->str, a->str)) {
        diag_error(a->pos, "E_ARG", "%s: the key %s is given twice; each key appears once", what, a->str);
        ok = false;
      }
    }
    for (int k = 0; reserved && reserved[k]; k++)
      if (!strcmp(reserved[k], a->str)) {
        diag_error(a->pos, "E_ARG", "%s: the key %s is %s; choose another name, e.g. my_%s", what, a->str,
                   from ? "the manifest's own (program, shdc, ranks, mesh, config, args)"
                        : "the runtime's own (each line's wall-clock time, in Unix seconds)", a->str);
        ok = false;
      }
    Type t = tc_expr(c, a->lhs);
    if (t.kind == TY_ERROR || t.kind == TY_STRING) {
      ok &= t.kind != TY_ERROR;
      continue;
    }
    if (!tc_want_array(c, a->lhs, &t, what)) {
      ok = false;
      continue;
    }
    if (t.rank) {
      diag_error(a->lhs->pos, "E_SHAPE", "%s: %s=%s is the array %s; %s, e.g. %s=mean(%s)", what, a->str,
                 tc_expr_text(a->lhs), TS(&t), from ? "a manifest value is one scalar" : "a metric is one scalar per line",
                 a->str, tc_expr_text(a->lhs));
      ok = false;
    }
  }
  return ok;
}

/* metrics(key=value, ...): keyword arguments only. */
static Type check_metrics(TcCtx *c, Expr *e, const Type *annot) {
  if (!global_view_only(c, e))
    return ty_error();
  if (!e->args.len) {
    diag_error(e->pos, "E_ARG", "metrics needs at least one key=value, e.g. metrics(step=step, loss=l)");
    return ty_error();
  }
  static const char *const reserved[] = {"time", NULL};
  return check_keyed(c, e, 0, reserved) ? ty_void() : ty_error();
}

/* A str value (literal or expression), not a path. */
static bool check_str_value(TcCtx *c, Expr *a, const char *what) {
  Type t = tc_expr(c, a);
  if (t.kind == TY_ERROR)
    return false;
  if (t.kind != TY_STRING) {
    diag_error(a->pos, "E_ARG", "%s must be a str, not %s", what, t.kind == TY_ARRAY ? TS(&t) : "this value");
    return false;
  }
  return true;
}

/* A str path (literal or expression) as the first argument. */
static bool check_path_first(TcCtx *c, Expr *e, const char *usage) {
  if (!e->args.len || ((Expr *)e->args.data[0])->kind == EX_KWARG) {
    diag_error(e->pos, "E_ARG", "%s needs a path first: %s", tc_callee(e), usage);
    return false;
  }
  Expr *p = e->args.data[0];
  if (p->kind == EX_STRING && !p->str[0]) {
    diag_error(p->pos, "E_ARG", "%s: the path is empty; write e.g. %s", tc_callee(e), usage);
    return false;
  }
  if (p->kind == EX_STRING)
    return tc_string_arg(c, p, tc_callee(e));
  return check_path(c, p, tc_callee(e));
}

/* manifest(PATH, key=value, ...). The program's consts (their values
 * after -D) go with the call, as name=literal keywords of a list in
 * TcInfo.value, for the manifest's "config": a number const as an int or
 * float literal, a dtype const (`const DT = f32`) as a string literal of
 * the dtype's name with the DType in ival. */
static Type check_manifest(TcCtx *c, Expr *e, const Type *annot) {
  static const char *const reserved[] = {"program", "shdc", "ranks", "mesh", "config", "args", NULL};
  if (!global_view_only(c, e) || !check_path_first(c, e, "manifest(dir + \"/manifest.json\", step=step)"))
    return ty_error();
  if (!check_keyed(c, e, 1, reserved))
    return ty_error();
  Expr *config = ast_expr(EX_LIST, e->pos);
  for (int i = 0; i < c->prog->consts.len; i++) {
    const ConstDecl *cd = c->prog->consts.data[i];
    bool dtype = cd->sym && cd->sym->kind == SYM_TYPE && cd->sym->dtype_const;
    if (!cd->sym || (cd->sym->kind != SYM_CONST && !dtype))
      continue;
    Expr *v = ast_expr(dtype ? EX_STRING : cd->sym->is_float_const ? EX_FLOAT : EX_INT, e->pos);
    v->ival = dtype ? cd->sym->type.dtype : cd->sym->ival;
    v->fval = cd->sym->fval;
    v->str = dtype ? (char *)ty_dtype_name(cd->sym->type.dtype) : NULL;
    Expr *kv = ast_expr(EX_KWARG, e->pos);
    kv->str = (char *)cd->sym->name;
    kv->lhs = v;
    vec_push(&config->args, kv);
  }
  tc_info(e)->value = config;
  return ty_void();
}

/* mkdir(PATH). */
static Type check_mkdir(TcCtx *c, Expr *e, const Type *annot) {
  Expr *pos[1], *kw[1];
  if (!global_view_only(c, e) || tc_call_args(c, e, pos, 1, 1, kw, NULL, 0, "mkdir(dir)") < 0 ||
      !check_path_first(c, e, "mkdir(\"ckpt\")"))
    return ty_error();
  return ty_void();
}

/* keep_last(DIR, PREFIX, N). */
static Type check_keep_last(TcCtx *c, Expr *e, const Type *annot) {
  Expr *pos[3], *kw[1];
  const char *usage = "keep_last(dir, \"step_\", 3)";
  if (!global_view_only(c, e) || tc_call_args(c, e, pos, 3, 3, kw, NULL, 0, usage) < 0 ||
      !check_path_first(c, e, usage) || !check_str_value(c, pos[1], "keep_last's prefix") ||
      !tc_scalar_value(c, pos[2], DT_I32, "keep_last's count", false))
    return ty_error();
  Expr *p = pos[1];
  if (p->kind == EX_STRING && (!p->str[0] || strchr(p->str, '/'))) {
    diag_error(p->pos, "E_ARG", "keep_last: the prefix %s %s; it names the entries of the directory to keep or "
               "remove, e.g. %s", str_lit(p->str), p->str[0] ? "holds '/'" : "is empty (it would match every entry)",
               usage);
    return ty_error();
  }
  if (pos[2]->ty->weak) {
    int64_t n;
    if (!tc_const_int(c, pos[2], &n))
      return ty_error();
    if (n < 1) {
      diag_error(pos[2]->pos, "E_ARG", "keep_last keeps %lld entries; keep at least 1 (the newest)", (long long)n);
      return ty_error();
    }
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
  Type x = tc_expr(c, pos[1]);
  if (x.kind == TY_STRUCT)
    return tc_struct_save(c, e, pos[0], pos[1], &save_begin_row, &save_commit_row);
  pos[1]->pretyped = true;
  x = tc_operand(c, pos[1], "save");
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
  if (annot->kind == TY_STRUCT && n == 1)
    return tc_struct_load(c, e, pos[0], annot);
  if (annot->kind == TY_STRUCT) {
    diag_error(pos[1]->pos, "E_ARG", "load: a struct is read whole, from its directory: load(DIR); a window is "
               "read from one array's file");
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

/* exists(PATH): a bool, the same on every rank. */
static Type check_exists(TcCtx *c, Expr *e, const Type *annot) {
  Expr *pos[1], *kw[1];
  if (!global_view_only(c, e))
    return ty_error();
  int n = tc_call_args(c, e, pos, 1, 1, kw, NULL, 0, "exists(\"path\")");
  if (n < 0 || !check_path(c, pos[0], "exists"))
    return ty_error();
  return ty_scalar(DT_BOOL);
}

/* The two halves of a struct save, called by the code tc_struct.c builds:
 * their operands are str values already typed. */
static Type check_save_begin(TcCtx *c, Expr *e, const Type *annot) { return ty_string(); }
static Type check_save_commit(TcCtx *c, Expr *e, const Type *annot) { return ty_void(); }

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

/* The runtime's own flags of a program: --help, and --metrics=FILE of one
 * that calls metrics(). */
static const char *const runtime_flags[] = {"help", "metrics"};

/* The program reads --NAME=VALUE: a name must be something a command line
 * can spell that way (and not one of the runtime's own flags). */
static bool arg_name_ok(Expr *s) {
  const char *why = !s->str[0] ? "is empty"
                    : strchr(s->str, '=') ? "contains '=', which ends the name on the command line"
                    : !strcmp(s->str, runtime_flags[0]) ? "is reserved: --help lists the program's arguments"
                    : !strcmp(s->str, runtime_flags[1]) ? "is reserved: --metrics=FILE is where metrics() writes"
                    : NULL;
  if (why)
    diag_error(s->pos, "E_ARG", "arg: the name %s %s; use letters, digits, '_' or '-', e.g. arg(\"steps\", 10)",
               str_lit(s->str), why);
  return !why;
}

/* help="...": one line of printable text for --help. */
static bool arg_help_ok(TcCtx *c, Expr *h) {
  if (!h)
    return true;
  if (!tc_string_arg(c, h, "arg's help"))
    return false;
  for (const unsigned char *p = (const unsigned char *)h->str; *p; p++)
    if (*p < 32 || *p == 127) {
      diag_error(h->pos, "E_ARG", "arg: the help text holds a control character (byte %d); --help prints it on "
                 "one line of plain text", *p);
      return false;
    }
  return true;
}

static Type check_arg(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  const char *kwn[1] = {"help"};
  int n = tc_call_args(c, e, pos, 2, 2, kw, kwn, 1, "arg(\"name\", default) or arg(\"name\", default, help=\"...\")");
  if (n < 0 || !tc_string_arg(c, pos[0], "arg") || !arg_name_ok(pos[0]) || !arg_help_ok(c, kw[0]))
    return ty_error();
  info->y = kw[0];
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

/* Every rank must reach it (it is an all-reduce over the world): not in
 * manual code, where conditions may vary across devices. */
static Type check_stop(TcCtx *c, Expr *e, const Type *annot) {
  if (e->args.len) {
    diag_error(e->pos, "E_ARG", "stop_requested() takes no arguments");
    return ty_error();
  }
  if (c->manual) {
    diag_error(e->pos, "E_MANUAL", "stop_requested() is agreed by every device, so it is called in the global view, "
               "not in a manual function; call it outside and pass the result in");
    return ty_error();
  }
  return ty_scalar(DT_BOOL);
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

/* IR_METRICS: one operand per key, the keys in Inst.str one after another,
 * each NUL-terminated (Inst.niv of them). */
static Value *lower_metrics(Lower *L, Expr *e) {
  int n = e->args.len;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)n);
  Str keys = {0};
  for (int i = 0; i < n; i++) {
    Expr *a = e->args.data[i];
    str_printf(&keys, "%s", a->str);
    str_putc(&keys, '\0');
    args[i] = a->lhs->ty->kind == TY_STRING ? lower_expr(L, a->lhs) : lower_as(L, a->lhs, a->lhs->ty->dtype);
  }
  Inst *in = lower_emit0(L, IR_METRICS, e->pos, n, args);
  in->str = arena_strndup(keys.buf, keys.len);
  in->niv = n;
  free(keys.buf);
  return NULL;
}

/* IR_MANIFEST: the path, then one operand per key (keys as IR_METRICS, in
 * Inst.str); after the keys Inst.str holds each const's kind and name
 * ("iN", "fSCALE", "dDT": MANIFEST_INT, _FLOAT, _DTYPE, then the name) and
 * Inst.iv its value (Inst.dim of them): an int const's int64, a float
 * const's double as its bits, a dtype const's DType. */
enum { MANIFEST_INT = 'i', MANIFEST_FLOAT = 'f', MANIFEST_DTYPE = 'd' };

static Value *lower_manifest(Lower *L, Expr *e) {
  int n = e->args.len;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)n);
  Str keys = {0};
  Expr *config = ((TcInfo *)e->tc)->value;
  args[0] = lower_expr(L, e->args.data[0]);
  for (int i = 1; i < n; i++) {
    Expr *a = e->args.data[i];
    str_printf(&keys, "%s", a->str);
    str_putc(&keys, '\0');
    args[i] = a->lhs->ty->kind == TY_STRING ? lower_expr(L, a->lhs) : lower_as(L, a->lhs, a->lhs->ty->dtype);
  }
  int nc = config->args.len;
  int64_t *vals = arena_alloc(sizeof(int64_t) * (size_t)(nc + 1));
  for (int i = 0; i < nc; i++) {
    Expr *kv = config->args.data[i];
    int kind = kv->lhs->kind == EX_FLOAT ? MANIFEST_FLOAT : kv->lhs->kind == EX_STRING ? MANIFEST_DTYPE : MANIFEST_INT;
    str_printf(&keys, "%c%s", kind, kv->str);
    str_putc(&keys, '\0');
    if (kind == MANIFEST_FLOAT)
      memcpy(&vals[i], &kv->lhs->fval, sizeof(double));
    else
      vals[i] = kv->lhs->ival;
  }
  Inst *in = lower_emit0(L, IR_MANIFEST, e->pos, n, args);
  in->str = keys.len ? arena_strndup(keys.buf, keys.len) : "";
  in->niv = n - 1;
  in->iv = vals;
  in->dim = nc;
  free(keys.buf);
  return NULL;
}

static Value *lower_mkdir(Lower *L, Expr *e) {
  Value *p = lower_expr(L, e->args.data[0]);
  lower_emit0(L, IR_MKDIR, e->pos, 1, &p);
  return NULL;
}

static Value *lower_keep_last(Lower *L, Expr *e) {
  Value *args[3] = {lower_expr(L, e->args.data[0]), lower_expr(L, e->args.data[1]),
                    lower_as(L, e->args.data[2], DT_I32)};
  lower_emit0(L, IR_KEEP_LAST, e->pos, 3, args);
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

/* IR_ARG's Inst.str: the name, NUL, the help text ("" when none). */
static const char *arg_name_help(Expr *e) {
  TcInfo *info = e->tc;
  const char *name = ((Expr *)e->args.data[0])->str, *help = info->y ? info->y->str : "";
  size_t n = strlen(name), h = strlen(help);
  char *s = arena_alloc(n + h + 2);
  memcpy(s, name, n + 1);
  memcpy(s + n + 1, help, h + 1);
  return s;
}

/* One name is one value on the command line, with one default and one
 * type (--help lists it once): a later arg of a name must read it as the
 * first did. The calls of one lowering, which sees every function, imported
 * or a generic's instance, once; an instance repeats its generic's call at
 * the same place, which is the same call, checked once. A lowering is
 * known by its module's mesh (lower_mesh). */
typedef struct {
  const Expr *call;
  double value;                  /* a number's default, folded */
} ArgSeen;

static struct {
  const Mesh *of;
  Vec calls;                     /* ArgSeen * */
} args_seen;

static const char *arg_name(const Expr *call) { return ((Expr *)call->args.data[0])->str; }
static bool same_pos(Pos a, Pos b) { return a.file == b.file && a.line == b.line && a.col == b.col; }

/* A default's value as source text: "out", 3, 0.1, true. */
static const char *default_value(const Expr *call, double v) {
  const Expr *d = ((TcInfo *)call->tc)->value;
  if (d->kind == EX_STRING)
    return emit_str_lit(d->str, (size_t)d->ival);
  if (call->ty->dtype == DT_BOOL)
    return v != 0 ? "true" : "false";
  int prec = 1;   /* the shortest that reads back as v */
  while (prec < 17 && strtod(arena_printf("%.*g", prec, v), NULL) != v)
    prec++;
  return arena_printf("%.*g", prec, v);
}

/* A default as the call wrote it (its value when it has no source text). */
static const char *default_source(const Expr *call, double v) {
  const char *src = diag_expr_source(((TcInfo *)call->tc)->value);
  return src ? src : default_value(call, v);
}

/* The same, with the value where it is a name or arithmetic: 3, N (= 3). */
static const char *default_text(const Expr *call, double v) {
  const Expr *d = ((TcInfo *)call->tc)->value;
  const char *src = default_source(call, v), *val = default_value(call, v);
  bool lit = d->kind == EX_INT || d->kind == EX_FLOAT || d->kind == EX_BOOL || d->kind == EX_STRING;
  return lit || !strcmp(src, val) ? src : arena_printf("%s (= %s)", src, val);
}

static const char *arg_kind(const Expr *call) {
  return call->ty->kind == TY_STRING ? "str" : ty_dtype_name(call->ty->dtype);
}

static bool same_default(const ArgSeen *a, const Expr *call, double value) {
  if (strcmp(arg_kind(a->call), arg_kind(call)))
    return false;
  if (call->ty->kind != TY_STRING)
    return a->value == value;
  const Expr *x = ((TcInfo *)a->call->tc)->value, *y = ((TcInfo *)call->tc)->value;
  return x->ival == y->ival && !memcmp(x->str, y->str, (size_t)x->ival);
}

/* A let's name for an arg's value: its name with what an identifier cannot
 * hold made '_'. */
static const char *let_name(const char *arg) {
  char *s = arena_printf("%s%s", isdigit((unsigned char)arg[0]) ? "a_" : "", arg);
  for (char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p))
      *p = '_';
  return s;
}

static void check_arg_once(Lower *L, Expr *e, double value) {
  if (args_seen.of != lower_mesh(L)) {
    args_seen.of = lower_mesh(L);
    args_seen.calls.len = 0;
  }
  const ArgSeen *first = NULL;
  for (int i = 0; i < args_seen.calls.len; i++) {
    const ArgSeen *a = args_seen.calls.data[i];
    if (strcmp(arg_name(a->call), arg_name(e)))
      continue;
    if (same_pos(a->call->pos, e->pos))
      return;   /* another instance of a generic's call: checked (and reported) once */
    first = first ? first : a;
  }
  ArgSeen *a = arena_alloc(sizeof *a);
  *a = (ArgSeen){e, value};
  vec_push(&args_seen.calls, a);
  if (!first || same_default(first, e, value))
    return;
  Pos p = first->call->pos;
  diag_error(e->pos, "E_ARG", "arg: %s is read here as %s with default %s, but at %s:%d:%d as %s with default %s; "
             "one name is one value on the command line: give both calls the same default%s, or read it once into "
             "a let (let %s = arg(%s, %s)) and use that", str_lit(arg_name(e)), arg_kind(e), default_text(e, value),
             p.file ? p.file->name : "?", p.line, p.col, arg_kind(first->call), default_text(first->call, first->value),
             strcmp(arg_kind(e), arg_kind(first->call)) ? " and type" : "", let_name(arg_name(e)),
             str_lit(arg_name(e)), default_source(first->call, first->value));
  diag_note(p, "the first arg(%s, ...) is here", str_lit(arg_name(e)));
}

static Value *lower_arg(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  if (e->ty->kind == TY_STRING) {
    check_arg_once(L, e, 0);
    Value *def = lower_expr(L, info->value);
    Inst *in = lower_emit(L, IR_ARG, e->pos, 1, &def, *e->ty);
    in->str = arg_name_help(e);
    return in->results[0];
  }
  Inst *in = lower_emit(L, IR_ARG, e->pos, 0, NULL, *e->ty);
  in->str = arg_name_help(e);
  in->fval = lower_fold(L, info->value);
  in->ival = (int64_t)in->fval;
  check_arg_once(L, e, in->fval);
  return in->results[0];
}

static Value *lower_clock(Lower *L, Expr *e) { return lower_emit1(L, IR_CLOCK, e->pos, 0, NULL, *e->ty); }
static Value *lower_stop(Lower *L, Expr *e) { return lower_emit1(L, IR_STOP_REQUESTED, e->pos, 0, NULL, *e->ty); }

static Value *lower_exists(Lower *L, Expr *e) {
  Expr *path = e->args.data[0];
  bool lit = path->kind == EX_STRING;
  Value *p = lit ? NULL : lower_expr(L, path);
  Inst *in = lower_emit(L, IR_EXISTS, e->pos, lit ? 0 : 1, &p, *e->ty);
  in->str = lit ? path->str : NULL;
  return in->results[0];
}

static Value *lower_save_begin(Lower *L, Expr *e) {
  Value *dir = lower_expr(L, e->args.data[0]);
  return lower_emit1(L, IR_SAVE_BEGIN, e->pos, 1, &dir, ty_string());
}

static Value *lower_save_commit(Lower *L, Expr *e) {
  Value *args[2] = {lower_expr(L, e->args.data[0]), lower_expr(L, e->args.data[1])};
  lower_emit0(L, IR_SAVE_COMMIT, e->pos, 2, args);
  return NULL;
}

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
      emit_line(e, "shd_print_scalar(%s, %s);", emit_scalar_double(v), emit_dtconst(v->type.dtype));
  }
  emit_line(e, "shd_print_end();");
  emit_indent(e, -2);
  emit_line(e, "}");
}

/* The shd_json_* calls of the keyed operands first..nargs-1 (keys in
 * Inst.str). */
static void emit_json_values(Emit *e, const Inst *in, int first) {
  const char *key = in->str;
  for (int k = first; k < in->nargs; k++, key += strlen(key) + 1) {
    const Value *v = in->args[k];
    if (is_str(v))
      emit_line(e, "shd_json_str(%s, &%s);", str_lit(key), vname(v));
    else if (v->type.dtype == DT_I32)
      emit_line(e, "shd_json_i32(%s, %s);", str_lit(key), vname(v));
    else if (v->type.dtype == DT_BOOL)
      emit_line(e, "shd_json_bool(%s, %s);", str_lit(key), vname(v));
    else
      emit_line(e, "shd_json_float(%s, %s, %s);", str_lit(key), emit_scalar_double(v),
                v->type.dtype != DT_F64 ? "true" : "false");
  }
}

static void emit_metrics(Emit *e, const Inst *in) {
  emit_line(e, "if (shd_world_rank() == 0 && shd_metrics_on()) {");
  emit_indent(e, 2);
  emit_line(e, "shd_metrics_begin();");
  emit_json_values(e, in, 0);
  emit_line(e, "shd_metrics_end(%d);", in->pos.line);
  emit_indent(e, -2);
  emit_line(e, "}");
}

/* One const of a manifest's table (lower_manifest): {name, kind, integer,
 * number, text}, every name and text an escaped C string literal. */
static void emit_manifest_const(Str *table, const char *kname, int64_t v) {
  const char *name = str_lit(kname + 1);
  if (*kname == MANIFEST_FLOAT) {
    double f;
    memcpy(&f, &v, sizeof f);
    str_printf(table, "{%s, 'f', 0, %s, NULL}, ", name, emit_flit(DT_F64, f));
  } else if (*kname == MANIFEST_DTYPE) {
    str_printf(table, "{%s, 'd', 0, 0.0, %s}, ", name, str_lit(ty_dtype_name((DType)v)));
  } else if (v == INT64_MIN) {
    str_printf(table, "{%s, 'i', -9223372036854775807LL - 1, 0.0, NULL}, ", name);
  } else {
    str_printf(table, "{%s, 'i', %lldLL, 0.0, NULL}, ", name, (long long)v);
  }
}

/* manifest(PATH, ...): operand 0 is the path; the consts after the keys
 * (lower_manifest) become a table of the call. */
static void emit_manifest(Emit *e, const Inst *in) {
  const char *name = in->str;
  for (int k = 0; k < in->niv; k++)
    name += strlen(name) + 1;
  Str table = {0};
  for (int k = 0; k < in->dim; k++, name += strlen(name) + 1)
    emit_manifest_const(&table, name, in->iv[k]);
  emit_line(e, "{");
  emit_indent(e, 2);
  emit_line(e, "static const shd_const consts[] = {%s{NULL, 0, 0, 0.0, NULL}};", table.len ? str_cstr(&table) : "");
  emit_line(e, "shd_manifest_begin(%s, consts, %d);", str_lit(drv_version_full()), in->dim);
  free(table.buf);
  emit_line(e, "if (shd_world_rank() == 0) {");
  emit_indent(e, 2);
  emit_json_values(e, in, 1);
  emit_indent(e, -2);
  emit_line(e, "}");
  emit_line(e, "shd_manifest_end(shd_str_path(&%s, \"manifest\", %d), %d);", vname(in->args[0]), in->pos.line,
            in->pos.line);
  emit_indent(e, -2);
  emit_line(e, "}");
}

static void emit_mkdir(Emit *e, const Inst *in) {
  emit_line(e, "shd_mkdir(shd_str_path(&%s, \"mkdir\", %d), %d);", vname(in->args[0]), in->pos.line, in->pos.line);
}

static void emit_keep_last(Emit *e, const Inst *in) {
  emit_line(e, "shd_keep_last(shd_str_path(&%s, \"keep_last\", %d), %s.s, %s, %d);", vname(in->args[0]),
            in->pos.line, vname(in->args[1]), vname(in->args[2]), in->pos.line);
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
  if (dt == DT_BF16) {
    emit_line(e, "uint16_t %s = shd_d2bf(shd_arg_f64(%s, %s));", vname(r), str_lit(in->str),
              emit_flit(DT_F64, in->fval));
    return;
  }
  const char *get = dt == DT_I32 ? "shd_arg_i32" : dt == DT_BOOL ? "shd_arg_bool" : "shd_arg_f64";
  emit_line(e, "%s %s = (%s)%s(%s, %s);", ty_dtype_c(dt), vname(r), ty_dtype_c(dt), get, str_lit(in->str),
       dt == DT_BOOL ? (in->fval != 0 ? "true" : "false") : emit_flit(dt == DT_I32 ? DT_I32 : DT_F64, in->fval));
}

static void emit_clock(Emit *e, const Inst *in) { emit_line(e, "double %s = shd_time();", vname(in->results[0])); }
static void emit_stop(Emit *e, const Inst *in) {
  emit_line(e, "bool %s = shd_stop_requested();", vname(in->results[0]));
}

static void emit_exists(Emit *e, const Inst *in) {
  emit_line(e, "bool %s = shd_exists(%s);", vname(in->results[0]), path_c(in, "exists"));
}

static void emit_save_begin(Emit *e, const Inst *in) {
  emit_line(e, "shd_str %s;", vname(in->results[0]));
  emit_line(e, "shd_savedir_begin(&%s, &%s, %d);", vname(in->results[0]), vname(in->args[0]), in->pos.line);
}

static void emit_save_commit(Emit *e, const Inst *in) {
  emit_line(e, "shd_savedir_commit(&%s, &%s, %d);", vname(in->args[0]), vname(in->args[1]), in->pos.line);
}

/* ---- main's table of the program's args ------------------------------------------------- */

/* What main sets up: the program's args (the first of each name), and
 * whether it asks stop_requested() or writes metrics. */
typedef struct {
  Vec args;
  bool stop, metrics;
} MainUses;

static void collect_uses(const IrBlock *b, MainUses *u) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    u->stop |= in->op == IR_STOP_REQUESTED;
    u->metrics |= in->op == IR_METRICS;
    bool seen = false;
    for (int k = 0; in->op == IR_ARG && k < u->args.len && !seen; k++)
      seen = !strcmp(((Inst *)u->args.data[k])->str, in->str);
    if (in->op == IR_ARG && !seen)
      vec_push(&u->args, in);
    for (int r = 0; r < in->nregions; r++)
      collect_uses(in->regions[r], u);
  }
}

/* Every arg of the functions main reaches, once each, as a table of data
 * (names and help texts are escaped literals) that the runtime checks the
 * command line against before the program runs; the metrics file opened
 * before the first step when the program writes metrics; and, when the
 * program asks stop_requested(), SIGTERM/SIGUSR1/SIGUSR2 taken as a
 * request to stop. */
static const char *args_setup(Emit *e, const bool *live) {
  const Module *mod = emit_module_of(e);
  FILE *o = emit_out(e);
  MainUses u = {0};
  for (int i = 0; i < mod->funcs.len; i++)
    if (live[i])
      collect_uses(((Func *)mod->funcs.data[i])->body, &u);
  if (u.args.len) {
    fprintf(o, "\nstatic const shd_arg_spec shd_args[] = {\n");
    for (int i = 0; i < u.args.len; i++) {
      const Inst *in = u.args.data[i];
      DType dt = in->results[0]->type.dtype;
      const Inst *sdef = in->results[0]->type.kind == TY_STRING ? in->args[0]->def : NULL;   /* its literal */
      const char *help = in->str + strlen(in->str) + 1;
      if (sdef)
        fprintf(o, "  {%s, SHD_I32, 0.0, %s, %lld, %s},\n", emit_str_lit(in->str, strlen(in->str)),
                emit_str_lit(sdef->str, (size_t)sdef->ival), (long long)sdef->ival, emit_str_lit(help, strlen(help)));
      else
        fprintf(o, "  {%s, %s, %s, NULL, 0, %s},\n", emit_str_lit(in->str, strlen(in->str)), emit_dtconst(dt),
                emit_flit(DT_F64, dt == DT_I32 ? (double)in->ival : in->fval), emit_str_lit(help, strlen(help)));
    }
    fprintf(o, "};\n");
  }
  const char *r = arena_printf("shd_program_info(%s);\n  %sshd_args_check(%s, %d);%s", str_lit(drv_version_full()),
                               u.metrics ? "shd_metrics_enable();\n  " : "",
                               u.args.len ? "shd_args" : "NULL", u.args.len, u.stop ? "\n  shd_stop_init();" : "");
  free(u.args.data);
  return r;
}

/* ---- the IR text ------------------------------------------------------------------- */

/* A string in the IR text, with the escapes of the C literal. */
static void print_str(FILE *out, const Module *mod, const Inst *in) {
  if (in->str)
    fprintf(out, " %s", str_lit(in->str));
}

static void print_arg(FILE *out, const Module *mod, const Inst *in) {
  print_str(out, mod, in);
  const char *help = in->str + strlen(in->str) + 1;
  if (*help)
    fprintf(out, " help=%s", str_lit(help));
}

static void print_keys(FILE *out, const Module *mod, const Inst *in) {
  fputs(" keys=[", out);
  const char *key = in->str;
  for (int k = 0; k < in->niv; k++, key += strlen(key) + 1)
    fprintf(out, "%s%s", k ? "," : "", str_lit(key));
  fputc(']', out);
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

/* print, save, metrics, manifest, mkdir and keep_last make nothing; load's array and arg's value take the type
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

static bool infer_save_begin(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 1 && in->args[0]->type.kind == TY_STRING && (*out = ty_string(), true);
}

static bool infer_save_commit(const Module *mod, const Inst *in, Type *out) {
  return in->nresults == 0 && in->nargs == 2 && in->args[0]->type.kind == TY_STRING &&
         in->args[1]->type.kind == TY_STRING;
}

static bool infer_exists(const Module *mod, const Inst *in, Type *out) {
  Type s = ty_scalar(DT_BOOL);
  return (in->nargs == 0 || in->args[0]->type.kind == TY_STRING) && ir_infer_shape(out, &s);
}

/* The same on every rank: a bool scalar. */
static bool infer_stop(const Module *mod, const Inst *in, Type *out) {
  Type s = ty_scalar(DT_BOOL);
  return in->nargs == 0 && ir_infer_shape(out, &s);
}

static const OpDef ops[] = {
    {.op = IR_PRINT, .name = "print", .flags = OPF_EFFECT | OPF_OUTPUT, .print = print_texts, .partition = part_print,
     .emit = emit_print, .infer = infer_output},
    {.op = IR_SAVE, .name = "save", .flags = OPF_EFFECT | OPF_OUTPUT, .print = print_str, .partition = part_save,
     .emit = emit_save, .infer = infer_output},
    {.op = IR_SAVE_BEGIN, .name = "save_begin", .flags = OPF_EFFECT | OPF_OUTPUT, .emit = emit_save_begin,
     .infer = infer_save_begin},
    {.op = IR_SAVE_COMMIT, .name = "save_commit", .flags = OPF_EFFECT | OPF_OUTPUT, .emit = emit_save_commit,
     .infer = infer_save_commit},
    {.op = IR_EXISTS, .name = "exists", .flags = OPF_EFFECT | OPF_RECOMPUTE, .print = print_str, .emit = emit_exists,
     .infer = infer_exists},
    {.op = IR_LOAD, .name = "load", .flags = OPF_EFFECT | OPF_RECOMPUTE, .print = print_str, .partition = part_created,
     .emit = emit_load, .infer = infer_load},
    {.op = IR_LOAD_DIM, .name = "load_dim", .flags = OPF_EFFECT | OPF_RECOMPUTE, .print = print_load_dim, .emit = emit_load_dim, .infer = infer_load_dim},
    {.op = IR_ARG, .name = "arg", .flags = OPF_RECOMPUTE, .print = print_arg, .emit = emit_arg, .infer = infer_arg},
    {.op = IR_METRICS, .name = "metrics", .flags = OPF_EFFECT | OPF_OUTPUT, .print = print_keys, .partition = part_print,
     .emit = emit_metrics, .infer = infer_output},
    {.op = IR_MANIFEST, .name = "manifest", .flags = OPF_EFFECT | OPF_OUTPUT, .print = print_keys,
     .partition = part_print, .emit = emit_manifest, .infer = infer_output},
    {.op = IR_MKDIR, .name = "mkdir", .flags = OPF_EFFECT | OPF_OUTPUT, .emit = emit_mkdir, .infer = infer_output},
    {.op = IR_KEEP_LAST, .name = "keep_last", .flags = OPF_EFFECT | OPF_OUTPUT, .partition = part_print,
     .emit = emit_keep_last, .infer = infer_output},
    {.op = IR_CLOCK, .name = "clock", .flags = OPF_EFFECT | OPF_RECOMPUTE, .emit = emit_clock, .infer = infer_scalar_f64},
    {.op = IR_STOP_REQUESTED, .name = "stop_requested", .flags = OPF_EFFECT, .emit = emit_stop, .infer = infer_stop},
    {0},
};

static const BuiltinDef save_begin_row = {.name = "save", .check = check_save_begin, .lower = lower_save_begin};
static const BuiltinDef save_commit_row = {.name = "save", .check = check_save_commit, .lower = lower_save_commit};

static const BuiltinDef builtins[] = {
    {.name = "print", .code = IO_PRINT, .check = check_print, .lower = lower_print},
    {.name = "save", .code = IO_SAVE, .check = check_save, .lower = lower_save},
    {.name = "load", .code = IO_LOAD, .flags = BIF_ANNOT | BIF_STR_ANNOT | BIF_STRUCT_ANNOT, .check = check_load,
     .lower = lower_load},
    {.name = "load_dim", .code = IO_LOAD_DIM, .check = check_load_dim, .lower = lower_load_dim},
    {.name = "arg", .code = IO_ARG, .flags = BIF_ANNOT | BIF_STR_ANNOT, .check = check_arg, .lower = lower_arg},
    {.name = "clock", .code = IO_CLOCK, .check = check_clock, .lower = lower_clock},
    {.name = "exists", .code = IO_EXISTS, .check = check_exists, .lower = lower_exists},
    {.name = "stop_requested", .code = IO_STOP, .check = check_stop, .lower = lower_stop},
    {.name = "metrics", .code = IO_METRICS, .check = check_metrics, .lower = lower_metrics},
    {.name = "manifest", .code = IO_MANIFEST, .check = check_manifest, .lower = lower_manifest},
    {.name = "mkdir", .code = IO_MKDIR, .check = check_mkdir, .lower = lower_mkdir},
    {.name = "keep_last", .code = IO_KEEP_LAST, .check = check_keep_last, .lower = lower_keep_last},
    {0},
};

const OpFamily op_io_family = {
    .name = "io",
    .ops = ops,
    .builtins = builtins,
    .main_setup = args_setup,
};
