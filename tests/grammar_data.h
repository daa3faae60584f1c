/* grammar_data.h - reading the grammar room's test data (the files in tests/grammar/): a whole
 * file, and the strings' escapes. Shared by test_grammar.c and test_json_schema.c. */
#ifndef CHATFS_TESTS_GRAMMAR_DATA_H
#define CHATFS_TESTS_GRAMMAR_DATA_H

#include <stdio.h>
#include <stdlib.h>

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long k = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)k + 1);
    if (s && fread(s, 1, (size_t)k, f) != (size_t)k) free(s), s = NULL;
    fclose(f);
    if (s) s[k] = 0, *n = (size_t)k;
    return s;
}

/* the data files' escapes: \n \t \r \\ \xHH */
static size_t unescape(const char *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            out[k++] = s[i];
            continue;
        }
        char e = s[++i];
        if (e == 'n') out[k++] = '\n';
        else if (e == 't') out[k++] = '\t';
        else if (e == 'r') out[k++] = '\r';
        else if (e == 'x' && i + 2 < n) {
            char h[3] = {s[i + 1], s[i + 2], 0};
            out[k++] = (char)strtol(h, NULL, 16);
            i += 2;
        } else out[k++] = e;
    }
    return k;
}

#endif
