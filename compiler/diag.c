/* diag.c: diagnostics in the one fixed format.
 *
 *   FILE:LINE:COL: error: MESSAGE [E_CODE]
 *     source line
 *     ^
 *
 * Each plain diagnostic ends, after its notes, with the line
 *
 *     = help: shdc explain-error E_CODE (the rule, an example, the fix)
 *
 * written when the next diagnostic starts or when the file is done
 * (diag_finish). Every stage reports through diag_error and keeps going
 * where it can; the
 * driver stops between stages when the count is non-zero. Messages are lower
 * case, print types in DSL syntax and end with a fix where one exists.
 * With --diagnostics=json or sarif they are recorded instead (diag_json.c)
 * and written as one document at the end.
 */
#include <unistd.h>

#include "shdc.h"

static int error_count;
static const char *last_code;

const char *diag_last_code(void) { return last_code; }
static int max_shown = 100;   /* --max-errors; 0: no limit */
static const char **capture;  /* diag_capture */

void diag_capture(const char **first) { capture = first; }

int diag_error_count(void) { return error_count; }
void diag_reset(void) { error_count = 0; }
void diag_set_max_errors(int n) { max_shown = n; }

/* Past the limit an error is counted, not printed (nor its notes), so that
 * a file of a hundred thousand bad lines costs little; the driver says how
 * many were left out. */
static bool shown(void) { return max_shown == 0 || error_count <= max_shown; }

bool diag_will_show(void) { return max_shown == 0 || error_count < max_shown; }

int diag_errors_not_shown(void) { return max_shown && error_count > max_shown ? error_count - max_shown : 0; }

/* Where each line of the last file asked about starts: built once, so that
 * quoting a line costs O(1) however many diagnostics (or generated C
 * comments) quote it. */
static struct {
  const SourceFile *file;
  const char **starts;
  int n;
} lines;

const char *diag_line_text(const SourceFile *f, int line, size_t *len) {
  if (lines.file != f) {
    free(lines.starts);
    lines.file = f;
    lines.n = 1;
    for (size_t i = 0; i < f->len; i++)
      lines.n += f->text[i] == '\n';
    lines.starts = mem_alloc(sizeof(char *) * (size_t)(lines.n + 1));
    int k = 0;
    lines.starts[k++] = f->text;
    for (size_t i = 0; i < f->len; i++)
      if (f->text[i] == '\n')
        lines.starts[k++] = f->text + i + 1;
  }
  const char *p = line >= 1 && line <= lines.n ? lines.starts[line - 1] : f->text + f->len;
  const char *end = p;
  while (end < f->text + f->len && *end && *end != '\n')
    end++;
  *len = (size_t)(end - p);
  return p;
}

/* ---- colour ------------------------------------------------------------------ */

/* As gcc and clang: the place bold, "error:" bold red, "warning:" bold
 * magenta, "note:" bold cyan, the message bold, the caret line bold green;
 * on a terminal unless NO_COLOR is set (and not empty) or TERM is dumb, or
 * as --color says. */
static int color_mode = DIAG_COLOR_AUTO, color_on = -1;

void diag_set_color(int mode) {
  color_mode = mode;
  color_on = -1;
}

static const char *sgr(const char *code) {
  if (color_on < 0) {
    const char *no = getenv("NO_COLOR"), *term = getenv("TERM");
    color_on = color_mode == DIAG_COLOR_ALWAYS ||
               (color_mode == DIAG_COLOR_AUTO && isatty(2) && !(no && *no) && !(term && !strcmp(term, "dumb")));
  }
  return color_on ? code : "";
}
#define SGR_BOLD "\033[1m"
#define SGR_ERROR "\033[1;31m"
#define SGR_WARNING "\033[1;35m"
#define SGR_NOTE "\033[1;36m"
#define SGR_CARET "\033[1;32m"
#define SGR_RESET "\033[0m"

/* The source line and under it a caret at pos.col, with ~ under the rest
 * of the expression the diagnostic is about on that line (`a @ b`: clang's
 * ~~^~~), each written with one call (stderr is unbuffered: a byte at a
 * time made a long line quadratic). A line longer than SNIPPET_MAX bytes
 * is shown as a window around the column, cut ends marked with "...". */
#define SNIPPET_MAX 240
static void print_source_line(Pos pos) {
  if (!pos.file || pos.line <= 0)
    return;
  size_t len;
  const char *p = diag_line_text(pos.file, pos.line, &len);
  size_t col = pos.col > 1 ? (size_t)pos.col - 1 : 0;   /* bytes before the caret */
  if (col > len)
    col = len;
  size_t lo = col, hi = col + 1;   /* the bytes of the line under ~ or ^ */
  Pos rf, rt;
  if (diag_expr_range(pos, &rf, &rt)) {
    size_t indent = 0;   /* a part on an earlier line: from the first non-blank byte of this one */
    while (indent < col && (p[indent] == ' ' || p[indent] == '\t'))
      indent++;
    lo = rf.line < pos.line ? indent : rf.line == pos.line && (size_t)rf.col - 1 < col ? (size_t)rf.col - 1 : col;
    hi = rt.line > pos.line ? len : rt.line == pos.line && (size_t)rt.col - 1 > col ? (size_t)rt.col - 1 : col + 1;
  }
  size_t from = 0, to = len;
  if (len > SNIPPET_MAX) {
    from = col > SNIPPET_MAX / 2 ? col - SNIPPET_MAX / 2 : 0;
    to = from + SNIPPET_MAX < len ? from + SNIPPET_MAX : len;
  }
  lo = lo < from ? from : lo;
  hi = hi > to ? (to > col ? to : col + 1) : hi;
  const char *pre = from > 0 ? "..." : "", *post = to < len ? "..." : "";
  char *marks = mem_alloc(hi - from + strlen(pre) + 1);
  size_t n = 0;
  for (const char *q = pre; *q; q++)
    marks[n++] = ' ';
  /* The marks line up under tabs as well as spaces. */
  for (size_t i = from; i < hi; i++)
    marks[n++] = i == col ? '^' : i >= lo ? '~' : p[i] == '\t' ? '\t' : ' ';
  marks[n] = 0;
  size_t blank = strlen(pre) + (lo - from);
  fprintf(stderr, "  %s%.*s%s\n  %.*s%s%s%s\n", pre, (int)(to - from), p + from, post, (int)blank, marks,
          sgr(SGR_CARET), marks + blank, sgr(SGR_RESET));
  free(marks);
}

/* The code whose explain-error hint is still to be written: the last line
 * of its diagnostic comes after the notes that follow it. */
static const char *hint_code;

static void flush_hint(void) {
  if (hint_code)
    fprintf(stderr, "  = %shelp:%s shdc explain-error %s (the rule, an example, the fix)\n", sgr(SGR_BOLD),
            sgr(SGR_RESET), hint_code);
  hint_code = NULL;
}

void diag_finish(void) { flush_hint(); }

static void print_where(Pos pos) {
  fputs(sgr(SGR_BOLD), stderr);
  if (pos.file && pos.line > 0)
    fprintf(stderr, "%s:%d:%d: ", pos.file->name, pos.line, pos.col);
  else if (pos.file)
    fprintf(stderr, "%s: ", pos.file->name);
  else
    fprintf(stderr, "shdc: ");
  fputs(sgr(SGR_RESET), stderr);
}

/* The field of a struct operation being typed leaf by leaf ("h.w"): a
 * message that does not name it yet gets "in field h.w: " after its first
 * "OP: " (or in front). */
static const char *context_field;
/* Or the field as a function of (obj, k), called only when a message needs
 * it: a struct of n leaves nested n deep would spend n^2 making paths for
 * messages that are never written. */
static const char *(*context_path)(const void *obj, int k);
static const void *context_obj;
static int context_k;

static const char *field_now(void) {
  if (context_path) {
    context_field = context_path(context_obj, context_k);
    context_path = NULL;
  }
  return context_field;
}

const char *diag_set_field(const char *field) {
  const char *old = field_now();
  context_field = field;
  return old;
}

void diag_set_field_lazy(const char *(*path)(const void *obj, int k), const void *obj, int k) {
  context_field = NULL;
  context_path = path;
  context_obj = obj;
  context_k = k;
}

/* Notes that every error carries while they are pushed: the instantiation
 * of a generic function being checked, and where it was called. */
typedef struct {
  Pos pos;
  const char *text;
} ContextNote;
static ContextNote *context_notes;
static int ncontext, capcontext;

void diag_push_note(Pos pos, const char *text) {
  context_notes = mem_grow(context_notes, &capcontext, ncontext + 1, sizeof *context_notes);
  context_notes[ncontext++] = (ContextNote){pos, text};
}

void diag_pop_note(void) { ncontext--; }

static struct {
  bool on;
  Pos at;
  const char *callee;
} redirect;

bool diag_push_redirect(Pos at, const char *callee) {
  if (redirect.on)
    return false;
  redirect.on = true;
  redirect.at = at;
  redirect.callee = callee;
  return true;
}

void diag_pop_redirect(void) { redirect.on = false; }

/* A fix rewrites the source text an error points at. Not while a struct
 * operation is typed leaf by leaf (the leaf's expression has no text of its
 * own: `n.h[1]` is not `n.h.w[1]`) or while errors are moved to a call in a
 * manual body (the position is not the expression's). */
bool diag_fixes_apply(void) { return !context_field && !context_path && !redirect.on; }

static const char *with_field(const char *msg) {
  if (!field_now())
    return msg;
  const char *tag = arena_printf("in field %s: ", context_field);
  if (strstr(msg, tag))
    return msg;
  const char *colon = strstr(msg, ": ");
  bool op = colon && colon - msg < 40 && !memchr(msg, ' ', (size_t)(colon - msg));
  if (!op)
    return arena_printf("%s%s", tag, msg);
  return arena_printf("%.*s: %s%s", (int)(colon - msg), msg, tag, colon + 2);
}

void diag_verror(Pos pos, const char *code, const char *fmt, va_list ap) {
  error_count++;
  last_code = code;
  const char *msg = with_field(arena_vprintf(fmt, ap));
  if (redirect.on && pos.file) {
    msg = arena_printf("%s, %s%sline %d: %s", redirect.callee, pos.file != redirect.at.file ? pos.file->name : "",
                       pos.file != redirect.at.file ? " " : "", pos.line, msg);
    pos = redirect.at;
  }
  if (capture) {
    if (!*capture)
      *capture = arena_printf("%s:%d:%d: %s%s%s%s", pos.file ? pos.file->name : "shdc", pos.line, pos.col, msg,
                              code ? " [" : "", code ? code : "", code ? "]" : "");
    return;
  }
  if (!shown())
    return;
  if (diagout_recording()) {
    diagout_add(pos, code, msg, false);
  } else {
    flush_hint();
    print_where(pos);
    fprintf(stderr, "%serror: %s%s%s", sgr(SGR_ERROR), sgr(SGR_RESET), sgr(SGR_BOLD), msg);
    if (code)
      fprintf(stderr, " [%s]", code);
    fprintf(stderr, "%s\n", sgr(SGR_RESET));
    print_source_line(pos);
    hint_code = code && diag_code_index(code) >= 0 ? code : NULL;
  }
  for (int i = ncontext - 1; i >= 0; i--)
    diag_note(context_notes[i].pos, "%s", context_notes[i].text);
}

void diag_error(Pos pos, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(pos, code, fmt, ap);
  va_end(ap);
}

void diag_note(Pos pos, const char *fmt, ...) {
  if (!shown() || capture)
    return;
  va_list ap;
  va_start(ap, fmt);
  if (diagout_recording()) {
    diagout_add(pos, NULL, arena_vprintf(fmt, ap), true);
    va_end(ap);
    return;
  }
  print_where(pos);
  fprintf(stderr, "%snote: %s", sgr(SGR_NOTE), sgr(SGR_RESET));
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  print_source_line(pos);
}

/* The user's or the system's trouble outside the program text (a bad
 * option, a file that cannot be read or written, a broken toolchain):
 * "shdc: error: ..." on stderr after any diagnostics, exit status 2; a
 * usage error also points at --help. */
void diag_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_finish();
  fputs("shdc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(run shdc --help for usage)\n", stderr);
  va_end(ap);
  exit(2);
}

void diag_io_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_finish();
  fputs("shdc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

void diag_ice(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  flush_hint();
  fputs("shdc: internal compiler error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(this is a bug in shdc; please report it with the input file)\n", stderr);
  va_end(ap);
  exit(2);   /* inside the fixed set: not a verdict on the program */
}
