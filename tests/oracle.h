/* oracle.h - reading llama.cpp's reference results (tests/fixtures/<model>.json,
 * <model>.long.json, <model>.last.f32) and comparing our engine against them. */
#ifndef CHATFS_TESTS_ORACLE_H
#define CHATFS_TESTS_ORACLE_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURES "tests/fixtures/"

static inline char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}

static inline cJSON *read_json(const char *path) {
    char *s = read_file(path, NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

/* an int array member as a malloc'd array; *n gets its length */
static inline int *json_ints(const cJSON *o, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    *n = cJSON_GetArraySize(a);
    int *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = cJSON_GetArrayItem(a, i)->valueint;
    return v;
}

static inline float max_abs_diff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts as a difference */
    }
    return m;
}

#endif
