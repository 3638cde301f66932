/* safefile.c: temporaries in private, unpredictable names, and renames
 * that replace only regular files (the rules are in safefile.h).
 *
 * Pure C, no MPI: compiled into libshdrt and into shdc (as blockmap.c is).
 *
 * Names: 64 bits from getrandom(2), mixed with a per-process counter, the
 * pid and the clock, so that even a source that repeats itself (a
 * container without getrandom, a test that fixes it) gives a new name on
 * each attempt; an attempt that meets an existing name (EEXIST) draws
 * again, up to 64 times.
 *
 * Invariant: nothing here opens, truncates, removes or renames a path that
 * this process did not create with O_EXCL, except the final rename over a
 * target that lstat showed to be absent or a regular file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "safefile.h"

/* splitmix64's finaliser: spreads every input bit over the output. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t draw(void)
{
    static uint64_t counter;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t salt = mix(++counter ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^
                        ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)&counter);
    return r ^ salt;
}

int shd_temp_create_at(shd_temp *t, const char *name)
{
    if (strlen(name) >= sizeof t->path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (t->path != name)
        memmove(t->path, name, strlen(name) + 1);
    int fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        unlink(t->path);
        errno = err;
        return -1;
    }
    t->dev = st.st_dev;
    t->ino = st.st_ino;
    return fd;
}

bool shd_temp_name(char *buf, size_t cap, const char *target, const char *tag)
{
    const char *slash = strrchr(target, '/');
    int dirlen = slash ? (int)(slash - target) + 1 : 0;
    int n = snprintf(buf, cap, "%.*s.%s-%016llx.tmp", dirlen, target, tag, (unsigned long long)draw());
    return n >= 0 && (size_t)n < cap;
}

int shd_temp_create(shd_temp *t, const char *target, const char *tag)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        char name[sizeof t->path];
        if (!shd_temp_name(name, sizeof name, target, tag)) {
            snprintf(t->path, sizeof t->path, "%.*s", (int)sizeof t->path - 1, target);
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = shd_temp_create_at(t, name);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

const char *shd_file_unreplaceable(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? NULL : errno == EACCES ? "cannot be examined (permission denied)"
               : errno == ENOTDIR ? "is under something that is not a directory"
               : errno == ENAMETOOLONG ? "is too long a name" : "cannot be examined";
    if (S_ISREG(st.st_mode))
        return NULL;
    return S_ISDIR(st.st_mode) ? "is a directory, not a regular file"
           : S_ISLNK(st.st_mode) ? "is a symbolic link, not a regular file"
           : S_ISFIFO(st.st_mode) ? "is a FIFO, not a regular file"
           : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file" : "is a device, not a regular file";
}

const char *shd_file_foreign(const char *path, const char *magic, size_t n, const char *what)
{
    static char why[300];
    char head[64];
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return NULL;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot be read to see what it is: %s", strerror(errno));
        return why;
    }
    if (n > sizeof head)
        n = sizeof head;
    ssize_t got = read(fd, head, n);
    close(fd);
    if (got == (ssize_t)n && !memcmp(head, magic, n))
        return NULL;
    snprintf(why, sizeof why, "exists and is not %s (it does not begin as one does), so it is not replaced: "
             "write to another name, or move it away yourself", what);
    return why;
}

bool shd_temp_is_ours(const shd_temp *t)
{
    struct stat st;
    return lstat(t->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == t->dev && st.st_ino == t->ino;
}

int shd_temp_commit(const shd_temp *t, const char *target, const char **why)
{
    if (!shd_temp_is_ours(t)) {
        *why = "was not replaced: its temporary file was replaced or removed by someone else while it was "
               "written";
        return -1;
    }
    const char *bad = shd_file_unreplaceable(target);
    if (bad) {
        *why = bad;
        return -1;
    }
    if (rename(t->path, target) != 0) {
        static char buf[160];
        snprintf(buf, sizeof buf, "cannot be replaced: %s", strerror(errno));
        *why = buf;
        return -1;
    }
    return 0;
}
