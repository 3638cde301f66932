/* savedir.c: a directory of .npy files replaced as a whole (save(DIR, p) of a
 * struct, language.md §9.5), and exists(PATH).
 *
 * A struct save writes every leaf into a fresh directory beside DIR
 * (.NAME.shd-save-XXXXXX in DIR's parent, made by rank 0 with mkdtemp, so
 * its name is private and on DIR's file system), each with shd_save_npy;
 * then rank 0 lists the leaves in its marker .shd-checkpoint, syncs it and
 * puts it in DIR's place in one step: rename() when DIR does not exist,
 * renameat2(RENAME_EXCHANGE) when it does, after which the old contents
 * (now under the fresh name) are removed. So after a crash at any moment
 * DIR holds either the complete earlier contents or the complete new ones;
 * what a crash can leave behind is a .NAME.shd-save-* sibling, never a
 * mixture in DIR, and a later save of DIR removes it. A failed step stops
 * every rank (shd_agree) with the cause and leaves DIR as it was.
 *
 * Nothing a save did not write is ever removed (what orbax and
 * torch.distributed.checkpoint promise; ckpt.c says what is the runtime's):
 * - an existing DIR is replaced only when it is empty or a checkpoint (its
 *   marker lists every entry). Anything else (a directory of the user's, a
 *   symbolic link at DIR, a checkpoint someone added a file to) is refused
 *   with the path and the cause, checked when the save begins and again
 *   just before the swap; removing the old contents removes only what
 *   their marker lists;
 * - the fresh directory's marker is locked (flock, held by rank 0 from its
 *   creation to the swap), and a sweep removes only the .NAME.shd-save-*
 *   siblings whose marker it can lock: those whose job has ended (the
 *   kernel drops the lock when the process dies, however it dies). Two
 *   jobs saving to one DIR never remove each other's fresh directory.
 *
 * A file system without RENAME_EXCHANGE (some network file systems) cannot
 * replace a directory atomically: replacing an existing DIR there is an
 * error that says so.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define MARKER SHD_CKPT_MARKER

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

/* ---- what a save may replace ---------------------------------------------------- */

/* NULL when path may be replaced by a struct save (absent, an empty
 * directory or a checkpoint), else the rest of a sentence that begins
 * with the path (static). */
static const char *unreplaceable(const char *path)
{
    static char why[SHD_MSG_LEN + 64];
    struct stat st;
    if (lstat(path, &st) != 0) {
        int err = errno;
        snprintf(why, sizeof why, "cannot be looked at: %s", strerror(err));
        return err == ENOENT ? NULL : why;
    }
    if (S_ISLNK(st.st_mode))
        return "is a symbolic link; a struct save never replaces a link or writes through one: name the "
               "directory itself";
    if (!S_ISDIR(st.st_mode))
        return "exists and is not a directory; a struct is saved as a directory of .npy files";
    const char *no = shd_ckpt_not_ours(path, true);
    if (!no)
        return NULL;
    snprintf(why, sizeof why, "exists and is not a checkpoint (%s): a save replaces only an empty directory "
             "or an earlier save's; save elsewhere, or move it away yourself", no);
    return why;
}

/* ---- the fresh directory and its lock ---------------------------------------- */

static int g_lock = -1;   /* rank 0: the fresh directory's marker, flock'ed until the swap */

/* Opens (creating) the marker of the directory at path for reading and
 * writing (so that a lock works on NFS too); -1 with errno. */
static int open_marker(const char *dir, int excl)
{
    char path[3 * SHD_STR_MAX + 32];
    snprintf(path, sizeof path, "%s/" MARKER, dir);
    return open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | excl, 0666);
}

/* What a save killed before its swap left beside DIR (.NAME.shd-save-*
 * whose marker we can lock: its job has ended, and the kernel dropped the
 * lock): removed, so crashes do not pile up copies. A fresh directory
 * another job is filling has its marker locked, and is kept. */
static void sweep(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    char prefix[SHD_STR_MAX + 16], path[3 * SHD_STR_MAX];
    snprintf(prefix, sizeof prefix, ".%s.shd-save-", base);
    size_t plen = strlen(prefix);
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (strncmp(ent->d_name, prefix, plen) || strlen(ent->d_name) != plen + 6)
            continue;
        snprintf(path, sizeof path, "%s/%s", parent, ent->d_name);
        int fd = open_marker(path, 0);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
            shd_checkpoint_remove(path, true);
        if (fd >= 0)
            close(fd);   /* drops the lock */
    }
    closedir(d);
}

/* Makes the fresh directory tmp (a mkdtemp template) with its marker
 * locked: true, or false with errno. Another job's sweep may find it
 * before the marker is locked and remove it: then the marker is not ours
 * (EEXIST) or no longer linked once we hold its lock, and we make another. */
static bool make_locked(char *tmp)
{
    char templ[SHD_STR_MAX];
    snprintf(templ, sizeof templ, "%s", tmp);
    for (int tries = 0; tries < 100; tries++) {
        snprintf(tmp, SHD_STR_MAX, "%s", templ);
        if (!mkdtemp(tmp))
            return false;
        int fd = open_marker(tmp, O_EXCL);
        struct stat st;
        if (fd < 0 && (errno == EEXIST || errno == ENOENT))   /* ENOENT: another job's sweep took it first */
            continue;
        if (fd < 0 || flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
            int err = errno;
            if (fd >= 0)
                close(fd);
            errno = err;
            return false;
        }
        if (st.st_nlink > 0) {
            g_lock = fd;
            return true;
        }
        close(fd);
    }
    errno = EAGAIN;
    return false;
}

static void unlock(void)
{
    if (g_lock >= 0)
        close(g_lock);
    g_lock = -1;
}

/* Rank 0's checks of a save's target; msg empty when it may go on. */
static void check_target(const char *path, const char *parent, const char *base, char *msg, int line)
{
    struct stat st;
    const char *why;
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        shd_msgf(msg, "line %d: save(\"%s\"): a struct is saved to a directory of its own; name one, "
                 "e.g. \"ckpt/params\"", line, path);
    else if ((why = unreplaceable(path)))
        shd_msgf(msg, "line %d: save(\"%s\"): %s %s", line, path, path, why);
    else if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        shd_msgf(msg, "line %d: save(\"%s\"): cannot save into %s: %s", line, path, parent,
                 stat(parent, &st) != 0 ? strerror(errno) : "not a directory");
}

void shd_savedir_begin(shd_str *tmp, const shd_str *dir, int line)
{
    const char *path = shd_str_path(dir, "save", line);
    char msg[SHD_MSG_LEN] = "";
    if (shd_world_rank() == 0) {
        char parent[SHD_STR_MAX], base[SHD_STR_MAX];
        split_path(path, parent, sizeof parent, base, sizeof base);
        check_target(path, parent, base, msg, line);
        if (msg[0])
            ;
        else if ((size_t)snprintf(tmp->s, SHD_STR_MAX, "%s/.%s.shd-save-XXXXXX", parent, base) >= SHD_STR_MAX - 16)
            shd_msgf(msg, "line %d: save(\"%s\"): the path is too long", line, path);
        else if ((sweep(parent, base), !make_locked(tmp->s)))
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

/* Puts the complete fresh directory tmp in path's place; msg set on
 * failure. True when tmp is left to remove: the old contents after an
 * exchange, or the new ones after a failure (DIR is left as it was). */
static bool swap_in(const char *tmp, const char *path, char *msg, int line)
{
    const char *why = unreplaceable(path);   /* again: DIR may have changed since the save began */
    int err = why ? 0 : shd_ckpt_list_leaves(g_lock, tmp);
    struct stat st;
    if (why || err) {
        if (why)
            shd_msgf(msg, "line %d: save(\"%s\"): %s %s", line, path, path, why);
        else
            shd_msgf(msg, "line %d: save(\"%s\"): cannot write %s/%s: %s", line, path, tmp, MARKER, strerror(err));
        return true;
    }
    sync_dir(tmp);
    /* Another job saving to DIR may put its directory there between the
     * lstat and the rename (ENOTEMPTY), or its exchange may leave none for
     * a moment (ENOENT): look again, a few times. */
    for (int tries = 0;; tries++) {
        if (lstat(path, &st) != 0) {
            if (rename(tmp, path) == 0)
                return false;
            if ((errno == ENOTEMPTY || errno == EEXIST) && tries < 8 && !(why = unreplaceable(path)))
                continue;
            if (why)
                shd_msgf(msg, "line %d: save(\"%s\"): %s %s", line, path, path, why);
            else
                shd_msgf(msg, "line %d: save(\"%s\"): cannot rename %s to it: %s", line, path, tmp, strerror(errno));
            return true;
        }
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0)
            return true;
        if (errno == ENOENT && tries < 8)
            continue;
        break;
    }
    err = errno;
    shd_msgf(msg, "line %d: save(\"%s\"): cannot replace the directory with the new one "
             "(%s): %s", line, path, tmp,
             err == EINVAL || err == ENOSYS ? "this file system cannot exchange two directories in one step, "
                                              "so it cannot replace a checkpoint atomically; save to a new "
                                              "directory, or to a local file system"
                                            : strerror(err));
    return true;
}

void shd_savedir_commit(const shd_str *tmp, const shd_str *dir, int line)
{
    const char *path = shd_str_path(dir, "save", line);
    char msg[SHD_MSG_LEN] = "";
    if (shd_world_rank() == 0) {
        char parent[SHD_STR_MAX], base[SHD_STR_MAX];
        split_path(path, parent, sizeof parent, base, sizeof base);
        bool leftover = swap_in(tmp->s, path, msg, line);
        sync_dir(parent);
        if (leftover)
            shd_checkpoint_remove(tmp->s, msg[0] != 0);
        if (!msg[0])
            shd_ckpt_note(path, true);   /* in DIR's parent, when the runtime made it */
        unlock();
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
