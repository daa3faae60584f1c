/* test_vision_chat.c - images in conversations through the engine (chat.h with
 * engine_config.mmproj_path), against llama.cpp's mtmd and against the engine itself:
 *  - a user turn with an image gives llama-mtmd-cli's greedy reply (the fixtures of
 *    test_vision: the same prompt, rendered by a template that writes it);
 *  - restoring a checkpoint around an image gives what computing it all gives: a follow-up
 *    about the same image, and another question after it, encode nothing and reuse the image;
 *    the same text with another image never reuses past the image's start (vllm-mlx #718);
 *  - a burst of six conversations, three with images, gives each the reply it gets alone;
 *  - bad images are refused with the reason, and a model without a projector refuses images. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/threadpool.h"
#include "engine/runtime/chat.h"
#include "tests/check.h"
#include "tests/engine_db.h"
#include "tests/oracle.h"

#define VISION FIXTURES "vision/"
#define MODEL FIXTURES "qwen35-tiny-f32.gguf"
#define MMPROJ VISION "mmproj-tiny-f32.gguf"

/* writes test_vision's fixture prompt ("What is in <image> this picture?" as a user turn)
 * for a conversation whose turns carry their images before a text */
static const char TEMPLATE[] =
    "{%- for m in messages -%}<|im_start|>{{ m.role + '\\n' }}"
    "{%- if m.content is string %}{{ m.content }}{% else %}{{ 'What is in' }}"
    "{%- for p in m.content %}{% if p.type == 'image' %}{{ ' <|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% else %}{{ ' ' + p.text }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor -%}"
    "{{ '<|im_start|>assistant\\n' }}";

static const char *const images[] = {"grad-97x61.png", "noise-131x91.png", "wide-640x37.jpg", "checks-128x128.png",
                                     "dots-100x90.png"};
#define N_IMAGES (int)(sizeof images / sizeof images[0])

typedef struct {
    char *bytes;
    size_t len;
} file;

static file load(const char *name) {
    char path[256];
    snprintf(path, sizeof path, VISION "%s", name);
    file f;
    f.bytes = read_file(path, &f.len);
    REQUIRE(f.bytes, "cannot read %s", path);
    return f;
}

static chat_engine *open_engine(ckpt_port port, const char *mmproj) {
    engine_config cfg = {.model_path = MODEL, .checkpoints = port, .threads = 2, .n_ctx = 2048, .mmproj_path = mmproj};
    char err[512];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    return e;
}

static gen_settings settings(int checkpoints) {
    gen_settings s;
    gen_settings_defaults(&s);
    s.chat_template = TEMPLATE;
    s.max_tokens = 8;
    s.ignore_eog = 1;
    s.checkpoints = checkpoints;
    return s;
}

static void append(void *ud, const char *t, size_t n) {
    char *buf = ud;
    strncat(buf, t, n < 1000 - strlen(buf) ? n : 1000 - strlen(buf));
}

/* runs msgs; the reply into text (1024 bytes) */
static int run(chat_engine *e, const chat_msg *msgs, int n, int checkpoints, char *text, gen_report *r, char *err) {
    gen_settings s = settings(checkpoints);
    text[0] = 0;
    return engine_run(e, msgs, n, &s, append, text, r, err, 512);
}

/* each fixture image as one user turn: mtmd's greedy tokens, mtmd's prompt length */
static void against_mtmd(chat_engine *e) {
    const tokenizer *tok = engine_model(e)->tok;
    for (int i = 0; i < N_IMAGES; i++) {
        char path[256], text[1024], err[512];
        snprintf(path, sizeof path, VISION "%.*s.json", (int)(strrchr(images[i], '.') - images[i]), images[i]);
        cJSON *j = read_json(path);
        REQUIRE(j, "cannot read %s", path);
        int n_greedy;
        int *greedy = json_ints(j, "greedy", &n_greedy);
        char want[1024];
        size_t n_want = 0;
        detok_stream ds; /* as the engine streams a reply: whole UTF-8 characters */
        detok_init(&ds, 0);
        for (int k = 0; k < n_greedy; k++) n_want += detok_push(tok, &ds, greedy[k], want + n_want, sizeof want - n_want - 1);
        n_want += detok_flush(&ds, want + n_want, sizeof want - n_want - 1);
        want[n_want] = 0;
        int rows = 0, n_text = 0;
        const cJSON *ch;
        cJSON_ArrayForEach(ch, cJSON_GetObjectItemCaseSensitive(j, "chunks")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(ch, "text");
            if (t) n_text += cJSON_GetArraySize(t);
            else rows += cJSON_GetObjectItemCaseSensitive(ch, "image_tokens")->valueint;
        }
        file img = load(images[i]);
        chat_image ci = {img.bytes, img.len};
        chat_msg m = {.role = "user", .content = "this picture?", .n_images = 1, .images = &ci};
        gen_report r;
        CHECK(run(e, &m, 1, 0, text, &r, err) == 0, "%s: %s", images[i], err);
        CHECK(!strcmp(text, want), "%s: the reply is \"%s\", llama-mtmd-cli's \"%s\"", images[i], text, want);
        CHECK(r.prompt_tokens == n_text + rows, "%s: %d prompt positions, mtmd's chunks hold %d", images[i],
              r.prompt_tokens, n_text + rows);
        CHECK(r.images == 1 && r.images_encoded == 1, "%s: %d images, %d encoded", images[i], r.images,
              r.images_encoded);
        printf("  %-20s %d prompt tokens (%d image rows): mtmd's %d greedy tokens\n", images[i], r.prompt_tokens, rows,
               n_greedy);
        free(greedy), free(img.bytes);
        cJSON_Delete(j);
    }
}

/* restores around images equal recomputing: e keeps checkpoints, fresh computes all */
static void reuse(chat_engine *e, chat_engine *fresh) {
    file a = load("noise-131x91.png"), b = load("grad-97x61.png");
    chat_image ia = {a.bytes, a.len}, ib = {b.bytes, b.len};
    char t1[1024], t2[1024], want[1024], err[512];
    gen_report r, rf;
    chat_msg conv[3] = {{.role = "user", .content = "this picture?", .n_images = 1, .images = &ia}};
    REQUIRE(run(e, conv, 1, 1, t1, &r, err) == 0, "%s", err);
    const int first_prompt = r.prompt_tokens;
    /* a follow-up: everything up to the new message comes back, nothing is encoded */
    conv[1] = (chat_msg){.role = "assistant", .content = t1};
    conv[2] = (chat_msg){.role = "user", .content = "And its colours?"};
    REQUIRE(run(e, conv, 3, 1, t2, &r, err) == 0, "%s", err);
    REQUIRE(run(fresh, conv, 3, 0, want, &rf, err) == 0, "%s", err);
    CHECK(!strcmp(t2, want), "the follow-up after a restore says \"%s\", computed anew \"%s\"", t2, want);
    CHECK(r.reused_tokens > first_prompt && r.images_encoded == 0,
          "the follow-up reused %d of %d tokens (the first turn had %d) and encoded %d images", r.reused_tokens,
          r.prompt_tokens, first_prompt, r.images_encoded);
    printf("  follow-up: reused %d of %d tokens, %d images encoded\n", r.reused_tokens, r.prompt_tokens,
           r.images_encoded);
    /* another question after the same image: restored from the checkpoint after the image */
    conv[0].content = "this one, in a word?";
    REQUIRE(run(e, conv, 1, 1, t2, &r, err) == 0, "%s", err);
    REQUIRE(run(fresh, conv, 1, 0, want, &rf, err) == 0, "%s", err);
    const int image_end = 23 + 12; /* 23 tokens before its 4 x 3 rows (test_vision's fixture) */
    CHECK(!strcmp(t2, want), "another question after a restored image says \"%s\", computed anew \"%s\"", t2, want);
    CHECK(r.reused_tokens == image_end && r.images_encoded == 0,
          "another question reused %d of %d tokens and encoded %d images", r.reused_tokens, r.prompt_tokens,
          r.images_encoded);
    printf("  another question about the image: reused %d of %d tokens\n", r.reused_tokens, r.prompt_tokens);
    /* the same text with another image: nothing past the image's start */
    conv[0] = (chat_msg){.role = "user", .content = "this picture?", .n_images = 1, .images = &ib};
    REQUIRE(run(e, conv, 1, 1, t2, &r, err) == 0, "%s", err);
    REQUIRE(run(fresh, conv, 1, 0, want, &rf, err) == 0, "%s", err);
    CHECK(!strcmp(t2, want), "another image says \"%s\", computed anew \"%s\"", t2, want);
    CHECK(r.reused_tokens <= 23 && r.images_encoded == 1,
          "another image reused %d tokens (its rows start at 23) and encoded %d", r.reused_tokens, r.images_encoded);
    printf("  the same text, another image: reused %d tokens\n", r.reused_tokens);
    free(a.bytes), free(b.bytes);
}

/* a burst of six conversations, three with images, submitted at once */
typedef struct {
    char text[1024];
    int done;
    char error[256];
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
} reply_box;

static void box_done(void *ud, const gen_report *r, const char *error) {
    (void)r;
    reply_box *b = ud;
    pthread_mutex_lock(b->mu);
    b->done = 1;
    snprintf(b->error, sizeof b->error, "%s", error ? error : "");
    pthread_cond_broadcast(b->cv);
    pthread_mutex_unlock(b->mu);
}

static void burst(chat_engine *e, chat_engine *fresh) {
    static const char *const texts[6] = {"this picture?", "Hello there", "this image?", "Count to five",
                                         "this view?", "Name a colour"};
    file img[3] = {load("checks-128x128.png"), load("dots-100x90.png"), load("wide-640x37.jpg")};
    chat_image ci[3];
    chat_msg m[6];
    for (int i = 0; i < 6; i++) {
        m[i] = (chat_msg){.role = "user", .content = texts[i]};
        if (i % 2 == 0) ci[i / 2] = (chat_image){img[i / 2].bytes, img[i / 2].len}, m[i].n_images = 1,
                        m[i].images = &ci[i / 2];
    }
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    reply_box box[6];
    gen_settings s = settings(1);
    for (int i = 0; i < 6; i++) {
        box[i] = (reply_box){.mu = &mu, .cv = &cv};
        gen_callbacks cb = {.on_text = append, .on_done = box_done, .ud = &box[i]};
        char err[512];
        /* on_text gets the box: its text is its first member */
        REQUIRE(engine_submit(e, &m[i], 1, &s, &cb, err, sizeof err) > 0, "%s", err);
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 6; i++)
        while (!box[i].done) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 6; i++) {
        char want[1024], err[512];
        gen_report r;
        REQUIRE(run(fresh, &m[i], 1, 0, want, &r, err) == 0, "%s", err);
        CHECK(!box[i].error[0] && !strcmp(box[i].text, want), "burst %d (%s): \"%s\" (%s), alone \"%s\"", i,
              m[i].n_images ? "image" : "text", box[i].text, box[i].error, want);
    }
    printf("  a burst of 6 conversations, 3 with images: each reply as alone\n");
    for (int i = 0; i < 3; i++) free(img[i].bytes);
}

static void refusals(chat_engine *e) {
    char err[512], text[1024];
    gen_report r;
    file png = load("grad-97x61.png");
    /* a truncated PNG: its header reads, its pixels do not */
    chat_image cut = {png.bytes, png.len / 2};
    CHECK(engine_check_image(e, cut.bytes, cut.len, err, sizeof err) == -1 && errno == EINVAL,
          "a truncated PNG is refused by the check");
    chat_msg m = {.role = "user", .content = "this picture?", .n_images = 1, .images = &cut};
    CHECK(run(e, &m, 1, 0, text, &r, err) == -1 && strstr(err, "image 1"), "a truncated PNG fails the request: %s",
          err);
    static const char not_image[] = "just some text, named .png";
    CHECK(engine_check_image(e, not_image, sizeof not_image, err, sizeof err) == -1 && errno == EINVAL &&
              strstr(err, "not an image"),
          "a text file is refused: %s", err);
    CHECK(engine_check_image(e, png.bytes, png.len, err, sizeof err) == 0, "the whole PNG passes the check: %s", err);
    /* a template that writes no image places: refused at the submit */
    gen_settings s = settings(0);
    s.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
    chat_image whole = {png.bytes, png.len};
    m.images = &whole;
    CHECK(engine_submit(e, &m, 1, &s, NULL, err, sizeof err) == 0 && errno == EINVAL && strstr(err, "placed 0"),
          "a template without image places: %s", err);
    /* a model without a projector */
    ckpt_port none = {0};
    chat_engine *blind = open_engine(none, NULL);
    CHECK(!engine_has_vision(blind) && engine_check_image(blind, png.bytes, png.len, err, sizeof err) == -1 &&
              errno == ENOTSUP,
          "no projector: the check says so");
    CHECK(run(blind, &m, 1, 0, text, &r, err) == -1 && strstr(err, "no vision projector"),
          "no projector: the request is refused: %s", err);
    engine_close(blind);
    /* a projector of another width */
    engine_config cfg = {.model_path = FIXTURES "qwen3-tiny-f32.gguf", .mmproj_path = MMPROJ, .threads = 2};
    chat_engine *other = engine_open(&cfg, err, sizeof err);
    CHECK(other == NULL || engine_model(other)->n_embd == 64, "another width is refused: %s", err);
    engine_close(other);
    free(png.bytes);
}

int main(void) {
    test_store ts;
    chat_engine *e = open_engine(test_store_open(&ts, NULL), MMPROJ);
    ckpt_port none = {0};
    chat_engine *fresh = open_engine(none, MMPROJ);
    CHECK(engine_has_vision(e), "the engine has the projector");
    against_mtmd(fresh);
    reuse(e, fresh);
    burst(e, fresh);
    refusals(e);
    engine_close(fresh);
    engine_close(e);
    test_store_close(&ts);
    pool_shutdown();
    return check_report("test_vision_chat");
}
