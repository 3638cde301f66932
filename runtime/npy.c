/* npy.c: .npy files of global arrays, read and written with MPI-IO.
 *
 * Format (NumPy's .npy v1.0): "\x93NUMPY", version bytes 1 0, a 2-byte
 * little-endian header length, then a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), } padded with
 * spaces and ended by '\n' so that the data starts at a multiple of 64; the
 * data follows in C order. Versions 2.0 and 3.0 (4-byte header length) are
 * accepted on load.
 *
 * Every rank touches only its own block: its file view is an MPI subarray
 * type (global shape, block shape, block offset) at the data offset, and
 * the collective read/write moves the whole block in one call. Saving goes
 * to PATH.tmp.<pid of rank 0>, renamed to PATH by rank 0 after every rank
 * has closed the file, so a reader never sees a half-written file.
 *
 * Invariants: the header is validated once, on rank 0, and the verdict is
 * broadcast, so a bad file produces one message rather than one per rank;
 * any I/O failure aborts all ranks (MPI-IO reports errors by return code).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
#define MSG_LEN 1024

/* ---- agreement: one message, then every rank aborts ------------------- */

/* Collective. When any rank has a message, the lowest such rank reports it
 * and aborts; the others wait in a barrier that the abort ends. */
static void agree(const char *msg)
{
    int me = shd_world_rank(), size = shd_world_size();
    int mine = msg ? me : size, first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size)
        return;
    if (first == me)
        shd_fatal("%s", msg);
    MPI_Barrier(MPI_COMM_WORLD);
    shd_fatal("aborted after an I/O error on rank %d", first);
}

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
 * rank makes the same number of collective calls. */
static int transfer_all(MPI_File fh, void *buf, int64_t count, MPI_Datatype et,
                        size_t es, bool write)
{
    const int64_t chunk = ((int64_t)1 << 30) / (int64_t)es;
    int64_t most = count;
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    int rc = MPI_SUCCESS;
    for (int64_t done = 0; done < most; done += chunk) {
        int64_t left = count - done;
        int n = (int)(left <= 0 ? 0 : left < chunk ? left : chunk);
        char *p = (char *)buf + (size_t)(done < count ? done : 0) * es;
        int r = write ? MPI_File_write_all(fh, p, n, et, MPI_STATUS_IGNORE)
                      : MPI_File_read_all(fh, p, n, et, MPI_STATUS_IGNORE);
        if (r != MPI_SUCCESS)
            rc = r;
    }
    return rc;
}

/* ---- save ---------------------------------------------------------------- */

static void save_body(MPI_File fh, const char *path, const char *header,
                      size_t hlen, const void *local, shd_dtype dt, int rank,
                      const int64_t *gshape, const int64_t *offset,
                      const int64_t *shape, bool writer)
{
    char err[MPI_MAX_ERROR_STRING], msg[MSG_LEN];
    const char *bad = NULL;
    size_t es = shd_dtype_size(dt);
    int64_t gcount = shd_shape_count(rank, gshape);
    /* Every step is collective or local, so all run even after an error;
     * the first error is reported once by agree(). */
    int rc = MPI_File_set_size(fh, (MPI_Offset)(hlen + (size_t)gcount * es));
    if (shd_world_rank() == 0) {
        int r = MPI_File_write_at(fh, 0, header, (int)hlen, MPI_BYTE,
                                  MPI_STATUS_IGNORE);
        rc = rc == MPI_SUCCESS ? r : rc;
    }
    MPI_Datatype et = elem_type(dt), ft;
    int64_t count = writer ? shd_shape_count(rank, shape) : 0;
    int r = set_view(fh, (MPI_Offset)hlen, et, rank, gshape, offset, shape,
                     count > 0, &ft);
    rc = rc == MPI_SUCCESS ? r : rc;
    if (rc != MPI_SUCCESS) {
        msgf(msg, "save(\"%s\"): %s", path, mpi_error(rc, err));
        bad = msg;
    }
    agree(bad);
    rc = transfer_all(fh, (void *)local, count, et, es, true);
    if (rc != MPI_SUCCESS) {
        msgf(msg, "save(\"%s\"): write failed: %s", path,
                 mpi_error(rc, err));
        bad = msg;
    }
    if (ft != MPI_DATATYPE_NULL)
        MPI_Type_free(&ft);
    MPI_Type_free(&et);
    agree(bad);
}

void shd_save_npy(const char *path, const void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape, bool writer)
{
    check_block("save", path, rank, gshape, offset, shape);
    char header[1024], tmp[4096], err[MPI_MAX_ERROR_STRING], msg[MSG_LEN];
    size_t hlen = build_header(header, sizeof header, dt, rank, gshape);
    long pid = (long)getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, pid);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, tmp, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                           MPI_INFO_NULL, &fh);
    msgf(msg, "save(\"%s\"): cannot create %s: %s", path, tmp,
             rc == MPI_SUCCESS ? "" : mpi_error(rc, err));
    agree(rc == MPI_SUCCESS ? NULL : msg);
    save_body(fh, path, header, hlen, local, dt, rank, gshape, offset, shape, writer);
    rc = MPI_File_close(&fh);
    msgf(msg, "save(\"%s\"): close failed: %s", path,
             rc == MPI_SUCCESS ? "" : mpi_error(rc, err));
    agree(rc == MPI_SUCCESS ? NULL : msg);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *bad = NULL;
    if (shd_world_rank() == 0 && rename(tmp, path) != 0) {
        msgf(msg, "save(\"%s\"): cannot rename %s: %s", path,
                 tmp, strerror(errno));
        bad = msg;
    }
    agree(bad);
}

/* ---- header parsing (rank 0) ---------------------------------------------- */

typedef struct {
    char descr[16];
    bool fortran;
    int rank;
    int64_t shape[SHD_MAX_RANK + 1];
} npy_header;

/* Finds key 'name' (either quote) in the dict and returns the text after
 * its colon, or NULL. */
static const char *dict_value(const char *dict, const char *name)
{
    char key[64];
    for (int q = 0; q < 2; q++) {
        snprintf(key, sizeof key, q ? "\"%s\"" : "'%s'", name);
        const char *p = strstr(dict, key);
        if (p) {
            p = strchr(p + strlen(key), ':');
            if (!p)
                return NULL;
            p++;
            while (*p == ' ')
                p++;
            return p;
        }
    }
    return NULL;
}

static bool parse_shape(const char *p, npy_header *h)
{
    if (*p++ != '(')
        return false;
    h->rank = 0;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            return true;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || h->rank == SHD_MAX_RANK + 1)
            return false;
        h->shape[h->rank++] = v;
        p = end;
        while (*p == 'L' || *p == ' ')   /* Python 2 longs */
            p++;
        if (*p != ',' && *p != ')')
            return false;
    }
}

static bool parse_dict(const char *dict, npy_header *h)
{
    const char *d = dict_value(dict, "descr");
    const char *f = dict_value(dict, "fortran_order");
    const char *s = dict_value(dict, "shape");
    if (!d || !f || !s || (*d != '\'' && *d != '"'))
        return false;
    const char *end = strchr(d + 1, *d);
    if (!end || end - d - 1 >= (long)sizeof h->descr)
        return false;
    memcpy(h->descr, d + 1, (size_t)(end - d - 1));
    h->descr[end - d - 1] = 0;
    if (strncmp(f, "True", 4) == 0)
        h->fortran = true;
    else if (strncmp(f, "False", 5) == 0)
        h->fortran = false;
    else
        return false;
    return parse_shape(s, h);
}

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
static bool header_matches(const char *path, const npy_header *h, shd_dtype dt,
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

/* Reads the preamble; returns the data offset, or -1 with msg filled. */
static long read_preamble(FILE *f, const char *path, npy_header *h, char *msg)
{
    unsigned char pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, MAGIC, MAGIC_LEN) != 0) {
        msgf(msg, "load(\"%s\"): not a .npy file", path);
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
        msgf(msg, "load(\"%s\"): unsupported .npy version %d.%d",
                 path, pre[6], pre[7]);
        return -1;
    }
    char *dict = hlen < (1u << 24) ? malloc(hlen + 1) : NULL;
    bool ok = dict && fread(dict, 1, hlen, f) == hlen;
    if (ok) {
        dict[hlen] = 0;
        ok = parse_dict(dict, h);
    }
    free(dict);
    if (!ok) {
        msgf(msg, "load(\"%s\"): malformed .npy header", path);
        return -1;
    }
    return (long)(at + hlen);
}

/* Rank 0: opens, parses and validates; returns the data offset or -1. */
static long inspect(const char *path, shd_dtype dt, int rank,
                    const int64_t *gshape, char *msg)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        msgf(msg, "load(\"%s\"): cannot open: %s", path, strerror(errno));
        return -1;
    }
    npy_header h;
    long off = read_preamble(f, path, &h, msg);
    if (off >= 0 && !header_matches(path, &h, dt, rank, gshape, msg))
        off = -1;
    if (off >= 0) {
        size_t need = (size_t)shd_shape_count(rank, gshape) * shd_dtype_size(dt);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        if (size < 0 || (size_t)size < (size_t)off + need) {
            msgf(msg, "load(\"%s\"): file is truncated (%ld bytes, "
                     "expected %zu)", path, size, (size_t)off + need);
            off = -1;
        }
    }
    fclose(f);
    return off;
}

/* ---- load ---------------------------------------------------------------- */

void shd_load_npy(const char *path, void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape)
{
    check_block("load", path, rank, gshape, offset, shape);
    char msg[MSG_LEN], err[MPI_MAX_ERROR_STRING];
    long off = 0;
    if (shd_world_rank() == 0)
        off = inspect(path, dt, rank, gshape, msg);
    agree(off < 0 ? msg : NULL);
    MPI_Bcast(&off, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    msgf(msg, "load(\"%s\"): cannot open: %s", path,
             rc == MPI_SUCCESS ? "" : mpi_error(rc, err));
    agree(rc == MPI_SUCCESS ? NULL : msg);
    size_t es = shd_dtype_size(dt);
    int64_t count = shd_shape_count(rank, shape);
    MPI_Datatype et = elem_type(dt), ft;
    rc = set_view(fh, (MPI_Offset)off, et, rank, gshape, offset, shape, count > 0, &ft);
    if (rc == MPI_SUCCESS)
        rc = transfer_all(fh, local, count, et, es, false);
    else
        transfer_all(fh, local, 0, et, es, false);
    msgf(msg, "load(\"%s\"): read failed: %s", path,
             rc == MPI_SUCCESS ? "" : mpi_error(rc, err));
    if (ft != MPI_DATATYPE_NULL)
        MPI_Type_free(&ft);
    MPI_Type_free(&et);
    MPI_File_close(&fh);
    agree(rc == MPI_SUCCESS ? NULL : msg);
}
