/* lsp.h: what the language server's two files share (lsp.c: the protocol,
 * the documents and the child processes; lsp_query.c: the answers, computed
 * in a child from the compiler's own analysis). Only they include it, so
 * jansson stays out of shdc.h.
 */
#ifndef SHDC_LSP_H
#define SHDC_LSP_H

#include <jansson.h>

#include "shdc.h"

/* How the client counts a line's characters (LSP positionEncoding). */
typedef enum { ENC_UTF16, ENC_UTF8 } LspEncoding;

typedef enum { Q_DIAGNOSTICS, Q_HOVER, Q_DEFINITION, Q_SYMBOLS } LspQuery;

/* An open document: its URI, the file name diagnostics give it (the path of
 * a file: URI, else the URI), its text (NUL-terminated after len bytes). */
typedef struct {
  char *uri;
  char *path;
  char *text;
  size_t len;
  int64_t version;
  bool dirty;              /* changed since its diagnostics were published */
  json_t *diagnostics;     /* the last ones published (with their fixes), for code actions */
} LspDoc;

/* Byte offset of the LSP position (0-based line, character in enc units)
 * in text; a position past a line's end is its end, past the text its end. */
size_t lsp_offset(const char *text, size_t len, int64_t line, int64_t ch, LspEncoding enc);
/* The LSP {line, character} of a 1-based line and byte column of text. */
json_t *lsp_position(const char *text, size_t len, int line, int col, LspEncoding enc);
/* A file name as a file: URI (percent-encoded), and back (NULL when the URI
 * is not a file: URI). */
char *lsp_path_uri(const char *path);
char *lsp_uri_path(const char *uri);

/* lsp_query.c, in the child: the answer to one query about doc, as the
 * JSON of an LSP result (diagnostics: an array of Diagnostic with
 * data.fixes; hover: Hover or null; definition: Location or null;
 * symbols: DocumentSymbol[]). (line, ch) is the query's position. */
json_t *lsp_answer(const LspDoc *doc, LspQuery q, int64_t line, int64_t ch, LspEncoding enc);

#endif
