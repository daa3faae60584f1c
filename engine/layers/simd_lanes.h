/* simd_lanes.h - the layer math whose vector code is the same at every width, written
 * once over SIMD_LANES floats a vector. simd_avx2.c (8 lanes) and simd_avx512.c (16)
 * include it after their own exp_scale (exp_vec's last step, j * 2^n: the two sets round
 * it differently), dot_v (dot_ggml), expf_libm_pd (libm's expf of one register of
 * doubles) and transpose_across (the cross-lane half of a transpose), and get: exp_vec and
 * SiLU of one vector, SiLU and SwiGLU of n floats (n % 16 == 0), ReLU^2, mad_ggml's update,
 * one token of the transposed convolution, the delta rule's loop over the rows of the state,
 * libm's expf of one vector, Mamba-1's scan and half <-> float rows. Each is the arithmetic
 * of ops.c's scalar code, lane by lane. */
#if SIMD_LANES == 16
#define VF __m512
#define vf_load _mm512_loadu_ps
#define vf_store _mm512_storeu_ps
#define vf_set1 _mm512_set1_ps
#define vf_zero _mm512_setzero_ps
#define vf_mul _mm512_mul_ps
#define vf_max _mm512_max_ps
#define vf_add _mm512_add_ps
#define vf_sub _mm512_sub_ps
#define vf_div _mm512_div_ps
#define vf_fnmadd _mm512_fnmadd_ps
#define vf_fmadd _mm512_fmadd_ps
#define vf_unpacklo _mm512_unpacklo_ps
#define vf_unpackhi _mm512_unpackhi_ps
#define vf_shuffle _mm512_shuffle_ps
#define vf_lo_pd(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x)) /* the low half's floats as doubles */
#define vf_hi_pd(x) _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1))
#define vf_join(lo, hi) _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1)
#define vu_top_above(x, k) /* lanes whose bits 20-30 exceed k, one bit each */ \
    ((unsigned)_mm512_cmpgt_epu32_mask(_mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff)), _mm512_set1_epi32(k)))
#elif SIMD_LANES == 8
#define VF __m256
#define vf_load _mm256_loadu_ps
#define vf_store _mm256_storeu_ps
#define vf_set1 _mm256_set1_ps
#define vf_zero _mm256_setzero_ps
#define vf_mul _mm256_mul_ps
#define vf_max _mm256_max_ps
#define vf_add _mm256_add_ps
#define vf_sub _mm256_sub_ps
#define vf_div _mm256_div_ps
#define vf_fnmadd _mm256_fnmadd_ps
#define vf_fmadd _mm256_fmadd_ps
#define vf_unpacklo _mm256_unpacklo_ps
#define vf_unpackhi _mm256_unpackhi_ps
#define vf_shuffle _mm256_shuffle_ps
#define vf_lo_pd(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))
#define vf_hi_pd(x) _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))
#define vf_join(lo, hi) _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1)
#define vu_top_above(x, k)                                                                                   \
    ((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(                                    \
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff)), _mm256_set1_epi32(k)))))
#else
#error "SIMD_LANES is 8 or 16"
#endif

/* exp_vec (ops.h): the same fused multiply-adds, lane by lane */
INLINE VF exp_v(VF x) {
    const VF shift = vf_set1(0x1.8p23f);
    const VF z = vf_fmadd(x, vf_set1(0x1.715476p+0f), shift);
    const VF n = vf_sub(z, shift); /* round(x / ln 2) */
    const VF b = vf_fnmadd(n, vf_set1(0x1.7f7d1cp-20f), vf_fnmadd(n, vf_set1(0x1.62e4p-1f), x));
    const VF u = vf_mul(b, b);
    const VF j = vf_fmadd(vf_fmadd(vf_fmadd(vf_set1(0x1.0e4020p-7f), b, vf_set1(0x1.573e2ep-5f)), u,
                                   vf_fmadd(vf_set1(0x1.555e66p-3f), b, vf_set1(0x1.fffdb6p-2f))),
                          u, vf_fmadd(vf_set1(0x1.ffffecp-1f), b, vf_set1(1.0f)));
    return exp_scale(j, n);
}

/* x / (1 + exp_vec(-x)) */
INLINE VF silu_v(VF x) { return vf_div(x, vf_add(vf_set1(1.0f), exp_v(vf_sub(vf_zero(), x)))); }

static void op_silu(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += SIMD_LANES) vf_store(y + i, silu_v(vf_load(x + i)));
}

static void op_swiglu(float *y, const float *x, const float *g, int n) {
    for (int i = 0; i < n; i += SIMD_LANES) vf_store(y + i, vf_mul(silu_v(vf_load(x + i)), vf_load(g + i)));
}

/* y = relu(x)^2: VMAXPS returns its second operand when the first is not greater (NaN, -0),
 * so max(x, 0) is x > 0 ? x : 0 to the bit */
static void op_relu2(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + SIMD_LANES <= n; i += SIMD_LANES) {
        const VF v = vf_max(vf_load(x + i), vf_zero());
        vf_store(y + i, vf_mul(v, v));
    }
    for (; i < n; i++) y[i] = relu2(x[i]);
}

/* y += x * v: one fused multiply-add per element */
static void op_mad(float *y, const float *x, float v, int n) {
    const VF vv = vf_set1(v);
    int i = 0;
    for (; i + SIMD_LANES <= n; i += SIMD_LANES) vf_store(y + i, vf_fmadd(vf_load(x + i), vv, vf_load(y + i)));
    for (; i < n; i++) y[i] = fmaf(x[i], v, y[i]);
}

/* one token of conv_transposed (simd.h): per channel the K taps in one fused chain */
static void conv_row(float *y, const float *wt, const float *const *rows, int C, int K) {
    int ch = 0;
    for (; ch + SIMD_LANES <= C; ch += SIMD_LANES) {
        VF acc = vf_zero();
        for (int k = 0; k < K; k++) acc = vf_fmadd(vf_load(wt + (size_t)k * C + ch), vf_load(rows[k] + ch), acc);
        vf_store(y + ch, acc);
    }
    conv_row_ref(y, wt, rows, ch, C, K);
}

/* The delta rule (gdn_head_step, ops.h) one row of S^T at a time, as the reference:
 * decay the row, delta = (v[c] - row . k) * beta, row += k * delta, o[c] = row . q * scale. */
INLINE void gdn_rows(float *S, int dk, int dv, const float *q, const float *k, const float *v, float decay,
                     float beta, float scale, float *o) {
    const VF dec = vf_set1(decay);
    for (int c = 0; c < dv; c++) {
        float *s = S + (size_t)c * dk;
        int i = 0;
        for (; i + SIMD_LANES <= dk; i += SIMD_LANES) vf_store(s + i, vf_mul(vf_load(s + i), dec));
        for (; i < dk; i++) s[i] *= decay;
        const float delta = (v[c] - dot_v(s, k, dk)) * beta;
        op_mad(s, k, delta, dk);
        o[c] = dot_v(s, q, dk) * scale;
    }
}

/* libm's expf of SIMD_LANES floats, to the bit: each half's floats as doubles through the
 * set's expf_libm_pd (glibc's main path, simd_avx512.c tells it), and the lanes off that
 * path (|x| >= 88 or so, infinities, NaNs) through libm's expf itself, as glibc's own
 * special cases give */
INLINE VF expf_libm_v(VF x) {
    VF y = vf_join(expf_libm_pd(vf_lo_pd(x)), expf_libm_pd(vf_hi_pd(x)));
    const unsigned off = vu_top_above(x, EXPF_LIBM_TOP);
    if (off) {
        float v[SIMD_LANES], e[SIMD_LANES];
        vf_store(v, x);
        vf_store(e, y);
        for (int k = 0; k < SIMD_LANES; k++)
            if (off >> k & 1) e[k] = expf(v[k]);
        y = vf_load(e);
    }
    return y;
}

/* The first half of transposing SIMD_LANES rows r: u[4i + j] holds, in its 128-bit lane L,
 * column 4L + j of rows 4i..4i+3 (what is left is moving 128-bit lanes: transpose_across) */
INLINE void transpose_in_lanes(const VF *r, VF *u) {
    VF t[SIMD_LANES];
    for (int i = 0; i < SIMD_LANES / 2; i++) {
        t[2 * i] = vf_unpacklo(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = vf_unpackhi(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < SIMD_LANES / 4; i++) {
        u[4 * i] = vf_shuffle(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = vf_shuffle(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = vf_shuffle(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = vf_shuffle(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
}

/* The SIMD_LANES x SIMD_LANES floats r transposed in place */
INLINE void transpose_v(VF *r) {
    VF u[SIMD_LANES];
    transpose_in_lanes(r, u);
    transpose_across(u, r);
}

/* ssm_scan1 (ops.h) with a state of 16: SIMD_LANES channels at a time, one per lane, so
 * that each lane's sum runs over the state in element order as the reference's does,
 * without waiting on one channel's chain of fused multiply-adds. A channel's 16 state
 * values (and A's) are 16 / SIMD_LANES square blocks, transposed in, the state's back out;
 * the exponentials are expf_libm_v's, libm's to the bit. Other state sizes and the
 * channels left over take the reference. */
static void op_scan1(float *S, const float *A, const float *B, const float *C, const float *dt, const float *x,
                     float *y, int d0, int d1, int n) {
    int d = d0;
    for (; n == 16 && d + SIMD_LANES <= d1; d += SIMD_LANES) {
        float delta[SIMD_LANES];
        for (int k = 0; k < SIMD_LANES; k++) delta[k] = softplus(dt[d + k]);
        const VF dl = vf_load(delta), xdt = vf_mul(vf_load(x + d), dl);
        VF a[16], s[16];
        for (int h = 0; h < 16; h += SIMD_LANES) {
            for (int k = 0; k < SIMD_LANES; k++) {
                a[h + k] = vf_load(A + (size_t)(d + k) * 16 + h);
                s[h + k] = vf_load(S + (size_t)(d + k) * 16 + h);
            }
            transpose_v(a + h);
            transpose_v(s + h);
        }
        VF sum = vf_zero();
        for (int e = 0; e < 16; e++) {
            s[e] = vf_fmadd(s[e], expf_libm_v(vf_mul(dl, a[e])), vf_mul(vf_set1(B[e]), xdt));
            sum = vf_fmadd(s[e], vf_set1(C[e]), sum);
        }
        for (int h = 0; h < 16; h += SIMD_LANES) {
            transpose_v(s + h);
            for (int k = 0; k < SIMD_LANES; k++) vf_store(S + (size_t)(d + k) * 16 + h, s[h + k]);
        }
        vf_store(y + d, sum);
    }
    ssm_scan1_ref(S, A, B, C, dt, x, y, d, d1, n);
}

#undef VF
#undef vf_load
#undef vf_store
#undef vf_set1
#undef vf_zero
#undef vf_mul
#undef vf_max
#undef vf_add
#undef vf_sub
#undef vf_div
#undef vf_fnmadd
#undef vf_fmadd
#undef vf_unpacklo
#undef vf_unpackhi
#undef vf_shuffle
#undef vf_lo_pd
#undef vf_hi_pd
#undef vf_join
#undef vu_top_above

/* half <-> float rows (an F16 attention cache), the same F16C code in both sets: 8 at a
 * time, the tail through the scalar conversions; exact like quant.h's */
static void op_f16_to_f32(float *y, const uint16_t *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

static void op_f32_to_f16(uint16_t *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}
