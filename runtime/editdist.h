/* editdist.h: the edit distance of two names, for "did you mean" (pure C,
 * no MPI: compiled into libshdrt, for a program's mistyped flags, and into
 * shdc, for names, fields, options and error codes). */
#ifndef SHD_EDITDIST_H
#define SHD_EDITDIST_H

/* Insertions, deletions, substitutions and swaps of two neighbours, one
 * edit each (Damerau-Levenshtein, restricted: "stpes" is 1 from "steps");
 * 99 once it is sure to reach `limit`, or when either is longer than 32
 * bytes. */
int shd_edit_distance(const char *a, const char *b, int limit);

#endif
