/* fs.c: the directories of a long run: mkdir(PATH) and
 * keep_last(DIR, PREFIX, N).
 *
 * mkdir creates a directory and its missing parents and proves that it is
 * a writable directory by creating and removing a file in it, so a training
 * run learns before its first step, not at its first checkpoint hours later,
 * that it cannot save; each directory it creates is marked as the
 * runtime's (ckpt.c), so that keep_last may remove it and what saves put
 * in it later. keep_last removes, among the entries of DIR whose
 * names start with PREFIX, all but the N that sort last by name: with
 * zero-padded step numbers (step_000120) those are the newest checkpoints,
 * as orbax's max_to_keep and the Hugging Face Trainer's save_total_limit
 * keep them. Only checkpoints count, and only they are removed: a
 * directory the runtime wrote (ckpt.c: its marker lists every entry;
 * shd_checkpoint_remove removes just those) or a regular .npy file;
 * an entry of the user's that shares the prefix (a symbolic link, a
 * directory without the marker, notes.txt) is neither counted nor touched.
 *
 * Both are collective: rank 0 acts, every rank takes part in the verdict
 * (shd_agree), so a failure stops every rank at the same statement with
 * the path, the source line and the cause, and no rank runs ahead into a
 * save in a directory that is not there yet.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define MSG 4600

/* ---- mkdir -------------------------------------------------------------------- */

/* Creates the directory p (its parent exists) and marks it as the
 * runtime's (ckpt.c), noted in its parent's marker when the runtime made
 * that too, so that keep_last may remove it; a directory that was there
 * already is left as it is. 0, or -1 with errno. */
static int make_one(const char *p)
{
    if (mkdir(p, 0777) != 0)
        return errno == EEXIST ? 0 : -1;
    int err = shd_ckpt_mark(p);
    if (err) {
        errno = err;
        return -1;
    }
    shd_ckpt_note(p, true);
    return 0;
}

/* Creates path and its parents; 0, or -1 with errno. */
static int make_dirs(const char *path)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (make_one(p) != 0)
            return -1;
        *s = '/';
    }
    return make_one(p);
}

static void check_dir(const char *path, char *msg)
{
    struct stat st;
    if (make_dirs(path) != 0) {
        snprintf(msg, MSG, "cannot create the directory %s: %s", path, strerror(errno));
        return;
    }
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(msg, MSG, "%s exists and is not a directory", path);
        return;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.shd-probe-%ld", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(msg, MSG, "cannot write in the directory %s: %s", path, strerror(errno));
        return;
    }
    close(fd);
    unlink(probe);
}

void shd_mkdir(const char *path, int line)
{
    char msg[MSG] = "", full[MSG + 64];
    if (shd_world_rank() == 0)
        check_dir(path, msg);
    if (*msg)
        snprintf(full, sizeof full, "line %d: mkdir(\"%s\"): %s", line, path, msg);
    shd_agree(*msg ? full : NULL);
}

/* ---- keep_last ------------------------------------------------------------------ */

/* Whether the entry `name` of dir is a checkpoint a save wrote: a struct
 * save's directory (its marker, only files a save writes) or a regular
 * .npy file (NumPy's magic at its start). Nothing else is counted or
 * removed: a file or directory of the user's that shares the prefix stays. */
static bool is_saved(const char *dir, const char *name)
{
    char p[MSG], magic[6];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    if (lstat(p, &st) != 0)
        return false;
    if (S_ISDIR(st.st_mode))
        return shd_is_checkpoint(p);
    size_t n = strlen(name);
    if (!S_ISREG(st.st_mode) || n < 4 || strcmp(name + n - 4, ".npy"))
        return false;
    int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    bool yes = fd >= 0 && read(fd, magic, 6) == 6 && !memcmp(magic, "\x93NUMPY", 6);
    if (fd >= 0)
        close(fd);
    return yes;
}

/* Removes the checkpoint dir/name; msg set on failure. */
static void remove_saved(const char *dir, const char *name, char *msg)
{
    char p[MSG];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    int r = lstat(p, &st) != 0 ? 0 : S_ISDIR(st.st_mode) ? shd_checkpoint_remove(p, false) : unlink(p);
    int err = errno;
    if (r != 0 && err != ENOENT)
        snprintf(msg, MSG, "cannot remove %.4000s: %s%s", p, strerror(err),
                 err == ENOTEMPTY ? " (it holds files no save wrote, which are kept)" : "");
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void prune(const char *dir, const char *prefix, int32_t keep, char *msg)
{
    if (!*prefix || strchr(prefix, '/')) {
        snprintf(msg, MSG, "the prefix \"%s\" must be a non-empty name without '/'", prefix);
        return;
    }
    if (keep < 1) {
        snprintf(msg, MSG, "keeps %d entries; keep at least 1 (the newest)", (int)keep);
        return;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(msg, MSG, "cannot read the directory %s: %s", dir, strerror(errno));
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0, plen = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, plen) != 0 || !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !is_saved(dir, e->d_name))
            continue;
        names = shd_mem_grow(names, &cap, n + 1, sizeof *names, "keep_last: listing %s", dir);
        names[n++] = shd_mem_strdup(e->d_name, "keep_last: listing %s", dir);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i + (size_t)keep < n && !*msg; i++)
        remove_saved(dir, names[i], msg);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

void shd_keep_last(const char *dir, const char *prefix, int32_t keep, int line)
{
    char msg[MSG] = "", full[2 * MSG];
    if (shd_world_rank() == 0)
        prune(dir, prefix, keep, msg);
    if (*msg)
        snprintf(full, sizeof full, "line %d: keep_last(\"%s\", \"%s\", %d): %s", line, dir, prefix, (int)keep, msg);
    shd_agree(*msg ? full : NULL);
}
