/* safefile.h: creating and replacing files without being fooled by what
 * is already at a name.
 *
 * Pure C with no MPI: the runtime (save, the SHD_TRACE timeline) and the
 * compiler (build -o, --keep-c, check -o) write every file they replace
 * through these functions, so there is one rule for all of them:
 *
 * - a file is written under a temporary name beside its target,
 *   DIR/.TAG-<16 random hex digits>.tmp, created with O_CREAT|O_EXCL|
 *   O_NOFOLLOW: the name cannot be predicted (two jobs whose rank 0 has the
 *   same pid, in two containers or on two hosts sharing a file system, do
 *   not meet), and whatever is planted at it (a symbolic link, a FIFO, a
 *   file) is never opened, followed or truncated;
 * - only something that is absent or a regular file is replaced: a
 *   directory, a symbolic link, a FIFO, a device or a socket at the target
 *   is reported, never replaced (lstat: a link is not followed);
 * - the rename that replaces the target renames only the temporary this
 *   process made (same device and inode as when it was created).
 */
#ifndef SHD_SAFEFILE_H
#define SHD_SAFEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* A temporary this process created: its name and identity. */
typedef struct {
    char path[4200];
    dev_t dev;
    ino_t ino;
} shd_temp;

/* Creates a new temporary for `target` in its directory (tag: "shd-save",
 * "shdc-build", ...), open for writing with mode 0666 less the umask.
 * Returns the descriptor, or -1 with errno set (the temporary's name is
 * then still in t->path, for the message). */
int shd_temp_create(shd_temp *t, const char *target, const char *tag);

/* A fresh temporary name for target (DIR/.TAG-RANDOM.tmp), not created;
 * false when it does not fit cap. */
bool shd_temp_name(char *buf, size_t cap, const char *target, const char *tag);

/* Creates the temporary at a name from shd_temp_name (a collective save
 * tells every rank the name first); -1 with errno EEXIST when anything is
 * there, which it never opens. */
int shd_temp_create_at(shd_temp *t, const char *name);

/* NULL when `path` is absent or a regular file, so that a new regular file
 * may take its name; otherwise the rest of a sentence that begins with the
 * path: "is a directory, not a regular file" (a symbolic link, a FIFO, a
 * device, a socket alike), or why it cannot be looked at. Never follows a
 * symbolic link. */
const char *shd_file_unreplaceable(const char *path);

/* NULL when `path` is absent, not a regular file (shd_file_unreplaceable
 * tells those), empty, or begins with the n bytes of magic: a file of the
 * kind the caller writes, so one it may replace. Otherwise the rest of a
 * sentence that begins with the path: "is not WHAT (it does not begin as
 * one does)", or why it cannot be read. What a writer replaces is then
 * only what such a writer could have written, never a user's other file
 * that happens to have the name. */
const char *shd_file_foreign(const char *path, const char *magic, size_t n, const char *what);

/* Renames the temporary over target: only when t->path still names the
 * regular file this process created and target may be replaced. 0, or -1
 * with *why set: a static string that follows the target's name in a
 * sentence ("is a directory, ...", "cannot be replaced: CAUSE"). */
int shd_temp_commit(const shd_temp *t, const char *target, const char **why);

/* Whether `name` is still the temporary this process created. */
bool shd_temp_is_ours(const shd_temp *t);

#endif
