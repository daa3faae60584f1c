/* json_schema_int.c - integer bounds as digit rules. An integer from lo to hi (both
 * without sign) is split by digit count; the numbers of one count from a to b are, at the
 * first digit where a and b differ, a's digit followed by a's tail up to all nines, the
 * digits between followed by any digits, and b's digit followed by zeros up to b's tail.
 * A side without a bound stops at 16 digits, as llama.cpp's integral-part does. */
#include <stdio.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

#define MAX_DIGITS 16

static void digit_class(schema_buf *o, char from, char to) {
    if (from == to) schema_printf(o, "[%c]", from);
    else schema_printf(o, "[%c-%c]", from, to);
}

static void any_digits(schema_buf *o, size_t min, size_t max) {
    schema_add(o, "[0-9]");
    if (min == 1 && max == 1) return;
    if (min == max) schema_printf(o, "{%zu}", min);
    else schema_printf(o, "{%zu,%zu}", min, max);
}

static int all_of(const char *s, size_t n, char c) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != c) return 0;
    return 1;
}

/* the numbers of len digits from a to b (a <= b), as alternatives (no parentheses) */
static void same_length(schema_buf *o, const char *a, const char *b, size_t len) {
    size_t i = 0;
    while (i < len && a[i] == b[i]) i++;
    if (i > 0) {
        schema_addn(o, "\"", 1), schema_addn(o, a, i), schema_addn(o, "\"", 1);
        if (i == len) return;
        schema_add(o, " ");
    }
    size_t rest = len - i - 1;
    if (rest == 0) {
        digit_class(o, a[i], b[i]);
        return;
    }
    const char *ra = a + i + 1, *rb = b + i + 1;
    int from_zeros = all_of(ra, rest, '0'), to_nines = all_of(rb, rest, '9');
    char mid_from = from_zeros ? a[i] : (char)(a[i] + 1), mid_to = to_nines ? b[i] : (char)(b[i] - 1);
    char nines[24], zeros[24];
    memset(nines, '9', rest), memset(zeros, '0', rest);
    int alts = 0;
    if (i > 0) schema_add(o, "(");
    if (!from_zeros) {
        digit_class(o, a[i], a[i]);
        schema_add(o, " (");
        same_length(o, ra, nines, rest);
        schema_add(o, ")");
        alts++;
    }
    if (mid_from <= mid_to) {
        if (alts++) schema_add(o, " | ");
        digit_class(o, mid_from, mid_to);
        schema_add(o, " ");
        any_digits(o, rest, rest);
    }
    if (!to_nines) {
        if (alts++) schema_add(o, " | ");
        digit_class(o, b[i], b[i]);
        schema_add(o, " (");
        same_length(o, zeros, rb, rest);
        schema_add(o, ")");
    }
    if (i > 0) schema_add(o, ")");
}

/* lo to hi, both >= 0 */
static void range(schema_buf *o, int64_t lo, int64_t hi) {
    char a[24], b[24];
    size_t la = (size_t)snprintf(a, sizeof a, "%lld", (long long)lo);
    size_t lb = (size_t)snprintf(b, sizeof b, "%lld", (long long)hi);
    for (size_t len = la; len <= lb; len++) {
        char from[24], to[24];
        if (len == la) memcpy(from, a, la);
        else from[0] = '1', memset(from + 1, '0', len - 1);
        if (len == lb) memcpy(to, b, lb);
        else memset(to, '9', len);
        if (len > la) schema_add(o, " | ");
        same_length(o, from, to, len);
    }
}

/* lo and above, lo >= 0, up to MAX_DIGITS digits (more when lo itself has more) */
static void at_least(schema_buf *o, int64_t lo) {
    char a[24], nines[24];
    size_t la = (size_t)snprintf(a, sizeof a, "%lld", (long long)lo);
    memset(nines, '9', la);
    same_length(o, a, nines, la);
    if (la < MAX_DIGITS) {
        schema_add(o, " | [1-9] ");
        any_digits(o, la, MAX_DIGITS - 1);
    }
}

void schema_integer_range(schema_buf *o, int has_min, int64_t min, int has_max, int64_t max) {
    schema_add(o, "(");
    if (has_min && has_max) {
        if (max < 0) {
            schema_add(o, "\"-\" (");
            range(o, -max, -min);
            schema_add(o, ")");
        } else if (min < 0) {
            schema_add(o, "\"-\" (");
            range(o, 1, -min);
            schema_add(o, ") | ");
            range(o, 0, max);
        } else {
            range(o, min, max);
        }
    } else if (has_min) {
        if (min < 0) {
            schema_add(o, "\"-\" (");
            range(o, 1, -min);
            schema_add(o, ") | ");
            at_least(o, 0);
        } else {
            at_least(o, min);
        }
    } else if (has_max) {
        if (max < 0) {
            schema_add(o, "\"-\" (");
            at_least(o, -max);
            schema_add(o, ")");
        } else {
            schema_add(o, "\"-\" [1-9] ");
            any_digits(o, 0, MAX_DIGITS - 1);
            schema_add(o, " | ");
            range(o, 0, max);
        }
    } else {
        schema_add(o, "\"-\"? ([0] | [1-9] [0-9]{0,15})");
    }
    schema_add(o, ")");
}
