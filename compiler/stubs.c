/* stubs.c: temporary, removed as the stages land. */
#include "shdc.h"
bool ad_module(Module *mod) { (void)mod; return true; }
void opt_module(Module *mod) { (void)mod; }
