// RANKS: 1
/* test_npy_header: .npy header dicts are read as Python literals.
 *
 * NumPy's own headers (either quote, Python 2 longs, a 1-d and a 0-d shape,
 * trailing spaces) parse to their descr, order and shape. A key's text
 * inside another string value is only text: the decoy header
 * {'x': "'shape': (8, 4)", ..., 'shape': (9, 4)} has shape (9, 4). A
 * repeated key takes its last value, as a Python dict does; unknown keys
 * with any literal value (nested tuples, lists, dicts, numbers) are
 * skipped. Malformed headers are refused with a reason: a missing key, a
 * non-tuple shape ((8) is the integer 8), a negative or huge dimension, an
 * unterminated string, text after the dict, too many dims.
 */
#include "check.h"
#include "shdrt_internal.h"

static shd_npy_header parse_ok(const char *text, const char *what)
{
    shd_npy_header h;
    const char *why = NULL;
    bool ok = shd_npy_parse_header(text, strlen(text), &h, &why);
    CHECK(ok, "%s: refused (%s): %s", what, why ? why : "?", text);
    return h;
}

static void parse_bad(const char *text, const char *reason)
{
    shd_npy_header h;
    const char *why = NULL;
    bool ok = shd_npy_parse_header(text, strlen(text), &h, &why);
    CHECK(!ok, "accepted a bad header: %s", text);
    CHECK(!ok && why && strstr(why, reason), "reason for %s: got '%s', want '%s'", text, why ? why : "", reason);
}

static void check_shape(shd_npy_header h, const char *descr, bool fortran, int rank, const int64_t *shape,
                        const char *what)
{
    CHECK(strcmp(h.descr, descr) == 0, "%s: descr '%s'", what, h.descr);
    CHECK(h.fortran == fortran, "%s: fortran_order", what);
    CHECK(h.rank == rank, "%s: rank %d, want %d", what, h.rank, rank);
    for (int d = 0; d < rank && d < h.rank; d++)
        CHECK(h.shape[d] == shape[d], "%s: dim %d is %lld", what, d, (long long)h.shape[d]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    static const char *const names[] = { "x" };
    int sizes[1] = { 1 };
    shd_init(&argc, &argv, 1, names, sizes);

    check_shape(parse_ok("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), }          \n", "numpy"),
                "<f4", false, 2, (int64_t[]){ 8, 4 }, "numpy");
    check_shape(parse_ok("{\"descr\": \"<f8\", \"fortran_order\": True, \"shape\": (3,)}", "double quotes"),
                "<f8", true, 1, (int64_t[]){ 3 }, "double quotes");
    check_shape(parse_ok("{'descr':'|b1','fortran_order':False,'shape':()}", "0-d"), "|b1", false, 0, NULL, "0-d");
    check_shape(parse_ok("{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 5L), }", "longs"),
                "<i4", false, 2, (int64_t[]){ 2, 5 }, "longs");
    check_shape(parse_ok("{'x': \"'shape': (8, 4)\", 'descr': '<f4', 'fortran_order': False, 'shape': (9, 4)}",
                         "decoy"), "<f4", false, 2, (int64_t[]){ 9, 4 }, "decoy");
    check_shape(parse_ok("{'descr': '<f4', 'y': '\\'shape\\': (1,)', 'fortran_order': False, 'shape': (7,)}",
                         "escaped decoy"), "<f4", false, 1, (int64_t[]){ 7 }, "escaped decoy");
    check_shape(parse_ok("{'shape': (1, 1), 'descr': '<f4', 'fortran_order': False, 'shape': (6, 2)}",
                         "repeated key"), "<f4", false, 2, (int64_t[]){ 6, 2 }, "repeated key");
    check_shape(parse_ok("{'meta': {'a': [1, (2, 3), -4.5e3], 'b': None}, 'descr': '<f4', "
                         "'fortran_order': False, 'shape': (5,)}", "nested"), "<f4", false, 1, (int64_t[]){ 5 },
                "nested unknown value");

    parse_bad("{'descr': '<f4', 'fortran_order': False}", "no 'shape'");
    parse_bad("{'descr': '<f4', 'shape': (8,)}", "no 'fortran_order'");
    parse_bad("{'fortran_order': False, 'shape': (8,)}", "no 'descr'");
    parse_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (8)}", "not a tuple");
    parse_bad("{'descr': '<f4', 'fortran_order': False, 'shape': 8}", "not a tuple");
    parse_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (-8,)}", "integer");
    parse_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "too large");
    parse_bad("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (8,)}", "True or False");
    parse_bad("{'descr': '<f4, 'fortran_order': False, 'shape': (8,)}", "");
    parse_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (8,)} trailing", "text after the dict");
    parse_bad("['descr', '<f4']", "not a dict");
    parse_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1)}", "too many dimensions");
    parse_bad("{'descr': '<f4' 'fortran_order': False, 'shape': (8,)}", "','");
    parse_bad("", "not a dict");

    return finish("test_npy_header");
}
