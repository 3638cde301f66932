/* fs.c: the directories of a long run: mkdir(PATH) and
 * keep_last(DIR, PREFIX, N).
 *
 * mkdir creates a directory and its missing parents and proves that it is
 * a writable directory by creating and removing a file in it, so a training
 * run learns before its first step, not at its first checkpoint hours later,
 * that it cannot save. keep_last removes, among the entries of DIR whose
 * names start with PREFIX, all but the N that sort last by name: with
 * zero-padded step numbers (step_000120) those are the newest checkpoints,
 * as orbax's max_to_keep and the Hugging Face Trainer's save_total_limit
 * keep them. Removal never follows a symbolic link (nftw FTW_PHYS: a link
 * is removed, not what it points to) and never leaves DIR.
 *
 * Both are collective: rank 0 acts, every rank takes part in the verdict
 * (shd_agree), so a failure stops every rank at the same statement with
 * the path, the source line and the cause, and no rank runs ahead into a
 * save in a directory that is not there yet.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define MSG 4600

/* ---- mkdir -------------------------------------------------------------------- */

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
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return -1;
    return 0;
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

static char g_fail[MSG];

static int remove_one(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
    if ((type == FTW_DP ? rmdir(p) : unlink(p)) != 0 && errno != ENOENT) {
        snprintf(g_fail, sizeof g_fail, "cannot remove %s: %s", p, strerror(errno));
        return 1;
    }
    return 0;
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
        if (strncmp(e->d_name, prefix, plen) != 0 || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        names = shd_mem_grow(names, &cap, n + 1, sizeof *names, "keep_last: listing %s", dir);
        names[n++] = shd_mem_strdup(e->d_name, "keep_last: listing %s", dir);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i + (size_t)keep < n && !*msg; i++) {
        char p[MSG];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        g_fail[0] = 0;
        if (nftw(p, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
            snprintf(msg, MSG, "%s", g_fail[0] ? g_fail : strerror(errno));
    }
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
