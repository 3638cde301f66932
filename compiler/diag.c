/* diag.c: diagnostics in the one fixed format.
 *
 *   FILE:LINE:COL: error: MESSAGE [E_CODE]
 *     source line
 *     ^
 *
 * Every stage reports through diag_error and keeps going where it can; the
 * driver stops between stages when the count is non-zero. Messages are lower
 * case, print types in DSL syntax and end with a fix where one exists.
 */
#include "shdc.h"

static int error_count;

int diag_error_count(void) { return error_count; }
void diag_reset(void) { error_count = 0; }

static void print_source_line(Pos pos) {
  if (!pos.file || pos.line <= 0)
    return;
  const char *p = pos.file->text;
  for (int line = 1; line < pos.line && *p; p++)
    if (*p == '\n')
      line++;
  const char *end = p;
  while (*end && *end != '\n')
    end++;
  fprintf(stderr, "  %.*s\n  ", (int)(end - p), p);
  /* The caret lines up under tabs as well as spaces. */
  for (int i = 1; i < pos.col && p + i - 1 < end; i++)
    fputc(p[i - 1] == '\t' ? '\t' : ' ', stderr);
  fputs("^\n", stderr);
}

static void print_where(Pos pos) {
  if (pos.file && pos.line > 0)
    fprintf(stderr, "%s:%d:%d: ", pos.file->name, pos.line, pos.col);
  else if (pos.file)
    fprintf(stderr, "%s: ", pos.file->name);
  else
    fprintf(stderr, "shdc: ");
}

void diag_verror(Pos pos, const char *code, const char *fmt, va_list ap) {
  error_count++;
  print_where(pos);
  fputs("error: ", stderr);
  vfprintf(stderr, fmt, ap);
  if (code)
    fprintf(stderr, " [%s]", code);
  fputc('\n', stderr);
  print_source_line(pos);
}

void diag_error(Pos pos, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(pos, code, fmt, ap);
  va_end(ap);
}

void diag_note(Pos pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  print_where(pos);
  fputs("note: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  print_source_line(pos);
}

void diag_ice(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("shdc: internal compiler error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(this is a bug in shdc; please report it with the input file)\n", stderr);
  va_end(ap);
  exit(2);   /* inside the fixed set: not a verdict on the program */
}
