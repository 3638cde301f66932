/* stubs.c: temporary, removed as the stages land. */
#include "shdc.h"
Module *lower_program(Program *p, const Mesh *m) { (void)p; (void)m; diag_error((Pos){0}, "E_NOTIMPL", "not supported yet"); return NULL; }
void ir_verify(const Module *mod) { (void)mod; }
bool ad_module(Module *mod) { (void)mod; return true; }
bool part_module(Module *mod) { (void)mod; return true; }
void opt_module(Module *mod) { (void)mod; }
void ir_print_module(FILE *out, const Module *mod) { (void)out; (void)mod; }
void explain_module(FILE *out, const Module *mod, const SourceFile *file) { (void)out; (void)mod; (void)file; }
void emit_module(FILE *out, const Module *mod, const SourceFile *file) { (void)out; (void)mod; (void)file; }
