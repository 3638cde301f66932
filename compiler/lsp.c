/* lsp.c: `shdc lsp`, a Language Server Protocol server on stdin and stdout.
 *
 * Messages are JSON-RPC 2.0 with a Content-Length header; jansson parses and
 * writes them. The server keeps the open documents (didOpen, didChange with
 * whole or ranged edits, didClose) and answers initialize, shutdown, exit,
 * textDocument/hover, definition, documentSymbol and codeAction, and
 * publishes each document's diagnostics after it changes (the same as
 * `shdc check`, with their fixes as quick-fix code actions), and every
 * document's after any file is saved (a document reads the files it
 * imports from the disk).
 *
 * Every answer about a program is computed in a child process (fork): the
 * child runs the compiler's front end (and, for diagnostics, check's later
 * stages) on the document, writes the answer as JSON to a pipe and exits.
 * The compiler keeps its state in globals (the diagnostics, the typechecker's
 * tables) and its memory in an arena freed only at exit, and stops the
 * process on an internal error: in a child all of that is reset by the
 * exit, so the server's own memory is only its documents and messages, and
 * a crash or an internal error of the compiler costs one answer (a JSON-RPC
 * error), never the server. A child that runs past CHILD_SECONDS is killed.
 *
 * Malformed input never stops the server: a body that is not JSON is a
 * parse error (-32700), a message that is not a request or notification an
 * invalid request (-32600), an unknown method -32601, bad params -32602, a
 * request before initialize -32002, a request after shutdown -32600; a
 * header without Content-Length is answered with a parse error and the
 * server reads on. A notification that cannot be honoured (a change to a
 * document that is not open) is reported with window/logMessage. Pending
 * messages are read before a changed document is analysed, so a burst of
 * keystrokes costs one analysis.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lsp.h"

#define MAX_BODY ((size_t)64 << 20)    /* a message; documents are at most 8 MiB */
#define MAX_DOCS 4096
#define CHILD_SECONDS 30

enum {
  RPC_PARSE_ERROR = -32700,
  RPC_INVALID_REQUEST = -32600,
  RPC_METHOD_NOT_FOUND = -32601,
  RPC_INVALID_PARAMS = -32602,
  RPC_INTERNAL_ERROR = -32603,
  RPC_SERVER_NOT_INITIALIZED = -32002,
  RPC_REQUEST_FAILED = -32803,
};

static struct {
  int in;                  /* stdin */
  char buf[65536];         /* bytes read and not yet used */
  size_t have, at;
  bool initialized, shutdown;
  LspEncoding enc;
  LspDoc *docs;
  int ndocs, capdocs;
  const Vec *incdirs;       /* -I DIR: where imports are looked for */
} S;

/* ---- writing ------------------------------------------------------------------ */

static void send_json(json_t *msg) {
  json_object_set_new(msg, "jsonrpc", json_string("2.0"));
  char *body = json_dumps(msg, JSON_COMPACT);
  json_decref(msg);
  if (!body)
    return;
  size_t n = strlen(body);
  char head[64];
  int h = snprintf(head, sizeof head, "Content-Length: %zu\r\n\r\n", n);
  const char *parts[2] = {head, body};
  size_t lens[2] = {(size_t)h, n};
  for (int k = 0; k < 2; k++)
    for (size_t done = 0; done < lens[k];) {
      ssize_t w = write(1, parts[k] + done, lens[k] - done);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {   /* the client is gone */
        free(body);
        exit(1);
      }
      done += (size_t)w;
    }
  free(body);
}

static void respond(json_t *id, json_t *result) {
  json_t *m = json_object();
  json_object_set(m, "id", id ? id : json_null());
  json_object_set_new(m, "result", result ? result : json_null());
  send_json(m);
}

static void respond_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void respond_error(json_t *id, int code, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  json_t *m = json_object();
  json_object_set(m, "id", id ? id : json_null());
  json_object_set_new(m, "error", json_pack("{s:i, s:s}", "code", code, "message", text));
  send_json(m);
}

static void notify(const char *method, json_t *params) {
  json_t *m = json_object();
  json_object_set_new(m, "method", json_string(method));
  json_object_set_new(m, "params", params);
  send_json(m);
}

/* window/logMessage: type 1 error, 2 warning, 3 info. */
static void log_message(int type, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_message(int type, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  notify("window/logMessage", json_pack("{s:i, s:s}", "type", type, "message", text));
}

/* ---- reading ------------------------------------------------------------------ */

/* The next byte of stdin, or -1 at its end. */
static int next_byte(void) {
  if (S.at == S.have) {
    ssize_t n;
    do
      n = read(S.in, S.buf, sizeof S.buf);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
      return -1;
    S.have = (size_t)n;
    S.at = 0;
  }
  return (unsigned char)S.buf[S.at++];
}

static bool input_pending(void) {
  if (S.at < S.have)
    return true;
  struct pollfd p = {S.in, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

/* One header line (without CR LF) into line; false at the end of input. */
static bool read_line(char *line, size_t cap) {
  size_t n = 0;
  for (;;) {
    int c = next_byte();
    if (c < 0)
      return false;
    if (c == '\n')
      break;
    if (n + 1 < cap)
      line[n++] = (char)c;
  }
  if (n && line[n - 1] == '\r')
    n--;
  line[n] = 0;
  return true;
}

/* The body of the next message (malloc'd, NUL-terminated) in *body, its
 * length in *len. 1: a message; 0: end of input; -1: a header without a
 * usable Content-Length (answered; the caller reads on). */
static int read_message(char **body, size_t *len) {
  char line[1024];
  long long length = -1;
  bool any = false, bad = false;
  for (;;) {
    if (!read_line(line, sizeof line))
      return 0;
    if (!line[0]) {
      if (any)
        break;
      continue;   /* blank lines between messages */
    }
    any = true;
    if (!strncasecmp(line, "Content-Length:", 15)) {
      char *end;
      errno = 0;
      length = strtoll(line + 15, &end, 10);
      while (*end == ' ' || *end == '\t')
        end++;
      bad = errno || *end || length < 0;
    }
  }
  if (length < 0 || bad || (size_t)length > MAX_BODY) {
    respond_error(NULL, RPC_PARSE_ERROR, "%s",
                  length < 0 || bad ? "a message without a valid Content-Length header"
                                    : "a message longer than 64 MiB");
    if (length > 0 && !bad)
      for (long long i = 0; i < length && next_byte() >= 0; i++)
        ;
    return -1;
  }
  char *b = mem_alloc((size_t)length + 1);
  for (long long i = 0; i < length; i++) {
    int c = next_byte();
    if (c < 0) {
      free(b);
      return 0;
    }
    b[i] = (char)c;
  }
  b[length] = 0;
  *body = b;
  *len = (size_t)length;
  return 1;
}

/* ---- documents ------------------------------------------------------------------ */

static LspDoc *find_doc(const char *uri) {
  for (int i = 0; uri && i < S.ndocs; i++)
    if (!strcmp(S.docs[i].uri, uri))
      return &S.docs[i];
  return NULL;
}

static void free_doc(LspDoc *d) {
  free(d->uri);
  free(d->path);
  free(d->text);
  json_decref(d->diagnostics);
  memset(d, 0, sizeof *d);
}

static const char *text_of(json_t *v, size_t *len) {
  *len = json_string_length(v);
  return json_string_value(v);
}

static void set_text(LspDoc *d, const char *text, size_t len) {
  char *t = mem_alloc(len + 1);
  memcpy(t, text, len);
  t[len] = 0;
  free(d->text);
  d->text = t;
  d->len = len;
  d->dirty = true;
}

/* ---- analysis in a child ---------------------------------------------------------- */

/* The answer as JSON, written at once: json_dumpfd writes each token with
 * a system call of its own, and an outline of 50,000 bindings is millions. */
static bool write_answer(int fd, json_t *answer) {
  char *text = json_dumps(answer, JSON_COMPACT | JSON_ENCODE_ANY);
  bool ok = text != NULL;
  for (size_t n = ok ? strlen(text) : 0, at = 0; ok && at < n;) {
    ssize_t w = write(fd, text + at, n - at);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    at += ok ? (size_t)w : 0;
  }
  free(text);
  return ok;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The answer of a query about d, computed in a child; NULL with *why set
 * when the child failed. */
static json_t *run_query(const LspDoc *d, LspQuery q, int64_t line, int64_t ch, const char **why) {
  static char msg[256];
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(msg, sizeof msg, "pipe: %s", strerror(errno));
    *why = msg;
    return NULL;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    snprintf(msg, sizeof msg, "fork: %s", strerror(errno));
    *why = msg;
    return NULL;
  }
  if (pid == 0) {
    close(fds[0]);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {   /* the compiler's own messages must not reach the client */
      dup2(null, 1);
      dup2(null, 2);
    }
    json_t *answer = lsp_answer(d, S.incdirs, q, line, ch, S.enc);
    _exit(write_answer(fds[1], answer ? answer : json_null()) ? 0 : 3);
  }
  close(fds[1]);
  Str out = {0};
  int64_t deadline = now_ms() + CHILD_SECONDS * 1000;
  bool timed_out = false;
  for (;;) {
    struct pollfd p = {fds[0], POLLIN, 0};
    int64_t left = deadline - now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) == 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    char buf[65536];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    str_printf(&out, "%.*s", (int)n, buf);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  json_t *answer = NULL;
  if (timed_out)
    snprintf(msg, sizeof msg, "the analysis took longer than %d s and was stopped", CHILD_SECONDS);
  else if (WIFSIGNALED(status))
    snprintf(msg, sizeof msg, "the analysis crashed (signal %d): a bug in shdc", WTERMSIG(status));
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    snprintf(msg, sizeof msg, "the analysis failed (exit status %d): a bug in shdc", WEXITSTATUS(status));
  else {
    json_error_t err;
    answer = json_loadb(out.buf ? out.buf : "", out.len, JSON_DECODE_ANY, &err);
    if (!answer)
      snprintf(msg, sizeof msg, "the analysis gave no answer: %s", err.text);
  }
  free(out.buf);
  *why = msg;
  return answer;
}

static void publish(LspDoc *d) {
  const char *why = NULL;
  json_t *diags = run_query(d, Q_DIAGNOSTICS, 0, 0, &why);
  d->dirty = false;
  if (!diags || !json_is_array(diags)) {
    json_decref(diags);
    log_message(1, "shdc: %s: %s", d->uri, why ? why : "no diagnostics");
    diags = json_array();
  }
  json_decref(d->diagnostics);
  d->diagnostics = json_incref(diags);
  json_t *params = json_pack("{s:s, s:o}", "uri", d->uri, "diagnostics", diags);
  if (d->version >= 0)
    json_object_set_new(params, "version", json_integer(d->version));
  notify("textDocument/publishDiagnostics", params);
}

static void publish_dirty(void) {
  for (int i = 0; i < S.ndocs; i++)
    if (S.docs[i].uri && S.docs[i].dirty)
      publish(&S.docs[i]);
}

/* ---- requests ----------------------------------------------------------------------- */

static json_t *capabilities(void) {
  return json_pack("{s:s, s:{s:b, s:i, s:{s:b}}, s:b, s:b, s:b, s:{s:[s]}}", "positionEncoding",
                   S.enc == ENC_UTF8 ? "utf-8" : "utf-16", "textDocumentSync", "openClose", 1, "change", 2,
                   "save", "includeText", 0,
                   "hoverProvider", 1, "definitionProvider", 1, "documentSymbolProvider", 1,
                   "codeActionProvider", "codeActionKinds", "quickfix");
}

static void initialize(json_t *id, json_t *params) {
  if (S.initialized) {
    respond_error(id, RPC_INVALID_REQUEST, "initialize was already received");
    return;
  }
  json_t *encs = json_object_get(json_object_get(json_object_get(params, "capabilities"), "general"),
                                 "positionEncodings");
  size_t i;
  json_t *e;
  json_array_foreach(encs, i, e) {
    if (json_is_string(e) && !strcmp(json_string_value(e), "utf-8"))
      S.enc = ENC_UTF8;
  }
  S.initialized = true;
  respond(id, json_pack("{s:o, s:{s:s, s:s}}", "capabilities", capabilities(), "serverInfo", "name", "shdc",
                        "version", drv_version()));
}

/* params.textDocument.uri and, for a position query, params.position. */
static LspDoc *doc_param(json_t *id, json_t *params, int64_t *line, int64_t *ch) {
  const char *uri = json_string_value(json_object_get(json_object_get(params, "textDocument"), "uri"));
  if (!uri) {
    respond_error(id, RPC_INVALID_PARAMS, "params.textDocument.uri is missing");
    return NULL;
  }
  LspDoc *d = find_doc(uri);
  if (!d) {
    respond_error(id, RPC_INVALID_PARAMS, "%s is not open (send textDocument/didOpen first)", uri);
    return NULL;
  }
  if (line) {
    json_t *pos = json_object_get(params, "position");
    json_t *l = json_object_get(pos, "line"), *c = json_object_get(pos, "character");
    if (!json_is_integer(l) || !json_is_integer(c) || json_integer_value(l) < 0 || json_integer_value(c) < 0) {
      respond_error(id, RPC_INVALID_PARAMS, "params.position needs a line and a character (integers from 0)");
      return NULL;
    }
    *line = json_integer_value(l);
    *ch = json_integer_value(c);
  }
  return d;
}

static void query(json_t *id, json_t *params, LspQuery q) {
  int64_t line = 0, ch = 0;
  LspDoc *d = doc_param(id, params, q == Q_SYMBOLS ? NULL : &line, q == Q_SYMBOLS ? NULL : &ch);
  if (!d)
    return;
  const char *why = NULL;
  json_t *answer = run_query(d, q, line, ch, &why);
  if (!answer)
    respond_error(id, RPC_REQUEST_FAILED, "%s", why);
  else
    respond(id, answer);
}

/* Whether the ranges a and b (LSP objects) overlap or touch. */
static bool overlaps(json_t *a, json_t *b) {
  int64_t al = json_integer_value(json_object_get(json_object_get(a, "start"), "line"));
  int64_t ac = json_integer_value(json_object_get(json_object_get(a, "start"), "character"));
  int64_t ael = json_integer_value(json_object_get(json_object_get(a, "end"), "line"));
  int64_t aec = json_integer_value(json_object_get(json_object_get(a, "end"), "character"));
  int64_t bl = json_integer_value(json_object_get(json_object_get(b, "start"), "line"));
  int64_t bc = json_integer_value(json_object_get(json_object_get(b, "start"), "character"));
  int64_t bel = json_integer_value(json_object_get(json_object_get(b, "end"), "line"));
  int64_t bec = json_integer_value(json_object_get(json_object_get(b, "end"), "character"));
  bool a_before_b = ael < bl || (ael == bl && aec < bc);
  bool b_before_a = bel < al || (bel == al && bec < ac);
  return !a_before_b && !b_before_a;
}

/* The fixes of the published diagnostics that meet params.range. */
static void code_action(json_t *id, json_t *params) {
  LspDoc *d = doc_param(id, params, NULL, NULL);
  if (!d)
    return;
  json_t *range = json_object_get(params, "range");
  if (!json_is_object(range)) {
    respond_error(id, RPC_INVALID_PARAMS, "params.range is missing");
    return;
  }
  json_t *actions = json_array();
  size_t i, k;
  json_t *diag, *fix;
  json_array_foreach(d->diagnostics, i, diag) {
    if (!overlaps(json_object_get(diag, "range"), range))
      continue;
    json_array_foreach(json_object_get(json_object_get(diag, "data"), "fixes"), k, fix) {
      json_t *changes = json_object();
      json_object_set(changes, d->uri, json_object_get(fix, "edits"));
      json_t *diag_copy = json_deep_copy(diag);
      json_object_del(diag_copy, "data");
      json_array_append_new(actions, json_pack("{s:O, s:s, s:[o], s:b, s:{s:o}}", "title",
                                               json_object_get(fix, "title"), "kind", "quickfix", "diagnostics",
                                               diag_copy, "isPreferred", k == 0, "edit", "changes", changes));
    }
  }
  respond(id, actions);
}

/* ---- notifications --------------------------------------------------------------------- */

static void did_open(json_t *params) {
  json_t *td = json_object_get(params, "textDocument");
  const char *uri = json_string_value(json_object_get(td, "uri"));
  json_t *text = json_object_get(td, "text");
  if (!uri || !json_is_string(text)) {
    log_message(1, "shdc: didOpen without textDocument.uri and text: ignored");
    return;
  }
  LspDoc *d = find_doc(uri);
  if (!d) {
    if (S.ndocs == MAX_DOCS) {
      log_message(1, "shdc: more than %d open documents: %s ignored", MAX_DOCS, uri);
      return;
    }
    S.docs = mem_grow(S.docs, &S.capdocs, S.ndocs + 1, sizeof *S.docs);
    d = &S.docs[S.ndocs++];
    memset(d, 0, sizeof *d);
    d->uri = mem_strdup(uri);
    char *path = lsp_uri_path(uri);
    d->path = path ? path : mem_strdup(uri);
  }
  size_t len;
  const char *t = text_of(text, &len);
  set_text(d, t, len);
  json_t *v = json_object_get(td, "version");
  d->version = json_is_integer(v) ? json_integer_value(v) : -1;
}

/* One change: {range, text} replaces the range, {text} the whole text. */
static bool apply_change(LspDoc *d, json_t *c) {
  json_t *text = json_object_get(c, "text"), *range = json_object_get(c, "range");
  if (!json_is_string(text))
    return false;
  size_t len;
  const char *t = text_of(text, &len);
  if (!range) {
    set_text(d, t, len);
    return true;
  }
  json_t *s = json_object_get(range, "start"), *e = json_object_get(range, "end");
  json_t *sl = json_object_get(s, "line"), *sc = json_object_get(s, "character");
  json_t *el = json_object_get(e, "line"), *ec = json_object_get(e, "character");
  if (!json_is_integer(sl) || !json_is_integer(sc) || !json_is_integer(el) || !json_is_integer(ec) ||
      json_integer_value(sl) < 0 || json_integer_value(sc) < 0 || json_integer_value(el) < 0 ||
      json_integer_value(ec) < 0)
    return false;
  size_t a = lsp_offset(d->text, d->len, json_integer_value(sl), json_integer_value(sc), S.enc);
  size_t b = lsp_offset(d->text, d->len, json_integer_value(el), json_integer_value(ec), S.enc);
  if (b < a)
    return false;
  size_t n = d->len - (b - a) + len;
  char *nt = mem_alloc(n + 1);
  memcpy(nt, d->text, a);
  memcpy(nt + a, t, len);
  memcpy(nt + a + len, d->text + b, d->len - b);
  nt[n] = 0;
  free(d->text);
  d->text = nt;
  d->len = n;
  d->dirty = true;
  return true;
}

static void did_change(json_t *params) {
  json_t *td = json_object_get(params, "textDocument");
  const char *uri = json_string_value(json_object_get(td, "uri"));
  LspDoc *d = find_doc(uri);
  if (!d) {
    log_message(1, "shdc: didChange of %s, which is not open: ignored", uri ? uri : "a document without a uri");
    return;
  }
  json_t *changes = json_object_get(params, "contentChanges");
  size_t i;
  json_t *c;
  if (!json_is_array(changes)) {
    log_message(1, "shdc: didChange of %s without contentChanges: ignored", uri);
    return;
  }
  json_array_foreach(changes, i, c) {
    if (!apply_change(d, c)) {
      log_message(1, "shdc: didChange of %s: change %zu is malformed; the document may now differ from the "
                  "editor's (reopen it)", uri, i);
      break;
    }
  }
  json_t *v = json_object_get(td, "version");
  if (json_is_integer(v))
    d->version = json_integer_value(v);
}

static void did_close(json_t *params) {
  const char *uri = json_string_value(json_object_get(json_object_get(params, "textDocument"), "uri"));
  LspDoc *d = find_doc(uri);
  if (!d) {
    log_message(2, "shdc: didClose of %s, which is not open", uri ? uri : "a document without a uri");
    return;
  }
  /* Clear what the editor shows for it, then forget it. */
  notify("textDocument/publishDiagnostics", json_pack("{s:s, s:[]}", "uri", d->uri, "diagnostics"));
  free_doc(d);
  *d = S.docs[--S.ndocs];
}

/* A saved file may be imported by any open document, which reads it from
 * the disk: every document is analysed again. */
static void did_save(void) {
  for (int i = 0; i < S.ndocs; i++)
    S.docs[i].dirty = true;
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static void dispatch(json_t *msg) {
  if (!json_is_object(msg)) {
    respond_error(NULL, RPC_INVALID_REQUEST, "a message must be a JSON object (batches are not supported)");
    return;
  }
  json_t *id = json_object_get(msg, "id");
  const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
  json_t *method_v = json_object_get(msg, "method");
  json_t *params = json_object_get(msg, "params");
  bool request = id != NULL;
  if (request && !json_object_get(msg, "method") && (json_object_get(msg, "result") || json_object_get(msg, "error")))
    return;   /* a response: the server sends no requests, so it answers none */
  if (request && !json_is_integer(id) && !json_is_string(id)) {
    respond_error(NULL, RPC_INVALID_REQUEST, "the id must be an integer or a string");
    return;
  }
  if (!version || strcmp(version, "2.0") || !json_is_string(method_v) || (params && !json_is_object(params) &&
                                                                           !json_is_array(params))) {
    if (request || !method_v)   /* a response from the client, or no method: nothing to answer */
      respond_error(request ? id : NULL, RPC_INVALID_REQUEST,
                    "not a JSON-RPC 2.0 request: it needs \"jsonrpc\": \"2.0\", a string \"method\" and object "
                    "params");
    return;
  }
  const char *method = json_string_value(method_v);
  if (!strcmp(method, "exit"))
    exit(S.shutdown ? 0 : 1);
  if (!S.initialized && strcmp(method, "initialize")) {
    if (request)
      respond_error(id, RPC_SERVER_NOT_INITIALIZED, "%s before initialize", method);
    return;
  }
  if (S.shutdown) {
    if (request)
      respond_error(id, RPC_INVALID_REQUEST, "%s after shutdown", method);
    return;
  }
  if (request)
    publish_dirty();   /* an answer (a code action) sees the diagnostics of the text it is about */
  if (!request) {
    if (!strcmp(method, "textDocument/didOpen"))
      did_open(params);
    else if (!strcmp(method, "textDocument/didChange"))
      did_change(params);
    else if (!strcmp(method, "textDocument/didClose"))
      did_close(params);
    else if (!strcmp(method, "textDocument/didSave"))
      did_save();
    /* initialized, $/cancelRequest, ...: nothing to do */
    return;
  }
  if (!strcmp(method, "initialize"))
    initialize(id, params);
  else if (!strcmp(method, "shutdown")) {
    S.shutdown = true;
    respond(id, NULL);
  } else if (!strcmp(method, "textDocument/hover"))
    query(id, params, Q_HOVER);
  else if (!strcmp(method, "textDocument/definition"))
    query(id, params, Q_DEFINITION);
  else if (!strcmp(method, "textDocument/documentSymbol"))
    query(id, params, Q_SYMBOLS);
  else if (!strcmp(method, "textDocument/codeAction"))
    code_action(id, params);
  else
    respond_error(id, RPC_METHOD_NOT_FOUND, "shdc does not implement %s", method);
}

int lsp_main(const Vec *incdirs) {
  signal(SIGPIPE, SIG_IGN);
  S.incdirs = incdirs;
  S.in = 0;
  json_set_alloc_funcs(mem_alloc, free);   /* jansson's memory through the choke point too */
  for (;;) {
    char *body = NULL;
    size_t len = 0;
    int r = read_message(&body, &len);
    if (r == 0)
      break;
    if (r > 0) {
      json_error_t err;
      json_t *msg = json_loadb(body, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
      free(body);
      if (!msg)
        respond_error(NULL, RPC_PARSE_ERROR, "the message is not JSON: %s (line %d, column %d)", err.text,
                      err.line, err.column);
      else
        dispatch(msg);
      json_decref(msg);
    }
    if (!input_pending())
      publish_dirty();
  }
  return S.shutdown ? 0 : 1;
}
