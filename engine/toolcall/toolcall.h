/* toolcall.h - tool calls read out of a model's answer text, as llama.cpp's chat parsers
 * read them (common/chat.cpp, common/parsers/, common/chat-peg-parser.cpp of the release
 * tools/llama-cpp-src.sh names), per template family.
 *
 * The answer is split into its content (the text outside the calls) and the calls, each a
 * function name and its arguments as a compact JSON object in the model's key order. The
 * same function reads a finished answer and one still streaming: on a partial text it
 * returns only what the rest cannot change (content before a possible start marker, calls
 * whose closing marker has arrived), so what it returns for a prefix is a prefix of what it
 * returns for the whole text. engine/toolcall/README.md says what each family accepts and
 * where chatfs departs from llama.cpp. */
#ifndef CHATFS_TOOLCALL_H
#define CHATFS_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

enum tc_family {
    TC_NONE,        /* the template has no tool calls: everything is content */
    TC_QWEN_XML,    /* Qwen3.5, Nemotron-3: <tool_call><function=..><parameter=..>, thinking */
    TC_QWEN3_CODER, /* the same calls; the first may come without <tool_call> */
    TC_HERMES,      /* Qwen2.5, Qwen3, Hermes, Granite-4: <tool_call>{"name", "arguments"}</tool_call> */
    TC_LLAMA3,      /* Llama 3.1-3.3: {"name": ..., "parameters": {...}} */
    TC_LFM2,        /* LFM2, LFM2.5: <|tool_call_start|>[name(arg=value, ...)]<|tool_call_end|> */
};

/* The family of a chat template's Jinja source, by the markers it contains, in the order
 * llama.cpp's common_chat_try_specialized_template tests them (the JSON families, which
 * llama.cpp derives by rendering the template, by their own markers). TC_NONE when the
 * template renders no tool calls. */
enum tc_family tc_detect(const char *template_src, size_t len);
const char *tc_family_name(enum tc_family f);                  /* "qwen-xml", ..., "none" */
bool tc_family_from_name(const char *name, enum tc_family *out); /* false: no such family */

/* The offered functions (OpenAI's "tools" array), compiled once: names, and each
 * parameter's types and whether it is required. */
struct tc_tools;
/* NULL and the reason in err (e.g. "tools[1].function: no name") when the text is not a
 * tools array. */
struct tc_tools *tc_tools_parse(const char *json, size_t len, char *err, size_t errlen);
void tc_tools_free(struct tc_tools *t);
int tc_tools_count(const struct tc_tools *t);

struct tc_call {
    int index;        /* 0, 1, 2, ... in the order of the answer */
    char *name;       /* NUL-terminated */
    char *arguments;  /* a JSON object, compact, NUL-terminated */
    /* NULL, or what is wrong with the call, one line: a value that did not convert to its
     * parameter's type (kept as a string: "count: \"many\" is not an integer"), a function
     * or parameter that is not offered, a required parameter missing. */
    char *problem;
    size_t start, end; /* the call's bytes in the text, markers included */
};

struct tc_reply {
    char *content;     /* NUL-terminated; content_len bytes */
    size_t content_len;
    struct tc_call *calls;
    int n_calls;
};

/* Parses an answer: the content and the calls. tools may be NULL (then names and
 * parameters are not checked and parameter values are typed as what they read as). With
 * final false the text is a prefix of the answer: see above. Every byte of text is read
 * within len; text need not be NUL-terminated. -1 when out of memory (*out is empty). */
int tc_parse(enum tc_family f, const struct tc_tools *tools, const char *text, size_t len, bool final,
             struct tc_reply *out);
void tc_reply_free(struct tc_reply *r);

/* Streaming: feed the whole text so far after each piece; reply grows, never changes what it
 * held: reply.content[0, content_len) is safe to show, reply.calls[0, n_calls) are complete.
 * The caller keeps its own counts of what it has shown. Rescans only the text after the last
 * settled point (a call's end, content before a possible marker). The last feed has final
 * true. -1 when out of memory. */
struct tc_stream {
    enum tc_family family;
    const struct tc_tools *tools; /* borrowed; NULL: unchecked */
    struct tc_reply reply;
    size_t settled;  /* bytes of the text already turned into reply */
    bool skip_space; /* the whitespace at `settled` is dropped (start of the answer, after a call) */
    size_t content_cap; /* internal: reply.content's allocation */
};
void tc_stream_init(struct tc_stream *s, enum tc_family f, const struct tc_tools *tools);
int tc_stream_feed(struct tc_stream *s, const char *text, size_t len, bool final);
void tc_stream_free(struct tc_stream *s);

/* The grammar (GBNF text, malloc'd) of an answer that is calls of the offered functions
 * (tools_json: OpenAI's tools array) in family f's format, for tool_choice "required" or
 * one function: only (NULL: any offered function). parallel: one call or more, else
 * exactly one (llama3: always one). Every argument as its parameter's schema allows
 * (call_grammar.c says how the XML families write values). NULL with the reason in err:
 * tools that do not parse, no function named only, a family without a call grammar
 * (lfm2, none), a parameter schema the conversion refuses. */
char *tc_call_grammar(enum tc_family f, const char *tools_json, size_t len, const char *only, bool parallel, char *err,
                      size_t errlen);

/* Reasoning: llama.cpp ends a Qwen3.5/Nemotron-3 reasoning block at a <tool_call> as well
 * as at </think> (the call is then parsed as part of the answer, even when no </think>
 * ever comes). Given the reasoning text (what follows <think>), returns where the reasoning
 * ends that way: the offset of the first <tool_call>, or len when there is none (and for
 * every other family, whose calls inside a think block stay reasoning). The caller parses
 * text[offset, len) as the start of the answer. *safe (may be NULL): the bytes of reasoning
 * that can be streamed now (a partial "<tool_" at the end held back). */
size_t tc_reasoning_end(enum tc_family f, const char *text, size_t len, size_t *safe);

#endif
