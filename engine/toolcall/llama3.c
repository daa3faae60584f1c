/* llama3.c - Llama 3.1-3.3's JSON calls, which the templates ask for as
 * {"name": function name, "parameters": dictionary of argument name and its value}: a bare
 * object, no markers around it, so its start marker is "{" (llama.cpp's autoparser: content
 * up to "{", then the call). llama.cpp also accepts the OpenAI wrapper's leading
 * "type": "function" (the templates' "Respond in the format" patch); "arguments" is read as
 * well as "parameters". Because "{" begins any JSON in a reply, an object is a call only
 * when its first key is "name" or "type" and, when functions are offered, it names one of
 * them: any other object is text. <|python_tag|> (Llama 3.1's built-in tools) is text, as in
 * llama.cpp's release. */
#include "engine/toolcall/toolcall_impl.h"

#include <string.h>

enum tc_read tc_read_llama3(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end) {
    const char *s = sc->s;
    size_t n = sc->n, p = tc_skip_space(s, at + marker_len, n);
    if (p >= n) return TC_MORE;
    /* decide early whether this brace can start a call, so that content streams on */
    enum tc_read k1 = tc_lit(s, p, n, "\"name\"", NULL), k2 = tc_lit(s, p, n, "\"type\"", NULL);
    if (k1 == TC_BAD && k2 == TC_BAD) return TC_BAD;
    if (k1 != TC_OK && k2 != TC_OK) return TC_MORE;
    enum tc_read r = tc_json_call(sc, at, "parameters", "arguments", true, true, end);
    if (r != TC_OK) return r;
    const struct tc_call *c = &sc->reply->calls[sc->reply->n_calls - 1];
    if (sc->tools && !tc_tools_find(sc->tools, c->name, strlen(c->name))) return TC_BAD; /* the scanner frees it */
    return TC_OK;
}
