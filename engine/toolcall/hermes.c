/* hermes.c - Hermes-style JSON calls: Qwen2.5, Qwen3, Hermes 2/3, Granite-4 (in llama.cpp
 * the autoparser's JSON-in-tags format, derived from these templates' renders):
 *
 *     <tool_call>
 *     {"name": "NAME", "arguments": {...}}
 *     </tool_call>
 *
 * Whitespace around the object is free (llama.cpp's space()); one object a block, one
 * block a call. The OpenAI wrapper's "type": "function" member is admitted, as for Llama 3.
 * A finished answer may end without the </tool_call>. */
#include "engine/toolcall/toolcall_impl.h"

enum tc_read tc_read_hermes(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end) {
    const char *s = sc->s;
    size_t n = sc->n, p = tc_skip_space(s, at + marker_len, n);
    if (p >= n) return TC_MORE;
    if (s[p] != '{') return TC_BAD;
    enum tc_read r = tc_json_call(sc, p, "arguments", NULL, true, false, &p);
    if (r != TC_OK) return r;
    p = tc_skip_space(s, p, n);
    size_t q;
    r = tc_lit(s, p, n, "</tool_call>", &q);
    if (r == TC_MORE && sc->final && p >= n) r = TC_OK, q = n;
    if (r != TC_OK) return r; /* the scanner cuts the call back */
    *end = q;
    return TC_OK;
}
