/* json_schema_int.c - integer bounds as digit rules. An integer from lo to hi (both
 * without sign) is split by digit count; the numbers of one count from a to b are, at the
 * first digit where a and b differ, a's digit followed by a's tail up to all nines, the
 * digits between followed by any digits, and b's digit followed by zeros up to b's tail.
 * A side without a bound stops at 16 digits, as llama.cpp's integral-part does. */
#include <stdio.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

#define MAX_DIGITS 16

static void digit_class(strbuf *o, char from, char to) {
    if (from == to) strbuf_printf(o, "[%c]", from);
    else strbuf_printf(o, "[%c-%c]", from, to);
}

static void any_digits(strbuf *o, size_t min, size_t max) {
    strbuf_adds(o, "[0-9]");
    if (min == 1 && max == 1) return;
    if (min == max) strbuf_printf(o, "{%zu}", min);
    else strbuf_printf(o, "{%zu,%zu}", min, max);
}

static int all_of(const char *s, size_t n, char c) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != c) return 0;
    return 1;
}

/* the numbers of len digits from a to b (a <= b), as alternatives (no parentheses) */
static void same_length(strbuf *o, const char *a, const char *b, size_t len) {
    size_t i = 0;
    while (i < len && a[i] == b[i]) i++;
    if (i > 0) {
        strbuf_add(o, "\"", 1), strbuf_add(o, a, i), strbuf_add(o, "\"", 1);
        if (i == len) return;
        strbuf_adds(o, " ");
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
    if (i > 0) strbuf_adds(o, "(");
    if (!from_zeros) {
        digit_class(o, a[i], a[i]);
        strbuf_adds(o, " (");
        same_length(o, ra, nines, rest);
        strbuf_adds(o, ")");
        alts++;
    }
    if (mid_from <= mid_to) {
        if (alts++) strbuf_adds(o, " | ");
        digit_class(o, mid_from, mid_to);
        strbuf_adds(o, " ");
        any_digits(o, rest, rest);
    }
    if (!to_nines) {
        if (alts++) strbuf_adds(o, " | ");
        digit_class(o, b[i], b[i]);
        strbuf_adds(o, " (");
        same_length(o, zeros, rb, rest);
        strbuf_adds(o, ")");
    }
    if (i > 0) strbuf_adds(o, ")");
}

/* lo to hi, both >= 0 */
static void range(strbuf *o, int64_t lo, int64_t hi) {
    char a[24], b[24];
    size_t la = (size_t)snprintf(a, sizeof a, "%lld", (long long)lo);
    size_t lb = (size_t)snprintf(b, sizeof b, "%lld", (long long)hi);
    for (size_t len = la; len <= lb; len++) {
        char from[24], to[24];
        if (len == la) memcpy(from, a, la);
        else from[0] = '1', memset(from + 1, '0', len - 1);
        if (len == lb) memcpy(to, b, lb);
        else memset(to, '9', len);
        if (len > la) strbuf_adds(o, " | ");
        same_length(o, from, to, len);
    }
}

/* lo and above, lo >= 0, up to MAX_DIGITS digits (more when lo itself has more) */
static void at_least(strbuf *o, int64_t lo) {
    char a[24], nines[24];
    size_t la = (size_t)snprintf(a, sizeof a, "%lld", (long long)lo);
    memset(nines, '9', la);
    same_length(o, a, nines, la);
    if (la < MAX_DIGITS) {
        strbuf_adds(o, " | [1-9] ");
        any_digits(o, la, MAX_DIGITS - 1);
    }
}

void schema_integer_range(strbuf *o, int has_min, int64_t min, int has_max, int64_t max) {
    strbuf_adds(o, "(");
    if (has_min && has_max) {
        if (max < 0) {
            strbuf_adds(o, "\"-\" (");
            range(o, -max, -min);
            strbuf_adds(o, ")");
        } else if (min < 0) {
            strbuf_adds(o, "\"-\" (");
            range(o, 1, -min);
            strbuf_adds(o, ") | ");
            range(o, 0, max);
        } else {
            range(o, min, max);
        }
    } else if (has_min) {
        if (min < 0) {
            strbuf_adds(o, "\"-\" (");
            range(o, 1, -min);
            strbuf_adds(o, ") | ");
            at_least(o, 0);
        } else {
            at_least(o, min);
        }
    } else if (has_max) {
        if (max < 0) {
            strbuf_adds(o, "\"-\" (");
            at_least(o, -max);
            strbuf_adds(o, ")");
        } else {
            strbuf_adds(o, "\"-\" [1-9] ");
            any_digits(o, 0, MAX_DIGITS - 1);
            strbuf_adds(o, " | ");
            range(o, 0, max);
        }
    } else {
        strbuf_adds(o, "\"-\"? ([0] | [1-9] [0-9]{0,15})");
    }
    strbuf_adds(o, ")");
}
