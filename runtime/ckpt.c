/* ckpt.c: what the runtime wrote in a directory, so that it removes or
 * replaces only that (issue 28: nothing a save, keep_last or a sweep does
 * may delete a file it did not write).
 *
 * A directory the runtime made, a struct save's (savedir.c) or mkdir()'s
 * (fs.c), holds the marker .shd-checkpoint: two lines of header, then one
 * line "+ NAME" for each entry the runtime put there (NAME/ for a
 * directory): a struct save lists its leaves when they are complete;
 * a single-array save, a manifest, a struct save and mkdir note the
 * entry they made in their directory's marker, when it has one. Only
 * rank 0 writes a marker.
 *
 * A directory is a checkpoint when it has the marker and every entry is the
 * marker, a temporary of the runtime's (.shd-*: the save's .shd-save-*,
 * which a killed save can leave) or listed; a listed directory must be a
 * checkpoint itself. Removing a checkpoint unlinks the listed regular files
 * and temporaries and removes listed directories the same way, then the
 * directory with rmdir, which keeps it (and everything else in it) when
 * it is not empty. Nothing follows a symbolic link: a link is a regular
 * file of nobody's here, and is never listed by the runtime.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define HEADER "shd checkpoint 1\nprogram "
#define MAX_DEPTH 8
#define MAX_MARKER (64 << 20)

/* A fresh stream of the directory open at fd, from its start (a dup shares
 * the offset with fd, which an earlier listing left at the end). */
static DIR *open_stream(int fd)
{
    int d2 = dup(fd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (d)
        rewinddir(d);
    else if (d2 >= 0)
        close(d2);
    return d;
}

/* The marker's listed names, sorted (pointers into text). */
typedef struct {
    char *text;
    char **names;
    size_t n;
} listing;

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Reads the marker of the directory open at dirfd: false when it is absent,
 * not a regular file or not one the runtime wrote. */
static bool read_listing(int dirfd, listing *l)
{
    memset(l, 0, sizeof *l);
    int fd = openat(dirfd, SHD_CKPT_MARKER, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_MARKER) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    size_t len = 0, size = (size_t)st.st_size;
    l->text = shd_mem(NULL, size + 1, "reading %s", SHD_CKPT_MARKER);
    for (ssize_t r; len < size && (r = read(fd, l->text + len, size - len)) > 0;)
        len += (size_t)r;
    close(fd);
    l->text[len] = 0;
    if (strncmp(l->text, HEADER, strlen(HEADER)) != 0) {
        free(l->text);
        return false;
    }
    size_t cap = 0;
    for (char *line = l->text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (line[0] == '+' && line[1] == ' ') {
            l->names = shd_mem_grow(l->names, &cap, l->n + 1, sizeof *l->names, "reading %s", SHD_CKPT_MARKER);
            l->names[l->n++] = line + 2;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (l->n)
        qsort(l->names, l->n, sizeof *l->names, by_name);
    return true;
}

static void free_listing(listing *l)
{
    free(l->text);
    free(l->names);
}

/* Whether name (with "/" after it when dir) is listed. */
static bool listed(const listing *l, const char *name, bool dir)
{
    char key[NAME_MAX + 2];
    snprintf(key, sizeof key, "%s%s", name, dir ? "/" : "");
    const char *k = key;
    return l->n && bsearch(&k, l->names, l->n, sizeof *l->names, by_name);
}

static bool dot_or_dotdot(const char *n) { return !strcmp(n, ".") || !strcmp(n, ".."); }

/* A temporary of the runtime's: .shd-save-*, .shd-probe-*, ... */
static bool runtime_temp(const char *n) { return !strncmp(n, ".shd-", 5) && strcmp(n, SHD_CKPT_MARKER) != 0; }

static const char *not_ours_at(int fd, char *why, size_t cap, int depth);

/* Whether the entry name of the directory fd (its marker's listing l) is
 * the runtime's; why set when not. */
static bool entry_ours(int fd, const listing *l, const char *name, char *why, size_t cap, int depth)
{
    struct stat st;
    if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT;   /* gone meanwhile */
    bool reg = S_ISREG(st.st_mode), dir = S_ISDIR(st.st_mode);
    if (reg && (!strcmp(name, SHD_CKPT_MARKER) || runtime_temp(name) || listed(l, name, false)))
        return true;
    if (dir && listed(l, name, true) && depth < MAX_DEPTH) {
        int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        const char *no = sub < 0 ? "cannot be read" : not_ours_at(sub, why, cap, depth + 1);
        if (sub >= 0)
            close(sub);
        if (!no)
            return true;
        if (no != why)
            snprintf(why, cap, "%s %s", name, no);
        return false;
    }
    snprintf(why, cap, "it holds %s, which no save wrote", name);
    return false;
}

/* NULL when the directory open at fd is a checkpoint, else why not. */
static const char *not_ours_at(int fd, char *why, size_t cap, int depth)
{
    listing l;
    if (!read_listing(fd, &l)) {
        snprintf(why, cap, "it has no %s, which the runtime writes in every directory it makes", SHD_CKPT_MARKER);
        return why;
    }
    DIR *d = open_stream(fd);
    bool ok = d != NULL;
    if (!d)
        snprintf(why, cap, "cannot read it: %s", strerror(errno));
    for (struct dirent *e; ok && (e = readdir(d));)
        ok = dot_or_dotdot(e->d_name) || entry_ours(fd, &l, e->d_name, why, cap, depth);
    if (d)
        closedir(d);
    free_listing(&l);
    return ok ? NULL : why;
}

const char *shd_ckpt_not_ours(const char *path, bool empty_ok)
{
    static char why[SHD_MSG_LEN];
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot read it: %s", strerror(errno));
        return why;
    }
    DIR *d = open_stream(fd);
    bool empty = d != NULL;
    for (struct dirent *e; empty && (e = readdir(d));)
        empty = dot_or_dotdot(e->d_name);
    if (d)
        closedir(d);
    const char *no = empty && empty_ok ? NULL : not_ours_at(fd, why, sizeof why, 0);
    close(fd);
    return no;
}

bool shd_is_checkpoint(const char *path)
{
    return !shd_ckpt_not_ours(path, false);
}

/* Removes the runtime's entries of the directory open at fd (fresh: every
 * regular .npy file and temporary, a struct save's directory that was not
 * complete; else the listed ones). */
static void remove_entries(int fd, bool fresh, int depth)
{
    listing l;
    bool have = read_listing(fd, &l);
    DIR *d = open_stream(fd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (dot_or_dotdot(n) || fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        bool ours = runtime_temp(n) || !strcmp(n, SHD_CKPT_MARKER) ||
                    (fresh && len > 4 && !strcmp(n + len - 4, ".npy"));
        if (S_ISREG(st.st_mode) && (ours || (have && listed(&l, n, false))))
            unlinkat(fd, n, 0);
        else if (S_ISDIR(st.st_mode) && have && listed(&l, n, true) && depth < MAX_DEPTH) {
            int sub = openat(fd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                remove_entries(sub, false, depth + 1);
                close(sub);
                unlinkat(fd, n, AT_REMOVEDIR);
            }
        }
    }
    if (d)
        closedir(d);
    if (have)
        free_listing(&l);
}

int shd_checkpoint_remove(const char *path, bool fresh)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    remove_entries(fd, fresh, 0);
    close(fd);
    return rmdir(path);
}

/* ---- writing markers (rank 0) ------------------------------------------------- */

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_header(int fd)
{
    char text[600];
    int n = snprintf(text, sizeof text, HEADER "%.500s\n", shd_program_name());
    return write_all(fd, text, (size_t)n);
}

int shd_ckpt_mark(const char *dir)
{
    char path[SHD_STR_MAX + 32];
    if (snprintf(path, sizeof path, "%s/" SHD_CKPT_MARKER, dir) >= (int)sizeof path)
        return ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return errno;
    int err = write_header(fd);
    if (close(fd) != 0 && !err)
        err = errno;
    return err;
}

int shd_ckpt_list_leaves(int marker, const char *dir)
{
    if (ftruncate(marker, 0) != 0 || lseek(marker, 0, SEEK_SET) != 0)
        return errno;
    int err = write_header(marker);
    DIR *d = opendir(dir);
    if (!d)
        return err ? err : errno;
    char line[NAME_MAX + 8];
    for (struct dirent *e; !err && (e = readdir(d));) {
        struct stat st;
        if (dot_or_dotdot(e->d_name) || !strcmp(e->d_name, SHD_CKPT_MARKER) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        int n = snprintf(line, sizeof line, "+ %s\n", e->d_name);
        err = write_all(marker, line, (size_t)n);
    }
    closedir(d);
    return err ? err : fsync(marker) != 0 ? errno : 0;
}

void shd_ckpt_note(const char *path, bool dir)
{
    char parent[SHD_STR_MAX + 8], line[NAME_MAX + 8];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t slash = n;
    while (slash > 0 && path[slash - 1] != '/')
        slash--;
    if (n - slash > NAME_MAX || n - slash == 0 ||
        snprintf(parent, sizeof parent, "%.*s", slash ? (int)slash : 1, slash ? path : ".") >= (int)sizeof parent)
        return;
    snprintf(line, sizeof line, "%.*s", (int)(n - slash), path + slash);
    int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    listing l;
    if (dfd < 0)
        return;
    if (read_listing(dfd, &l)) {   /* a directory the runtime made, where name is new */
        bool known = listed(&l, line, dir);
        free_listing(&l);
        int fd = known ? -1 : openat(dfd, SHD_CKPT_MARKER, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0) {
            int len = snprintf(line, sizeof line, "+ %.*s%s\n", (int)(n - slash), path + slash, dir ? "/" : "");
            write_all(fd, line, (size_t)len);
            close(fd);
        }
    }
    close(dfd);
}
