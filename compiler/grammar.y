/* grammar.y: the grammar of .shd files, for the Lemon parser generator.
 *
 * Every action is one line that calls a builder in parse.c, so this file
 * reads as the language's syntax. Newlines are statement terminators (the
 * lexer emits TK_NL only where a statement can end). `stmt ::= error` lets
 * the parser resynchronise at the next line after a syntax error, so one run
 * reports several.
 *
 * Precedence, loosest first, as Python's: `as`, comparisons
 * (non-associative), |, &, + -, * / % @, unary - and !, ** (right
 * associative, so -x ** 2 is -(x ** 2)), calls and indexing. So (a < b) &
 * (c < d) needs its parentheses, as in NumPy. A type is an expression of
 * its own (an argument of zeros, cast, reshard...), not a postfix one, so
 * that `f32[8]` is a type and `x[8]` an indexing without a conflict.
 */

%name Parse
%token_prefix TK_
%token_type {Token}
%extra_argument {ParseCtx *pc}
%start_symbol program

%include {
#include <assert.h>
#include "shdc.h"

typedef struct { Vec types; bool tuple; } RetSpec;
typedef struct { Vec names, sizes; } MeshAxes;

static Token *box_token(Token t) {
  Token *p = arena_alloc(sizeof *p);
  *p = t;
  return p;
}
}

%syntax_error { parse_syntax_error(pc, yyminor); }

%code {
/* Lemon reports a second syntax error only after three tokens have been
 * shifted since the first; parse.c has already skipped the rest of the bad
 * statement, so the next one's errors are reported at once. */
void ParseErrorsReported(void *p) { ((yyParser *)p)->yyerrcnt = -1; }
}
%stack_overflow { parse_too_deep(pc); }
%stack_size 1000

/* Every token, so that grammar.h defines them all in this order. */
%token MESH CONST FN MANUAL LET VAR FOR IN IF ELSE RETURN AS TRUE FALSE
       DTYPE IDENT FLOAT INT STRING ANNOT_U ANNOT_R ANNOT_V ARROW DOTDOT
       LE GE EQEQ NE LT GT ASSIGN LBRACE RBRACE LPAREN RPAREN LBRACKET
       RBRACKET COMMA COLON SEMI AT PLUS MINUS STAR SLASH NL
       STARSTAR PERCENT AMP PIPE BANG STRUCT DOT IMPORT.

%left AS.
%nonassoc LT LE GT GE EQEQ NE.
%left PIPE.
%left AMP.
%left PLUS MINUS.
%left STAR SLASH PERCENT AT.
%right UMINUS BANG.
%right STARSTAR.

%type expr {Expr *}
%type postfix {Expr *}
%type primary {Expr *}
%type index {Expr *}
%type index_list {Vec}
%type arg {Expr *}
%type args {Vec}
%type arg_list {Vec}
%type elems {Vec}
%type type {TypeExpr *}
%type atype {TypeExpr *}
%type ntdims {TypeExpr *}
%type tbase {TypeExpr *}
%type tdims {TypeExpr *}
%type dim {DimExpr}
%type ident_list {Vec}
%type block {Block *}
%type stmts {Vec}
%type stmt_seq {Vec}
%type stmt {Stmt *}
%type if_stmt {Stmt *}
%type fn_decl {FuncDecl *}
%type params {Vec}
%type param_list {Vec}
%type ret {RetSpec}
%type type_list {Vec}

/* ---- file ---------------------------------------------------------------- */

program ::= items.
items ::= .
items ::= items item.
items ::= items NL.
items ::= items SEMI.

item ::= MESH(K) LBRACE mesh_axes(A) opt_comma opt_nl RBRACE. { parse_mesh(pc, K, &A.names, &A.sizes); }
item ::= CONST IDENT(N) ASSIGN expr(E).                    { parse_const(pc, N, E); }
item ::= fn_decl(F).                                        { parse_func(pc, F); }
item ::= MANUAL(M) LPAREN ident_list(L) RPAREN fn_decl(F). { parse_manual(pc, F, M, &L); }
item ::= STRUCT(K) IDENT(N) LBRACE fields(F) RBRACE.        { parse_struct(pc, K, N, &F); }
item ::= IMPORT(K) STRING(S).                               { parse_import(pc, K, S); }
item ::= error.

%type mesh_axes {MeshAxes}
mesh_axes(A) ::= IDENT(N) COLON expr(E).                    { A.names = (Vec){0}; A.sizes = (Vec){0}; vec_push(&A.names, box_token(N)); vec_push(&A.sizes, E); }
mesh_axes(A) ::= mesh_axes(A) COMMA IDENT(N) COLON expr(E). { vec_push(&A.names, box_token(N)); vec_push(&A.sizes, E); }
opt_comma ::= .
opt_comma ::= COMMA.
opt_nl ::= .
opt_nl ::= NL.

/* ---- structs: fields separated by commas or newlines ----------------------- */

%type fields {Vec}
%type field_list {Vec}
fields(F) ::= .                               { F = (Vec){0}; }
fields(F) ::= field_list(F).
fields(F) ::= field_list(F) fsep.
field_list(F) ::= IDENT(N) COLON type(T).     { F = (Vec){0}; vec_push(&F, parse_param(N, T)); }
field_list(F) ::= field_list(F) fsep IDENT(N) COLON type(T). { vec_push(&F, parse_param(N, T)); }
fsep ::= COMMA.
fsep ::= NL.
fsep ::= COMMA NL.

/* ---- functions ----------------------------------------------------------- */

fn_decl(F) ::= FN IDENT(N) LPAREN params(P) RPAREN ret(R) block(B). { F = parse_func_head(N, &P, &R.types, R.tuple); F->body = B; }
fn_decl(F) ::= FN IDENT(N) LT ident_list(T) GT LPAREN params(P) RPAREN ret(R) block(B). { F = parse_func_head(N, &P, &R.types, R.tuple); F->body = B; parse_type_params(F, &T); }

params(P) ::= .                               { P = (Vec){0}; }
params(P) ::= param_list(P).
params(P) ::= param_list(P) COMMA.
param_list(P) ::= IDENT(N) COLON type(T).     { P = (Vec){0}; vec_push(&P, parse_meta_param(pc, N, T, N)); }
param_list(P) ::= param_list(P) COMMA IDENT(N) COLON type(T). { vec_push(&P, parse_meta_param(pc, N, T, N)); }
param_list(P) ::= IDENT(N) COLON FN(K).       { P = (Vec){0}; vec_push(&P, parse_meta_param(pc, N, NULL, K)); }
param_list(P) ::= param_list(P) COMMA IDENT(N) COLON FN(K). { vec_push(&P, parse_meta_param(pc, N, NULL, K)); }

ret(R) ::= .                                  { R.types = (Vec){0}; R.tuple = false; }
ret(R) ::= ARROW type(T).                     { R.types = (Vec){0}; vec_push(&R.types, T); R.tuple = false; }
ret(R) ::= ARROW LPAREN type_list(L) RPAREN.  { R.types = L; R.tuple = true; }
type_list(L) ::= type(T).                     { L = (Vec){0}; vec_push(&L, T); }
type_list(L) ::= type_list(L) COMMA type(T).  { vec_push(&L, T); }

/* ---- types: f32, f32[8@X, 4@(Y,Z)]<U:W>, a struct S or S[N@X] ------------ */
/* A named type (a struct, a type parameter) is a type only where a type is
 * expected; as an argument (zeros(GPT)) it is a name the checker resolves,
 * so `expr ::= atype` leaves names to primary. */

type(T) ::= atype(T).
type(T) ::= IDENT(N).                         { T = parse_named_type(pc, N); }
type(T) ::= ntdims(T) RBRACKET.
ntdims(T) ::= IDENT(N) LBRACKET dim(X).       { T = parse_named_type(pc, N); parse_type_dim(pc, T, X, X.size.pos); }
ntdims(T) ::= ntdims(T) COMMA dim(X).         { parse_type_dim(pc, T, X, X.size.pos); }
atype(T) ::= tbase(T).
atype(T) ::= atype(T) ANNOT_U(K) ident_list(L) GT. { parse_type_annot(pc, T, 'U', &L, tok_pos(K)); }
atype(T) ::= atype(T) ANNOT_R(K) ident_list(L) GT. { parse_type_annot(pc, T, 'R', &L, tok_pos(K)); }
atype(T) ::= atype(T) ANNOT_V(K) ident_list(L) GT. { parse_type_annot(pc, T, 'V', &L, tok_pos(K)); }
tbase(T) ::= DTYPE(D).                        { T = parse_type(pc, D); }
tbase(T) ::= DTYPE(D) LBRACKET RBRACKET.      { T = parse_type(pc, D); }
tbase(T) ::= tdims(T) RBRACKET.
tdims(T) ::= DTYPE(D) LBRACKET dim(X).        { T = parse_type(pc, D); parse_type_dim(pc, T, X, X.size.pos); }
tdims(T) ::= tdims(T) COMMA dim(X).           { parse_type_dim(pc, T, X, X.size.pos); }

dim(D) ::= INT(S).                            { D = parse_dim(S, NULL, false); }
dim(D) ::= IDENT(S).                          { D = parse_dim(S, NULL, false); }
dim(D) ::= INT(S) AT IDENT(A).                { Vec v = {0}; vec_push(&v, box_token(A)); D = parse_dim(S, &v, false); }
dim(D) ::= IDENT(S) AT IDENT(A).              { Vec v = {0}; vec_push(&v, box_token(A)); D = parse_dim(S, &v, false); }
dim(D) ::= INT(S) AT LPAREN ident_list(L) RPAREN.   { D = parse_dim(S, &L, true); }
dim(D) ::= IDENT(S) AT LPAREN ident_list(L) RPAREN. { D = parse_dim(S, &L, true); }

ident_list(L) ::= IDENT(N).                   { L = (Vec){0}; vec_push(&L, box_token(N)); }
ident_list(L) ::= ident_list(L) COMMA IDENT(N). { vec_push(&L, box_token(N)); }

/* ---- statements ---------------------------------------------------------- */

block(B) ::= LBRACE(K) stmts(S) RBRACE.       { B = parse_block(K, &S); }
stmts(S) ::= .                                { S = (Vec){0}; }
stmts(S) ::= stmt_seq(S).
stmts(S) ::= stmt_seq(S) terms.
stmt_seq(S) ::= stmt(X).                      { S = (Vec){0}; parse_push_stmt(&S, X); }
stmt_seq(S) ::= stmt_seq(S) terms stmt(X).    { parse_push_stmt(&S, X); }
terms ::= term.
terms ::= terms term.
term ::= NL.
term ::= SEMI.

stmt(S) ::= LET(K) IDENT(N) ASSIGN expr(E).                  { S = parse_stmt_let(K, N, NULL, E, ST_LET); }
stmt(S) ::= LET(K) IDENT(N) COLON type(T) ASSIGN expr(E).    { S = parse_stmt_let(K, N, T, E, ST_LET); }
stmt(S) ::= LET(K) LPAREN ident_list(L) RPAREN ASSIGN expr(E). { S = parse_stmt_let_tuple(K, &L, E); }
stmt(S) ::= VAR(K) IDENT(N) ASSIGN expr(E).                  { S = parse_stmt_let(K, N, NULL, E, ST_VAR); }
stmt(S) ::= VAR(K) IDENT(N) COLON type(T) ASSIGN expr(E).    { S = parse_stmt_let(K, N, T, E, ST_VAR); }
stmt(S) ::= postfix(N) ASSIGN(K) expr(E).                    { S = parse_stmt_assign(pc, N, K, E); }
stmt(S) ::= FOR(K) IDENT(V) IN expr(L) DOTDOT expr(H) block(B). { S = parse_stmt_for(K, V, L, H, B); }
stmt(S) ::= if_stmt(S).
stmt(S) ::= RETURN(K) expr(E).                               { S = parse_stmt_return(K, E); }
stmt(S) ::= RETURN(K).                                       { S = parse_stmt_return(K, NULL); }
stmt(S) ::= expr(E).                                         { S = parse_stmt_expr(E); }
stmt(S) ::= error.                                           { S = NULL; }

if_stmt(S) ::= IF(K) expr(C) block(B).                       { S = parse_stmt_if(K, C, B, NULL); }
if_stmt(S) ::= IF(K) expr(C) block(B) ELSE block(E).         { S = parse_stmt_if(K, C, B, E); }
if_stmt(S) ::= IF(K) expr(C) block(B) ELSE if_stmt(E).       { S = parse_stmt_if(K, C, B, parse_block_of(E)); }

/* ---- expressions --------------------------------------------------------- */

expr(E) ::= expr(L) AS(K) type(T).            { E = parse_as(L, T, K); }
expr(E) ::= expr(L) LT(K) expr(R).            { E = parse_binary(BIN_LT, L, R, K); }
expr(E) ::= expr(L) LE(K) expr(R).            { E = parse_binary(BIN_LE, L, R, K); }
expr(E) ::= expr(L) GT(K) expr(R).            { E = parse_binary(BIN_GT, L, R, K); }
expr(E) ::= expr(L) GE(K) expr(R).            { E = parse_binary(BIN_GE, L, R, K); }
expr(E) ::= expr(L) EQEQ(K) expr(R).          { E = parse_binary(BIN_EQ, L, R, K); }
expr(E) ::= expr(L) NE(K) expr(R).            { E = parse_binary(BIN_NE, L, R, K); }
expr(E) ::= expr(L) PLUS(K) expr(R).          { E = parse_binary(BIN_ADD, L, R, K); }
expr(E) ::= expr(L) MINUS(K) expr(R).         { E = parse_binary(BIN_SUB, L, R, K); }
expr(E) ::= expr(L) STAR(K) expr(R).          { E = parse_binary(BIN_MUL, L, R, K); }
expr(E) ::= expr(L) SLASH(K) expr(R).         { E = parse_binary(BIN_DIV, L, R, K); }
expr(E) ::= expr(L) AT(K) expr(R).            { E = parse_binary(BIN_MATMUL, L, R, K); }
expr(E) ::= expr(L) PERCENT(K) expr(R).       { E = parse_binary(BIN_MOD, L, R, K); }
expr(E) ::= expr(L) STARSTAR(K) expr(R).      { E = parse_binary(BIN_POW, L, R, K); }
expr(E) ::= expr(L) AMP(K) expr(R).           { E = parse_binary(BIN_AND, L, R, K); }
expr(E) ::= expr(L) PIPE(K) expr(R).          { E = parse_binary(BIN_OR, L, R, K); }
expr(E) ::= MINUS(K) expr(X). [UMINUS]        { E = parse_unary(UN_NEG, X, K); }
expr(E) ::= BANG(K) expr(X).                  { E = parse_unary(UN_NOT, X, K); }
expr(E) ::= postfix(E).
expr(E) ::= atype(T).                         { E = parse_type_expr(T); }

postfix(E) ::= primary(E).
postfix(E) ::= postfix(F) LPAREN args(A) RPAREN. { E = parse_call(F, &A); }
postfix(E) ::= postfix(X) LBRACKET(K) index_list(L) RBRACKET. { E = parse_index(X, &L, K); }
postfix(E) ::= postfix(X) DOT(K) IDENT(N).    { E = parse_field(X, N, K); }

/* NumPy basic indexing: x[i, lo:hi, :], either bound of a slice optional. */
index_list(L) ::= index(X).                   { L = (Vec){0}; vec_push(&L, X); }
index_list(L) ::= index_list(L) COMMA index(X). { vec_push(&L, X); }
index(E) ::= expr(E).
index(E) ::= COLON(K).                        { E = parse_slice(NULL, NULL, K); }
index(E) ::= expr(L) COLON(K).                { E = parse_slice(L, NULL, K); }
index(E) ::= COLON(K) expr(H).                { E = parse_slice(NULL, H, K); }
index(E) ::= expr(L) COLON(K) expr(H).        { E = parse_slice(L, H, K); }

args(A) ::= .                                 { A = (Vec){0}; }
args(A) ::= arg_list(A).
args(A) ::= arg_list(A) COMMA.
arg_list(A) ::= arg(X).                       { A = (Vec){0}; vec_push(&A, X); }
arg_list(A) ::= arg_list(A) COMMA arg(X).     { vec_push(&A, X); }
arg(E) ::= expr(E).
arg(E) ::= IDENT(N) ASSIGN expr(V).           { E = parse_kwarg(N, V); }

primary(E) ::= INT(T).                        { E = parse_literal(pc, EX_INT, T); }
primary(E) ::= FLOAT(T).                      { E = parse_literal(pc, EX_FLOAT, T); }
primary(E) ::= STRING(T).                     { E = parse_literal(pc, EX_STRING, T); }
primary(E) ::= TRUE(T).                       { E = parse_literal(pc, EX_BOOL, T); }
primary(E) ::= FALSE(T).                      { E = parse_literal(pc, EX_BOOL, T); }
primary(E) ::= IDENT(T).                      { E = parse_literal(pc, EX_NAME, T); }
primary(E) ::= LPAREN expr(X) RPAREN.              { E = X; }
primary(E) ::= LPAREN(K) expr(X) COMMA elems(L) RPAREN. { vec_push(&L, NULL); memmove(L.data + 1, L.data, sizeof(void *) * (size_t)(L.len - 1)); L.data[0] = X; E = parse_seq(EX_TUPLE, &L, tok_pos(K)); }
primary(E) ::= LBRACKET(K) elems(L) RBRACKET. { E = parse_seq(EX_LIST, &L, tok_pos(K)); }

/* Left recursion: a long list does not grow the parser's stack. */
%type elem_list {Vec}
elems(L) ::= .                                { L = (Vec){0}; }
elems(L) ::= elem_list(L).
elems(L) ::= elem_list(L) COMMA.
elem_list(L) ::= expr(X).                     { L = (Vec){0}; vec_push(&L, X); }
elem_list(L) ::= elem_list(L) COMMA expr(X).  { vec_push(&L, X); }
