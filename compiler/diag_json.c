/* diag_json.c: diagnostics as data, for CI and editors.
 *
 * With --diagnostics=json or --diagnostics=sarif, diag_error and diag_note
 * record here instead of printing (diag.c asks diagout_recording()); every
 * file of the run adds to one list, and diagout_write prints one document:
 *
 *   json   a JSON array, one object per error or warning: file, line, column,
 *          endLine, endColumn (exclusive), severity ("error" or "warning"), code, message, notes
 *          (each with its place), fixes (each a replacement text and the
 *          range it replaces). Lines and columns are 1-based, as in the
 *          plain format; a diagnostic about a whole file has line null.
 *   sarif  one SARIF 2.1.0 log: the rules are the E_ and W_ codes with their help
 *          (diag_codes.c), each error a result with its region, notes as
 *          related locations, fixes as SARIF fixes; file problems (an
 *          unreadable file) are tool execution notifications.
 *
 * Fixes are resolved against the programs (diag_fix.c) only when the
 * document is written, after every stage has run. Text is written as valid
 * UTF-8: bytes that are not are replaced by U+FFFD.
 */
#include <unistd.h>
#include <math.h>

#include "shdc.h"

typedef struct {
  Pos pos;
  const char *code, *message;
  bool warning;            /* a W_ code's warning, not an error */
  Vec notes;               /* Diagnostic * (code NULL) */
  Vec fixes;               /* PendingFix * */
} Diagnostic;

static struct {
  DiagFormat format;
  Vec diags;               /* Diagnostic *, in report order */
  Vec programs;            /* const Program * */
  Vec tool_errors;         /* const char * */
} g_out;

void diagout_start(DiagFormat format) { g_out.format = format; }
bool diagout_recording(void) { return g_out.format != DIAG_PLAIN; }
void diagout_program(const Program *prog) {
  if (prog)
    vec_push(&g_out.programs, (void *)prog);
}
void diagout_tool_error(const char *message) { vec_push(&g_out.tool_errors, (void *)arena_strdup(message)); }

void diagout_add(Pos pos, const char *code, const char *message, bool note) {
  Diagnostic *d = arena_alloc(sizeof *d);
  d->pos = pos;
  d->code = note ? NULL : code;
  d->message = message;
  if (note && g_out.diags.len) {
    Diagnostic *last = g_out.diags.data[g_out.diags.len - 1];
    vec_push(&last->notes, d);
    return;
  }
  vec_push(&g_out.diags, d);
}

void diagout_add_warning(Pos pos, const char *code, const char *message) {
  diagout_add(pos, code, message, false);
  ((Diagnostic *)g_out.diags.data[g_out.diags.len - 1])->warning = true;
}

void diagout_add_fix(const PendingFix *f) {
  if (!diagout_recording()) {
    diag_plain_fix(f);
    return;
  }
  if (!g_out.diags.len || !diag_fixes_apply() || diag_last_suppressed())
    return;
  Diagnostic *last = g_out.diags.data[g_out.diags.len - 1];
  PendingFix *copy = arena_alloc(sizeof *copy);
  *copy = *f;
  if (copy->kind == FIX_WRAP_OPERAND || copy->kind == FIX_ANNOTATE)
    copy->at = last->pos;
  vec_push(&last->fixes, copy);
}

const Program *diagout_program_of(const SourceFile *file) {
  for (int i = 0; i < g_out.programs.len; i++) {
    const Program *p = g_out.programs.data[i];
    if (p->file == file)
      return p;
  }
  return NULL;
}

/* ---- JSON text ------------------------------------------------------------------- */

/* UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates, nothing
 * past U+10FFFF (the second byte's range depends on the first). A document
 * holds only valid UTF-8: anything else is written as U+FFFD, and SARIF's
 * columns count it as one code point (cp_col).
 *
 * The bytes at s that form a valid sequence or the start of one (a
 * "maximal subpart", which a decoder replaces by one U+FFFD, as Python and
 * browsers do), and in *ok whether they are a whole valid sequence. */
static int utf8_scan(const unsigned char *s, bool *ok) {
  unsigned c = s[0];
  *ok = c < 0x80;
  if (c < 0x80)
    return 1;
  int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!n)
    return 1;
  unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
  int i = 1;
  for (; i < n && s[i] >= (i == 1 ? lo : 0x80) && s[i] <= (i == 1 ? hi : 0xBF); i++)
    ;
  *ok = i == n;
  return i;
}


static void json_str(FILE *o, const char *s) {
  fputc('"', o);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
    bool ok;
    int n = utf8_scan(p, &ok);
    if (!ok) {
      fputs("\\ufffd", o);
      p += n;
    } else if (n > 1) {
      fwrite(p, 1, (size_t)n, o);
      p += n;
    } else {
      unsigned char c = *p++;
      if (c == '"' || c == '\\')
        fprintf(o, "\\%c", c);
      else if (c == '\n')
        fputs("\\n", o);
      else if (c == '\t')
        fputs("\\t", o);
      else if (c < 0x20 || c == 0x7f)
        fprintf(o, "\\u%04x", c);
      else
        fputc(c, o);
    }
  }
  fputc('"', o);
}

/* The resolved fixes of d. */
static int resolve_fixes(const Diagnostic *d, SourceFix *out, int max) {
  int n = 0;
  for (int i = 0; i < d->fixes.len && n < max; i++) {
    const PendingFix *f = d->fixes.data[i];
    if (diag_fix_resolve(f, diagout_program_of(f->at.file), &out[n]))
      n++;
  }
  return n;
}

/* ---- --diagnostics=json ---------------------------------------------------------- */

static void json_place(FILE *o, Pos p) {
  fputs("\"file\": ", o);
  json_str(o, p.file ? p.file->name : NULL);
  if (p.line > 0)
    fprintf(o, ", \"line\": %d, \"column\": %d, \"endLine\": %d, \"endColumn\": %d", p.line, p.col, p.line,
            diag_token_end(p));
  else
    fputs(", \"line\": null, \"column\": null, \"endLine\": null, \"endColumn\": null", o);
}

static void json_diag(FILE *o, const Diagnostic *d) {
  fputs("  {", o);
  json_place(o, d->pos);
  Pos from, to;
  if (diag_expr_range(d->pos, &from, &to))   /* the whole expression the caret is in */
    fprintf(o, ", \"range\": {\"line\": %d, \"column\": %d, \"endLine\": %d, \"endColumn\": %d}", from.line,
            from.col, to.line, to.col);
  fprintf(o, ", \"severity\": \"%s\", \"code\": ", d->warning ? "warning" : "error");
  if (d->code)
    json_str(o, d->code);
  else
    fputs("null", o);
  fputs(", \"message\": ", o);
  json_str(o, d->message);
  fputs(",\n   \"notes\": [", o);
  for (int i = 0; i < d->notes.len; i++) {
    const Diagnostic *n = d->notes.data[i];
    fputs(i ? ", {" : "{", o);
    json_place(o, n->pos);
    fputs(", \"message\": ", o);
    json_str(o, n->message);
    fputs("}", o);
  }
  fputs("],\n   \"fixes\": [", o);
  SourceFix fx[16];
  int nf = resolve_fixes(d, fx, 16);
  for (int i = 0; i < nf; i++) {
    fprintf(o, "%s{\"description\": ", i ? ",\n             " : "");
    json_str(o, fx[i].what);
    fprintf(o, ", \"line\": %d, \"column\": %d, \"endLine\": %d, \"endColumn\": %d, \"replacement\": ", fx[i].from.line,
            fx[i].from.col, fx[i].to.line, fx[i].to.col);
    json_str(o, fx[i].text);
    fputs("}", o);
  }
  fputs("]}", o);
}

static void write_json(FILE *o) {
  fputs("[", o);
  for (int i = 0; i < g_out.diags.len; i++) {
    fputs(i ? ",\n" : "\n", o);
    json_diag(o, g_out.diags.data[i]);
  }
  fputs(g_out.diags.len ? "\n]\n" : "]\n", o);
}

/* ---- --diagnostics=sarif ---------------------------------------------------------- */

/* SARIF locations name files by URI: relative names against %SRCROOT% (the
 * working directory, given in originalUriBaseIds), absolute ones as file:. */
static void uri_frag(FILE *o, const char *path, const char *fragment) {
  Str s = {0};
  if (path[0] == '/')
    str_printf(&s, "file://");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
      str_putc(&s, (char)*p);
    else
      str_printf(&s, "%%%02X", *p);
  }
  if (fragment)
    str_printf(&s, "#%s", fragment);
  json_str(o, str_cstr(&s));
  free(s.buf);
}

static void uri_str(FILE *o, const char *path) { uri_frag(o, path, NULL); }

/* SARIF columns count Unicode code points (run.columnKind), as json_str
 * writes the line: a valid sequence is one, so is each U+FFFD. */
static int cp_col(const SourceFile *f, int line, int col) {
  size_t len;
  const unsigned char *p = (const unsigned char *)diag_line_text(f, line, &len), *end = p + len;
  const unsigned char *stop = p + (col - 1 < (int)len ? col - 1 : (int)len);
  int c = 1;
  while (p < stop && p < end) {
    bool ok;
    int n = utf8_scan(p, &ok);
    p += p + n <= end ? n : 1;
    c++;
  }
  return c;
}

static int artifact_index(Vec *files, const SourceFile *f) {
  for (int i = 0; i < files->len; i++)
    if (files->data[i] == f)
      return i;
  vec_push(files, (void *)f);
  return files->len - 1;
}

static void sarif_artifact(FILE *o, Vec *files, const SourceFile *f) {
  fputs("\"artifactLocation\": {\"uri\": ", o);
  uri_str(o, f->name);
  if (f->name[0] != '/')
    fputs(", \"uriBaseId\": \"%SRCROOT%\"", o);
  fprintf(o, ", \"index\": %d}", artifact_index(files, f));
}

static void sarif_location(FILE *o, Vec *files, Pos p, int id, const char *message) {
  fputs("{", o);
  if (id >= 0)
    fprintf(o, "\"id\": %d, ", id);
  if (message) {
    fputs("\"message\": {\"text\": ", o);
    json_str(o, message);
    fputs("}, ", o);
  }
  fputs("\"physicalLocation\": {", o);
  sarif_artifact(o, files, p.file);
  if (p.line > 0) {
    /* The region with its text, and the whole line as context. */
    size_t llen;
    const char *line = diag_line_text(p.file, p.line, &llen);
    int len = (int)llen, end = diag_token_end(p);
    int a = p.col - 1 < len ? p.col - 1 : len, b = end - 1 < len ? end - 1 : len;
    fprintf(o, ", \"region\": {\"startLine\": %d, \"startColumn\": %d, \"endLine\": %d, \"endColumn\": %d", p.line,
            cp_col(p.file, p.line, p.col), p.line, cp_col(p.file, p.line, end));
    fputs(", \"snippet\": {\"text\": ", o);
    json_str(o, arena_printf("%.*s", b - a, line + a));
    fprintf(o, "}}, \"contextRegion\": {\"startLine\": %d, \"endLine\": %d, \"snippet\": {\"text\": ", p.line, p.line);
    json_str(o, arena_printf("%.*s", len, line));
    fputs("}}", o);
  }
  fputs("}}", o);
}

static void sarif_fixes(FILE *o, Vec *files, const Diagnostic *d) {
  SourceFix fx[16];
  int nf = resolve_fixes(d, fx, 16);
  if (!nf)
    return;
  fputs(",\n       \"fixes\": [", o);
  for (int i = 0; i < nf; i++) {
    const SourceFile *f = fx[i].from.file;
    fputs(i ? ",\n         {" : "\n         {", o);
    fputs("\"description\": {\"text\": ", o);
    json_str(o, fx[i].what);
    fputs("}, \"artifactChanges\": [{", o);
    sarif_artifact(o, files, f);
    fprintf(o, ", \"replacements\": [{\"deletedRegion\": {\"startLine\": %d, \"startColumn\": %d, \"endLine\": %d, "
               "\"endColumn\": %d}, \"insertedContent\": {\"text\": ",
            fx[i].from.line, cp_col(f, fx[i].from.line, fx[i].from.col), fx[i].to.line,
            cp_col(f, fx[i].to.line, fx[i].to.col));
    json_str(o, fx[i].text);
    fputs("}}]}]}", o);
  }
  fputs("]", o);
}

static void sarif_result(FILE *o, Vec *files, const Diagnostic *d) {
  int rule = diag_code_index(d->code);
  fputs("      {", o);
  if (rule >= 0)
    fprintf(o, "\"ruleId\": \"%s\", \"ruleIndex\": %d, ", d->code, rule);
  fprintf(o, "\"level\": \"%s\", \"message\": {\"text\": ", d->warning ? "warning" : "error");
  json_str(o, d->message);
  fputs("},\n       \"locations\": [", o);
  sarif_location(o, files, d->pos, -1, NULL);
  fputs("]", o);
  if (d->notes.len) {
    fputs(",\n       \"relatedLocations\": [", o);
    for (int i = 0; i < d->notes.len; i++) {
      const Diagnostic *n = d->notes.data[i];
      if (i)
        fputs(", ", o);
      sarif_location(o, files, n->pos.file ? n->pos : d->pos, i + 1, n->message);
    }
    fputs("]", o);
  }
  sarif_fixes(o, files, d);
  fputs("}", o);
}

/* Each rule's helpUri: its section of errors.md in the docs beside this
 * shdc (installed, or the source tree's docs/). */
static void sarif_rules(FILE *o) {
  const char *docs = drv_docs_dir();
  fputs("          \"rules\": [", o);
  for (int i = 0; i < diag_code_count(); i++) {
    const DiagCode *c = diag_code_at(i);
    fprintf(o, "%s\n            {\"id\": \"%s\", \"name\": ", i ? "," : "", c->code);
    /* SARIF rule names are identifiers: "Ambiguous contraction" -> AmbiguousContraction. */
    Str n = {0};
    bool up = true;
    for (const char *p = c->name; *p; p++) {
      if (*p == ' ' || *p == '-') {
        up = true;
        continue;
      }
      str_putc(&n, up && *p >= 'a' && *p <= 'z' ? (char)(*p - 32) : *p);
      up = false;
    }
    json_str(o, str_cstr(&n));
    free(n.buf);
    fputs(", \"shortDescription\": {\"text\": ", o);
    json_str(o, arena_printf("%s.", c->summary));
    fputs("}, \"fullDescription\": {\"text\": ", o);
    json_str(o, c->help);
    fputs("}, \"help\": {\"text\": ", o);
    json_str(o, arena_printf("%s (shdc explain-error %s shows an example and its fix.)", c->help, c->code));
    fputs("}, ", o);
    if (docs) {
      char id[32];
      size_t k = 0;
      for (; c->code[k] && k + 1 < sizeof id; k++)
        id[k] = (char)(c->code[k] >= 'A' && c->code[k] <= 'Z' ? c->code[k] + 32 : c->code[k]);
      id[k] = 0;
      fputs("\"helpUri\": ", o);
      uri_frag(o, arena_printf("%s/errors.md", docs), id);
      fputs(", ", o);
    }
    fprintf(o, "\"defaultConfiguration\": {\"level\": \"%s\"}}", c->code[0] == 'W' ? "warning" : "error");
  }
  fputs("]", o);
}

static void write_sarif(FILE *o) {
  Vec files = {0};
  fputs("{\n  \"$schema\": \"https://json.schemastore.org/sarif-2.1.0.json\",\n  \"version\": \"2.1.0\",\n"
        "  \"runs\": [\n    {\n      \"tool\": {\n        \"driver\": {\n          \"name\": \"shdc\",\n",
        o);
  fprintf(o, "          \"version\": \"%s\",\n          \"semanticVersion\": \"%s\",\n", drv_version(), drv_version());
  /* The tool's documentation: the man page or docs/cli.md beside it. */
  const char *doc = drv_doc_path();
  if (doc) {
    fputs("          \"informationUri\": ", o);
    uri_str(o, doc);
    fputs(",\n", o);
  }
  sarif_rules(o);
  fputs("\n        }\n      },\n      \"columnKind\": \"unicodeCodePoints\",\n", o);
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) {
    fputs("      \"originalUriBaseIds\": {\"%SRCROOT%\": {\"uri\": ", o);
    uri_str(o, arena_printf("%s/", cwd[1] ? cwd : ""));
    fputs("}},\n", o);
  }
  fputs("      \"results\": [\n", o);
  for (int i = 0; i < g_out.diags.len; i++) {
    if (i)
      fputs(",\n", o);
    sarif_result(o, &files, g_out.diags.data[i]);
  }
  fprintf(o, "\n      ],\n      \"invocations\": [{\"executionSuccessful\": %s",
          g_out.tool_errors.len ? "false" : "true");
  if (g_out.tool_errors.len) {
    fputs(", \"toolExecutionNotifications\": [", o);
    for (int i = 0; i < g_out.tool_errors.len; i++) {
      fputs(i ? ", {\"level\": \"error\", \"message\": {\"text\": " : "{\"level\": \"error\", \"message\": {\"text\": ",
            o);
      json_str(o, g_out.tool_errors.data[i]);
      fputs("}}", o);
    }
    fputs("]", o);
  }
  fputs("}],\n      \"artifacts\": [", o);
  for (int i = 0; i < files.len; i++) {
    const SourceFile *f = files.data[i];
    fputs(i ? ",\n        {\"location\": {\"uri\": " : "\n        {\"location\": {\"uri\": ", o);
    uri_str(o, f->name);
    if (f->name[0] != '/')
      fputs(", \"uriBaseId\": \"%SRCROOT%\"", o);
    fputs("}, \"sourceLanguage\": \"shd\"}", o);
  }
  fputs(files.len ? "\n      ]\n    }\n  ]\n}\n" : "]\n    }\n  ]\n}\n", o);
  free(files.data);
}

bool diagout_write(FILE *out) {
  if (g_out.format == DIAG_JSON)
    write_json(out);
  else if (g_out.format == DIAG_SARIF)
    write_sarif(out);
  return fflush(out) == 0 && !ferror(out);
}

/* A JSON string literal of s, as the diagnostics write them (shdc plan
 * --json uses it for file names and error messages). */
void diag_json_string(FILE *o, const char *s) { json_str(o, s); }

/* A JSON number: v to 17 significant digits, which read back exactly; JSON
 * has no inf or nan, so a value that is not finite is written null (every
 * caller bounds its inputs so that none should be: this is the last guard
 * of the document's validity). */
void diag_json_number(FILE *o, double v) {
  if (isfinite(v))
    fprintf(o, "%.17g", v);
  else
    fputs("null", o);
}
