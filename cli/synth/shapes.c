/* shapes.c - the published models `chatfs synth` copies the shapes of (docs/engine-math.md
 * §10), and the weight types it writes. */
#include "cli/synth/shapes.h"


const shape synth_shapes[] = {
    {.name = "qwen3.5-0.8b", .arch = "qwen35", .n_embd = 1024, .n_layer = 24, .n_head = 8, .n_head_kv = 2,
     .head_dim = 256, .n_ff = 3584, .n_vocab = 248320, .tied = 1, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 64, .lin_k = 16, .lin_v = 16, .lin_dk = 128, .conv_k = 4},
    {.name = "qwen3.5-2b", .arch = "qwen35", .n_embd = 2048, .n_layer = 24, .n_head = 8, .n_head_kv = 2,
     .head_dim = 256, .n_ff = 6144, .n_vocab = 248320, .tied = 1, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 64, .lin_k = 16, .lin_v = 16, .lin_dk = 128, .conv_k = 4},
    {.name = "qwen3.5-4b", .arch = "qwen35", .n_embd = 2560, .n_layer = 32, .n_head = 16, .n_head_kv = 4,
     .head_dim = 256, .n_ff = 9216, .n_vocab = 248320, .tied = 1, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 64, .lin_k = 16, .lin_v = 32, .lin_dk = 128, .conv_k = 4},
    /* small enough for tests, with rows that fill 256-element blocks (K-quants) */
    {.name = "qwen3.5-small", .arch = "qwen35", .n_embd = 256, .n_layer = 4, .n_head = 2, .n_head_kv = 1,
     .head_dim = 64, .n_ff = 512, .n_vocab = 512, .tied = 1, .ctx = 4096, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 16, .lin_k = 2, .lin_v = 4, .lin_dk = 64, .conv_k = 4},
    {.name = "nemotron-h-4b", .arch = "nemotron_h", .n_embd = 3136, .n_head = 40, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 12544, .n_vocab = 131072, .tied = 0, .ctx = 8192, .eps = 1e-5f,
     .pattern = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-", .ssm_heads = 96, .ssm_head_dim = 80, .ssm_groups = 8,
     .ssm_state = 128, .conv_k = 4},
    {.name = "nemotron-h-8b", .arch = "nemotron_h", .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 21504, .n_vocab = 131072, .tied = 0, .ctx = 8192, .eps = 1e-5f,
     .pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", .ssm_heads = 128, .ssm_head_dim = 64,
     .ssm_groups = 8, .ssm_state = 128, .conv_k = 4},
    {.name = "nemotron-nano-9b", .arch = "nemotron_h", .n_embd = 4480, .n_head = 40, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 15680, .n_vocab = 131072, .tied = 0, .ctx = 8192, .eps = 1e-5f,
     .pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-", .ssm_heads = 128, .ssm_head_dim = 80,
     .ssm_groups = 8, .ssm_state = 128, .conv_k = 4},
    {.name = "mamba2-130m", .arch = "mamba2", .n_embd = 768, .n_layer = 24, .n_vocab = 50288, .tied = 1,
     .ctx = 1 << 20, .eps = 1e-5f, .ssm_heads = 24, .ssm_head_dim = 64, .ssm_groups = 1, .ssm_state = 128,
     .conv_k = 4},
    {.name = "mamba-130m", .arch = "mamba", .n_embd = 768, .n_layer = 24, .n_vocab = 50280, .tied = 1,
     .ctx = 1 << 20, .eps = 1e-5f, .ssm_state = 16, .dt_rank = 48, .conv_k = 4},
    {.name = "granite-4.0-h-350m", .arch = "granitehybrid", .n_embd = 768, .n_layer = 32, .n_head = 12,
     .n_head_kv = 4, .head_dim = 64, .n_ff = 2048, .n_vocab = 100352, .tied = 1, .ctx = 1 << 20, .eps = 1e-5f,
     .ssm_heads = 48, .ssm_head_dim = 32, .ssm_groups = 1, .ssm_state = 128, .conv_k = 4,
     .attn_layers = {10, 13, 17, 27}, .n_attn_layers = 4, .emb_scale = 12, .res_scale = 0.246f, .logit_scale = 3,
     .attn_scale = 0.015625f},
    {.name = "lfm2-350m", .arch = "lfm2", .n_embd = 1024, .n_layer = 16, .n_head = 16, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 4608, .n_vocab = 65536, .tied = 1, .ctx = 128000, .rope_base = 1e6f, .eps = 1e-5f,
     .conv_k = 3, .attn_layers = {2, 5, 8, 10, 12, 14}, .n_attn_layers = 6},
    {.name = "qwen3-0.6b", .arch = "qwen3", .n_embd = 1024, .n_layer = 28, .n_head = 16, .n_head_kv = 8,
     .head_dim = 128, .n_ff = 3072, .n_vocab = 151936, .tied = 1, .ctx = 40960, .rope_base = 1e6f, .eps = 1e-6f},
    /* Qwen/Qwen1.5-0.5B's config.json (GGUF arch qwen2; Qwen2/2.5-0.5B differ only in sizes) */
    {.name = "qwen1.5-0.5b", .arch = "qwen2", .n_embd = 1024, .n_layer = 24, .n_head = 16, .n_head_kv = 16,
     .head_dim = 64, .n_ff = 2816, .n_vocab = 151936, .tied = 1, .ctx = 32768, .rope_base = 1e6f, .eps = 1e-6f},
    {.name = "llama-3.2-1b", .arch = "llama", .n_embd = 2048, .n_layer = 16, .n_head = 32, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 8192, .n_vocab = 128256, .tied = 1, .ctx = 131072, .rope_base = 5e5f, .eps = 1e-5f},
    /* mixture-of-experts hybrids (docs/engine-math.md §11; their published configs) */
    {.name = "qwen3.5-35b-a3b", .arch = "qwen35moe", .n_embd = 2048, .n_layer = 40, .n_head = 16, .n_head_kv = 2,
     .head_dim = 256, .n_vocab = 248320, .tied = 0, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f, .rope_dim = 64,
     .lin_k = 16, .lin_v = 32, .lin_dk = 128, .conv_k = 4, .n_expert = 256, .n_used = 8, .n_ff_exp = 512,
     .n_ff_shexp = 512},
    {.name = "nemotron-3-nano-30b-a3b", .arch = "nemotron_h_moe", .n_embd = 2688, .n_head = 32, .n_head_kv = 2,
     .head_dim = 128, .n_vocab = 131072, .tied = 0, .ctx = 262144, .eps = 1e-5f,
     .pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", .ssm_heads = 64, .ssm_head_dim = 64,
     .ssm_groups = 8, .ssm_state = 128, .conv_k = 4, .n_expert = 128, .n_used = 6, .n_ff_exp = 1856,
     .n_ff_shexp = 3712, .w_scale = 2.5f},
    {.name = "lfm2-8b-a1b", .arch = "lfm2moe", .n_embd = 2048, .n_layer = 24, .n_head = 32, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 7168, .n_vocab = 65536, .tied = 1, .ctx = 128000, .rope_base = 1e6f, .eps = 1e-5f,
     .conv_k = 3, .attn_layers = {2, 6, 10, 14, 18, 21}, .n_attn_layers = 6, .n_expert = 32, .n_used = 4,
     .n_ff_exp = 1792, .n_dense_lead = 2},
    {.name = "granite-4.0-h-tiny", .arch = "granitehybrid", .n_embd = 1536, .n_layer = 40, .n_head = 12,
     .n_head_kv = 4, .head_dim = 128, .n_ff = 512, .n_vocab = 100352, .tied = 1, .ctx = 1 << 20, .eps = 1e-5f,
     .ssm_heads = 48, .ssm_head_dim = 64, .ssm_groups = 1, .ssm_state = 128, .conv_k = 4,
     .attn_layers = {5, 15, 25, 35}, .n_attn_layers = 4, .emb_scale = 12, .res_scale = 0.22f, .logit_scale = 6,
     .attn_scale = 0.0078125f, .n_expert = 64, .n_used = 6, .n_ff_exp = 512, .n_ff_shexp = 1024},
    /* small enough for tests, with expert rows that fill 256-element blocks (K-quants) */
    {.name = "qwen3.5-moe-small", .arch = "qwen35moe", .n_embd = 256, .n_layer = 4, .n_head = 2, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 512, .tied = 1, .ctx = 4096, .rope_base = 1e7f, .eps = 1e-6f, .rope_dim = 16,
     .lin_k = 2, .lin_v = 4, .lin_dk = 64, .conv_k = 4, .n_expert = 4, .n_used = 2, .n_ff_exp = 256,
     .n_ff_shexp = 256},
};
const int synth_n_shapes = (int)(sizeof synth_shapes / sizeof synth_shapes[0]);

const synth_type synth_types[] = {
    {"f32", GGML_F32, 0},     {"f16", GGML_F16, 1},     {"bf16", GGML_BF16, 32}, {"q8_0", GGML_Q8_0, 7},
    {"q4_0", GGML_Q4_0, 2},   {"q4_1", GGML_Q4_1, 3},   {"q5_0", GGML_Q5_0, 8},  {"q5_1", GGML_Q5_1, 9},
    {"q4_k", GGML_Q4_K, 14},  {"q5_k", GGML_Q5_K, 16},  {"q6_k", GGML_Q6_K, 18},
    {"q4_k_m", GGML_Q4_K, 15}, /* a mix: mix_type */
};
const int synth_n_types = (int)(sizeof synth_types / sizeof synth_types[0]);
