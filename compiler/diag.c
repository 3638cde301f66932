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
 *
 * Warnings (diag_warning) have the same form with "warning:" and a W_ code;
 * -Werror makes them errors, -Wno-NAME leaves one out. A fix that is a text
 * edit the error site knows (diag_fix.c) is shown, as rustc does, as a help
 * line and the source line with the edit applied, the new text marked.
 */
#include <unistd.h>

#include "shdc.h"

static int error_count, warning_count, promoted_count;
static const char *last_code;

const char *diag_last_code(void) { return last_code; }
static int max_shown = 100;   /* --max-errors; 0: no limit */
static const char **capture;  /* diag_capture */

void diag_capture(const char **first) { capture = first; }

int diag_error_count(void) { return error_count; }
void diag_reset(void) {
  error_count = 0;
  warning_count = promoted_count = 0;
}
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
static void print_source_line(Pos pos, bool token) {
  if (!pos.file || pos.line <= 0)
    return;
  size_t len;
  const char *p = diag_line_text(pos.file, pos.line, &len);
  size_t col = pos.col > 1 ? (size_t)pos.col - 1 : 0;   /* bytes before the caret */
  if (col > len)
    col = len;
  size_t lo = col, hi = col + 1;   /* the bytes of the line under ~ or ^ */
  Pos rf, rt;
  if (token && !diag_expr_range(pos, &rf, &rt)) {   /* a name: the whole token, as rustc marks it */
    size_t end = (size_t)diag_token_end(pos) - 1;
    hi = end > hi && end <= len ? end : hi;
  } else if (diag_expr_range(pos, &rf, &rt)) {
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

/* The fixes of the plain diagnostic being printed, shown by flush_hint. */
static PendingFix *plain_fixes;
static int nplain_fixes, capplain_fixes;
static Pos plain_at;          /* the diagnostic's position (operand/annotate fixes) */
static bool suppressed;       /* the last diagnostic was not printed: nor are its notes and fixes */

bool diag_last_suppressed(void) { return suppressed || capture; }

void diag_plain_fix(const PendingFix *f) {
  if (suppressed || capture || !diag_fixes_apply() || nplain_fixes >= 8)
    return;
  plain_fixes = mem_grow(plain_fixes, &capplain_fixes, nplain_fixes + 1, sizeof *plain_fixes);
  PendingFix *c = &plain_fixes[nplain_fixes++];
  *c = *f;
  if (c->kind == FIX_WRAP_OPERAND || c->kind == FIX_ANNOTATE)
    c->at = plain_at;
}

/* "= help: WHAT:" and the lines the fix changes, edited, with `+` under
 * inserted text and `~` under replaced text (rustc's suggestion format);
 * nothing for a fix that cannot be placed exactly. */
static void print_fix(const PendingFix *pf) {
  SourceFix fx;
  const SourceFile *f = pf->at.file ? pf->at.file : pf->from.file;
  if (!f || !diag_fix_resolve(pf, diagout_program_of(f), &fx) || fx.from.line <= 0 || fx.to.line < fx.from.line)
    return;
  size_t len0, len1;
  const char *first = diag_line_text(f, fx.from.line, &len0), *last = diag_line_text(f, fx.to.line, &len1);
  size_t a = (size_t)fx.from.col - 1, b = (size_t)fx.to.col - 1;
  if (a > len0 || b > len1)
    return;
  const char *old = first + a, *old_end = last + b;
  size_t oldn = (size_t)(old_end - old), newn = strlen(fx.text);
  /* The new text that is old text kept (a wrap keeps its operand): marked
   * `+` around it; otherwise all of it `~`. A deletion marks nothing. */
  const char *kept = oldn && oldn <= newn ? memmem(fx.text, newn, old, oldn) : NULL;
  Str line = {0}, marks = {0};
  str_printf(&line, "%.*s%s%.*s", (int)a, first, fx.text, (int)(len1 - b), last + b);
  for (size_t i = 0; i < a; i++)
    str_putc(&marks, first[i] == '\t' ? '\t' : ' ');
  for (size_t i = 0; i < newn && fx.text[i] != '\n'; i++) {
    bool in_kept = kept && fx.text + i >= kept && fx.text + i < kept + oldn;
    str_putc(&marks, in_kept ? ' ' : kept ? '+' : '~');
  }
  fprintf(stderr, "  = %shelp:%s %s\n", sgr(SGR_BOLD), sgr(SGR_RESET), fx.what ? fx.what : "write");
  const char *p = str_cstr(&line);
  const char *nl = strchr(p, '\n');
  size_t total = nl ? (size_t)(nl - p) : strlen(p), from = 0, to = total;
  if (total > SNIPPET_MAX) {   /* a window around the edit, as print_source_line shows a long line */
    from = a > SNIPPET_MAX / 2 ? a - SNIPPET_MAX / 2 : 0;
    to = from + SNIPPET_MAX < total ? from + SNIPPET_MAX : total;
  }
  const char *pre = from ? "..." : "";
  fprintf(stderr, "      %s%.*s%s\n", pre, (int)(to - from), p + from, to < total ? "..." : "");
  const char *m = str_cstr(&marks);
  size_t mlen = strlen(m) < to ? strlen(m) : to;
  while (mlen > from && (m[mlen - 1] == ' ' || m[mlen - 1] == '\t'))
    mlen--;
  size_t blank = from;
  while (blank < mlen && (m[blank] == ' ' || m[blank] == '\t'))
    blank++;
  if (mlen > blank)
    fprintf(stderr, "      %s%.*s%s%.*s%s\n", from ? "   " : "", (int)(blank - from), m + from, sgr(SGR_CARET),
            (int)(mlen - blank), m + blank, sgr(SGR_RESET));
  free(line.buf);
  free(marks.buf);
}

static void flush_hint(void) {
  for (int i = 0; i < nplain_fixes; i++)
    print_fix(&plain_fixes[i]);
  nplain_fixes = 0;
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
  suppressed = !shown();
  if (suppressed)
    return;
  if (diagout_recording()) {
    diagout_add(pos, code, msg, false);
  } else {
    flush_hint();
    plain_at = pos;
    print_where(pos);
    fprintf(stderr, "%serror: %s%s%s", sgr(SGR_ERROR), sgr(SGR_RESET), sgr(SGR_BOLD), msg);
    if (code)
      fprintf(stderr, " [%s]", code);
    fprintf(stderr, "%s\n", sgr(SGR_RESET));
    print_source_line(pos, code && code[0] == 'W');   /* a warning made an error marks as a warning does */
    hint_code = code && diag_code_index(code) >= 0 ? code : NULL;
  }
  for (int i = ncontext - 1; i >= 0; i--)
    diag_note(context_notes[i].pos, "%s", context_notes[i].text);
}

/* ---- warnings ------------------------------------------------------------------ */

static bool all_off, all_error;
/* Per W_ code (its index in diag_codes.c's table): 0 as the defaults say,
 * 'o' off, 'e' an error, 'w' a warning even under -Werror. */
static char wstate[64];

int diag_warning_count(void) { return warning_count; }
int diag_promoted_count(void) { return promoted_count; }
void diag_warnings_off(bool off) { all_off = off; }

const char *diag_warning_flag(const char *code) {
  char *f = arena_strdup(code + 2);
  for (char *p = f; *p; p++)
    *p = *p == '_' ? '-' : (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
  return f;
}

/* The W_ code a -W name means (unused, W_UNUSED, w_unused), or -1. */
static int warning_named(const char *name) {
  for (int i = 0; i < diag_code_count() && i < (int)sizeof wstate; i++) {
    const char *code = diag_code_at(i)->code;
    if (code[0] == 'W' && (!strcmp(diag_warning_flag(code), name) || !strcasecmp(code, name)))
      return i;
  }
  return -1;
}

static const char *warning_names(void) {
  Str s = {0};
  for (int i = 0; i < diag_code_count(); i++)
    if (diag_code_at(i)->code[0] == 'W')
      str_printf(&s, "%s%s", s.len ? ", " : "", diag_warning_flag(diag_code_at(i)->code));
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

const char *diag_warning_option(const char *arg) {
  if (!strcmp(arg, "error")) {
    all_error = true;
    return NULL;
  }
  if (!strcmp(arg, "no-error")) {
    all_error = false;
    return NULL;
  }
  if (!strcmp(arg, "all") || !strcmp(arg, "extra") || !strcmp(arg, "everything")) {
    all_off = false;
    return NULL;
  }
  char state = 0;
  const char *name = arg;
  if (!strncmp(arg, "error=", 6))
    state = 'e', name = arg + 6;
  else if (!strncmp(arg, "no-error=", 9))
    state = 'w', name = arg + 9;
  else if (!strncmp(arg, "no-", 3))
    state = 'o', name = arg + 3;
  int i = warning_named(name);
  if (i < 0) {
    const char *near = NULL;
    int best = 3;
    for (int k = 0; k < diag_code_count(); k++) {
      const char *code = diag_code_at(k)->code;
      int d = code[0] == 'W' ? str_distance(name, diag_warning_flag(code), best) : 99;
      if (d < best)
        best = d, near = diag_warning_flag(code);
    }
    return arena_printf("unknown warning option '-W%s'%s (the warnings: %s; -Werror, -Wno-NAME, -Werror=NAME)", arg,
                        near ? arena_printf("; did you mean '-W%.*s%s'?", (int)(name - arg), arg, near) : "",
                        warning_names());
  }
  wstate[i] = state;   /* -WNAME: as the defaults and -Werror say */
  return NULL;
}

/* The file whose warnings are given (NULL: none, for the commands that do
 * not warn), and the places warned about already: a generic function's
 * instances and a second typing of one expression warn once. */
static const SourceFile *warn_file;
static PtrMap warned;

void diag_warn_file(const SourceFile *f) {
  warn_file = f;
  ptrmap_free(&warned);
  memset(&warned, 0, sizeof warned);
}

void diag_warning(Pos pos, const char *code, const char *fmt, ...) {
  int i = diag_code_index(code);
  char st = i >= 0 && i < (int)sizeof wstate ? wstate[i] : 0;
  uint64_t x = (((uint64_t)pos.line << 26) | ((uint64_t)(pos.col & 0xFFFFF) << 6) | (uint64_t)(i & 63)) + 1;
  x *= 0x9E3779B97F4A7C15ull;   /* mixed, as diag_fix.c's pos_key: ptrmap hashes the low bits */
  x ^= x >> 32;
  const void *key = (const void *)(uintptr_t)((x << 4 | x >> 60) | (x ? 0 : 1));
  if (capture || all_off || st == 'o' || !warn_file || pos.file != warn_file || ptrmap_get(&warned, key) >= 0) {
    suppressed = true;
    return;
  }
  ptrmap_put(&warned, key, 1);
  va_list ap;
  va_start(ap, fmt);
  if (st == 'e' || (all_error && st != 'w')) {   /* -Werror: an error in every way */
    promoted_count++;
    diag_verror(pos, code, fmt, ap);
    va_end(ap);
    return;
  }
  warning_count++;
  suppressed = false;
  const char *msg = arena_vprintf(fmt, ap);
  va_end(ap);
  if (diagout_recording()) {
    diagout_add_warning(pos, code, msg);
    return;
  }
  flush_hint();
  plain_at = pos;
  print_where(pos);
  fprintf(stderr, "%swarning: %s%s%s [%s]%s\n", sgr(SGR_WARNING), sgr(SGR_RESET), sgr(SGR_BOLD), msg, code,
          sgr(SGR_RESET));
  print_source_line(pos, true);
  hint_code = i >= 0 ? code : NULL;
}

void diag_error(Pos pos, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(pos, code, fmt, ap);
  va_end(ap);
}

void diag_note(Pos pos, const char *fmt, ...) {
  if (suppressed || !shown() || capture)
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
  print_source_line(pos, true);
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
