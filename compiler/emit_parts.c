/* emit_parts.c: the generated program as translation units, for `shdc
 * build`, which compiles them at once and keeps each compiled unit in its
 * cache (cache.c) under a hash of its text and the compiler's options.
 *
 * So that a rebuild after an edit compiles only what the edit changed, a
 * unit's text depends only on what it holds: each function's body is
 * emitted once (emit_c.c; its values numbered within it,
 * emit_number_values), and a unit is the file header (whose preamble
 * declares only the helpers its functions use), the prototypes of the
 * functions its functions call, and its functions' copies for one
 * instruction set. The units never depend on the number of cores.
 *
 * Which functions share a unit: a function whose C has at least
 * UNIT_ALONE bytes has units of its own; the smaller ones, in the
 * module's order, are grouped, a group ending after a function whose
 * name hashes to 0 modulo GROUP_SPLIT or once it holds GROUP_BYTES
 * bytes. The cut points are properties of the functions themselves, so an
 * edit, an added or a removed function changes the group it is in (and at
 * most the groups up to the next cut), not the others; and a program of
 * many small functions does not start a compiler per function (each
 * start reads the headers again). With clones, each group's copies for
 * default, avx2 and avx512f are three units, compiled in parallel: what
 * matters for the big functions on a machine with few cores. The last
 * unit holds main, the table of source files, the mesh table and the
 * resolvers; it depends on the whole program, and it is small.
 *
 * Invariant: the units together are the one-file program (emit_module),
 * but every function is external and, where target_clones would make the
 * copies (x86-64 GCC, SHD_SPLIT_CLONES), the copies are separate
 * functions NAME__ISA and NAME an ifunc choosing one when the program is
 * loaded, as target_clones does within one unit. Without clones (another
 * architecture, or SHD_NO_CLONES) NAME__default is NAME (SHD_FN_COPY) and
 * the units of avx2 and avx512f are empty, so a build that knows there
 * are no clones (--isa=native or baseline) emits only the default ones.
 */
#include "emit_internal.h"

static const char *const isa_name[3] = {"default", "avx2", "avx512f"};

enum {
  UNIT_ALONE = 16 << 10,    /* bytes of C from which a function has units of its own */
  GROUP_BYTES = 48 << 10,   /* a group of small functions ends when it holds this many */
  GROUP_SPLIT = 4,          /* ... or after a function whose name hashes to 0 modulo this */
};

/* FNV-1a: a cut point that depends on the name only. */
static bool cut_after(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 16777619u;
  return h % GROUP_SPLIT == 0;
}

/* By function index: its group (the index of the group's first
 * function) for the functions main reaches; -1 for the others. */
static int *plan_groups(const Module *mod, const bool *live, const size_t *blen) {
  int nf = mod->funcs.len;
  int *group = mem_alloc(sizeof(int) * (size_t)(nf + 1));
  int open = -1;
  size_t bytes = 0;
  for (int i = 0; i < nf; i++) {
    group[i] = -1;
    if (!live[i])
      continue;
    if (blen[i] >= UNIT_ALONE) {
      group[i] = i;
      continue;
    }
    if (open < 0) {
      open = i;
      bytes = 0;
    }
    group[i] = open;
    bytes += blen[i];
    if (cut_after(((Func *)mod->funcs.data[i])->name) || bytes >= GROUP_BYTES)
      open = -1;
  }
  return group;
}

static void mark_calls(const IrBlock *b, const PtrMap *index, bool *called) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    int j = in->op == IR_CALL ? ptrmap_get(index, in->callee) : -1;
    if (j >= 0)
      called[j] = true;
    for (int r = 0; r < in->nregions; r++)
      mark_calls(in->regions[r], index, called);
  }
}

static void unit_begin(Emit *e, const SourceFile *file, const bool *holds, char **buf, size_t *len) {
  e->out = mem_open_stream(buf, len);
  e->unit = holds;
  emit_file_header(e, file);
  fprintf(e->out, "#ifdef SHD_SPLIT_CLONES\n#define SHD_FN_COPY(f, isa) f##__##isa\n"
                  "#else\n#define SHD_FN_COPY(f, isa) f\n#endif\n");
}

static void unit_end(Emit *e) {
  mem_close_stream(e->out);
  e->out = NULL;
  e->unit = NULL;
}

/* The copy for instruction set `isa` of the functions of group g. */
static void group_unit(Emit *e, const Module *mod, const int *group, int g, int isa,
                       char *const *body, const size_t *blen, const PtrMap *index, EmitUnit *u) {
  int nf = mod->funcs.len;
  bool *holds = mem_calloc((size_t)nf + 1, sizeof(bool)), *called = mem_calloc((size_t)nf + 1, sizeof(bool));
  Str label = {0};
  for (int i = 0; i < nf; i++)
    if (group[i] == g) {
      holds[i] = true;
      mark_calls(((Func *)mod->funcs.data[i])->body, index, called);
      str_printf(&label, "%s%s", label.len ? ", " : "", ((Func *)mod->funcs.data[i])->name);
    }
  str_printf(&label, " for %s", isa_name[isa]);
  u->label = arena_strdup(str_cstr(&label));
  free(label.buf);
  unit_begin(e, NULL, holds, &u->text, &u->len);   /* unnamed: the same text wherever the file is */
  FILE *o = e->out;
  for (int i = 0; i < nf; i++)
    if (called[i]) {
      emit_signature_as(e, mod->funcs.data[i], true, NULL);
      fprintf(o, ";\n");
    }
  for (int i = 0; i < nf; i++) {
    if (group[i] != g)
      continue;
    const Func *f = mod->funcs.data[i];
    fprintf(o, "\n/* %s%s, for %s */\n", f->name, f->generated ? " (generated by autodiff)" : "", isa_name[isa]);
    if (isa) {
      fprintf(o, "#ifdef SHD_SPLIT_CLONES\n");
      emit_signature_as(e, f, true, isa_name[isa]);
      fprintf(o, ";\n__attribute__((target(\"%s\")))\n", isa_name[isa]);
      emit_signature_as(e, f, true, isa_name[isa]);
    } else {
      /* the default copy is named through SHD_FN_COPY: NAME without clones */
      const char *name = arena_printf("SHD_FN_COPY(%s, default)", emit_fname(f));
      emit_signature_named(e, f, true, name);
      fprintf(o, ";\n");
      emit_signature_named(e, f, true, name);
    }
    fwrite(body[i], 1, blen[i], o);
    if (isa)
      fprintf(o, "#endif\n");
  }
  unit_end(e);
  free(holds);
  free(called);
}

/* main, the tables and, with split clones, each function's resolver. */
static void main_unit(Emit *e, const Module *mod, const SourceFile *file, const Func *mainf, const bool *live,
                      EmitUnit *u) {
  int nf = mod->funcs.len;
  bool *none = mem_calloc((size_t)nf + 1, sizeof(bool));
  u->label = "entry point";
  unit_begin(e, file, none, &u->text, &u->len);
  FILE *o = e->out;
  for (int i = 0; i < nf; i++)
    if (live[i]) {
      emit_signature_as(e, mod->funcs.data[i], true, NULL);
      fprintf(o, ";\n");
    }
  fprintf(o, "\n#ifdef SHD_SPLIT_CLONES\n");
  for (int i = 0; i < nf; i++) {
    if (!live[i])
      continue;
    const Func *f = mod->funcs.data[i];
    const char *name = emit_fname(f);
    for (int k = 0; k < 3; k++) {
      emit_signature_as(e, f, true, isa_name[k]);
      fprintf(o, ";\n");
    }
    fprintf(o,
            "static __typeof__(%s__default) *%s__resolve(void) {\n  __builtin_cpu_init();\n"
            "  if (__builtin_cpu_supports(\"avx512f\"))\n    return %s__avx512f;\n"
            "  if (__builtin_cpu_supports(\"avx2\"))\n    return %s__avx2;\n  return %s__default;\n}\n",
            name, name, name, name, name);
    emit_signature_as(e, f, true, NULL);
    fprintf(o, " __attribute__((ifunc(\"%s__resolve\")));\n", name);
  }
  fprintf(o, "#endif\n\n");
  emit_mesh_table(o, mod);
  emit_main_fn(e, o, mod, mainf, live);
  unit_end(e);
  free(none);
}

int emit_module_units(const Module *mod, const SourceFile *file, int64_t main_peak, bool clones, EmitUnit **units) {
  const Func *mainf = emit_main_func(mod);
  if (!mainf)
    diag_ice("emit_module_units: no main");
  bool *live = emit_reachable(mod, mainf);
  int nf = mod->funcs.len, nisa = clones ? 3 : 1;
  /* Each function's body once, as text. */
  char **body = mem_calloc((size_t)nf + 1, sizeof(char *));
  size_t *blen = mem_calloc((size_t)nf + 1, sizeof(size_t));
  Emit e;
  emit_state_init(&e, NULL, mod, file);
  e.main_peak = main_peak;
  for (int i = 0; i < nf; i++) {
    if (!live[i])
      continue;
    e.out = mem_open_stream(&body[i], &blen[i]);
    emit_func_body(&e, mod->funcs.data[i]);
    mem_close_stream(e.out);
  }
  int *group = plan_groups(mod, live, blen);
  int ngroups = 0;
  for (int i = 0; i < nf; i++)
    ngroups += group[i] == i;
  EmitUnit *u = mem_calloc((size_t)(ngroups * nisa + 1), sizeof(EmitUnit));
  PtrMap index = {0};
  for (int i = 0; i < nf; i++)
    ptrmap_put(&index, mod->funcs.data[i], i);
  int n = 0;
  for (int g = 0; g < nf; g++)
    for (int isa = 0; group[g] == g && isa < nisa; isa++)
      group_unit(&e, mod, group, g, isa, body, blen, &index, &u[n++]);
  main_unit(&e, mod, file, mainf, live, &u[n++]);
  ptrmap_free(&index);
  for (int i = 0; i < nf; i++)
    free(body[i]);
  free(body);
  free(blen);
  free(group);
  free(live);
  emit_state_fini(&e);
  *units = u;
  return n;
}
