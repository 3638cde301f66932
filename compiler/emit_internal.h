/* emit_internal.h: the C emitter's state and the pieces of a generated
 * file, shared by emit_c.c (the builders: names, literals, buffers,
 * elementwise loops; and the state), emit_group.c (a planned loop group:
 * several elementwise instructions and row sums as one loop nest),
 * emit_program.c (blocks, control flow, functions, the one-file program)
 * and emit_parts.c (the same program as several translation units, for a
 * parallel build), and by no one else: the families see Emit only through
 * the builders of ops.h. What is fused and grouped, and when each value
 * dies, is the plan's (schedule.h), which the emitter only reads.
 *
 * Layers, each calling only those below it: emit_parts.c, emit_program.c,
 * emit_group.c, emit_c.c.
 */
#ifndef EMIT_INTERNAL_H
#define EMIT_INTERNAL_H
#include "ops.h"
#include "schedule.h"


struct Emit {
  FILE *out;
  const Module *mod;
  const Mesh *m;
  const SourceFile *src;
  int indent;
  int last_line;
  const SourceFile *last_file;   /* of last_line */
  int tmp;
  /* the module's plan (sched_plan), and views of it by value id: the last
   * uses (in the block defining the value), the values computed inside
   * their one consumer's loop, the uses over the whole module, whether a
   * group member needs no buffer (used only inside its group) */
  Schedule *plan;
  const int *last_use;
  const bool *fused;
  const int *uses;
  const bool *nobuf;
  bool *owned;         /* by value id: a value a block defines (not a parameter or loop argument) */
  const Inst *cur;     /* the instruction being emitted, and its index */
  int cur_idx;
  const IrBlock *main_body;   /* a loop directly in it is a training loop: a trace span per step */
  const BlockPlan *bp;             /* the plan of the block being emitted */
  const Group *cur_group;          /* being emitted: its members are locals (full) or scalars (row) */
  const char *flat;                /* the flat index of the loop being emitted: "i", or "ir" for rows */
  bool making_deferred;            /* emitting the tape pushes made after a group */
  /* the source files the timeline names, by SourceFile.order (the
   * program's own 0): shd_src_files in main's unit */
  const SourceFile **files;
  int nfiles;
  int64_t main_peak;               /* explain's peak of main, which main checks (emit_module's caller) */
  const bool *unit;                /* by function index: those the unit being written holds; NULL: all */
};

/* ---- emit_c.c: the state and the builders -------------------------------- */

/* The state for a module: its plan (sched_plan) made here, before any C. */
void emit_state_init(Emit *e, FILE *out, const Module *mod, const SourceFile *file);
void emit_state_fini(Emit *e);
const Func *emit_main_func(const Module *mod);      /* NULL when there is none */
const char *emit_fname(const Func *f);              /* f's C name */
/* The C type of a scalar of type t (a str is a shd_str held by value); an
 * array is a pointer to it. */
static inline const char *emit_ctype(const Type *t) { return t->kind == TY_STRING ? "shd_str" : ty_dtype_c(t->dtype); }
static inline bool emit_is_array(const Value *v) { return v->type.rank > 0; }
const char *emit_elementwise_expr(Emit *e, const Inst *in);   /* the C expression of an elementwise result */
/* Opens the loop nest over res's local shape; the body sees i (flat) and,
 * when need_dims, i0..ik. Returns the number of loops opened. */
int emit_open_loops(Emit *e, const Type *res, bool need_dims);
void emit_close_loops(Emit *e, int n);
bool emit_needs_dims(Emit *e, const Inst *in);     /* whether an operand's index needs i0..ik */
/* A member's value inside the group being emitted, or NULL for any other value. */
const char *emit_group_operand(Emit *e, const Value *op);

/* ---- emit_group.c ---------------------------------------------------------- */

void emit_group(Emit *e, const Group *g);           /* at its last member */

/* ---- emit_program.c ------------------------------------------------------- */

/* What every translation unit starts with: the includes, the ABI check,
 * the clones' attribute (SHD_SPLIT_CLONES where the copies for each
 * instruction set are separate functions) and the families' preambles. */
void emit_file_header(Emit *e, const SourceFile *file);   /* file NULL: not named */
void emit_mesh_table(FILE *o, const Module *mod);   /* shd_mesh_names, shd_mesh_sizes */
/* By function index: what mainf reaches (everything without a main); malloc'd. */
bool *emit_reachable(const Module *mod, const Func *mainf);
void emit_main_fn(Emit *e, FILE *o, const Module *mod, const Func *mainf, const bool *live);
/* f's C prototype: static, or external in a program of several units;
 * named `name`, or fname(f)__suffix (suffix NULL: fname(f)). */
void emit_signature_named(Emit *e, const Func *f, bool external, const char *name);
void emit_signature_as(Emit *e, const Func *f, bool external, const char *suffix);
void emit_func_body(Emit *e, const Func *f);        /* from its opening brace to its closing one */

#endif
