/* driver.h: what main.c (the command line), driver.c (the pipeline) and
 * build.c (the C compiled and linked) share: the options of a run, the two
 * ways the driver gives up (a usage error and an I/O error, exit status
 * 2), and the commands. */
#ifndef SHDC_DRIVER_H
#define SHDC_DRIVER_H

#include "shdc.h"

/* --isa: which instruction sets build compiles each function for. */
typedef enum {
  ISA_CLONES,     /* default, avx2 and avx512f copies, the loader choosing (the default) */
  ISA_NATIVE,     /* -march=native, one copy: for the machine that builds */
  ISA_BASELINE,   /* one copy for the compiler's default target (plain x86-64) */
} Isa;

typedef struct {
  const char *cmd;
  Vec files;
  const char *out;
  const char *mesh;
  Vec defines;         /* "NAME=VALUE" of each -D, in order (the last one wins) */
  Vec incdirs;         /* -I DIR: where import looks after the importing file's directory */
  const char *opt;     /* -O0..-O3: the command line's, else SHDC_OPT's, else NULL (-O3) */
  Isa isa;             /* --isa, else SHDC_ISA */
  int64_t cache_limit; /* SHDC_CACHE_SIZE, default 1 GiB */
  bool keep_c;
  bool global_ir;
  DiagFormat diagnostics;
  const char *network;
  NetModel net;
  const char *max_memory;      /* --max-memory, as written */
  int64_t max_memory_bytes;
  int64_t devices;             /* plan */
  const char *memory;
  int64_t memory_bytes;
  double flops, ew_flops;
  bool json;
  int64_t bucket;              /* --bucket: the overlap pass's bucket cap in bytes (0: off) */
  bool bucket_given;
  bool no_prefetch;            /* --prefetch=off: a layer loop's all-gathers not started an iteration ahead */
  bool reduce_bf16;            /* --reduce-dtype=bf16: the buckets' f32 sums move as bf16 */
  bool warning_options;        /* a -W or -w was given (check and build take them) */
} Options;

/* One FILE through the command o->cmd: its exit status. */
int drv_run_one(const Options *o, const char *path);
/* build.c: the module (with a main) compiled and linked to o->out; the
 * exit status. main_peak: what the program checks at start-up. */
int drv_build(const Module *mod, const SourceFile *src, int64_t main_peak, const Options *o);
/* shdc plan FILE: every layout of the mesh axes over o->devices. */
int drv_plan(const Options *o, const char *path);
/* The JSON or SARIF document of the diagnostics, where o says; false when
 * it could not be written. */
bool drv_write_diagnostics(const Options *o);

#endif
