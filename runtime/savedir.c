/* savedir.c: a directory of .npy files replaced as a whole (save(DIR, p) of a
 * struct, language.md §9.5), and exists(PATH).
 *
 * A struct save writes every leaf into a fresh directory beside DIR
 * (.NAME.shd-save-XXXXXX in DIR's parent, made by rank 0 with mkdtemp, so
 * its name is private and on DIR's file system), each with shd_save_npy;
 * then rank 0 syncs it and puts it in DIR's place in one step: rename() when
 * DIR does not exist, renameat2(RENAME_EXCHANGE) when it does, after which
 * the old contents (now under the fresh name) are removed. So after a crash
 * at any moment DIR holds either the complete earlier contents or the
 * complete new ones; what a crash can leave behind is a .NAME.shd-save-*
 * sibling, never a mixture in DIR, and the next save of DIR removes it. A
 * failed step stops every rank
 * (shd_agree) with the cause and leaves DIR as it was.
 *
 * Invariants: every rank has finished writing its blocks before the swap
 * (each shd_save_npy ends in an agreement over every rank); removal of the
 * old contents never follows a symbolic link (nftw FTW_PHYS), so it removes
 * only what was in DIR. A file system without RENAME_EXCHANGE (some network
 * file systems) cannot replace a directory atomically: replacing an
 * existing DIR there is an error that says so.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdrt_internal.h"


/* DIR's parent and last name: "a/b/c" -> "a/b", "c"; "c" -> ".", "c"; a
 * trailing '/' is dropped. */
static void split_path(const char *dir, char *parent, size_t pcap, char *base, size_t bcap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    const char *slash = NULL;
    for (size_t i = 0; i < n; i++)
        if (dir[i] == '/')
            slash = dir + i;
    if (!slash) {
        snprintf(parent, pcap, ".");
        snprintf(base, bcap, "%.*s", (int)n, dir);
    } else {
        size_t plen = slash == dir ? 1 : (size_t)(slash - dir);
        snprintf(parent, pcap, "%.*s", (int)plen, dir);
        snprintf(base, bcap, "%.*s", (int)(n - (size_t)(slash - dir) - 1), slash + 1);
    }
}

static void sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *f);

/* What a save killed before its swap left beside DIR (.NAME.shd-save-*):
 * removed by the next save of DIR, so crashes do not pile up copies. */
static void sweep(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    char prefix[SHD_STR_MAX + 16], path[3 * SHD_STR_MAX];
    snprintf(prefix, sizeof prefix, ".%s.shd-save-", base);
    size_t plen = strlen(prefix);
    struct dirent *ent;
    while ((ent = readdir(d)))
        if (!strncmp(ent->d_name, prefix, plen) && strlen(ent->d_name) == plen + 6) {
            snprintf(path, sizeof path, "%s/%s", parent, ent->d_name);
            nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
        }
    closedir(d);
}

void shd_savedir_begin(shd_str *tmp, const shd_str *dir, int line)
{
    const char *path = shd_str_path(dir, "save", line);
    char msg[SHD_MSG_LEN] = "";
    if (shd_world_rank() == 0) {
        char parent[SHD_STR_MAX], base[SHD_STR_MAX];
        split_path(path, parent, sizeof parent, base, sizeof base);
        struct stat st;
        if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
            shd_msgf(msg, "line %d: save(\"%s\"): a struct is saved to a directory of its own; name one, "
                     "e.g. \"ckpt/params\"", line, path);
        else if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode))
            shd_msgf(msg, "line %d: save(\"%s\"): %s exists and is not a directory; a struct is saved as "
                     "a directory of .npy files", line, path, path);
        else if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
            shd_msgf(msg, "line %d: save(\"%s\"): cannot save into %s: %s", line, path, parent,
                 stat(parent, &st) != 0 ? strerror(errno) : "not a directory");
        else if ((size_t)snprintf(tmp->s, SHD_STR_MAX, "%s/.%s.shd-save-XXXXXX", parent, base) >= SHD_STR_MAX - 16)
            shd_msgf(msg, "line %d: save(\"%s\"): the path is too long", line, path);
        else if ((sweep(parent, base), !mkdtemp(tmp->s)))
            shd_msgf(msg, "line %d: save(\"%s\"): cannot create a directory in %s: %s", line, path,
                     parent, strerror(errno));
        else {
            mode_t um = umask(0);
            umask(um);
            chmod(tmp->s, 0777 & ~um);   /* the mode a mkdir would give, not mkdtemp's 0700 */
        }
        tmp->len = msg[0] ? 0 : (int32_t)strlen(tmp->s);
    }
    shd_agree(msg[0] ? msg : NULL);
    MPI_Bcast(&tmp->len, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(tmp->s, tmp->len + 1, MPI_CHAR, 0, MPI_COMM_WORLD);
}

const char *shd_savedir_leaf(shd_str *out, const shd_str *dir, const char *leaf, const char *what, int line)
{
    const char *d = shd_str_path(dir, what, line);
    int n = snprintf(out->s, SHD_STR_MAX, "%s/%s", d, leaf);
    if (n < 0 || n >= SHD_STR_MAX)
        shd_fatal("line %d: %s: the path %s/%s is longer than %d bytes", line, what, d, leaf, SHD_STR_MAX - 1);
    out->len = n;
    return out->s;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

void shd_savedir_commit(const shd_str *tmp, const shd_str *dir, int line)
{
    const char *path = shd_str_path(dir, "save", line);
    char msg[SHD_MSG_LEN] = "";
    if (shd_world_rank() == 0) {
        char parent[SHD_STR_MAX], base[SHD_STR_MAX];
        split_path(path, parent, sizeof parent, base, sizeof base);
        sync_dir(tmp->s);
        struct stat st;
        bool existed = lstat(path, &st) == 0;
        if (!existed && rename(tmp->s, path) != 0)
            shd_msgf(msg, "line %d: save(\"%s\"): cannot rename %s to it: %s", line, path, tmp->s,
                     strerror(errno));
        if (existed && renameat2(AT_FDCWD, tmp->s, AT_FDCWD, path, RENAME_EXCHANGE) != 0) {
            int err = errno;
            shd_msgf(msg, "line %d: save(\"%s\"): cannot replace the directory with the new one "
                     "(%s): %s", line, path, tmp->s,
                     err == EINVAL || err == ENOSYS ? "this file system cannot exchange two directories in one step, "
                                                      "so it cannot replace a checkpoint atomically; save to a new "
                                                      "directory, or to a local file system"
                                                    : strerror(err));
        }
        sync_dir(parent);
        /* The old contents, now under the temporary name (or the new
         * ones, after a failure: DIR is left as it was either way). */
        if (existed || msg[0])
            nftw(tmp->s, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    }
    shd_agree(msg[0] ? msg : NULL);
}

bool shd_exists(const char *path)
{
    int32_t yes = 0;
    if (shd_world_rank() == 0) {
        struct stat st;
        yes = path[0] && stat(path, &st) == 0;
    }
    MPI_Bcast(&yes, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
    return yes != 0;
}
