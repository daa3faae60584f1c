/* test_json_schema.c - JSON schemas as grammars (engine/grammar/json_schema.h): every
 * case of tests/grammar/json_schema.txt (llama.cpp's test_schema cases, cases after its
 * conversion tests, chatfs's own) converted and compiled, each passing string accepted
 * and each failing one rejected, each refusal refused with its reason; integer bounds
 * against arithmetic; bytes that are not a schema; then the time from a typical nested
 * schema to a compiled grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "tests/check.h"
#include "tests/grammar_data.h"

#define DATA "tests/grammar/json_schema.txt"

static int verbose;

/* the strings of one section, each checked against the grammar */
static void strings(const grammar *g, const char *desc, const char *line, const char *stop, int want, int *count) {
    while (line < stop) {
        const char *eol = memchr(line, '\n', (size_t)(stop - line));
        if (!eol) eol = stop;
        char buf[8192];
        size_t k = unescape(line, (size_t)(eol - line), buf);
        int got = grammar_accepts(g, buf, k);
        CHECK(got == want, "%s: \"%.*s\" %s", desc, (int)k, buf, want ? "rejected" : "accepted");
        (*count)++;
        line = eol + 1;
    }
}

static void cases(void) {
    size_t n;
    char *text = slurp(DATA, &n);
    REQUIRE(text, DATA " is missing");
    int converted = 0, refused = 0, accepted = 0, rejected = 0;
    char *p = strstr(text, "\n== ");
    while (p) {
        char *desc = p + 4, *desc_end = strchr(desc, '\n');
        char *schema = desc_end + 1;
        char *next = strstr(schema - 1, "\n== ");
        char *end = next ? next : text + n;
        char *comment = strstr(schema - 1, "\n# "); /* a comment line ends the case */
        if (comment && comment < end) end = comment;
        char *sep = strstr(schema - 1, "\n-- ");
        REQUIRE(sep && sep < end, "case without -- pass or -- refused");
        *desc_end = 0;
        char err[512] = "";
        char *gbnf = json_schema_to_gbnf(schema, (size_t)(sep + 1 - schema), err, sizeof err);
        if (!strncmp(sep, "\n-- refused\n", 12)) {
            char *want = sep + 12, *want_end = strchr(want, '\n');
            if (!want_end || want_end > end) want_end = end;
            *want_end = 0;
            CHECK(!gbnf && strstr(err, want), "%s: got \"%s\", want a refusal with \"%s\"", desc, gbnf ? "(converted)" : err, want);
            CHECK(gbnf || !strncmp(err, "schema: ", 8), "%s: message \"%s\"", desc, err);
            refused++;
        } else {
            char *pass = strstr(sep, "\n-- pass\n"), *fail = strstr(sep, "\n-- fail\n");
            REQUIRE(pass == sep && fail && fail < end, "%s: -- pass then -- fail", desc);
            CHECK(gbnf, "%s: %s", desc, err);
            grammar *g = NULL;
            if (gbnf) {
                g = grammar_compile(gbnf, strlen(gbnf), err, sizeof err);
                CHECK(g, "%s: %s\n%s", desc, err, gbnf);
                if (verbose) printf("== %s\n%s", desc, gbnf);
            }
            if (g) {
                int failed_before = check_failures;
                strings(g, desc, pass + 9, fail, 1, &accepted);
                strings(g, desc, fail + 9, end, 0, &rejected);
                if (check_failures != failed_before) printf("  grammar of '%s':\n%s", desc, gbnf);
                converted++;
            }
            grammar_free(g);
        }
        free(gbnf);
        p = next;
    }
    printf("  %s: %d schemas converted (%d strings accepted, %d rejected as they should be), %d refused with their reason\n",
           DATA, converted, accepted, rejected, refused);
    CHECK(converted >= 60 && refused >= 20, "%d converted, %d refused", converted, refused);
    free(text);
}

/* Integer bounds against arithmetic: for bounds around digit-count edges, one-sided and
 * two-sided, every integer from -1100 to 1100 is accepted exactly when it is in range
 * (and "-0", leading zeros, "+1" never are). */
static void integer_bounds(void) {
    static const long edges[] = {-1000, -101, -99, -10, -1, 0, 1, 9, 10, 99, 100, 123, 999};
    const int n = (int)(sizeof edges / sizeof *edges);
    int schemas = 0, numbers = 0;
    for (int a = -1; a < n; a++)
        for (int b = -1; b < n; b++) {
            if ((a >= 0 && b >= 0 && edges[a] > edges[b]) || (a < 0 && b < 0)) continue;
            char schema[160];
            int k = snprintf(schema, sizeof schema, "{\"type\": \"integer\"");
            if (a >= 0) k += snprintf(schema + k, sizeof schema - (size_t)k, ", \"minimum\": %ld", edges[a]);
            if (b >= 0) k += snprintf(schema + k, sizeof schema - (size_t)k, ", \"maximum\": %ld", edges[b]);
            snprintf(schema + k, sizeof schema - (size_t)k, "}");
            char err[256];
            char *gbnf = json_schema_to_gbnf(schema, strlen(schema), err, sizeof err);
            grammar *g = gbnf ? grammar_compile(gbnf, strlen(gbnf), err, sizeof err) : NULL;
            CHECK(g, "%s: %s", schema, err);
            for (long v = -1100; g && v <= 1100; v++) {
                char num[32];
                int len = snprintf(num, sizeof num, "%ld", v);
                int want = (a < 0 || v >= edges[a]) && (b < 0 || v <= edges[b]);
                CHECK(grammar_accepts(g, num, (size_t)len) == want, "%s: %ld %s", schema, v, want ? "rejected" : "accepted");
                numbers++;
            }
            static const char *const never[] = {"-0", "00", "01", "-01", "+1", "1.0", "", "-"};
            for (size_t i = 0; g && i < sizeof never / sizeof *never; i++)
                CHECK(grammar_accepts(g, never[i], strlen(never[i])) == 0, "%s: \"%s\" accepted", schema, never[i]);
            grammar_free(g);
            free(gbnf);
            schemas++;
        }
    printf("  integer bounds: %d schemas, %d integers each in range exactly when accepted\n", schemas, numbers);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* a typical request's schema: nested objects, arrays, enums, bounds, a pattern, a $ref */
static const char TYPICAL[] =
    "{\"type\": \"object\", \"$defs\": {\"address\": {\"type\": \"object\", \"properties\": {"
    "\"street\": {\"type\": \"string\", \"maxLength\": 80}, \"city\": {\"type\": \"string\"},"
    "\"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}(-[0-9]{4})?$\"},"
    "\"country\": {\"enum\": [\"US\", \"CA\", \"MX\"]}}, \"required\": [\"street\", \"city\"]}},"
    "\"properties\": {\"id\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 999999},"
    "\"name\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 64},"
    "\"email\": {\"type\": \"string\", \"format\": \"email\"},"
    "\"born\": {\"type\": \"string\", \"format\": \"date\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 10},"
    "\"home\": {\"$ref\": \"#/$defs/address\"}, \"work\": {\"anyOf\": [{\"$ref\": \"#/$defs/address\"}, {\"type\": \"null\"}]},"
    "\"scores\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}, \"minItems\": 1},"
    "\"active\": {\"type\": \"boolean\"}, \"extra\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}},"
    "\"required\": [\"id\", \"name\", \"tags\"], \"additionalProperties\": false}";

static void compile_time(void) {
    const int runs = 20;
    double best = 1e9;
    grammar *g = NULL;
    for (int i = 0; i < runs; i++) {
        char err[512];
        double t0 = now_ms();
        char *gbnf = json_schema_to_gbnf(TYPICAL, strlen(TYPICAL), err, sizeof err);
        REQUIRE(gbnf, "%s", err);
        grammar_free(g);
        g = grammar_compile(gbnf, strlen(gbnf), err, sizeof err);
        double dt = now_ms() - t0;
        REQUIRE(g, "%s", err);
        best = dt < best ? dt : best;
        free(gbnf);
    }
    const char *doc = "{\"id\": 42, \"name\": \"Ada\", \"tags\": [\"x\", \"y\"], \"born\": \"1815-12-10\","
                      " \"home\": {\"street\": \"1 Main St\", \"city\": \"London\", \"zip\": \"12345-6789\"},"
                      " \"work\": null, \"scores\": [1.5, -2e3], \"extra\": {\"a\": 1}}";
    CHECK(grammar_accepts(g, doc, strlen(doc)) == 1, "the typical document");
    const char *bad = "{\"id\": 0, \"name\": \"Ada\", \"tags\": []}";
    CHECK(grammar_accepts(g, bad, strlen(bad)) == 0, "id 0 is below the minimum");
    printf("  a typical nested schema (%zu bytes) to a compiled grammar (%d rules): %.2f ms (best of %d)\n",
           sizeof TYPICAL - 1, grammar_n_rules(g), best, runs);
    CHECK(best < 50, "compile time %.1f ms", best);
    grammar_free(g);
}

/* bytes that are not a schema: no crash, a reason */
static void hostile(void) {
    static const char *const bad[] = {"", "{", "nul", "[1, 2]", "\"type\"", "{\"type\": \"string\"} x", "{\"a\": 1,}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        char *g = json_schema_to_gbnf(bad[i], strlen(bad[i]), err, sizeof err);
        CHECK(!g && !strncmp(err, "schema: ", 8), "\"%s\": %s", bad[i], g ? g : err);
        free(g);
    }
    /* deep nesting stops at the bound */
    size_t depth = 5000;
    char *deep = malloc(depth * 20 + 64);
    size_t k = 0;
    for (size_t i = 0; i < depth; i++) k += (size_t)sprintf(deep + k, "{\"items\": ");
    k += (size_t)sprintf(deep + k, "{}");
    for (size_t i = 0; i < depth; i++) deep[k++] = '}';
    char err[256] = "";
    char *g = json_schema_to_gbnf(deep, k, err, sizeof err);
    CHECK(!g && err[0], "a schema nested %zu deep: %s", depth, g ? "converted" : err);
    free(g);
    k = 0;
    for (size_t i = 0; i < 40; i++) k += (size_t)sprintf(deep + k, "{\"items\": ");
    k += (size_t)sprintf(deep + k, "{\"type\": \"integer\"}");
    for (size_t i = 0; i < 40; i++) deep[k++] = '}';
    g = json_schema_to_gbnf(deep, k, err, sizeof err);
    CHECK(g, "a schema nested 40 deep: %s", err);
    free(g);
    free(deep);
    /* a property name too long for the additional keys' trie (it recurses per character) */
    char *wide = malloc(2000);
    k = (size_t)sprintf(wide, "{\"properties\": {\"");
    memset(wide + k, 'x', 1100), k += 1100;
    k += (size_t)sprintf(wide + k, "\": {}}, \"additionalProperties\": true}");
    g = json_schema_to_gbnf(wide, k, err, sizeof err);
    CHECK(!g && strstr(err, "a property name longer than 1024 bytes"), "a long name: %s", g ? "converted" : err);
    free(g);
    free(wide);
    /* a schema that need not end in NUL */
    const char *s = "{\"type\": \"boolean\"}garbage";
    g = json_schema_to_gbnf(s, 19, err, sizeof err);
    CHECK(g && strstr(g, "root ::="), "a schema of 19 bytes: %s", g ? "ok" : err);
    free(g);
}

int main(int argc, char **argv) {
    verbose = argc > 1 && !strcmp(argv[1], "-v");
    cases();
    integer_bounds();
    hostile();
    compile_time();
    return check_report("test_json_schema");
}
