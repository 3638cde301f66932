/* import.c: import "FILE.shd" (language.md §9.6).
 *
 * Input: the parsed program, whose items_order lists its declarations and
 * imports in source order. Output: the same Program with the structs,
 * consts and functions of every imported file merged in, in declaration
 * order: an imported file's declarations take the place of its import, so
 * a name declared twice is reported at the later declaration, and consts
 * are evaluated in order. Each declaration keeps its own SourceFile, so an
 * error inside an imported file is reported in that file.
 *
 * A path is looked up relative to the importing file's directory, then in
 * each -I DIR, then in the installed library directory (which holds std/).
 * A file is identified by its real path: importing it again is harmless;
 * importing a file that is still being imported (an ancestor on the import
 * chain, or the program itself) is a cycle, [E_IMPORT] at the import that
 * closes it. A library may not declare a mesh ([E_MESH] at the import, a
 * note at the mesh): a library is mesh-independent.
 *
 * Every import records the file it names (ImportDecl.real), and the
 * program's imports list grows by those of each file read, so a tool (the
 * language server) can follow the chain from any imported file back to the
 * program's own import of it.
 *
 * Invariants: every file is read and parsed at most once; the import chain
 * is at most MAX_IMPORT_DEPTH deep (an error at the import past it), and
 * every file read obeys the driver's rules (a regular file of at most 8
 * MiB).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdc.h"

#define MAX_IMPORT_DEPTH 200
#define MAX_SOURCE (8 << 20)

typedef struct {
  const char *real;    /* realpath of the file */
  int state;           /* 1 being imported (on the chain), 2 done */
  const SourceFile *file;
} FileEntry;

typedef struct {
  Program *into;
  const Vec *incdirs;
  Vec files;           /* FileEntry * */
  StrMap by_real;      /* real path -> FileEntry *: a lookup per import, not a pass over every file */
  Vec merged;          /* Item *, in declaration order */
  int depth;
  int next_order;
} Importer;

static FileEntry *find_file(Importer *im, const char *real) {
  return strmap_get(&im->by_real, real);
}

static FileEntry *add_file(Importer *im, const char *real, const SourceFile *sf) {
  FileEntry *f = arena_alloc(sizeof *f);
  f->real = arena_strdup(real);
  f->state = 1;
  f->file = sf;
  vec_push(&im->files, f);
  strmap_put(&im->by_real, f->real, f);
  return f;
}

/* The directory of a file name, as written ("a/b.shd" -> "a", "b.shd" -> "."). */
static const char *dir_of(const char *name) {
  char *copy = arena_strdup(name);
  return arena_strdup(dirname(copy));
}

/* What a name that is there but not a regular file is, for the message. */
static const char *file_kind(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* Where the import may name a file: its real path, or NULL; *tried lists
 * the places looked at, for the message, and *odd the first of them that
 * is there but is not a regular file (a directory, a FIFO), with what it is. */
static char *locate(Importer *im, const SourceFile *from, const char *path, Str *tried, const char **odd) {
  Vec dirs = {0};
  if (path[0] == '/')
    vec_push(&dirs, "");
  else {
    vec_push(&dirs, (void *)dir_of(from->name));
    for (int i = 0; im->incdirs && i < im->incdirs->len; i++)
      vec_push(&dirs, im->incdirs->data[i]);
    const char *lib = drv_library_dir();
    if (lib)
      vec_push(&dirs, (void *)lib);
  }
  char *found = NULL;
  for (int i = 0; i < dirs.len && !found; i++) {
    const char *d = dirs.data[i];
    const char *full = *d ? arena_printf("%s/%s", d, path) : path;
    str_printf(tried, "%s%s", i ? ", " : "", full);
    struct stat st;
    if (stat(full, &st) == 0 && S_ISREG(st.st_mode))
      found = realpath(full, NULL);
    else if (!*odd && stat(full, &st) == 0)
      *odd = arena_printf("%s is %s", full, file_kind(st.st_mode));
  }
  free(dirs.data);
  return found;
}

/* The file's text, or NULL after reporting at the import. */
static SourceFile *read_file(Pos at, const char *real, const char *path) {
  int fd = open(real, O_RDONLY | O_NONBLOCK);
  struct stat st;
  const char *why = NULL;
  if (fd < 0 || fstat(fd, &st) != 0)
    why = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (st.st_size > MAX_SOURCE)
    why = arena_printf("it has %lld bytes; a file may have at most 8 MiB", (long long)st.st_size);
  char *text = NULL;
  size_t len = 0;
  if (!why) {
    text = arena_alloc((size_t)st.st_size + 1);
    while (len < (size_t)st.st_size) {
      ssize_t n = read(fd, text + len, (size_t)st.st_size - len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        why = n < 0 ? strerror(errno) : "it changed while it was read";
        break;
      }
      len += (size_t)n;
    }
  }
  if (fd >= 0)
    close(fd);
  if (why) {
    diag_error(at, "E_IMPORT", "cannot read the imported file %s: %s", path, why);
    return NULL;
  }
  text[len] = 0;
  SourceFile *sf = arena_alloc(sizeof *sf);
  sf->name = arena_strdup(real);
  sf->text = text;
  sf->len = len;
  return sf;
}

static void merge(Importer *im, Program *from);

static void import_one(Importer *im, const SourceFile *from, ImportDecl *d) {
  Str tried = {0};
  const char *odd = NULL;
  char *real = locate(im, from, d->path, &tried, &odd);
  if (!real && odd) {
    diag_error(d->pos, "E_IMPORT", "cannot import \"%s\": %s, not a regular file; an import names a .shd file",
               d->path, odd);
    free(tried.buf);
    return;
  }
  if (!real) {
    diag_error(d->pos, "E_IMPORT", "cannot find the imported file \"%s\" (looked for %s); add the directory that "
               "holds it with -I DIR", d->path, str_cstr(&tried));
    free(tried.buf);
    return;
  }
  free(tried.buf);
  d->real = arena_strdup(real);
  FileEntry *f = find_file(im, real);
  if (f && f->state == 2) {
    free(real);
    return;   /* imported before: harmless */
  }
  if (f) {
    diag_error(d->pos, "E_IMPORT", "cyclic import: %s imports \"%s\", which is already being imported (it imports "
               "this file, directly or through others); move what both need to a third file",
               from->name, d->path);
    free(real);
    return;
  }
  if (im->depth >= MAX_IMPORT_DEPTH) {
    diag_error(d->pos, "E_IMPORT", "imports nest more than %d files deep here; import fewer files from each other",
               MAX_IMPORT_DEPTH);
    free(real);
    return;
  }
  SourceFile *sf = read_file(d->pos, real, d->path);
  if (!sf) {
    free(real);
    return;
  }
  sf->order = ++im->next_order;
  f = add_file(im, real, sf);
  free(real);
  int errs = diag_error_count();
  Program *p = parse_file(sf);
  for (int i = 0; p && i < p->imports.len; i++)
    vec_push(&im->into->imports, p->imports.data[i]);
  if (diag_error_count() == errs && p->mesh) {
    diag_error(d->pos, "E_MESH", "the imported file \"%s\" declares a mesh; a library is mesh-independent (its "
               "functions are generic or use replicated types): remove the mesh from it", d->path);
    diag_note(p->mesh->pos, "the mesh is declared here");
  } else if (diag_error_count() == errs) {
    im->depth++;
    merge(im, p);
    im->depth--;
  }
  f->state = 2;
}

static void merge(Importer *im, Program *from) {
  for (int i = 0; i < from->items_order.len; i++) {
    Item *it = from->items_order.data[i];
    if (it->kind == ITEM_IMPORT)
      import_one(im, from->file, it->decl);
    else
      vec_push(&im->merged, it);
  }
}

void import_program(Program *p, const Vec *incdirs) {
  bool any = false;
  for (int i = 0; i < p->items_order.len && !any; i++)
    any = ((Item *)p->items_order.data[i])->kind == ITEM_IMPORT;
  if (!any)
    return;
  Importer im;
  memset(&im, 0, sizeof im);
  im.into = p;
  im.incdirs = incdirs;
  char *real = realpath(p->file->name, NULL);
  add_file(&im, real ? real : p->file->name, p->file);
  free(real);
  merge(&im, p);
  p->consts = (Vec){0};
  p->structs = (Vec){0};
  p->funcs = (Vec){0};
  for (int i = 0; i < im.merged.len; i++) {
    Item *it = im.merged.data[i];
    vec_push(it->kind == ITEM_CONST ? &p->consts : it->kind == ITEM_STRUCT ? &p->structs : &p->funcs, it->decl);
  }
  free(p->items_order.data);
  p->items_order = im.merged;
  free(im.files.data);
  strmap_free(&im.by_real);
}
