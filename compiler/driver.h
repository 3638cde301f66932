/* driver.h: what main.c (the command line) and driver.c (the pipeline)
 * share: the options of a run, the two ways the driver gives up (a usage
 * error and an I/O error, exit status 2), and the commands. */
#ifndef SHDC_DRIVER_H
#define SHDC_DRIVER_H

#include "shdc.h"

typedef struct {
  const char *cmd;
  Vec files;
  const char *out;
  const char *mesh;
  Vec defines;         /* "NAME=VALUE" of each -D, in order (the last one wins) */
  Vec incdirs;         /* -I DIR: where import looks after the importing file's directory */
  const char *opt;
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
} Options;

__attribute__((noreturn, format(printf, 1, 2))) void drv_usage_error(const char *fmt, ...);
__attribute__((noreturn, format(printf, 1, 2))) void drv_io_error(const char *fmt, ...);
/* One FILE through the command o->cmd: its exit status. */
int drv_run_one(const Options *o, const char *path);
/* shdc plan FILE: every layout of the mesh axes over o->devices. */
int drv_plan(const Options *o, const char *path);
/* The JSON or SARIF document of the diagnostics, where o says; false when
 * it could not be written. */
bool drv_write_diagnostics(const Options *o);

#endif
