/* random_rows.c - normal, constant and uniform rows from (seed, name, row): splitmix64
 * seeded by the name's FNV-1a hash and the row, Box-Muller for the normal values. */
#include <math.h>
#include <stdint.h>
#include <stddef.h>

#include "cli/synth/random_rows.h"

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) * 0x1.0p-53; }

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

void random_rows(void *ctx, const char *name, int64_t row0, int64_t n, int64_t len, float *out) {
    const init_spec *sp = ctx;
    for (int64_t r = 0; r < n; r++) {
        uint64_t s = sp->seed ^ hash_name(name) ^ (uint64_t)(row0 + r) * 0xd1342543de82ef95ULL;
        float *o = out + (size_t)r * (size_t)len;
        for (int64_t i = 0; i < len; i++) {
            switch (sp->kind) {
            case I_NORMAL:
                if (i + 1 < len) { /* Box-Muller, two values per draw */
                    double u = unif(&s), v = unif(&s), m = sqrt(-2 * log(u));
                    o[i] = (float)(m * cos(6.283185307179586 * v)) * sp->a;
                    o[i + 1] = (float)(m * sin(6.283185307179586 * v)) * sp->a;
                    i++;
                } else {
                    o[i] = (float)(sqrt(-2 * log(unif(&s))) * cos(6.283185307179586 * unif(&s))) * sp->a;
                }
                break;
            case I_CONST: o[i] = sp->a; break;
            case I_UNIFORM: o[i] = (float)(sp->a + (sp->b - sp->a) * unif(&s)); break;
            case I_DT_BIAS: { /* inverse softplus of a time step log-uniform in [a, b] */
                double dt = exp(log(sp->a) + (log(sp->b) - log(sp->a)) * unif(&s));
                o[i] = (float)(dt + log(-expm1(-dt)));
                break;
            }
            case I_A_RANGE_ROW: o[i] = -(float)(i + 1); break;
            }
        }
    }
}
