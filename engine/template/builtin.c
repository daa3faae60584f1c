/* builtin.c - the chat templates chatfs ships, as Jinja text, by name.
 *
 * "chatml" is what a model without a template gets (llama.cpp's fallback renders the
 * same bytes). The others are the families settings.json's "template" has always named,
 * for a model whose own template is broken or missing: each renders what chatfs's
 * hand-written renderer of that family rendered (tests/test_template.c keeps its cases),
 * written in the way the published template of the family writes it, without the tool
 * parts (chatfs conversations have no tools):
 *
 *   qwen3     Qwen3: reasoning kept only after the last user query (Qwen3-0.6B's template)
 *   qwen35    Qwen3.5: contents trimmed, a think block on every turn after the last query
 *             (Qwen3.5-4B's)
 *   llama3    Llama 3.x: trimmed contents between header tokens, BOS first
 *   granite   Granite 4.0: always a system turn first (a default one when none is given)
 *   lfm2      LFM2.5: BOS first, an empty system prompt left out, past reasoning dropped
 *   nemotron  Nemotron Nano v2: /think and /no_think in a system or user message switch
 *             thinking; a last assistant turn is continued
 *
 * Contents arrive as strings (template_render passes every message's content, empty when
 * there is none), so the texts need none of the published templates' type checks. */
#include "engine/template/template.h"

#include <string.h>

static const char chatml[] =
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

/* ns.last_query_index: the last user message that is a question, not a tool's answer
 * wrapped in a user turn (the last message when there is none); `content` is how a
 * message's content is read (Qwen3.5 trims it) */
#define QWEN_LAST_QUERY(content)                                                                              \
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"                \
    "{%- for message in messages[::-1] %}\n"                                                                 \
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"                                           \
    "    {%- set content = " content " %}\n"                                                                  \
    "    {%- if ns.multi_step_tool and message.role == 'user' and\n"                                         \
    "           not (content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}\n"   \
    "        {%- set ns.multi_step_tool = false %}\n"                                                        \
    "        {%- set ns.last_query_index = index %}\n"                                                       \
    "    {%- endif %}\n"                                                                                     \
    "{%- endfor %}\n"

/* an assistant turn's reasoning: its reasoning_content, or the <think> part of its content */
#define QWEN_SPLIT_REASONING                                                                                  \
    "        {%- set reasoning_content = '' %}\n"                                                            \
    "        {%- if message.reasoning_content is string %}\n"                                                \
    "            {%- set reasoning_content = message.reasoning_content %}\n"                                 \
    "        {%- elif '</think>' in content %}\n"                                                            \
    "            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n" \
    "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"                         \
    "        {%- endif %}\n"

/* the generation prompt: the assistant header, then an empty think block when
 * enable_thinking is false, else `thinking_on` (Qwen3 leaves thinking to the model,
 * Qwen3.5 opens the think block) */
#define QWEN_GENERATION_PROMPT(thinking_on)                                                                   \
    "{%- if add_generation_prompt %}\n"                                                                       \
    "    {{- '<|im_start|>assistant\\n' }}\n"                                                                 \
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"                                 \
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"                                                          \
    thinking_on                                                                                               \
    "    {%- endif %}\n"                                                                                      \
    "{%- endif %}\n"

static const char qwen3[] =
    QWEN_LAST_QUERY("message.content")
    "{%- for message in messages %}\n"
    "    {%- set content = message.content %}\n"
    "    {%- if message.role != 'assistant' %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    QWEN_SPLIT_REASONING
    "        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}\n"
    "            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>assistant\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    QWEN_GENERATION_PROMPT("");

static const char qwen35[] =
    QWEN_LAST_QUERY("message.content|trim")
    "{%- for message in messages %}\n"
    "    {%- set content = message.content|trim %}\n"
    "    {%- if message.role != 'assistant' %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    QWEN_SPLIT_REASONING
    "        {%- set reasoning_content = reasoning_content|trim %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>assistant\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    QWEN_GENERATION_PROMPT("    {%- else %}\n"
                           "        {{- '<think>\\n' }}\n");

static const char llama3[] =
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content|trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

static const char granite[] =
    "{%- set default_system = 'You are a helpful assistant. Please ensure responses are professional, accurate, and safe.' %}\n"
    "{%- if messages and messages[0].role == 'system' %}\n"
    "    {%- set system = messages[0].content or default_system %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system = default_system %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "{{- '<|start_of_role|>system<|end_of_role|>' + system + '<|end_of_text|>\\n' }}\n"
    "{%- for message in loop_messages %}\n"
    "    {{- '<|start_of_role|>' + message.role + '<|end_of_role|>' + message.content + '<|end_of_text|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_of_role|>assistant<|end_of_role|>' }}\n"
    "{%- endif %}\n";

static const char lfm2[] =
    "{{- bos_token }}\n"
    "{%- set loop_messages = messages %}\n"
    "{%- if messages and messages[0].role == 'system' %}\n"
    "    {%- if messages[0].content %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(last_assistant_index=-1) %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message.role == 'assistant' %}\n"
    "        {%- set ns.last_assistant_index = loop.index0 %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- set content = message.content %}\n"
    "    {%- if message.role == 'assistant' and loop.index0 != ns.last_assistant_index and '</think>' in content %}\n"
    "        {%- set content = content.split('</think>')[-1]|trim %}\n"
    "    {%- endif %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

static const char nemotron[] =
    "{%- set ns = namespace(enable_thinking=true) %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role == 'user' or message.role == 'system' %}\n"
    "        {%- if '/think' in message.content %}\n"
    "            {%- set ns.enable_thinking = true %}\n"
    "        {%- elif '/no_think' in message.content %}\n"
    "            {%- set ns.enable_thinking = false %}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- set loop_messages = messages %}\n"
    "{{- '<SPECIAL_10>System\\n' }}\n"
    "{%- if messages and messages[0].role == 'system' %}\n"
    "    {{- messages[0].content.replace('/think', '').replace('/no_think', '').strip() }}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- endif %}\n"
    "{{- '\\n\\n' }}\n"
    "{%- set last_assistant = '' %}\n"
    "{%- if loop_messages and loop_messages[-1].role == 'assistant' %}\n"
    "    {%- set last_assistant = loop_messages[-1].content.strip() %}\n"
    "    {%- set loop_messages = loop_messages[:-1] %}\n"
    "{%- endif %}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if message.role == 'user' %}\n"
    "        {{- '<SPECIAL_11>User\\n' + message.content.replace('/think', '').replace('/no_think', '').strip() + '\\n' }}\n"
    "    {%- elif message.role == 'assistant' %}\n"
    "        {%- set content = message.content %}\n"
    "        {%- if content and '</think>' in content %}\n"
    "            {%- set content = content.split('</think>')[1] %}\n"
    "        {%- endif %}\n"
    "        {{- '<SPECIAL_11>Assistant\\n' + content.strip() + '\\n<SPECIAL_12>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- set think = '<think>\\n' if ns.enable_thinking else '<think></think>' %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<SPECIAL_11>Assistant\\n' + think + last_assistant }}\n"
    "{%- elif last_assistant %}\n"
    "    {{- '<SPECIAL_11>Assistant\\n' + think + last_assistant + '\\n<SPECIAL_12>\\n' }}\n"
    "{%- endif %}\n";

static const struct {
    const char *name, *text;
} builtins[] = {
    {"chatml", chatml}, {"qwen3", qwen3}, {"qwen35", qwen35}, {"llama3", llama3},
    {"granite", granite}, {"lfm2", lfm2}, {"nemotron", nemotron},
};

const char *template_builtin_text(const char *name) {
    for (size_t i = 0; name && i < sizeof builtins / sizeof *builtins; i++)
        if (!strcmp(name, builtins[i].name)) return builtins[i].text;
    return NULL;
}

const char *template_builtin_name(int i) {
    return i >= 0 && (size_t)i < sizeof builtins / sizeof *builtins ? builtins[i].name : NULL;
}
