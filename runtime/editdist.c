/* editdist.c: the edit distance of two names (editdist.h). Pure C, no
 * MPI: compiled into libshdrt and into shdc (as blockmap.c is). */
#include <string.h>

#include "editdist.h"

/* The edit distance of a and b: insertions, deletions, substitutions and
 * transpositions of two neighbours (Damerau-Levenshtein, restricted), or 99
 * once it is sure to reach `limit` (two rows of the table whose least
 * entries are at least the limit: no later entry can be smaller) or either
 * is longer than 32 bytes. For "did you mean" suggestions. */
int shd_edit_distance(const char *a, const char *b, int limit)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 32 || lb > 32 || la - lb >= limit || lb - la >= limit)
        return 99;
    int d[33][33];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    int prev_least = 0;
    for (int i = 1; i <= la; i++) {
        int least = d[i][0];
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int v = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
            least = v < least ? v : least;
        }
        if (least >= limit && prev_least >= limit)
            return 99;
        prev_least = least;
    }
    return d[la][lb];
}
