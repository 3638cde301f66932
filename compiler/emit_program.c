/* emit_program.c: the program's C, function by function.
 *
 * Input: a partitioned Module and its plan (sched_plan, made when the
 * emitter's state is: emit_state_init). Output: the one C file of
 * emit_module, or for emit_parts.c each function's body. A block is
 * emitted in the plan's order: each instruction where the plan makes it
 * (a loop group's members at its last one, emit_group.c, then the tape
 * pushes that waited for the group), each value released right after its
 * last use, control flow (for, if) as C loops and branches whose yields
 * hand references over, calls with their results by pointer. Each
 * instruction's own C comes from its family (OpDef.emit, or OpDef.expr for
 * the elementwise ones), written with emit_c.c's builders.
 *
 * Invariant: this file, above emit_group.c and emit_c.c, calls them and is
 * called by neither (tests/tools/test_layering.py).
 */
#include "emit_internal.h"

/* The values of a block released after each of its instructions, in
 * definition order: vals[at[i] .. at[i + 1]). */
typedef struct {
  const Value **vals;
  int *at;
} Releases;

#define W(...) fprintf(e->out, __VA_ARGS__)

#define vname emit_vname
#define ctype emit_ctype
#define is_array emit_is_array

/* ---- elementwise instructions ------------------------------------------------------------ */

static void emit_elementwise(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const char *x = emit_stored(&r->type, emit_elementwise_expr(e, in));
  if (!is_array(r)) {
    emit_line(e, "%s %s = %s;", ctype(&r->type), vname(r), x);
    return;
  }
  emit_def_array(e, r, false);
  bool dims = emit_needs_dims(e, in);
  emit_line(e, "shd_span_begin_at(SHD_SPAN_ELEMENTWISE, \"elementwise\", %d, %d);", emit_file_index(e, in->pos),
            in->pos.line);
  int n = emit_open_loops(e, &r->type, dims);
  emit_line(e, "%s[i] = %s;", vname(r), x);
  emit_close_loops(e, n);
  emit_line(e, "shd_span_end();");
}

/* ---- liveness ----------------------------------------------------------------------------------- */

/* Lists, once per block, the values whose last use is each index, so that
 * a block costs time linear in its length. */
static Releases plan_releases(Emit *e, const IrBlock *b) {
  int n = b->insts.len, total = 0;
  Releases r = {NULL, mem_calloc((size_t)n + 2, sizeof(int))};
  for (int i = 0; i < n; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++, total++) {
      int at = e->last_use[in->results[k]->id];
      if (at >= 0 && at < n)
        r.at[at + 1]++;
    }
  }
  for (int i = 0; i < n; i++)
    r.at[i + 1] += r.at[i];
  r.vals = mem_alloc(sizeof(Value *) * (size_t)(total + 1));
  int *fill = mem_alloc(sizeof(int) * (size_t)(n + 1));
  memcpy(fill, r.at, sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++) {
      int at = e->last_use[in->results[k]->id];
      if (at >= 0 && at < n)
        r.vals[fill[at]++] = in->results[k];
    }
  }
  free(fill);
  return r;
}

static void release_dead(Emit *e, const Releases *rel, int idx, const Inst *skip_moved) {
  for (int j = rel->at[idx]; j < rel->at[idx + 1]; j++) {
    const Value *v = rel->vals[j];
    if (v->type.kind == TY_TAPE) {
      if (v->type.elems[0].rank)
        emit_line(e, "for (int64_t k = 0; k < %s_n; k++) shd_release(%s[k]);", vname(v), vname(v));
      emit_line(e, "shd_release(%s);", vname(v));
      continue;
    }
    if (!is_array(v) || !e->owned[v->id] || e->fused[v->id] || e->nobuf[v->id])
      continue;
    bool moved = false;
    for (int a = 0; skip_moved && a < skip_moved->nargs; a++)
      moved |= skip_moved->args[a] == v;
    if (!moved)
      emit_line(e, "shd_release(%s);", vname(v));
  }
}

/* ---- instructions --------------------------------------------------------------------------------- */

static void emit_block(Emit *e, const IrBlock *b, const char **yield_to);

/* Hands v over to `dest`: a move when this is v's last use, else a new
 * reference. Moved values are not released again. */
static void hand_over(Emit *e, const Inst *in, int k, const char *dest) {
  const Value *v = in->args[k];
  emit_line(e, "%s = %s;", dest, vname(v));
  if (!is_array(v))
    return;
  bool twice = false;
  for (int j = 0; j < k; j++)
    twice |= in->args[j] == v;
  if (!emit_is_last_use(e, v, in) || twice)
    emit_line(e, "shd_retain(%s);", dest);
}

static void emit_for(Emit *e, const Inst *in) {
  int nc = in->nresults;
  const IrBlock *body = in->regions[0];
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    emit_line(e, "%s%s %s;", ctype(&c->type), is_array(c) ? " *" : "", vname(c));
    emit_line(e, "%s = %s;", vname(c), vname(in->args[k + 2]));
    if (is_array(c))
      emit_line(e, "shd_retain(%s);", vname(c));
  }
  emit_line(e, "for (int32_t %s = %s; %s < %s; %s++) {", vname(body->args[0]), vname(in->args[0]), vname(body->args[0]),
       vname(in->args[1]), vname(body->args[0]));
  e->indent += 2;
  bool step = in->parent && in->parent == e->main_body;
  if (step)
    emit_line(e, "shd_step_begin(%s, %d);", vname(body->args[0]), in->pos.line);
  const char **next = arena_alloc(sizeof(char *) * (size_t)(nc + 1));
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    next[k] = arena_printf("next_%s", vname(c));
  }
  emit_block(e, body, next);
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    if (is_array(c))
      emit_line(e, "shd_release(%s);", vname(c));
    emit_line(e, "%s = %s;", vname(c), next[k]);
  }
  if (step)
    emit_line(e, "shd_step_end();");
  e->indent -= 2;
  emit_line(e, "}");
  for (int k = 0; k < nc; k++)
    emit_line(e, "%s%s %s = %s;", ctype(&in->results[k]->type), is_array(in->results[k]) ? " *" : "",
         vname(in->results[k]), vname(body->args[k + 1]));
}

static void emit_if(Emit *e, const Inst *in) {
  int nr = in->nresults;
  const char **dest = arena_alloc(sizeof(char *) * (size_t)(nr + 1));
  for (int k = 0; k < nr; k++) {
    const Value *r = in->results[k];
    emit_line(e, "%s%s %s;", ctype(&r->type), is_array(r) ? " *" : "", vname(r));
    dest[k] = vname(r);
  }
  emit_line(e, "if (%s) {", vname(in->args[0]));
  e->indent += 2;
  emit_block(e, in->regions[0], dest);
  e->indent -= 2;
  emit_line(e, "} else {");
  e->indent += 2;
  emit_block(e, in->regions[1], dest);
  e->indent -= 2;
  emit_line(e, "}");
}

static void emit_call(Emit *e, const Inst *in) {
  Str s = {0};
  for (int k = 0; k < in->nresults; k++) {
    const Value *r = in->results[k];
    emit_line(e, "%s%s %s;", ctype(&r->type), is_array(r) ? " *" : "", vname(r));
  }
  str_printf(&s, "%s(", emit_fname(in->callee));
  for (int k = 0; k < in->nargs; k++)
    str_printf(&s, "%s%s", k ? ", " : "", vname(in->args[k]));
  for (int k = 0; k < in->nresults; k++)
    str_printf(&s, "%s&%s", k || in->nargs ? ", " : "", vname(in->results[k]));
  str_printf(&s, ");");
  const char *label = ir_func_label(in->callee);
  emit_line(e, "shd_span_begin_at(SHD_SPAN_CALL, %s, %d, %d);", emit_str_lit(label, strlen(label)), emit_file_index(e, in->pos),
            in->pos.line);
  emit_line(e, "%s", str_cstr(&s));
  emit_line(e, "shd_span_end();");
  free(s.buf);
}

/* Program text inside a C comment must stay a comment: no closing or
 * nested opener, no trigraph (??/ could splice lines), no byte outside
 * printable ASCII. */
static const char *comment_text(const char *p, size_t n) {
  Str s = {0};
  for (size_t k = 0; k < n; k++) {
    unsigned char ch = (unsigned char)p[k];
    char next = k + 1 < n ? p[k + 1] : 0;
    if ((ch == '*' && next == '/') || (ch == '/' && next == '*') || (ch == '?' && next == '?'))
      str_printf(&s, "%c ", ch);
    else
      str_putc(&s, ch >= 32 && ch < 127 ? (char)ch : '.');
  }
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

/* The source line of `in` as a comment, when it differs from the last one:
 * "N: text" in the program's file, "FILE N: text" (FILE's last component)
 * in an imported one. */
static void emit_source_line(Emit *e, const Inst *in) {
  const SourceFile *f = in->pos.file ? in->pos.file : e->src;
  if (!in->pos.line || (in->pos.line == e->last_line && f == e->last_file) || !f)
    return;
  e->last_line = in->pos.line;
  e->last_file = f;
  size_t len;
  const char *p = diag_line_text(f, in->pos.line, &len), *end = p + len;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  const char *base = strrchr(f->name, '/');
  base = base ? base + 1 : f->name;
  const char *file = f == e->src ? "" : arena_printf("%s ", comment_text(base, strlen(base)));
  emit_line(e, "/* %s%d: %s */", file, in->pos.line, comment_text(p, (size_t)(end - p)));
}

static void emit_tape(Emit *e, const Inst *in) {
  const Value *r = in->nresults ? in->results[0] : NULL;
  switch (in->op) {
  case IR_TAPE_NEW: {
    const Type *el = &r->type.elems[0];
    const char *n = vname(in->args[0]);
    if (el->rank)
      emit_line(e, "void **%s = shd_zalloc((size_t)(%s > 0 ? %s : 0) * sizeof(void *));", vname(r), n, n);
    else
      emit_line(e, "%s *%s = shd_alloc((size_t)(%s > 0 ? %s : 0) * sizeof(%s));", ctype(el), vname(r), n, n,
           ctype(el));
    if (el->rank)
      emit_line(e, "int64_t %s_n = %s > 0 ? %s : 0;", vname(r), n, n);
    return;
  }
  case IR_TAPE_PUSH:
    if (is_array(in->args[2])) {   /* an entry written again (vjp_save's slots) drops the one it replaces */
      emit_line(e, "shd_retain(%s);", vname(in->args[2]));
      emit_line(e, "shd_release(%s[%s]);", vname(in->args[0]), vname(in->args[1]));
    }
    emit_line(e, "%s[%s] = %s;", vname(in->args[0]), vname(in->args[1]), vname(in->args[2]));
    return;
  default:   /* IR_TAPE_GET */
    if (is_array(r)) {
      const Inst *t = in->args[0]->def;
      if (t && t->op == IR_TAPE_NEW && t->ival)   /* a vjp_save's: a load may read an entry no save wrote */
        emit_line(e, "if (!%s[%s]) shd_fatal(\"%%s: vjp_load reads entry %%d, which no vjp_save wrote\", %s, (int)%s);",
                  vname(in->args[0]), vname(in->args[1]), emit_where_lit(e, in->pos), vname(in->args[1]));
      emit_line(e, "%s *%s = %s[%s];", ctype(&r->type), vname(r), vname(in->args[0]), vname(in->args[1]));
      emit_line(e, "shd_retain(%s);", vname(r));
    } else {
      emit_line(e, "%s %s = %s[%s];", ctype(&r->type), vname(r), vname(in->args[0]), vname(in->args[1]));
    }
    return;
  }
}

static void emit_inst(Emit *e, const Inst *in, const char **yield_to);

/* A loop group is emitted at its last member (in), then the tape pushes
 * that waited for it. */
static void emit_group_at(Emit *e, const Group *g, const Inst *in, const char **yield_to) {
  emit_source_line(e, in);
  emit_group(e, g);
  int idx = e->cur_idx;
  e->making_deferred = true;
  for (int a = 0; a < g->nafter; a++) {
    e->cur = (const Inst *)e->bp->block->insts.data[g->after[a]];
    e->cur_idx = g->after[a];
    emit_inst(e, e->cur, yield_to);
  }
  e->making_deferred = false;
  e->cur = in;
  e->cur_idx = idx;
}

static void emit_inst(Emit *e, const Inst *in, const char **yield_to) {
  const Value *r = in->nresults ? in->results[0] : NULL;
  if (r && e->fused[r->id])
    return;   /* computed in its consumer's loop */
  if (e->bp->deferred[e->cur_idx] && !e->making_deferred)
    return;   /* a tape push made after its group */
  int gi = r ? sched_group_of(e->plan, e->bp, r) : 0;
  if (gi) {
    const Group *g = &e->bp->groups[gi - 1];
    if (g->mem[g->n - 1] == in)
      emit_group_at(e, g, in, yield_to);
    return;
  }
  emit_source_line(e, in);
  /* The timeline (SHD_TRACE=FILE.json) names the line of each GEMM and collective. */
  const OpDef *def = op_def(in->op);
  if (def && (def->flags & (OPF_TRACE_LINE | OPF_COLLECTIVE)))
    emit_trace_at(e, in->pos);
  switch (in->op) {
  case IR_CONST:
    emit_line(e, "%s %s = %s;", ctype(&r->type), vname(r), emit_flit(r->type.dtype, in->fval));
    return;
  case IR_RETYPE:
    emit_view(e, in);
    return;
  case IR_TAPE_NEW: case IR_TAPE_PUSH: case IR_TAPE_GET:
    emit_tape(e, in);
    return;
  case IR_CALL: emit_call(e, in); return;
  case IR_FOR: emit_for(e, in); return;
  case IR_IF: emit_if(e, in); return;
  case IR_YIELD:
  case IR_RETURN:
    for (int k = 0; k < in->nargs; k++)
      hand_over(e, in, k, in->op == IR_YIELD ? yield_to[k] : arena_printf("*ret%d", k));
    return;
  default: {
    const OpDef *d = op_def(in->op);
    if (d && (d->flags & OPF_ELEMENTWISE))
      emit_elementwise(e, in);
    else if (d && d->emit)
      d->emit(e, in);
    else
      diag_ice("emit: unexpected %s", ir_opname(in->op));
    return;
  }
  }
}

static void emit_block(Emit *e, const IrBlock *b, const char **yield_to) {
  const BlockPlan *bp = sched_block(e->plan, b);
  Releases rel = plan_releases(e, b);
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    e->bp = bp;   /* again after a nested block's emission */
    if (in->op == IR_YIELD && yield_to) {
      /* Declare the hand-over targets of a for before filling them. */
      const Inst *owner = b->owner;
      if (owner && owner->op == IR_FOR)
        for (int k = 0; k < in->nargs; k++)
          emit_line(e, "%s%s %s;", ctype(&in->args[k]->type), is_array(in->args[k]) ? " *" : "", yield_to[k]);
    }
    e->cur = in;
    e->cur_idx = i;
    emit_inst(e, in, yield_to);
    for (int k = 0; k < in->nresults; k++) {
      const Value *v = in->results[k];
      if (v->type.kind == TY_ARRAY && !is_array(v) && !e->uses[v->id] && !e->fused[v->id])
        emit_line(e, "(void)%s;", vname(v));
    }
    bool term = in->op == IR_YIELD || in->op == IR_RETURN;
    release_dead(e, &rel, i, term ? in : NULL);
  }
  free(rel.vals);
  free(rel.at);
}

/* ---- functions and the file ---------------------------------------------------------------------- */

/* The C prototype of f: static in a one-file program; in a program of
 * several translation units external, and named NAME__SUFFIX for one
 * instruction set's copy (suffix NULL: the entry everyone calls). */
void emit_signature_named(Emit *e, const Func *f, bool external, const char *name) {
  W("%svoid %s(", external ? "" : "static ", name);
  int n = 0;
  for (int i = 0; i < f->body->nargs; i++) {
    const Value *p = f->body->args[i];
    W("%s%s%s %s", n++ ? ", " : "", ctype(&p->type), is_array(p) ? " *" : "", vname(p));
  }
  for (int i = 0; i < f->nresults; i++) {
    const Type *t = &f->results[i];
    W("%s%s %s*ret%d", n++ ? ", " : "", ctype(t), t->rank ? " *" : "", i);
  }
  if (!n)
    W("void");
  W(")");
}

void emit_signature_as(Emit *e, const Func *f, bool external, const char *suffix) {
  emit_signature_named(e, f, external, suffix ? arena_printf("%s__%s", emit_fname(f), suffix) : emit_fname(f));
}

static void signature(Emit *e, const Func *f) { emit_signature_as(e, f, false, NULL); }

static void mark_owned(Emit *e, const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++)
      e->owned[in->results[k]->id] = true;
    for (int r = 0; r < in->nregions; r++)
      mark_owned(e, in->regions[r]);
  }
}

/* f's body, from its opening brace to its closing one. */
void emit_func_body(Emit *e, const Func *f) {
  if (!e->mod->numbered)
    diag_ice("emit: the module's values are not numbered (emit_number_values)");
  W(" {\n");
  e->indent = 2;
  e->tmp = 0;   /* per function, as the value numbers are */
  e->last_line = 0;
  e->last_file = NULL;
  mark_owned(e, f->body);
  emit_block(e, f->body, NULL);
  e->indent = 0;
  W("}\n");
}

static void emit_func(Emit *e, const Func *f) {
  W("\n/* %s%s */\n", f->name, f->generated ? " (generated by autodiff)" : "");
  /* Each function is compiled for several instruction sets and the loader
   * picks the best the CPU has: vectorised elementwise loops without tying
   * the binary to the build machine's CPU. */
  W("SHD_CLONES\n");
  signature(e, f);
  emit_func_body(e, f);
}

static void mark_callees(const IrBlock *b, const PtrMap *index, bool *live, int *work, int *n) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    int j = in->op == IR_CALL ? ptrmap_get(index, in->callee) : -1;
    if (j >= 0 && !live[j]) {
      live[j] = true;
      work[(*n)++] = j;
    }
    for (int r = 0; r < in->nregions; r++)
      mark_callees(in->regions[r], index, live, work, n);
  }
}

/* By function index: what main reaches (everything when there is no
 * main), by a worklist over the calls: linear in the program. */
bool *emit_reachable(const Module *mod, const Func *mainf) {
  int nf = mod->funcs.len, n = 0;
  bool *live = mem_calloc((size_t)nf + 1, sizeof(bool));
  int *work = mem_alloc(sizeof(int) * (size_t)(nf + 1));
  PtrMap index = {0};
  for (int i = 0; i < nf; i++) {
    ptrmap_put(&index, mod->funcs.data[i], i);
    if (!mainf || mod->funcs.data[i] == mainf) {
      live[i] = true;
      work[n++] = i;
    }
  }
  while (n > 0) {
    const Func *f = mod->funcs.data[work[--n]];
    mark_callees(f->body, &index, live, work, &n);
  }
  ptrmap_free(&index);
  free(work);
  return live;
}

/* main: the runtime starts, runs what the families set up (the table of
 * the program's args, which checks the command line: op_io.c), checks the
 * memory `explain` predicts against the host's, then runs fn main. The
 * families' declarations go to e's file before it. */
static bool block_has_async(const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (ir_is_async_start(in->op))
      return true;
    for (int r = 0; r < in->nregions; r++)
      if (block_has_async(in->regions[r]))
        return true;
  }
  return false;
}

/* Whether the program starts sums that a thread finishes (overlap.c). */
static bool has_async(const Module *mod) {
  for (int i = 0; i < mod->funcs.len; i++)
    if (block_has_async(((const Func *)mod->funcs.data[i])->body))
      return true;
  return false;
}

void emit_main_fn(Emit *e, FILE *o, const Module *mod, const Func *mainf, const bool *live) {
  const OpFamily *const *fams = op_families();
  int nf = 0;
  while (fams[nf])
    nf++;
  const char **setup = mem_calloc((size_t)nf + 1, sizeof *setup);
  for (int i = 0; i < nf; i++)
    setup[i] = fams[i]->main_setup ? fams[i]->main_setup(e, live) : NULL;
  int mfile = emit_file_index(e, mainf->pos);
  /* the timeline's file names: every file the bodies named, by order */
  fprintf(o, "\nstatic const char *const shd_src_files[%d] = {", e->nfiles);
  for (int i = 0; i < e->nfiles; i++) {
    const char *name = e->files[i] ? e->files[i]->name : "?";
    fprintf(o, "%s%s", i ? ", " : "", emit_str_lit(name, strlen(name)));
  }
  fprintf(o, "};\n");
  fprintf(o, "\nint main(int argc, char **argv) {\n");
  if (has_async(mod))
    fprintf(o, "  shd_async_enable();\n");
  fprintf(o, "  shd_init(&argc, &argv, %d, shd_mesh_names, shd_mesh_sizes);\n", mod->mesh.naxes);
  fprintf(o, "  shd_trace_files(%d, shd_src_files);\n", e->nfiles);
  for (int i = 0; i < nf; i++)
    if (setup[i])
      fprintf(o, "  %s\n", setup[i]);
  fprintf(o, "  shd_check_memory(%lldull);\n", (long long)e->main_peak);
  fprintf(o, "  shd_span_begin_at(SHD_SPAN_CALL, \"main\", %d, %d);\n  %s();\n  shd_span_end();\n", mfile,
          mainf->pos.line, emit_fname(mainf));
  fprintf(o, "  shd_finalize();\n  return 0;\n}\n");
  free(setup);
}

/* What every translation unit starts with: the program's file (NULL:
 * not named), the includes, the ABI check, the clones' attribute and the
 * families' preambles. */
void emit_file_header(Emit *e, const SourceFile *file) {
  FILE *o = e->out;
  if (file)
    fprintf(o, "/* Generated by shdc from %s: do not edit. */\n", comment_text(file->name, strlen(file->name)));
  else   /* a unit of a build: the same text wherever the program's file is */
    fprintf(o, "/* Generated by shdc: do not edit. */\n");
  fprintf(o, "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n#include \"shdrt.h\"\n\n");
  fprintf(o, "#if !defined(SHD_ABI_VERSION) || SHD_ABI_VERSION != %d\n#error \"this C was generated for runtime ABI %d, "
             "but the shdrt.h found is another version: use the shdrt.h installed with this shdc\"\n#endif\n\n",
          drv_abi_version(), drv_abi_version());
  fprintf(o, "#if defined(__x86_64__) && defined(__GNUC__) && !defined(SHD_NO_CLONES)\n"
             "#define SHD_CLONES __attribute__((target_clones(\"default\", \"avx2\", \"avx512f\")))\n"
             "#define SHD_SPLIT_CLONES 1\n"
             "#else\n#define SHD_CLONES\n#endif\n\n");
  for (const OpFamily *const *f = op_families(); *f; f++)
    if ((*f)->preamble)
      (*f)->preamble(e);
  fprintf(o, "\n");
}

void emit_mesh_table(FILE *o, const Module *mod) {
  fprintf(o, "static const char *const shd_mesh_names[] = {");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(o, "%s\"%s\"", a ? ", " : "", mod->mesh.names[a]);
  fprintf(o, "};\nstatic const int shd_mesh_sizes[] = {");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(o, "%s%d", a ? ", " : "", mod->mesh.sizes[a]);
  fprintf(o, "};\n\n");
}

void emit_module(FILE *out, const Module *mod, const SourceFile *file, int64_t main_peak) {
  Emit e;
  emit_state_init(&e, out, mod, file);
  e.main_peak = main_peak;
  FILE *o = out;
  emit_file_header(&e, file);
  emit_mesh_table(o, mod);
  const Func *mainf = emit_main_func(mod);
  /* Only what main reaches (everything when there is no main). */
  bool *live = emit_reachable(mod, mainf);
  for (int i = 0; i < mod->funcs.len; i++)
    if (live[i]) {
      if (!mainf)
        fprintf(o, "__attribute__((unused)) ");
      signature(&e, mod->funcs.data[i]);
      fprintf(o, ";\n");
    }
  for (int i = 0; i < mod->funcs.len; i++)
    if (live[i])
      emit_func(&e, mod->funcs.data[i]);
  if (mainf)
    emit_main_fn(&e, o, mod, mainf, live);
  free(live);
  emit_state_fini(&e);
}
