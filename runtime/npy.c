/* npy.c: .npy files of global arrays, read and written with MPI-IO.
 *
 * Format (NumPy's .npy v1.0): "\x93NUMPY", version bytes 1 0, a 2-byte
 * little-endian header length, then a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), } padded with
 * spaces and ended by '\n' so that the data starts at a multiple of 64; the
 * data follows in C order. Versions 2.0 and 3.0 (4-byte header length) are
 * accepted on load; the dict is parsed as a Python literal (shd_npy_header.c).
 *
 * Every rank touches only its own block: its file view is an MPI subarray
 * type (global shape, block shape, block offset) at the data offset, and
 * the collective read/write moves the whole block in one call. Saving goes
 * to a temporary file beside the target (DIR/.shd-save-PID-N.tmp, PID of
 * rank 0), renamed to PATH by rank 0 after every rank has written, synced
 * and closed it and the file has its full size, so a reader never sees a
 * half-written file and a failed save leaves the previous file as it was.
 *
 * Invariants: MPI-IO may report a failed write (a full disk) only through
 * the count of what it wrote, so every write's count is checked, and the
 * cause is then asked of the file system directly. Any failure stops every
 * rank through shd_agree with `save("PATH"): CAUSE`, and the temporary is
 * removed on that path and on the signals guard.c catches. The header is
 * validated once, on rank 0, and the verdict is shared, so a bad file
 * produces one message rather than one per rank. Before the collective
 * MPI_File_open every rank checks that it sees the file (visible): on hosts
 * that do not share the file system, MPI-IO's open fails on some ranks only
 * and the others wait in it for ever, so the rank that cannot see it says
 * so and every rank stops instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
#define MSG_LEN 1024

/* Messages may be cut at MSG_LEN; formatting through a va_list keeps
 * -Wformat-truncation quiet about that deliberate bound. */
__attribute__((format(printf, 2, 3)))
static void msgf(char *msg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, MSG_LEN, fmt, ap);
    va_end(ap);
}

static const char *mpi_error(int rc, char *buf)
{
    int len = 0;
    MPI_Error_string(rc, buf, &len);
    return buf;
}

/* ---- header text ---------------------------------------------------------- */

static const char *descr_of(shd_dtype dt)
{
    switch (dt) {
    case SHD_F32: return "<f4";
    case SHD_F64: return "<f8";
    case SHD_I32: return "<i4";
    case SHD_BOOL: return "|b1";
    }
    return "?";
}

/* "(8, 4)", "(8,)" or "()", as Python writes a tuple. */
static void shape_tuple(char *buf, size_t cap, int rank, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < rank && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "",
                               (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, rank == 1 ? ",)" : ")");
}

/* The full preamble (magic to '\n'); returns its length, a multiple of 64. */
static size_t build_header(char *buf, size_t cap, shd_dtype dt, int rank,
                           const int64_t *gshape)
{
    char tuple[512];
    shape_tuple(tuple, sizeof tuple, rank, gshape);
    char dict[640];
    int dl = snprintf(dict, sizeof dict,
                      "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr_of(dt), tuple);
    size_t total = (size_t)(MAGIC_LEN + 4 + dl + 1 + 63) / 64 * 64;
    if (total > cap || total - MAGIC_LEN - 4 > 65535)
        shd_fatal("npy header too long");
    size_t hlen = total - MAGIC_LEN - 4;
    memcpy(buf, MAGIC, MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memset(buf + 10, ' ', hlen);
    memcpy(buf + 10, dict, (size_t)dl);
    buf[total - 1] = '\n';
    return total;
}

/* ---- subarray views ------------------------------------------------------ */

/* The element as an MPI type (bytes, so no conversion ever happens). */
static MPI_Datatype elem_type(shd_dtype dt)
{
    MPI_Datatype t;
    MPI_Type_contiguous((int)shd_dtype_size(dt), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    return t;
}

static void check_block(const char *what, const char *path, int rank,
                        const int64_t *gshape, const int64_t *offset,
                        const int64_t *shape)
{
    for (int d = 0; d < rank; d++)
        if (offset[d] < 0 || shape[d] < 0 || offset[d] + shape[d] > gshape[d] ||
            gshape[d] > INT_MAX)
            shd_fatal("%s(\"%s\"): block [%lld, %lld) does not fit dim %d of "
                      "size %lld", what, path, (long long)offset[d],
                      (long long)(offset[d] + shape[d]), d, (long long)gshape[d]);
}

/* Sets this rank's view of the data: its block of the global array, or
 * nothing (plain bytes, count 0) when it moves no data. */
static int set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype et, int rank,
                    const int64_t *gshape, const int64_t *offset,
                    const int64_t *shape, bool active, MPI_Datatype *ft)
{
    *ft = MPI_DATATYPE_NULL;
    if (!active || rank == 0)
        return MPI_File_set_view(fh, disp, et, et, "native", MPI_INFO_NULL);
    int g[SHD_MAX_RANK], s[SHD_MAX_RANK], o[SHD_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        g[d] = (int)gshape[d];
        s[d] = (int)shape[d];
        o[d] = (int)offset[d];
    }
    MPI_Type_create_subarray(rank, g, s, o, MPI_ORDER_C, et, ft);
    MPI_Type_commit(ft);
    return MPI_File_set_view(fh, disp, et, *ft, "native", MPI_INFO_NULL);
}

/* Moves `count` elements in chunks small enough for an int count; every
 * rank makes the same number of collective calls. Returns the elements
 * moved: fewer than count when MPI-IO failed, whatever its return code. */
static int64_t transfer_all(MPI_File fh, void *buf, int64_t count, MPI_Datatype et,
                            size_t es, bool write, int *rc)
{
    const int64_t chunk = ((int64_t)1 << 30) / (int64_t)es;
    int64_t most = count, moved = 0;
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    *rc = MPI_SUCCESS;
    for (int64_t done = 0; done < most; done += chunk) {
        int64_t left = count - done;
        int n = (int)(left <= 0 ? 0 : left < chunk ? left : chunk);
        char *p = (char *)buf + (size_t)(done < count ? done : 0) * es;
        MPI_Status st;
        int r = write ? MPI_File_write_all(fh, p, n, et, &st)
                      : MPI_File_read_all(fh, p, n, et, &st);
        int got = 0;
        if (r == MPI_SUCCESS && n > 0 && MPI_Get_count(&st, et, &got) == MPI_SUCCESS && got > 0)
            moved += got;
        if (r != MPI_SUCCESS)
            *rc = r;
    }
    return moved;
}

/* ---- save ---------------------------------------------------------------- */

/* Why the file system took fewer bytes than it was given: a direct write
 * past the end of the temporary (which is removed anyway) gets the errno
 * MPI-IO did not pass on (ENOSPC, EFBIG, EDQUOT, EIO). */
static const char *write_cause(const char *tmp, size_t expect, char *buf, size_t cap)
{
    int fd = open(tmp, O_WRONLY);
    char block[4096];
    memset(block, 0, sizeof block);
    errno = 0;
    ssize_t n = fd < 0 ? -1 : pwrite(fd, block, sizeof block, (off_t)((expect + 4095) / 4096 * 4096));
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (n < 0 && err)
        snprintf(buf, cap, "%s", strerror(err));
    else
        snprintf(buf, cap, "the file system accepted fewer bytes than were written");
    return buf;
}

typedef struct {
    const char *path, *tmp;
    size_t total;          /* bytes of the complete file */
    char msg[MSG_LEN];     /* this rank's first failure, "" if none */
} save_job;

__attribute__((format(printf, 2, 3)))
static void save_fail(save_job *j, const char *fmt, ...)
{
    if (j->msg[0])
        return;
    char cause[MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cause, sizeof cause, fmt, ap);
    va_end(ap);
    msgf(j->msg, "save(\"%s\"): %s", j->path, cause);
}

static void save_check_mpi(save_job *j, int rc, const char *what)
{
    char err[MPI_MAX_ERROR_STRING];
    if (rc != MPI_SUCCESS)
        save_fail(j, "%s: %s", what, mpi_error(rc, err));
}

/* 0 when this rank may open path for mode (access(2)), else the errno. A
 * file just created on another host can take a moment to appear (NFS
 * caches a directory's entries): up to two seconds. */
static int visible(const char *path, int mode)
{
    for (int i = 0;; i++) {
        if (access(path, mode) == 0)
            return 0;
        if (errno != ENOENT || i == 40)
            return errno;
        usleep(50000);
    }
}

/* DIR/.shd-save-PID-N.tmp beside PATH: the rename stays in one file
 * system, and the name fits wherever PATH's own name fits. */
static void temp_name(char *tmp, size_t cap, const char *path)
{
    static unsigned seq;
    long pid = (long)getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) + 1 : 0;
    snprintf(tmp, cap, "%.*s.shd-save-%ld-%u.tmp", dirlen, path, pid, seq++);
}

/* Rank 0 creates the temporary with POSIX calls, so that a missing
 * directory or a permission problem gets its own errno, and reserves its
 * blocks: a full disk or a file size limit then fails here, by name, before
 * anything is written (file systems without fallocate skip this; the
 * written counts and the final size still catch them). */
static void save_create(save_job *j)
{
    struct stat st;
    /* A save replaces a file; it never replaces a directory, a device or a
     * FIFO that happens to have the name. */
    if (shd_world_rank() == 0 && stat(j->path, &st) == 0 && !S_ISREG(st.st_mode))
        save_fail(j, "%s exists and is not a regular file (%s)", j->path,
                  S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or special file");
    if (shd_world_rank() == 0 && !j->msg[0]) {
        int fd = open(j->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)j->total);
        if (fd < 0)
            save_fail(j, "cannot create %s: %s", j->tmp, strerror(err));
        else if (err && err != EOPNOTSUPP && err != EINVAL && err != ENOSYS)
            save_fail(j, "cannot reserve %zu bytes: %s", j->total, strerror(err));
        if (fd >= 0)
            close(fd);
    }
    shd_agree(j->msg[0] ? j->msg : NULL);
    int err = shd_world_rank() == 0 ? 0 : visible(j->tmp, W_OK);
    if (err)
        save_fail(j, "this rank cannot open %s, the temporary file rank 0 created beside it (%s): every rank writes "
                  "its block into the one file, so the directory must be the same on every host (a file system they "
                  "all share: NFS, Lustre, GPFS, ...)", j->tmp, strerror(err));
    shd_agree(j->msg[0] ? j->msg : NULL);
}

static void save_header(save_job *j, MPI_File fh, const char *header, size_t hlen)
{
    if (shd_world_rank() != 0)
        return;
    MPI_Status st;
    int rc = MPI_File_write_at(fh, 0, header, (int)hlen, MPI_BYTE, &st), got = 0;
    save_check_mpi(j, rc, "write failed");
    if (rc == MPI_SUCCESS && (MPI_Get_count(&st, MPI_BYTE, &got) != MPI_SUCCESS || (size_t)got != hlen)) {
        char cause[256];
        save_fail(j, "write failed: %s", write_cause(j->tmp, j->total, cause, sizeof cause));
    }
}

static void save_data(save_job *j, MPI_File fh, size_t hlen, const void *local, shd_dtype dt, int rank,
                      const int64_t *gshape, const int64_t *offset, const int64_t *shape, bool writer)
{
    MPI_Datatype et = elem_type(dt), ft;
    int64_t count = writer ? shd_shape_count(rank, shape) : 0;
    int rc = set_view(fh, (MPI_Offset)hlen, et, rank, gshape, offset, shape, count > 0, &ft);
    save_check_mpi(j, rc, "cannot set the file view");
    int64_t moved = transfer_all(fh, (void *)local, j->msg[0] ? 0 : count, et, shd_dtype_size(dt), true, &rc);
    save_check_mpi(j, rc, "write failed");
    if (!j->msg[0] && moved != count) {
        char cause[256];
        save_fail(j, "write failed after %lld of %lld bytes: %s", (long long)moved * (long long)shd_dtype_size(dt),
                  (long long)count * (long long)shd_dtype_size(dt), write_cause(j->tmp, j->total, cause, sizeof cause));
    }
    if (ft != MPI_DATATYPE_NULL)
        MPI_Type_free(&ft);
    MPI_Type_free(&et);
}

/* Rank 0, after every rank closed the file: it has its full size, then it
 * replaces PATH. */
static void save_finish(save_job *j)
{
    if (shd_world_rank() == 0) {
        struct stat st;
        if (stat(j->tmp, &st) != 0)
            save_fail(j, "cannot check %s: %s", j->tmp, strerror(errno));
        else if ((size_t)st.st_size != j->total) {
            char cause[256];
            save_fail(j, "wrote %lld of %zu bytes: %s", (long long)st.st_size, j->total,
                      write_cause(j->tmp, j->total, cause, sizeof cause));
        }
    }
    shd_agree(j->msg[0] ? j->msg : NULL);
    if (shd_world_rank() == 0 && rename(j->tmp, j->path) != 0)
        save_fail(j, "cannot rename %s to it: %s", j->tmp, strerror(errno));
    shd_agree(j->msg[0] ? j->msg : NULL);
}

void shd_save_npy(const char *path, const void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape, bool writer)
{
    check_block("save", path, rank, gshape, offset, shape);
    char header[1024], tmp[8192];
    size_t hlen = build_header(header, sizeof header, dt, rank, gshape);
    save_job j = { path, tmp, hlen + (size_t)shd_shape_count(rank, gshape) * shd_dtype_size(dt), "" };
    temp_name(tmp, sizeof tmp, path);
    if (!shd_guard_temp(tmp))
        save_fail(&j, "the path is too long");
    shd_agree(j.msg[0] ? j.msg : NULL);
    save_create(&j);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, tmp, MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    save_check_mpi(&j, rc, "cannot open the temporary file");
    shd_agree(j.msg[0] ? j.msg : NULL);
    save_header(&j, fh, header, hlen);
    save_data(&j, fh, hlen, local, dt, rank, gshape, offset, shape, writer);
    save_check_mpi(&j, MPI_File_sync(fh), "cannot flush the file");
    save_check_mpi(&j, MPI_File_close(&fh), "cannot close the file");
    shd_agree(j.msg[0] ? j.msg : NULL);
    save_finish(&j);
    shd_guard_temp(NULL);
}

/* ---- header parsing (rank 0) ---------------------------------------------- */

/* "f32", "i64", "bool", ... for a descr, to name the file's type. */
static void descr_name(const char *descr, char *buf, size_t cap)
{
    char kind = descr[0] ? descr[1] : 0;
    int bytes = descr[0] && descr[1] ? atoi(descr + 2) : 0;
    if (kind == 'b' && bytes == 1)
        snprintf(buf, cap, "bool");
    else if ((kind == 'f' || kind == 'i' || kind == 'u' || kind == 'c') && bytes > 0)
        snprintf(buf, cap, "%c%d", kind, bytes * 8);
    else
        snprintf(buf, cap, "'%s'", descr);
}

static void type_text(char *buf, size_t cap, const char *elem, int rank,
                      const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, cap, "%s[", elem);
    for (int d = 0; d < rank && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? "," : "",
                               (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

static bool same_descr(const char *file, shd_dtype dt)
{
    const char *want = descr_of(dt);
    if (strcmp(file, want) == 0)
        return true;
    /* '=' (native) and '|' (not applicable) mean little-endian here. */
    return (file[0] == '=' || file[0] == '|' || file[0] == '<') &&
           strcmp(file + 1, want + 1) == 0;
}

/* Checks the parsed header against the program's type; fills msg. */
static bool header_matches(const char *path, const shd_npy_header *h, shd_dtype dt,
                           int rank, const int64_t *gshape, char *msg)
{
    if (h->descr[0] == '>' && strcmp(h->descr + 1, "b1") != 0 &&
        strcmp(h->descr + 1, "i1") != 0 && strcmp(h->descr + 1, "u1") != 0) {
        msgf(msg, "load(\"%s\"): file is big-endian ('%s'); save "
                 "it little-endian (a.astype('<%s'))", path, h->descr, h->descr + 1);
        return false;
    }
    if (h->fortran) {
        msgf(msg, "load(\"%s\"): file is in Fortran order; save it "
                 "in C order (np.ascontiguousarray)", path);
        return false;
    }
    bool ok = same_descr(h->descr, dt) && h->rank == rank;
    for (int d = 0; ok && d < rank; d++)
        ok = h->shape[d] == gshape[d];
    if (ok)
        return true;
    char fe[32], ft[512], pt[512];
    descr_name(h->descr, fe, sizeof fe);
    type_text(ft, sizeof ft, fe, h->rank, h->shape);
    type_text(pt, sizeof pt, shd_dtype_name(dt), rank, gshape);
    msgf(msg, "load(\"%s\"): file has %s, program expects %s",
             path, ft, pt);
    return false;
}

/* Reads the preamble; returns the data offset, or -1 with msg filled
 * ("WHAT("PATH"): cause"). */
static long read_preamble(FILE *f, const char *what, const char *path, shd_npy_header *h, char *msg)
{
    unsigned char pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, MAGIC, MAGIC_LEN) != 0) {
        msgf(msg, "%s(\"%s\"): not a .npy file", what, path);
        return -1;
    }
    size_t hlen, at;
    if (pre[6] == 1 && fread(pre + 8, 1, 2, f) == 2) {
        hlen = pre[8] | (size_t)pre[9] << 8;
        at = 10;
    } else if ((pre[6] == 2 || pre[6] == 3) && fread(pre + 8, 1, 4, f) == 4) {
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        at = 12;
    } else {
        msgf(msg, "%s(\"%s\"): unsupported .npy version %d.%d", what, path, pre[6], pre[7]);
        return -1;
    }
    char *dict = hlen < (1u << 24) ? malloc(hlen + 1) : NULL;
    const char *why = dict ? "truncated header" : "header too long";
    bool ok = dict && fread(dict, 1, hlen, f) == hlen;
    if (ok)
        ok = shd_npy_parse_header(dict, hlen, h, &why);
    free(dict);
    if (!ok) {
        msgf(msg, "%s(\"%s\"): malformed .npy header: %s", what, path, why);
        return -1;
    }
    return (long)(at + hlen);
}

/* Opens PATH for reading its header, or NULL with msg filled. O_NONBLOCK:
 * a FIFO must not block the open; only a regular file is read (a device
 * such as /dev/zero would never end). */
static FILE *open_npy(const char *what, const char *path, char *msg)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        msgf(msg, "%s(\"%s\"): cannot open: %s", what, path, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        msgf(msg, "%s(\"%s\"): cannot open: %s", what, path, strerror(errno));
        close(fd);
    }
    return f;
}

/* What rank 0 read of a file: its header, where the data starts, and the
 * identity of the file it read (to tell later whether PATH still names
 * it: a save renames a new file over it, a writer changes its time). */
typedef struct {
    shd_npy_header h;
    long off;
    struct stat st;
} npy_file;

/* Rank 0: opens PATH and reads its header; false with msg filled. */
static bool read_npy(const char *what, const char *path, npy_file *nf, char *msg)
{
    FILE *f = open_npy(what, path, msg);
    if (!f)
        return false;
    nf->off = read_preamble(f, what, path, &nf->h, msg);
    bool ok = nf->off >= 0;
    if (ok && fstat(fileno(f), &nf->st) != 0) {
        msgf(msg, "%s(\"%s\"): cannot read its size: %s", what, path, strerror(errno));
        ok = false;
    }
    fclose(f);
    return ok;
}

/* Rank 0: whether PATH still names the file nf was read from. */
static bool same_file(const char *path, const npy_file *nf)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_dev == nf->st.st_dev && st.st_ino == nf->st.st_ino &&
           st.st_size == nf->st.st_size && st.st_mtim.tv_sec == nf->st.st_mtim.tv_sec &&
           st.st_mtim.tv_nsec == nf->st.st_mtim.tv_nsec;
}

/* Rank 0: whether the load can read the file's array. With start (a window
 * load), the file's array must hold the window gshape at start; without, it
 * must be gshape. False with msg filled. */
static bool fits(const char *path, const npy_file *nf, shd_dtype dt, int rank, const int64_t *gshape,
                 const int64_t *start, char *msg)
{
    const shd_npy_header *h = &nf->h;
    if (start && h->rank == rank)
        for (int d = 0; d < rank; d++)
            if (start[d] < 0 || start[d] > h->shape[d] - gshape[d]) {
                msgf(msg, "load(\"%s\"): the window of %lld from %lld along dim %d does not fit the file's %lld",
                     path, (long long)gshape[d], (long long)start[d], d, (long long)h->shape[d]);
                return false;
            }
    if (!header_matches(path, h, dt, rank, start ? h->shape : gshape, msg))
        return false;
    size_t need = (size_t)shd_shape_count(rank, start ? h->shape : gshape) * shd_dtype_size(dt);
    if ((size_t)nf->st.st_size < (size_t)nf->off + need) {
        msgf(msg, "load(\"%s\"): file is truncated (%lld bytes, expected %zu)", path, (long long)nf->st.st_size,
             (size_t)nf->off + need);
        return false;
    }
    return true;
}

/* ---- load ---------------------------------------------------------------- */

static MPI_File open_all(const char *path)
{
    char msg[MSG_LEN], err[MPI_MAX_ERROR_STRING];
    int e = shd_world_rank() == 0 ? 0 : visible(path, R_OK);
    msgf(msg, "load(\"%s\"): this rank cannot read it (%s), rank 0 can: every rank reads its block from the file, "
         "so it must be at this path on every host (a file system they all share, or the same copy on each)", path,
         strerror(e));
    shd_agree(e ? msg : NULL);
    MPI_File fh = MPI_FILE_NULL;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    msgf(msg, "load(\"%s\"): cannot open: %s", path, rc == MPI_SUCCESS ? "" : mpi_error(rc, err));
    shd_agree(rc == MPI_SUCCESS ? NULL : msg);
    return fh;
}

/* Every rank reads its block (shape at offset) of the file's array (fshape,
 * data from byte off) collectively; any rank's failure stops every rank. */
static void read_block(MPI_File fh, const char *path, long off, void *local, shd_dtype dt, int rank,
                       const int64_t *fshape, const int64_t *offset, const int64_t *shape)
{
    char msg[MSG_LEN], err[MPI_MAX_ERROR_STRING];
    size_t es = shd_dtype_size(dt);
    int64_t count = shd_shape_count(rank, shape);
    MPI_Datatype et = elem_type(dt), ft;
    int rc = set_view(fh, (MPI_Offset)off, et, rank, fshape, offset, shape, count > 0, &ft);
    int rc2 = MPI_SUCCESS;
    int64_t got = transfer_all(fh, local, rc == MPI_SUCCESS ? count : 0, et, es, false, &rc2);
    rc = rc == MPI_SUCCESS ? rc2 : rc;
    msgf(msg, "load(\"%s\"): read failed: %s", path,
         rc != MPI_SUCCESS ? mpi_error(rc, err) : "the file ended early");
    if (rc == MPI_SUCCESS && got != count)
        rc = MPI_ERR_IO;
    if (ft != MPI_DATATYPE_NULL)
        MPI_Type_free(&ft);
    MPI_Type_free(&et);
    shd_agree(rc == MPI_SUCCESS ? NULL : msg);
}

void shd_load_npy(const char *path, void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape)
{
    check_block("load", path, rank, gshape, offset, shape);
    char msg[MSG_LEN];
    long off = 0;
    if (shd_world_rank() == 0) {
        npy_file nf;
        off = read_npy("load", path, &nf, msg) && fits(path, &nf, dt, rank, gshape, NULL, msg) ? nf.off : -1;
    }
    shd_agree(off < 0 ? msg : NULL);
    MPI_Bcast(&off, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    MPI_File fh = open_all(path);
    read_block(fh, path, off, local, dt, rank, gshape, offset, shape);
    MPI_File_close(&fh);
}

/* The file of the last window load, kept open for the next: a training loop
 * reads many windows of one token file, and opening it (collectively, with
 * MPI-IO's own probes) costs more than reading a window. Before each window
 * rank 0 checks that PATH still names the file it read (device, inode, size,
 * modification time) and says whether the open one serves, so a file saved
 * or replaced since is opened again, and every rank opens and closes
 * together. Closed by a window of another file and by shd_npy_fini. */
static struct {
    char *path;          /* NULL: none open */
    MPI_File fh;
    npy_file nf;         /* rank 0 */
} g_win;

void shd_npy_fini(void)
{
    if (!g_win.path)
        return;
    MPI_File_close(&g_win.fh);
    free(g_win.path);
    g_win.path = NULL;
}

/* A window of the file's array: each rank reads its block of the window
 * (global shape gshape, block at offset) from the window's place start. The
 * start is the same on every rank (a replicated value); one that does not
 * fit stops every rank with the source line. */
void shd_load_npy_window(const char *path, void *local, shd_dtype dt, int rank, const int64_t *gshape,
                         const int64_t *offset, const int64_t *shape, const int64_t *start, int line)
{
    check_block("load", path, rank, gshape, offset, shape);
    char msg[MSG_LEN] = "";
    /* the data offset, whether the open file serves, the file's shape */
    int64_t got[2 + SHD_MAX_RANK] = {0}, foff[SHD_MAX_RANK];
    npy_file fresh;
    if (shd_world_rank() == 0) {
        char inner[MSG_LEN];
        bool reuse = g_win.path && strcmp(g_win.path, path) == 0 && same_file(path, &g_win.nf);
        const npy_file *nf = reuse ? &g_win.nf : &fresh;
        if ((reuse || read_npy("load", path, &fresh, inner)) && fits(path, nf, dt, rank, gshape, start, inner)) {
            got[0] = nf->off;
            got[1] = reuse;
            for (int d = 0; d < rank; d++)
                got[2 + d] = nf->h.shape[d];
        } else
            msgf(msg, "line %d: %s", line, inner);
    }
    shd_agree(msg[0] ? msg : NULL);
    MPI_Bcast(got, 2 + rank, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (!got[1]) {
        shd_npy_fini();
        char *copy = strdup(path);
        if (!copy)
            shd_fatal("load(\"%s\"): out of memory", path);
        g_win.fh = open_all(path);
        g_win.path = copy;
        if (shd_world_rank() == 0)
            g_win.nf = fresh;
    }
    for (int d = 0; d < rank; d++)
        foff[d] = start[d] + offset[d];
    read_block(g_win.fh, path, (long)got[0], local, dt, rank, got + 2, foff, shape);
}

/* ---- load_dim --------------------------------------------------------------- */

/* Rank 0: dim k of the file's array, or -1 with msg filled. */
static int64_t header_dim(const char *path, int k, char *msg)
{
    npy_file nf;
    if (!read_npy("load_dim", path, &nf, msg))
        return -1;
    const shd_npy_header h = nf.h;
    if (k < 0 || k >= h.rank) {
        char ft[256], fe[64];
        descr_name(h.descr, fe, sizeof fe);
        type_text(ft, sizeof ft, fe, h.rank, h.shape);
        msgf(msg, "load_dim(\"%s\"): the file's array %s has no dim %d", path, ft, k);
        return -1;
    }
    if (h.shape[k] > INT32_MAX) {
        msgf(msg, "load_dim(\"%s\"): dim %d of the file's array is %lld, more than an i32 holds", path, k,
             (long long)h.shape[k]);
        return -1;
    }
    return h.shape[k];
}

int32_t shd_npy_dim(const char *path, int k, int line)
{
    char msg[MSG_LEN];
    int64_t n = 0;
    if (shd_world_rank() == 0) {
        char inner[MSG_LEN];
        n = header_dim(path, k, inner);
        if (n < 0)
            msgf(msg, "line %d: %s", line, inner);
    }
    shd_agree(n < 0 ? msg : NULL);
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return (int32_t)n;
}
