/* template_render.c - renders conversations with chatfs's own template code (engine/template.c), for
 * check_template.py, which compares the result with the Jinja rendering of the default model's template.
 *
 *   cc -std=gnu11 -I. tools/train/template_render.c engine/template.c -o template_render
 *   template_render TEMPLATE.jinja < requests > renders
 *
 * The Jinja text selects the family as chatfs selects it for a GGUF (template_detect); the first output
 * line is "family variant". Requests, one after another on stdin:
 *   "THINKING ADD_GENERATION_PROMPT N\n", then N messages "ROLE LENGTH\n" followed by LENGTH bytes of content
 * and for each one the output is "LENGTH\n" followed by the rendered bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template.h"

#define MAX_MSGS 64
#define MAX_CONTENT (1 << 20)

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap + 1);
    for (size_t k; s && (k = fread(s + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *t = realloc(s, 2 * cap + 1);
            if (!t) free(s);
            s = t, cap *= 2;
        }
    }
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

static void die(const char *what) {
    fprintf(stderr, "template_render: %s\n", what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 2) die("usage: template_render TEMPLATE.jinja < requests");
    char *jinja = read_all(argv[1]);
    if (!jinja) die("cannot read the template");
    chat_template t;
    template_detect(&t, jinja);
    printf("%s %d\n", template_family_name(t.family), t.variant);

    int thinking, gen, n;
    while (scanf("%d %d %d", &thinking, &gen, &n) == 3) {
        if (n < 0 || n > MAX_MSGS) die("bad message count");
        chat_msg m[MAX_MSGS];
        char role[MAX_MSGS][16];
        for (int i = 0; i < n; i++) {
            long len;
            if (scanf("%15s %ld", role[i], &len) != 2 || len < 0 || len > MAX_CONTENT || getchar() != '\n')
                die("bad message header");
            char *c = malloc((size_t)len + 1);
            if (!c || fread(c, 1, (size_t)len, stdin) != (size_t)len) die("short message");
            c[len] = 0;
            m[i].role = role[i];
            m[i].content = c;
        }
        t.enable_thinking = thinking;
        char *out = template_render(&t, m, n, gen);
        if (!out) die("template_render failed");
        printf("%zu\n", strlen(out));
        fwrite(out, 1, strlen(out), stdout);
        free(out);
        for (int i = 0; i < n; i++) free((char *)m[i].content);
    }
    free(jinja);
    return 0;
}
