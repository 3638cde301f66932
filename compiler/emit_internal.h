/* emit_internal.h: the C emitter's state and the pieces of a generated
 * file, shared by emit_c.c (everything about one function's C, and the
 * one-file program), emit_group.c (loop groups: several elementwise
 * instructions and row sums as one loop nest) and emit_parts.c (the same
 * program as several translation units, for a parallel build), and by no
 * one else: the families see Emit only through the builders of shdc.h.
 */
#ifndef EMIT_INTERNAL_H
#define EMIT_INTERNAL_H
#include "shdc.h"


struct Emit {
  FILE *out;
  const Module *mod;
  const Mesh *m;
  const SourceFile *src;
  int indent;
  int last_line;
  const SourceFile *last_file;   /* of last_line */
  int tmp;
  /* liveness of the block being emitted, by value id */
  int *last_use;
  bool *owned;
  bool *fused;         /* by value id: computed inside its one consumer's loop */
  int *uses;           /* by value id, over the whole module */
  int cap;
  int *fuse_uses, *fuse_site, *fuse_depth;   /* plan_fusion's by-id scratch, cleared per block */
  const Inst *cur;     /* the instruction being emitted, and its index */
  int cur_idx;
  const IrBlock *main_body;   /* a loop directly in it is a training loop: a trace span per step */
  /* loop groups (plan_groups): by value id, the group (index + 1) whose
   * member defines it, and whether it needs no buffer (used only inside
   * its group); the groups of the block being emitted */
  int *gmember;
  bool *nobuf;
  struct Group *groups;
  int ngroups;
  const IrBlock *group_block;       /* the block whose groups e->groups are */
  const struct Group *cur_group;   /* being emitted: its members are locals (full) or scalars (row) */
  const char *flat;                /* the flat index of the loop being emitted: "i", or "ir" for rows */
  int *deferred;                   /* by instruction index: a tape push made after group (value - 1), or 0 */
  bool making_deferred;            /* emitting those pushes */
  bool *late;                      /* by value id, while a group is planned: defined by an instruction that
                                      reads a column sum, so made after the group */
  /* the source files the timeline names, by SourceFile.order (the
   * program's own 0): shd_src_files in main's unit */
  const SourceFile **files;
  int nfiles;
  int64_t main_peak;               /* explain's peak of main, which main checks (emit_module's caller) */
  const bool *unit;                /* by function index: those the unit being written holds; NULL: all */
};

void emit_state_init(Emit *e, FILE *out, const Module *mod, const SourceFile *file);
void emit_state_fini(Emit *e);
/* What every translation unit starts with: the includes, the ABI check,
 * the clones' attribute (SHD_SPLIT_CLONES where the copies for each
 * instruction set are separate functions) and the families' preambles. */
void emit_file_header(Emit *e, const SourceFile *file);   /* file NULL: not named */
void emit_mesh_table(FILE *o, const Module *mod);   /* shd_mesh_names, shd_mesh_sizes */
const Func *emit_main_func(const Module *mod);      /* NULL when there is none */
/* By function index: what mainf reaches (everything without a main); malloc'd. */
bool *emit_reachable(const Module *mod, const Func *mainf);
void emit_main_fn(Emit *e, FILE *o, const Module *mod, const Func *mainf, const bool *live);
const char *emit_fname(const Func *f);              /* f's C name */
/* f's C prototype: static, or external in a program of several units;
 * named `name`, or fname(f)__suffix (suffix NULL: fname(f)). */
void emit_signature_named(Emit *e, const Func *f, bool external, const char *name);
void emit_signature_as(Emit *e, const Func *f, bool external, const char *suffix);
void emit_func_body(Emit *e, const Func *f);        /* from its opening brace to its closing one */

/* ---- shared by emit_c.c and emit_group.c ---- */

/* The C type of a scalar of type t (a str is a shd_str held by value); an
 * array is a pointer to it. */
static inline const char *emit_ctype(const Type *t) { return t->kind == TY_STRING ? "shd_str" : ty_dtype_c(t->dtype); }
static inline bool emit_is_array(const Value *v) { return v->type.rank > 0; }
bool emit_is_elementwise(const Inst *in);
const char *emit_elementwise_expr(Emit *e, const Inst *in);   /* the C expression of an elementwise result */
/* Opens the loop nest over res's local shape; the body sees i (flat) and,
 * when need_dims, i0..ik. Returns the number of loops opened. */
int emit_open_loops(Emit *e, const Type *res, bool need_dims);
void emit_close_loops(Emit *e, int n);
bool emit_needs_dims(Emit *e, const Inst *in);
/* Computes elementwise chains in their consumer's loop: e->fused, and the
 * operands' last uses (e->last_use, of the block, set before). */
void emit_plan_fusion(Emit *e, const IrBlock *b);   /* whether an operand's index needs i0..ik */

/* A loop group (emit_group.c): elementwise instructions and row sums of one
 * block emitted as one loop nest at its last member. */
enum { GROUP_MAX = 96 };

typedef struct Group {
  int first, last;          /* instruction indices in the block */
  int k;                    /* row dims (leading); -1: no row sums, one flat pass */
  int rank;
  int64_t dom[MAX_RANK];    /* local shape of the full values */
  const Inst **mem;         /* members, in block order */
  int n, cap;
  int *after;               /* tape pushes of members made after the group: instruction indices */
  int nafter, capafter;
  int *sunk;                /* instructions reading a column sum: moved after the group (emit_schedule_module) */
  int nsunk, capsunk;
  bool sunk_collective;     /* one of them is a collective: another collective ends the group */
  int *stage;               /* per member: the pass after which it is known (row) or in which it is used (full) */
  int nstages;
  bool ok;
} Group;

/* Groups the block's elementwise instructions and row sums (after
 * plan_fusion); extends the operands' lifetimes to the groups' emission
 * points. */
void emit_plan_groups(Emit *e, const IrBlock *b, Group **out, int *nout);
void emit_free_groups(Group *gs, int n);
/* By instruction index of the block: the group (index + 1) after which a
 * deferred tape push is made, or 0; malloc'd. */
int *emit_deferred_pushes(const IrBlock *b, const Group *gs, int ng);
/* A member's value inside the group being emitted, or NULL for any other value. */
const char *emit_group_operand(Emit *e, const Value *op);
void emit_group(Emit *e, const Group *g);

#endif
