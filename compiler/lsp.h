/* lsp.h: what the language server's files share: lsp.c (the protocol, the
 * documents and the child processes) and, in the child, the answers
 * computed from the compiler's own analysis: lsp_query.c (positions,
 * diagnostics, definition, symbols), lsp_index.c (what each place of the
 * text means) and lsp_hover.c (the hover text). Only they include it, so
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
/* The LSP {line, character} of a 1-based line and byte column of text,
 * which is reported as report_line (the same line, unless text starts at a
 * later line of the file). */
json_t *lsp_position(const char *text, size_t len, int line, int col, LspEncoding enc, int report_line);
/* A file name as a file: URI (percent-encoded), and back (NULL when the URI
 * is not a file: URI). */
char *lsp_path_uri(const char *path);
char *lsp_uri_path(const char *uri);

/* lsp_query.c, in the child: the answer to one query about doc, as the
 * JSON of an LSP result (diagnostics: an array of Diagnostic with
 * data.fixes; hover: Hover or null; definition: Location or null;
 * symbols: DocumentSymbol[]). (line, ch) is the query's position. */
json_t *lsp_answer(const LspDoc *doc, const Vec *incdirs, LspQuery q, int64_t line, int64_t ch,
                   LspEncoding enc);

/* ---- in the child: the document in the compiler ------------------------------------ */

typedef struct {
  const LspDoc *doc;
  LspEncoding enc;
  SourceFile src;      /* the document (imported files have SourceFiles of their own) */
  Program *prog;       /* with the imported files' declarations merged in */
  Mesh mesh;
  bool typed;
  size_t *line_starts; /* offset of each line of src: a position costs O(its line), not O(the file) */
  int64_t nlines;
} LspCtx;

/* The URI of a compiler file (the document's own, or a file: URI), and LSP
 * ranges and locations of its 1-based lines and byte columns. */
json_t *lsp_uri_of(const LspCtx *c, const SourceFile *f);
json_t *lsp_range(const LspCtx *c, const SourceFile *f, int line, int col, int end_line, int end_col);
json_t *lsp_location(const LspCtx *c, Pos p, int len);
/* The bytes of the string literal starting at p (quotes included). */
int lsp_string_len(Pos p);

/* ---- lsp_index.c: what each place of the text means ---------------------------------- */

typedef enum {
  OC_FUNC,         /* a function's name where it is declared */
  OC_PARAM,        /* a parameter where it is declared */
  OC_BIND,         /* a let, var, loop variable where it is bound */
  OC_CONST,        /* a const where it is declared */
  OC_AXIS_DECL,    /* a mesh axis in the mesh declaration */
  OC_NAME,         /* a name used (Symbol) */
  OC_CALL,         /* the name of a called function or builtin */
  OC_EXPR,         /* an operator or literal: its expression's type */
  OC_AXIS,         /* a mesh axis written in a type */
  OC_CONST_SIZE,   /* a const used as a size in a type */
  OC_STRUCT_DECL,  /* a struct's name where it is declared */
  OC_FIELD_DECL,   /* a field's name in its struct's declaration */
  OC_STRUCT,       /* a struct's name used: in a type, ones(S), S(f=...) */
  OC_FIELD,        /* a field's name used: p.w, S(w=...), p.w = ... */
  OC_TPARAM_DECL,  /* a type parameter in fn f<P> */
  OC_TPARAM,       /* a type parameter used in a type or zeros(P) */
  OC_IMPORT,       /* the file name of an import */
} OccKind;

typedef struct {
  OccKind kind;
  Pos pos;
  int len;
  const Expr *e;          /* OC_NAME, OC_CALL, OC_EXPR, OC_FIELD of p.w, OC_STRUCT of S(f=...) */
  const Symbol *sym;      /* OC_PARAM, OC_BIND, OC_NAME */
  const FuncDecl *fn;     /* OC_FUNC; the function (or generic instance) a place is in */
  const Stmt *st;         /* OC_BIND */
  int axis;               /* OC_AXIS, OC_AXIS_DECL */
  const ConstDecl *cd;    /* OC_CONST, OC_CONST_SIZE */
  const StructDecl *sd;   /* OC_STRUCT_DECL, OC_STRUCT, OC_FIELD_DECL, OC_FIELD (when known) */
  int field;              /* OC_FIELD_DECL, OC_FIELD: the field's index in sd, or -1 */
  Type fty;               /* OC_FIELD: the field's type in the value (TY_ERROR when unknown) */
  int tparam;             /* OC_TPARAM_DECL, OC_TPARAM: index in the generic's type parameters */
  const ImportDecl *imp;  /* OC_IMPORT */
} Occ;

typedef struct {
  LspCtx *c;
  Vec occs;               /* Occ * */
  const FuncDecl *fn;     /* the function being indexed */
  PtrMap sym_kind;        /* Symbol * -> OC_PARAM / OC_BIND */
} LspIndex;

/* The places of the document (its own declarations; a generic function's
 * body through its instances, each place once per instance). */
void lsp_index(LspIndex *ix, LspCtx *c);
/* The innermost place at the 1-based line and byte column, or NULL. */
const Occ *lsp_occ_at(const LspIndex *ix, int line, int col);
/* The declaration a function, struct or instance comes from. */
const FuncDecl *lsp_decl_of(const FuncDecl *f);
const FuncDecl *lsp_func_named(const LspCtx *c, const char *name, int len);
const StructDecl *lsp_struct_named(const LspCtx *c, const char *name, int len);
const StructDecl *lsp_struct_of(const LspCtx *c, const StructDef *d);

/* ---- lsp_hover.c ---------------------------------------------------------------------- */

/* The Hover of place o (null when it has nothing to say). */
json_t *lsp_hover(LspCtx *c, const LspIndex *ix, const Occ *o);
/* A function's signature: typed (an instance with its binding, f<P = T>),
 * or as written (a generic declaration); fenced as shd code when fence. */
void lsp_signature(Str *s, const LspCtx *c, const FuncDecl *f, bool fence);
const char *lsp_type_text(const LspCtx *c, const Type *t);
/* const NAME = VALUE */
const char *lsp_const_text(const ConstDecl *cd);

#endif
