/* stubs.c: temporary, removed as the stages land. */
#include "shdc.h"
void opt_module(Module *mod) { (void)mod; }
