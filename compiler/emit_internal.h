/* emit_internal.h: the C emitter's state and the pieces of a generated
 * file, shared by emit_c.c (everything about one function's C, and the
 * one-file program) and emit_parts.c (the same program as several
 * translation units, for a parallel build), and by no one else: the
 * families see Emit only through the builders of shdc.h.
 */
#ifndef EMIT_INTERNAL_H
#define EMIT_INTERNAL_H
#include "shdc.h"

struct Group;   /* emit_c.c's loop groups */

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
  /* the source files the timeline names, by SourceFile.order (the
   * program's own 0): shd_src_files in main's unit */
  const SourceFile **files;
  int nfiles;
};

void emit_state_init(Emit *e, FILE *out, const Module *mod, const SourceFile *file);
void emit_state_fini(Emit *e);
/* What every translation unit starts with: the includes, the ABI check,
 * the clones' attribute (SHD_SPLIT_CLONES where the copies for each
 * instruction set are separate functions) and the families' preambles. */
void emit_file_header(Emit *e, const SourceFile *file);
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

#endif
