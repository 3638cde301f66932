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
 * type (global shape, block shape, block offset; built from 64-bit pieces
 * when a dim, offset or the array's bytes pass an int) at the data offset,
 * and the collective read/write moves the whole block in chunks of at most
 * 1 GiB. Saving goes to a temporary file beside the target that rank 0
 * creates in a private random name (safefile.c: DIR/.shd-save-RANDOM.tmp,
 * O_EXCL|O_NOFOLLOW), renamed to PATH by rank 0 after every rank has
 * written, synced and closed it and the file has its full size, so a
 * reader never sees a half-written file and a failed save leaves the
 * previous file as it was. Only a regular file (or nothing) is replaced.
 *
 * Loading reads the file whose header was checked: rank 0 reads the
 * header and notes the file's device and inode; every rank opens PATH and
 * checks it still names that file, so a file renamed over PATH in between
 * stops every rank. The header's shape is counted with a checked product
 * against the file's size; bool bytes other than 0 and 1 read as true.
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
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefile.h"
#include "shdrt_internal.h"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6

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
    case SHD_BF16: return "<u2";   /* the bit patterns (ml_dtypes, torch's .view(torch.int16)) */
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
        if (offset[d] < 0 || shape[d] < 0 || offset[d] > gshape[d] - shape[d])
            shd_fatal("%s(\"%s\"): block [%lld, %lld) does not fit dim %d of "
                      "size %lld", what, path, (long long)offset[d],
                      (long long)(offset[d] + shape[d]), d, (long long)gshape[d]);
}

/* MPI-3 constructors take int counts, and a file's dims and offsets may
 * pass 2^31 (a token file of 2^32 rows): these build the same types from
 * 2^30-element pieces. The caller frees what they return. */
#define PIECE ((int64_t)1 << 30)

/* n copies of inner, stride bytes apart. */
static MPI_Datatype big_hvector(int64_t n, MPI_Aint stride, MPI_Datatype inner)
{
    MPI_Datatype t;
    if (n <= INT_MAX) {
        MPI_Type_create_hvector((int)n, 1, stride, inner, &t);
        return t;
    }
    MPI_Datatype piece, body, rest;
    MPI_Type_create_hvector((int)PIECE, 1, stride, inner, &piece);
    MPI_Type_create_hvector((int)(n / PIECE), 1, stride * (MPI_Aint)PIECE, piece, &body);
    MPI_Type_create_hvector((int)(n % PIECE), 1, stride, inner, &rest);
    int lens[2] = { 1, 1 };
    MPI_Aint disps[2] = { 0, stride * (MPI_Aint)(n / PIECE * PIECE) };
    MPI_Datatype types[2] = { body, rest };
    MPI_Type_create_struct(n % PIECE ? 2 : 1, lens, disps, types, &t);
    MPI_Type_free(&piece);
    MPI_Type_free(&body);
    MPI_Type_free(&rest);
    return t;
}

/* n consecutive copies of et (extent es bytes): the hvector of stride es. */
static MPI_Datatype big_contiguous(int64_t n, MPI_Datatype et, size_t es)
{
    return big_hvector(n, (MPI_Aint)es, et);
}

/* The block (shape at offset) of a C-order array of gshape as a file
 * type: what MPI_Type_create_subarray builds, with 64-bit dims, offsets
 * and strides (byte offsets are MPI_Aint, 64 bits here). Its extent is the
 * whole array's, so the view tiles as a subarray's does. */
static MPI_Datatype block_type(MPI_Datatype et, size_t es, int rank, const int64_t *gshape,
                               const int64_t *offset, const int64_t *shape)
{
    MPI_Aint stride = (MPI_Aint)es, start = 0;
    MPI_Datatype t = big_contiguous(shape[rank - 1], et, es);
    start += (MPI_Aint)offset[rank - 1] * stride;
    for (int d = rank - 2; d >= 0; d--) {
        stride *= (MPI_Aint)gshape[d + 1];
        MPI_Datatype outer = big_hvector(shape[d], stride, t);
        MPI_Type_free(&t);
        t = outer;
        start += (MPI_Aint)offset[d] * stride;
    }
    int one = 1;
    MPI_Datatype placed, whole;
    MPI_Type_create_struct(1, &one, &start, &t, &placed);
    MPI_Type_create_resized(placed, 0, stride * (MPI_Aint)gshape[0], &whole);
    MPI_Type_free(&t);
    MPI_Type_free(&placed);
    return whole;
}

/* Sets this rank's view of the data: its block of the global array, or
 * nothing (plain bytes, count 0) when it moves no data. Dims, offsets and
 * the array's bytes that fit an int take MPI's own subarray type; larger
 * ones the same type built from 64-bit pieces (block_type). The header
 * check has bounded the array's bytes by the file's size (an int64). */
static int set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype et, size_t es, int rank,
                    const int64_t *gshape, const int64_t *offset,
                    const int64_t *shape, bool active, MPI_Datatype *ft)
{
    *ft = MPI_DATATYPE_NULL;
    if (!active || rank == 0)
        return MPI_File_set_view(fh, disp, et, et, "native", MPI_INFO_NULL);
    bool small = true;
    int64_t bytes = (int64_t)es;
    for (int d = 0; d < rank; d++) {
        small &= gshape[d] <= INT_MAX && !__builtin_mul_overflow(bytes, gshape[d], &bytes) && bytes <= INT_MAX;
    }
    if (small) {
        int g[SHD_MAX_RANK], s[SHD_MAX_RANK], o[SHD_MAX_RANK];
        for (int d = 0; d < rank; d++) {
            g[d] = (int)gshape[d];
            s[d] = (int)shape[d];
            o[d] = (int)offset[d];
        }
        MPI_Type_create_subarray(rank, g, s, o, MPI_ORDER_C, et, ft);
    } else {
        *ft = block_type(et, es, rank, gshape, offset, shape);
    }
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

/* ---- the identity of a file across ranks ------------------------------------ */

/* Whether this rank runs on rank 0's host (its hostname). A file's device
 * number is the same only there: on a cluster each host numbers its mount
 * of a shared file system itself, while the inode (NFS's file id, Lustre's
 * FID) is the file's own everywhere. */
static bool on_rank0_host(void)
{
    static int known = -1;
    if (known < 0) {
        char mine[256] = "", root[256] = "";
        gethostname(mine, sizeof mine - 1);
        memcpy(root, mine, sizeof root);
        MPI_Bcast(root, (int)sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
        known = strcmp(mine, root) == 0;
    }
    return known;
}

/* Whether st is the file rank 0 identified by id: {device, inode, size},
 * a size < 0 not compared. Collective (the first call). */
static bool same_identity(const struct stat *st, const int64_t *id)
{
    bool host = on_rank0_host();
    return (int64_t)st->st_ino == id[1] && (!host || (int64_t)st->st_dev == id[0]) &&
           (id[2] < 0 || (int64_t)st->st_size == id[2]);
}

/* ---- save ---------------------------------------------------------------- */

/* Why the file system took fewer bytes than it was given: a direct write
 * past the end of the temporary (which is removed anyway) gets the errno
 * MPI-IO did not pass on (ENOSPC, EFBIG, EDQUOT, EIO). */
static const char *write_cause(const char *tmp, size_t expect, char *buf, size_t cap)
{
    int fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
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
    const char *path;
    shd_temp t;            /* the temporary: its name on every rank, its identity */
    size_t total;          /* bytes of the complete file */
    char msg[SHD_MSG_LEN]; /* this rank's first failure, "" if none */
} save_job;

__attribute__((format(printf, 2, 3)))
static void save_fail(save_job *j, const char *fmt, ...)
{
    if (j->msg[0])
        return;
    char cause[SHD_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cause, sizeof cause, fmt, ap);
    va_end(ap);
    shd_msgf(j->msg, "save(\"%s\"): %s", j->path, cause);
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

/* Rank 0 creates the temporary beside PATH (safefile.c: a private random
 * name, O_EXCL|O_NOFOLLOW, so the rename stays in one file system and
 * nothing planted at a name is followed or overwritten), with POSIX calls,
 * so that a missing directory or a permission problem gets its own errno,
 * and reserves its blocks: a full disk or a file size limit then fails
 * here, by name, before anything is written (file systems without
 * fallocate skip this; the written counts and the final size still catch
 * them). Every rank then knows the name and the identity (device, inode)
 * of the file, and registers it with guard.c. */
static void save_create(save_job *j)
{
    struct { char path[sizeof j->t.path]; uint64_t dev, ino; int state; } made = { "", 0, 0, 0 };
    enum { CREATED, RETRY, FAILED };
    const char *bad = NULL;
    int fd = -1;
    (void)on_rank0_host();   /* collective the first time: here every rank is */
    /* A save replaces a regular file; never a directory, a symbolic link, a
     * device or a FIFO that happens to have the name. */
    if (shd_world_rank() == 0 && (bad = shd_file_unreplaceable(j->path)) != NULL)
        save_fail(j, "%s %s; save to another name", j->path, bad);
    else if (shd_world_rank() == 0 && (bad = shd_file_foreign(j->path, "\x93NUMPY", 6, "a .npy file")) != NULL)
        save_fail(j, "%s %s", j->path, bad);   /* and never a file of the user's */
    shd_agree(j->msg[0] ? j->msg : NULL);
    /* Every rank knows (and registers) the name before rank 0 creates the
     * file, so whichever rank survives a kill removes it. */
    for (int attempt = 0;; attempt++) {
        if (shd_world_rank() == 0 && !shd_temp_name(made.path, sizeof made.path, j->path, "shd-save"))
            made.path[0] = 0;
        MPI_Bcast(made.path, (int)sizeof made.path, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (!made.path[0] || !shd_guard_temp(made.path))
            shd_fatal("save(\"%s\"): the path is too long", j->path);
        if (shd_world_rank() == 0) {
            fd = shd_temp_create_at(&j->t, made.path);
            made.state = fd >= 0 ? CREATED : errno == EEXIST && attempt < 16 ? RETRY : FAILED;
            if (made.state == FAILED)
                save_fail(j, "cannot create a temporary file beside it (%s): %s", made.path, strerror(errno));
        }
        MPI_Bcast(&made.state, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (made.state != CREATED)
            shd_guard_temp(NULL);   /* what is at the name is not ours to remove */
        if (made.state != RETRY)
            break;
    }
    if (fd >= 0) {
        int err = posix_fallocate(fd, 0, (off_t)j->total);
        if (err && err != EOPNOTSUPP && err != EINVAL && err != ENOSYS)
            save_fail(j, "cannot reserve %zu bytes: %s", j->total, strerror(err));
        close(fd);
        made.dev = (uint64_t)j->t.dev;
        made.ino = (uint64_t)j->t.ino;
    }
    shd_agree(j->msg[0] ? j->msg : NULL);
    MPI_Bcast(&made, (int)sizeof made, MPI_BYTE, 0, MPI_COMM_WORLD);
    snprintf(j->t.path, sizeof j->t.path, "%s", made.path);
    j->t.dev = (dev_t)made.dev;
    j->t.ino = (ino_t)made.ino;
    int err = shd_world_rank() == 0 ? 0 : visible(j->t.path, W_OK);
    if (err)
        save_fail(j, "this rank cannot open %s, the temporary file rank 0 created beside it (%s): every rank writes "
                  "its block into the one file, so the directory must be the same on every host (a file system they "
                  "all share: NFS, Lustre, GPFS, ...)", j->t.path, strerror(err));
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
        save_fail(j, "write failed: %s", write_cause(j->t.path, j->total, cause, sizeof cause));
    }
}

static void save_data(save_job *j, MPI_File fh, size_t hlen, const void *local, shd_dtype dt, int rank,
                      const int64_t *gshape, const int64_t *offset, const int64_t *shape, bool writer)
{
    MPI_Datatype et = elem_type(dt), ft;
    int64_t count = writer ? shd_shape_count(rank, shape) : 0;
    int rc = set_view(fh, (MPI_Offset)hlen, et, shd_dtype_size(dt), rank, gshape, offset, shape, count > 0, &ft);
    save_check_mpi(j, rc, "cannot set the file view");
    int64_t moved = transfer_all(fh, (void *)local, j->msg[0] ? 0 : count, et, shd_dtype_size(dt), true, &rc);
    save_check_mpi(j, rc, "write failed");
    if (!j->msg[0] && moved != count) {
        char cause[256];
        save_fail(j, "write failed after %lld of %lld bytes: %s", (long long)moved * (long long)shd_dtype_size(dt),
                  (long long)count * (long long)shd_dtype_size(dt), write_cause(j->t.path, j->total, cause, sizeof cause));
    }
    if (ft != MPI_DATATYPE_NULL)
        MPI_Type_free(&ft);
    MPI_Type_free(&et);
}

/* Rank 0, after every rank closed the file: the temporary is still the
 * file it created and has its full size, then it replaces PATH (when PATH
 * is still absent or a regular file). */
static void save_finish(save_job *j)
{
    if (shd_world_rank() == 0) {
        struct stat st;
        if (lstat(j->t.path, &st) != 0 || !shd_temp_is_ours(&j->t))
            save_fail(j, "the temporary file %s was replaced or removed while it was written", j->t.path);
        else if ((size_t)st.st_size != j->total) {
            char cause[256];
            save_fail(j, "wrote %lld of %zu bytes: %s", (long long)st.st_size, j->total,
                      write_cause(j->t.path, j->total, cause, sizeof cause));
        }
    }
    shd_agree(j->msg[0] ? j->msg : NULL);
    const char *why;
    if (shd_world_rank() == 0 && shd_temp_commit(&j->t, j->path, &why) != 0)
        save_fail(j, "%s %s", j->path, why);
    else if (shd_world_rank() == 0)
        shd_ckpt_note(j->path, false);   /* in its directory's marker, when the runtime made it */
    shd_agree(j->msg[0] ? j->msg : NULL);
}

/* Every rank, after MPI-IO opened the temporary by name: the name still
 * leads to the file rank 0 created. */
static void save_check_opened(save_job *j)
{
    struct stat st = { 0 };
    const int64_t id[3] = { (int64_t)j->t.dev, (int64_t)j->t.ino, -1 };
    bool ok = lstat(j->t.path, &st) == 0;
    if (!same_identity(&st, id) || !ok || !S_ISREG(st.st_mode))
        save_fail(j, "the temporary file %s was replaced while it was opened", j->t.path);
}

void shd_save_npy(const char *path, const void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape, bool writer)
{
    check_block("save", path, rank, gshape, offset, shape);
    char header[1024];
    size_t hlen = build_header(header, sizeof header, dt, rank, gshape);
    save_job j;
    memset(&j, 0, sizeof j);
    j.path = path;
    int64_t data;
    if (!shd_shape_bytes(rank, gshape, shd_dtype_size(dt), &data) || data > INT64_MAX - (int64_t)hlen)
        shd_fatal("save(\"%s\"): the array's size passes 2^63 bytes", path);
    j.total = hlen + (size_t)data;
    save_create(&j);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, j.t.path, MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    save_check_mpi(&j, rc, "cannot open the temporary file");
    if (rc == MPI_SUCCESS)
        save_check_opened(&j);
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

/* The descr as text: quoted, odd bytes as \xHH, cut after 24 with "...". */
static void descr_quoted(const shd_npy_header *h, char *buf, size_t cap)
{
    const unsigned char *d = (const unsigned char *)h->descr;
    size_t n = (size_t)snprintf(buf, cap, "'");
    for (const unsigned char *c = d; *c && n + 8 < cap && c - d < 24; c++)
        n += (size_t)snprintf(buf + n, cap - n, *c >= 32 && *c < 127 && *c != '\\' ? "%c" : "\\x%02x", *c);
    snprintf(buf + n, cap - n, "%s'", h->descr_odd || strlen(h->descr) > 24 ? "..." : "");
}

/* "f32", "i64", "bool", ... for a descr, to name the file's type; any
 * other descr quoted, its odd bytes as \xHH and a long one cut with "...",
 * so that a message never shows two different types alike. */
static void descr_name(const shd_npy_header *h, char *buf, size_t cap)
{
    const char *d = h->descr;
    const char *p = d + (*d && strchr("<>|=", *d) ? 1 : 0);
    char kind = *p ? *p++ : 0;
    char *end;
    long bytes = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : 0;
    if (!h->descr_odd && bytes > 0 && bytes <= 64 && !*end && strchr("bfiuc", kind)) {
        if (kind == 'b' && bytes == 1)
            snprintf(buf, cap, "bool");
        else
            snprintf(buf, cap, "%c%ld", kind, bytes * 8);
        return;
    }
    descr_quoted(h, buf, cap);
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

static bool same_descr(const shd_npy_header *h, shd_dtype dt)
{
    const char *want = descr_of(dt), *file = h->descr;
    if (h->descr_odd)
        return false;
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
        char q[128];
        descr_quoted(h, q, sizeof q);
        shd_msgf(msg, "load(\"%s\"): file is big-endian (%s); save "
                 "it little-endian (a.astype('<%.*s'))", path, q, (int)strcspn(q + 2, "'."), q + 2);
        return false;
    }
    if (h->fortran) {
        shd_msgf(msg, "load(\"%s\"): file is in Fortran order; save it "
                 "in C order (np.ascontiguousarray)", path);
        return false;
    }
    bool ok = same_descr(h, dt) && h->rank == rank;
    for (int d = 0; ok && d < rank; d++)
        ok = h->shape[d] == gshape[d];
    if (ok)
        return true;
    char fe[128], ft[640], pt[512];
    descr_name(h, fe, sizeof fe);
    type_text(ft, sizeof ft, fe, h->rank, h->shape);
    type_text(pt, sizeof pt, shd_dtype_name(dt), rank, gshape);
    shd_msgf(msg, "load(\"%s\"): file has %s, program expects %s%s",
             path, ft, pt, dt == SHD_BF16 && !same_descr(h, dt)
                 ? " (a bf16 file holds the bit patterns as dtype <u2: "
                   "np.asarray(t.view(torch.int16)).view('<u2'), or ml_dtypes' bfloat16 viewed as '<u2')"
                 : "");
    return false;
}

/* Reads the preamble; returns the data offset, or -1 with msg filled
 * ("WHAT("PATH"): cause"). */
static long read_preamble(FILE *f, const char *what, const char *path, shd_npy_header *h, char *msg)
{
    unsigned char pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, MAGIC, MAGIC_LEN) != 0) {
        shd_msgf(msg, "%s(\"%s\"): not a .npy file", what, path);
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
        shd_msgf(msg, "%s(\"%s\"): unsupported .npy version %d.%d", what, path, pre[6], pre[7]);
        return -1;
    }
    char *dict = hlen < (1u << 24) ? shd_mem_try(NULL, hlen + 1) : NULL;
    const char *why = dict ? "truncated header" : "header too long";
    bool ok = dict && fread(dict, 1, hlen, f) == hlen;
    if (ok)
        ok = shd_npy_parse_header(dict, hlen, h, &why);
    free(dict);
    if (!ok) {
        shd_msgf(msg, "%s(\"%s\"): malformed .npy header: %s", what, path, why);
        return -1;
    }
    return (long)(at + hlen);
}

/* Why PATH is missing, when its directory is: " (the directory D does not
 * exist)" (for a relative D, in which current directory: a program run
 * away from its data, whose default paths are relative) or " (the directory D is empty)", so that a mistyped or empty
 * --resume=DIR is named as such; "" otherwise. */
static const char *missing_dir(const char *path)
{
    static char why[SHD_MSG_LEN / 2];
    char dir[SHD_STR_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path || (size_t)(slash - path) >= sizeof dir)
        return "";
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    if (stat(dir, &st) != 0) {
        char cwd[512];
        bool relative = path[0] != '/' && getcwd(cwd, sizeof cwd);
        snprintf(why, sizeof why, " (the directory %.200s does not exist%s%.200s%s)", dir,
                 relative ? " in the current directory, " : "", relative ? cwd : "",
                 relative ? "; a relative path is taken from there" : "");
        return errno == ENOENT ? why : "";
    }
    DIR *d = opendir(dir);
    bool empty = d != NULL;
    for (struct dirent *e; empty && (e = readdir(d));)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    snprintf(why, sizeof why, " (the directory %.400s is empty)", dir);
    return empty ? why : "";
}

/* Opens PATH for reading its header, or NULL with msg filled. O_NONBLOCK:
 * a FIFO must not block the open; only a regular file is read (a device
 * such as /dev/zero would never end). */
static FILE *open_npy(const char *what, const char *path, char *msg)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        shd_msgf(msg, "%s(\"%s\"): cannot open: %s%s", what, path, fd < 0 ? strerror(err) : "not a regular file",
                 fd < 0 && err == ENOENT ? missing_dir(path) : "");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        shd_msgf(msg, "%s(\"%s\"): cannot open: %s", what, path, strerror(errno));
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
        shd_msgf(msg, "%s(\"%s\"): cannot read its size: %s", what, path, strerror(errno));
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
                shd_msgf(msg, "load(\"%s\"): the window of %lld from %lld along dim %d does not fit the file's %lld",
                     path, (long long)gshape[d], (long long)start[d], d, (long long)h->shape[d]);
                return false;
            }
    if (!header_matches(path, h, dt, rank, start ? h->shape : gshape, msg))
        return false;
    /* The header's shape is the file's word: its bytes are counted with
     * the checked product, so a lie cannot wrap the comparison. */
    int64_t need = 0;
    bool counted = shd_shape_bytes(rank, h->shape, shd_dtype_size(dt), &need);
    if (!counted || need > (int64_t)nf->st.st_size - nf->off) {
        char ft[640], fe[128];
        descr_name(h, fe, sizeof fe);
        type_text(ft, sizeof ft, fe, h->rank, h->shape);
        if (counted)
            shd_msgf(msg, "load(\"%s\"): file is truncated (%lld bytes; its header's %s needs %lld after the %ld-byte "
                 "header)", path, (long long)nf->st.st_size, ft, (long long)need, nf->off);
        else
            shd_msgf(msg, "load(\"%s\"): file is truncated (%lld bytes; its header's %s would need more than 2^63 "
                 "bytes)", path, (long long)nf->st.st_size, ft);
        return false;
    }
    return true;
}

/* ---- load ---------------------------------------------------------------- */

/* Every rank opens PATH, then checks that PATH still names the file whose
 * header rank 0 checked (id: its device, inode and size): a file renamed over
 * PATH in between (a save does just that) stops every rank, instead of
 * being read with the other file's dtype and data offset. */
static MPI_File open_checked(const char *path, const int64_t *id, int line)
{
    char msg[SHD_MSG_LEN] = "", err[MPI_MAX_ERROR_STRING];
    int e = shd_world_rank() == 0 ? 0 : visible(path, R_OK);
    if (e)
        shd_msgf(msg, "load(\"%s\"): this rank cannot read it (%s), rank 0 can: every rank reads its block from the file, "
             "so it must be at this path on every host (a file system they all share, or the same copy on each)", path,
             strerror(e));
    shd_agree(e ? msg : NULL);
    MPI_File fh = MPI_FILE_NULL;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    struct stat st = { 0 };
    bool seen = stat(path, &st) == 0;
    bool same = same_identity(&st, id);   /* collective on first use: every rank calls it */
    if (rc != MPI_SUCCESS)
        shd_msgf(msg, "load(\"%s\"): cannot open: %s", path, mpi_error(rc, err));
    else if (!seen || !same)
        shd_msgf(msg, "load(\"%s\"): the file was replaced while it was being opened (rank 0 had checked the header "
             "of the file that was there before); nothing was read", path);
    if (msg[0] && line) {
        char inner[SHD_MSG_LEN];
        memcpy(inner, msg, sizeof inner);
        shd_msgf(msg, "line %d: %s", line, inner);
    }
    shd_agree(msg[0] ? msg : NULL);
    return fh;
}

/* Every rank reads its block (shape at offset) of the file's array (fshape,
 * data from byte off) collectively; any rank's failure stops every rank. */
static void read_block(MPI_File fh, const char *path, long off, void *local, shd_dtype dt, int rank,
                       const int64_t *fshape, const int64_t *offset, const int64_t *shape)
{
    char msg[SHD_MSG_LEN], err[MPI_MAX_ERROR_STRING];
    size_t es = shd_dtype_size(dt);
    int64_t count = shd_shape_count(rank, shape);
    MPI_Datatype et = elem_type(dt), ft;
    int rc = set_view(fh, (MPI_Offset)off, et, es, rank, fshape, offset, shape, count > 0, &ft);
    int rc2 = MPI_SUCCESS;
    int64_t got = transfer_all(fh, local, rc == MPI_SUCCESS ? count : 0, et, es, false, &rc2);
    rc = rc == MPI_SUCCESS ? rc2 : rc;
    shd_msgf(msg, "load(\"%s\"): read failed: %s", path,
         rc != MPI_SUCCESS ? mpi_error(rc, err) : "the file ended early");
    if (rc == MPI_SUCCESS && got != count)
        rc = MPI_ERR_IO;
    if (ft != MPI_DATATYPE_NULL)
        MPI_Type_free(&ft);
    MPI_Type_free(&et);
    shd_agree(rc == MPI_SUCCESS ? NULL : msg);
    /* NumPy reads any nonzero byte of a bool file as True: so does every
     * operation here, which needs bools to be exactly 0 or 1. */
    if (dt == SHD_BOOL)
        for (int64_t i = 0; i < count; i++)
            ((uint8_t *)local)[i] = ((uint8_t *)local)[i] != 0;
}

void shd_load_npy(const char *path, void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape)
{
    check_block("load", path, rank, gshape, offset, shape);
    char msg[SHD_MSG_LEN];
    int64_t got[4] = { 0, 0, 0, 0 };   /* data offset, device, inode, size */
    bool ok = true;
    if (shd_world_rank() == 0) {
        npy_file nf;
        ok = read_npy("load", path, &nf, msg) && fits(path, &nf, dt, rank, gshape, NULL, msg);
        if (ok) {
            got[0] = nf.off;
            got[1] = (int64_t)nf.st.st_dev;
            got[2] = (int64_t)nf.st.st_ino;
            got[3] = (int64_t)nf.st.st_size;
        }
    }
    shd_agree(ok ? NULL : msg);
    MPI_Bcast(got, 4, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_File fh = open_checked(path, got + 1, 0);
    read_block(fh, path, (long)got[0], local, dt, rank, gshape, offset, shape);
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
    char msg[SHD_MSG_LEN] = "";
    /* the data offset, whether the open file serves, its device, inode and
     * size, the file's shape */
    int64_t got[5 + SHD_MAX_RANK] = {0}, foff[SHD_MAX_RANK];
    npy_file fresh;
    if (shd_world_rank() == 0) {
        char inner[SHD_MSG_LEN];
        bool reuse = g_win.path && strcmp(g_win.path, path) == 0 && same_file(path, &g_win.nf);
        const npy_file *nf = reuse ? &g_win.nf : &fresh;
        if ((reuse || read_npy("load", path, &fresh, inner)) && fits(path, nf, dt, rank, gshape, start, inner)) {
            got[0] = nf->off;
            got[1] = reuse;
            got[2] = (int64_t)nf->st.st_dev;
            got[3] = (int64_t)nf->st.st_ino;
            got[4] = (int64_t)nf->st.st_size;
            for (int d = 0; d < rank; d++)
                got[5 + d] = nf->h.shape[d];
        } else
            shd_msgf(msg, "line %d: %s", line, inner);
    }
    shd_agree(msg[0] ? msg : NULL);
    MPI_Bcast(got, 5 + rank, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (!got[1]) {
        shd_npy_fini();
        char *copy = shd_mem_strdup(path, "load(\"%s\")", path);
        g_win.fh = open_checked(path, got + 2, line);
        g_win.path = copy;
        if (shd_world_rank() == 0)
            g_win.nf = fresh;
    }
    for (int d = 0; d < rank; d++)
        foff[d] = start[d] + offset[d];
    read_block(g_win.fh, path, (long)got[0], local, dt, rank, got + 5, foff, shape);
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
        char ft[640], fe[128];
        descr_name(&h, fe, sizeof fe);
        type_text(ft, sizeof ft, fe, h.rank, h.shape);
        shd_msgf(msg, "load_dim(\"%s\"): the file's array %s has no dim %d", path, ft, k);
        return -1;
    }
    if (h.shape[k] > INT32_MAX) {
        shd_msgf(msg, "load_dim(\"%s\"): dim %d of the file's array is %lld, more than an i32 holds", path, k,
             (long long)h.shape[k]);
        return -1;
    }
    return h.shape[k];
}

int32_t shd_npy_dim(const char *path, int k, int line)
{
    char msg[SHD_MSG_LEN];
    int64_t n = 0;
    if (shd_world_rank() == 0) {
        char inner[SHD_MSG_LEN];
        n = header_dim(path, k, inner);
        if (n < 0)
            shd_msgf(msg, "line %d: %s", line, inner);
    }
    shd_agree(n < 0 ? msg : NULL);
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return (int32_t)n;
}
