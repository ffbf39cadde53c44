/* radix_test.c: unit tests, numbered regressions, differential fuzz against
 * trivial models and allocation-failure injection for the radix library.
 *
 *   radix_test [seed [iterations]]   (or RADIX_TEST_SEED / RADIX_TEST_ITERS)
 *
 * Exit status 0 only when every CHECK held. Built twice by the Makefile:
 * optimised, and with ASan + UBSan (which also catch leaks on OOM paths).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix.h"

static int failures;
static int checks;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define U8(s) ((const uint8_t *)(s))

/* ---- failing allocator ----------------------------------------------------------- */
static long alloc_count;
static long fail_at = -1;
static void *test_alloc(size_t n) {
    alloc_count++;
    if (fail_at >= 0 && alloc_count == fail_at) return NULL;
    return malloc(n);
}
static void test_free(void *p) { free(p); }
static void fail_after(long k) { fail_at = alloc_count + k; }
static void fail_never(void) { fail_at = -1; }

/* ---- PRNG ------------------------------------------------------------------------- */
static uint64_t rng_state;
static uint64_t rnd(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
static size_t rndn(size_t n) { return (size_t)(rnd() % n); }

/* ---- helpers ---------------------------------------------------------------------- */
static char dump_a[1 << 16], dump_b[1 << 16];
static size_t tree_dump(const radix_tree *t, char *buf) {
    size_t len = 0;
    int rc = radix_tree_dump(t, buf, sizeof(dump_a) - 1, &len);
    CHECK(rc == RADIX_OK);
    buf[rc == RADIX_OK ? len : 0] = 0;
    return len;
}
static void topics_dump(const radix_topics *rt, int which, char *buf) {
    size_t len = 0;
    int rc = radix_topics_dump(rt, which, buf, sizeof(dump_a) - 1, &len);
    CHECK(rc == RADIX_OK);
    buf[rc == RADIX_OK ? len : 0] = 0;
}
static int ins(radix_tree *t, const char *k, uintptr_t v) {
    return radix_tree_insert(t, U8(k), strlen(k), (void *)v, NULL);
}
static int iter_is(radix_iter *it, const char *k) {
    size_t len;
    const uint8_t *p = radix_iter_key(it, &len);
    return p && len == strlen(k) && memcmp(p, k, len) == 0;
}

/* ---- unit: Layer A ---------------------------------------------------------------- */
static void unit_tree(void) {
    radix_tree *t = radix_tree_new();
    CHECK(t && radix_tree_nodes(t) == 1 && radix_tree_size(t) == 0);
    CHECK(ins(t, "foo", 1) == 1);
    CHECK(ins(t, "foobar", 2) == 1);
    CHECK(ins(t, "footer", 3) == 1);
    tree_dump(t, dump_a);
    CHECK(ins(t, "fox", 4) == 1);
    tree_dump(t, dump_b);
    CHECK(strcmp(dump_b, "(root)\n"
                         "  'f' \"o\"\n"
                         "    'o' \"\" =key\n"
                         "      'b' \"ar\" =key\n"
                         "      't' \"er\" =key\n"
                         "    'x' \"\" =key\n") == 0);
    CHECK(radix_tree_check(t, 1) == 0);
    void *v = NULL;
    CHECK(radix_tree_find(t, U8("fox"), 3, &v) == 1 && (uintptr_t)v == 4);
    CHECK(radix_tree_find(t, U8("fo"), 2, &v) == 0);
    CHECK(radix_tree_find(t, U8("foob"), 4, &v) == 0);
    CHECK(radix_tree_insert(t, U8("foo"), 3, (void *)9, &v) == 0 && (uintptr_t)v == 1);
    CHECK(radix_tree_try_insert(t, U8("foo"), 3, (void *)10, &v) == 0 && (uintptr_t)v == 9);
    CHECK(radix_tree_insert(t, U8("foo"), 3, (void *)1, NULL) == 0);
    CHECK(radix_tree_remove(t, U8("fox"), 3, &v) == 1 && (uintptr_t)v == 4);
    tree_dump(t, dump_b);
    CHECK(strcmp(dump_a, dump_b) == 0); /* re-compressed back to the same shape */
    CHECK(radix_tree_check(t, 1) == 0);
    CHECK(radix_tree_remove(t, U8("fox"), 3, NULL) == 0);
    /* empty key and a key that is a prefix of a compressed segment */
    CHECK(ins(t, "", 7) == 1);
    CHECK(ins(t, "foot", 8) == 1);
    CHECK(radix_tree_find(t, U8(""), 0, &v) == 1 && (uintptr_t)v == 7);
    CHECK(radix_tree_check(t, 1) == 0);
    CHECK(radix_tree_has_prefix(t, U8("foote"), 5) == 1);
    CHECK(radix_tree_has_prefix(t, U8("fooz"), 4) == 0);
    CHECK(radix_tree_remove_prefix(t, U8("foot"), 4, NULL, NULL) == 2);
    CHECK(radix_tree_size(t) == 3 && radix_tree_check(t, 1) == 0);
    radix_tree *c = radix_tree_copy(t);
    CHECK(c && radix_tree_size(c) == 3);
    tree_dump(t, dump_a);
    tree_dump(c, dump_b);
    CHECK(strcmp(dump_a, dump_b) == 0);
    CHECK(radix_tree_remove_prefix(t, U8(""), 0, NULL, NULL) == 3);
    CHECK(radix_tree_nodes(t) == 1 && radix_tree_size(t) == 0 && radix_tree_check(t, 1) == 0);
    radix_tree *fresh = radix_tree_new();
    CHECK(radix_tree_bytes(t) == radix_tree_bytes(fresh));
    radix_tree_free(fresh, NULL, NULL);
    CHECK(radix_tree_size(c) == 3 && radix_tree_check(c, 1) == 0);
    radix_tree_free(c, NULL, NULL);
    /* cursors */
    ins(t, "ab/cd", 1);
    ins(t, "ab/ce", 2);
    radix_pos p = radix_tree_root(t);
    CHECK(radix_pos_walk(t, &p, U8("ab/"), 3) == 1);
    radix_pos q = p;
    CHECK(radix_pos_walk(t, &q, U8("x"), 1) == 0 && q.node == p.node && q.off == p.off);
    CHECK(radix_pos_walk(t, &q, U8("cd"), 2) == 1 && radix_pos_is_key(&q, &v) && (uintptr_t)v == 1);
    CHECK(radix_pos_has_children(&p) && !radix_pos_has_children(&q));
    CHECK(radix_pos_is_key(&p, NULL) == 0);
    radix_tree_free(t, NULL, NULL);
}

static void unit_iter(void) {
    radix_tree *t = radix_tree_new();
    const char *keys[] = {"a", "ab", "abc", "b", "ba"};
    for (size_t i = 0; i < 5; i++) ins(t, keys[i], i);
    radix_iter *it = radix_iter_new(t);
    CHECK(radix_iter_seek(it, RADIX_SEEK_FIRST, NULL, 0) == 1 && radix_iter_next(it) == 1 &&
          iter_is(it, "a"));
    for (size_t i = 1; i < 5; i++) CHECK(radix_iter_next(it) == 1 && iter_is(it, keys[i]));
    CHECK(radix_iter_next(it) == 0);
    CHECK(radix_iter_seek(it, RADIX_SEEK_LAST, NULL, 0) == 1);
    for (int i = 4; i >= 0; i--) CHECK(radix_iter_prev(it) == 1 && iter_is(it, keys[i]));
    CHECK(radix_iter_prev(it) == 0);
    struct {
        int op;
        const char *k;
        const char *want;
    } cases[] = {
        {RADIX_SEEK_GE, "aa", "ab"},  {RADIX_SEEK_GT, "ab", "abc"}, {RADIX_SEEK_LE, "abz", "abc"},
        {RADIX_SEEK_LT, "a", NULL},   {RADIX_SEEK_LE, "b", "b"},    {RADIX_SEEK_LT, "b", "abc"},
        {RADIX_SEEK_EQ, "ab", "ab"},  {RADIX_SEEK_EQ, "aa", NULL},  {RADIX_SEEK_GE, "bb", NULL},
        {RADIX_SEEK_LE, "", NULL},    {RADIX_SEEK_GE, "", "a"},     {RADIX_SEEK_LT, "zz", "ba"},
        {RADIX_SEEK_GT, "abc", "b"},  {RADIX_SEEK_LE, "aZ", "a"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = radix_iter_seek(it, cases[i].op, U8(cases[i].k), strlen(cases[i].k));
        if (cases[i].want) {
            CHECK(rc == 1 && radix_iter_next(it) == 1 && iter_is(it, cases[i].want));
        } else {
            CHECK(rc == 0 && radix_iter_next(it) == 0);
        }
    }
    /* R10: an empty prefix (NULL, 0) iterates everything (UBSan: no memcmp on NULL). */
    CHECK(radix_iter_seek_prefix(it, NULL, 0) == 1 && radix_iter_next(it) == 1 && iter_is(it, "a"));
    CHECK(radix_iter_next(it) == 1 && iter_is(it, "ab"));
    CHECK(radix_iter_seek_prefix(it, U8("ab"), 2) == 1);
    CHECK(radix_iter_next(it) == 1 && iter_is(it, "ab"));
    radix_iter *cp = radix_iter_new(t);
    CHECK(radix_iter_copy(cp, it) == RADIX_OK);
    CHECK(radix_iter_next(it) == 1 && iter_is(it, "abc"));
    CHECK(radix_iter_next(it) == 0);
    CHECK(radix_iter_next(cp) == 1 && iter_is(cp, "abc"));
    radix_iter_free(cp);
    CHECK(radix_iter_seek(it, RADIX_SEEK_FIRST, NULL, 0) == 1);
    ins(t, "zzz", 9);
    CHECK(radix_iter_next(it) == RADIX_E_STALE);
    CHECK(radix_iter_stale(it) == 1 && radix_iter_value(it) == NULL);
    CHECK(radix_iter_key(it, NULL) == NULL);
    radix_iter_free(it);
    radix_tree_free(t, NULL, NULL);
}

/* ---- regressions (one line each) -------------------------------------------------- */
static int match_ids(radix_topics *rt, radix_match_ctx *m, const char *topic, uint32_t flags,
                     uint64_t *out, size_t *n) {
    return radix_match(rt, m, U8(topic), strlen(topic), flags, out, 64, n);
}

static void regressions(void) {
    radix_topics *rt = radix_topics_new(RADIX_F_STRICT_UTF8 | RADIX_F_INVERSION);
    radix_match_ctx *m = radix_match_ctx_new(1);
    uint64_t out[64];
    size_t n = 99;
    /* R1 (D1): "foo/bar" must not match "foobar" (keys keep the '/'). */
    radix_subscribe(rt, U8("foo/bar"), 7, 1, 0);
    CHECK(match_ids(rt, m, "foobar", 0, out, &n) == RADIX_OK && n == 0);
    /* R2 (D2): "+/#" matches the parent level after a '+' at the last level. */
    radix_subscribe(rt, U8("+/#"), 3, 10, 0);
    CHECK(match_ids(rt, m, "foo", 0, out, &n) == RADIX_OK && n == 1 && out[0] == 10);
    /* R3 (D3): a failed probe inside a compressed node must not crash. */
    radix_subscribe(rt, U8("+/site6/x"), 9, 1, 0);
    radix_subscribe(rt, U8("+/site32/#"), 10, 2, 0);
    CHECK(match_ids(rt, m, "r0/site24/y", 0, out, &n) == RADIX_OK && n == 1 && out[0] == 10);
    /* R4 (D4): the empty topic is rejected, never matched. */
    CHECK(match_ids(rt, m, "", 0, out, &n) == RADIX_E_EMPTY && n == 0);
    /* R5 (D4): "$share/x" without a filter is a syntax error, not a NULL dereference. */
    CHECK(radix_subscribe(rt, U8("$share/x"), 8, 1, 0) == RADIX_E_SHARE);
    /* R6 (D5): 0xEF is a UTF-8 lead byte; filters using it do not collide with shares. */
    CHECK(radix_subscribe(rt, U8("\xef\xbc\xa1"), 3, 11, 0) == RADIX_OK);
    CHECK(match_ids(rt, m, "\xef\xbc\xa1", 0, out, &n) == RADIX_OK && n == 2 && out[1] == 11);
    /* R7 (D4): topics longer than 256 bytes / 32 levels are not truncated. */
    char big[600];
    for (int i = 0; i < 300; i++) {
        big[2 * i] = 'a';
        big[2 * i + 1] = '/';
    }
    big[599] = 0;
    big[598] = 'z';
    CHECK(radix_subscribe(rt, U8(big), strlen(big), 12, 0) == RADIX_OK);
    big[598] = 'y';
    CHECK(match_ids(rt, m, big, 0, out, &n) == RADIX_OK && n == 1 && out[0] == 10);
    big[598] = 'z';
    CHECK(match_ids(rt, m, big, 0, out, &n) == RADIX_OK && n == 2 && out[1] == 12);
    /* R8: E_BUFFER keeps the result so fetch returns the same shared pick. */
    radix_subscribe(rt, U8("$share/g/q"), 10, 1, 0);
    radix_subscribe(rt, U8("$share/g/q"), 10, 2, 0);
    radix_subscribe(rt, U8("$share/g/q"), 10, 3, 0);
    CHECK(radix_match(rt, m, U8("q"), 1, 0, out, 0, &n) == RADIX_E_BUFFER && n == 2);
    CHECK(radix_match_fetch(m, out, 64, &n) == RADIX_OK && n == 2 && out[1] == 10);
    /* R11: round robin visits every member of a group in turn, also after the list grew. */
    radix_subscribe(rt, U8("$share/g/q"), 10, 4, 0);
    uint64_t seen = 0;
    for (int i = 0; i < 8; i++) {
        CHECK(radix_match(rt, m, U8("q"), 1, RADIX_SHARED_ROUND_ROBIN, out, 64, &n) == RADIX_OK);
        CHECK(n == 2 && out[0] >= 1 && out[0] <= 4);
        if (n == 2 && out[0] >= 1 && out[0] <= 4) seen |= 1u << out[0];
    }
    CHECK(seen == 0x1e);
    /* R9: an outbound alias number is not a pointer when the index is freed. */
    CHECK(radix_alias_set(rt, 1, RADIX_ALIAS_OUT, 1, 2, U8("a/b"), 3) == RADIX_OK);
    CHECK(radix_topics_check(rt) == 0);
    radix_match_ctx_free(m);
    radix_topics_free(rt);
}

/* ---- differential fuzz: Layer A vs a sorted array ---------------------------------- */
#define MK 8
typedef struct {
    uint8_t k[MK];
    size_t len;
    uintptr_t v;
} mkey;
static mkey model[4096];
static size_t nmodel;

static int kcmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl) {
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}
/* index of the first model key >= k */
static size_t mlower(const uint8_t *k, size_t len) {
    size_t i = 0;
    while (i < nmodel && kcmp(model[i].k, model[i].len, k, len) < 0) i++;
    return i;
}
static void rand_key(uint8_t *k, size_t *len) {
    static const uint8_t alpha[] = {'a', 'b', 'c', '/', 0x00, 0xff};
    *len = rndn(MK);
    for (size_t i = 0; i < *len; i++) k[i] = alpha[rndn(sizeof(alpha))];
}

static void compare_all(radix_tree *t) {
    CHECK(radix_tree_size(t) == nmodel);
    radix_iter *it = radix_iter_new(t);
    CHECK(it != NULL);
    if (!it) return;
    size_t i = 0;
    radix_iter_seek(it, RADIX_SEEK_FIRST, NULL, 0);
    while (radix_iter_next(it) == 1) {
        size_t len;
        const uint8_t *k = radix_iter_key(it, &len);
        CHECK(i < nmodel && kcmp(k, len, model[i].k, model[i].len) == 0 &&
              (uintptr_t)radix_iter_value(it) == model[i].v);
        i++;
    }
    CHECK(i == nmodel);
    radix_iter_seek(it, RADIX_SEEK_LAST, NULL, 0);
    while (radix_iter_prev(it) == 1) {
        size_t len;
        const uint8_t *k = radix_iter_key(it, &len);
        CHECK(i > 0 && kcmp(k, len, model[i - 1].k, model[i - 1].len) == 0);
        i--;
    }
    CHECK(i == 0);
    /* random seeks against the model */
    for (int s = 0; s < 8; s++) {
        uint8_t k[MK];
        size_t len;
        rand_key(k, &len);
        size_t lo = mlower(k, len);
        int eq = lo < nmodel && kcmp(model[lo].k, model[lo].len, k, len) == 0;
        int op = (int)rndn(5) + RADIX_SEEK_EQ;
        long want;
        switch (op) {
        case RADIX_SEEK_EQ: want = eq ? (long)lo : -1; break;
        case RADIX_SEEK_GE: want = lo < nmodel ? (long)lo : -1; break;
        case RADIX_SEEK_GT: want = lo + (size_t)eq < nmodel ? (long)(lo + (size_t)eq) : -1; break;
        case RADIX_SEEK_LE: want = eq ? (long)lo : (long)lo - 1; break;
        default: want = (long)lo - 1; break;
        }
        int rc = radix_iter_seek(it, op, k, len);
        if (want < 0) {
            CHECK(rc == 0);
        } else {
            size_t kl;
            CHECK(rc == 1 && radix_iter_next(it) == 1);
            const uint8_t *got = radix_iter_key(it, &kl);
            CHECK(got && kcmp(got, kl, model[want].k, model[want].len) == 0);
        }
    }
    radix_iter_free(it);
    CHECK(radix_tree_check(t, 1) == 0);
}

static void fuzz_tree(long iters) {
    radix_tree *t = radix_tree_new();
    nmodel = 0;
    for (long op = 0; op < iters; op++) {
        uint8_t k[MK];
        size_t len;
        rand_key(k, &len);
        size_t lo = mlower(k, len);
        int present = lo < nmodel && kcmp(model[lo].k, model[lo].len, k, len) == 0;
        size_t r = rndn(100);
        if (r < 55) {
            uintptr_t v = (uintptr_t)rnd();
            int rc = radix_tree_insert(t, k, len, (void *)v, NULL);
            CHECK(rc == (present ? 0 : 1));
            if (!present && nmodel < 4096) {
                memmove(model + lo + 1, model + lo, (nmodel - lo) * sizeof(mkey));
                memcpy(model[lo].k, k, len);
                model[lo].len = len;
                nmodel++;
            }
            model[lo].v = v;
        } else if (r < 65) {
            void *old = NULL;
            int rc = radix_tree_try_insert(t, k, len, (void *)(uintptr_t)7, &old);
            CHECK(rc == (present ? 0 : 1));
            if (present) {
                CHECK((uintptr_t)old == model[lo].v);
            } else {
                memmove(model + lo + 1, model + lo, (nmodel - lo) * sizeof(mkey));
                memcpy(model[lo].k, k, len);
                model[lo].len = len;
                model[lo].v = 7;
                nmodel++;
            }
        } else if (r < 95) {
            void *old = NULL;
            int rc = radix_tree_remove(t, k, len, &old);
            CHECK(rc == present);
            if (present) {
                CHECK((uintptr_t)old == model[lo].v);
                memmove(model + lo, model + lo + 1, (nmodel - lo - 1) * sizeof(mkey));
                nmodel--;
            }
        } else {
            size_t plen = len > 2 ? 2 : len;
            size_t removed = radix_tree_remove_prefix(t, k, plen, NULL, NULL);
            size_t w = 0, cnt = 0;
            for (size_t i = 0; i < nmodel; i++) {
                if (model[i].len >= plen && memcmp(model[i].k, k, plen) == 0) {
                    cnt++;
                } else {
                    model[w++] = model[i];
                }
            }
            nmodel = w;
            CHECK(removed == cnt);
        }
        if (op % 97 == 0) compare_all(t);
        if (failures) break;
    }
    compare_all(t);
    while (nmodel) {
        CHECK(radix_tree_remove(t, model[nmodel - 1].k, model[nmodel - 1].len, NULL) == 1);
        nmodel--;
    }
    CHECK(radix_tree_nodes(t) == 1 && radix_tree_check(t, 1) == 0);
    radix_tree_free(t, NULL, NULL);
}

/* ---- differential fuzz: Layer B vs brute force ------------------------------------ */
typedef struct {
    char f[64];
    uint64_t client;
} msub;
#define MAXSUBS 8192
static msub subs[MAXSUBS];
static size_t nsubs;

static const char *lv_filter[] = {"a", "b", "", "+", "$x", "\xc3\xa9"};
static const char *lv_topic[] = {"a", "b", "", "$x", "\xc3\xa9"};

/* "" and "$share/gN/" are invalid filters: never generated */
static int inner_empty_ok(const char *f) {
    if (!f[0]) return 0;
    if (strncmp(f, "$share/", 7) == 0) return strchr(f + 7, '/')[1] != 0;
    return 1;
}
static void rand_filter(char *out) {
again:
    out[0] = 0;
    if (rndn(6) == 0) strcat(out, rndn(2) ? "$share/g0/" : "$share/g1/");
    size_t n = 1 + rndn(4);
    for (size_t i = 0; i < n; i++) {
        if (i) strcat(out, "/");
        if (i == n - 1 && rndn(4) == 0) {
            strcat(out, "#");
        } else {
            strcat(out, lv_filter[rndn(6)]);
        }
    }
    if (!inner_empty_ok(out)) goto again;
}
static void rand_topic(char *out) {
    out[0] = 0;
    size_t n = 1 + rndn(4);
    for (size_t i = 0; i < n; i++) {
        if (i) strcat(out, "/");
        strcat(out, lv_topic[rndn(5)]);
    }
}
/* brute force MQTT matching of an inner filter against a topic */
static int brute_match(const char *f, const char *t) {
    if (t[0] == '$' && (f[0] == '+' || f[0] == '#')) return 0;
    const char *fp = f, *tp = t;
    for (;;) {
        const char *fe = strchr(fp, '/');
        size_t fl = fe ? (size_t)(fe - fp) : strlen(fp);
        if (fl == 1 && fp[0] == '#') return 1;
        if (!tp) return 0;
        const char *te = strchr(tp, '/');
        size_t tl = te ? (size_t)(te - tp) : strlen(tp);
        if (!(fl == 1 && fp[0] == '+') && (fl != tl || memcmp(fp, tp, fl) != 0)) return 0;
        tp = te ? te + 1 : NULL;
        if (!fe) return tp == NULL;
        fp = fe + 1;
    }
}
static const char *inner(const char *f) {
    if (strncmp(f, "$share/", 7) == 0) return strchr(f + 7, '/') + 1;
    return f;
}
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void fuzz_topics(long iters) {
    radix_topics *rt = radix_topics_new(RADIX_F_STRICT_UTF8 | RADIX_F_INVERSION);
    radix_match_ctx *m = radix_match_ctx_new(rnd());
    size_t empty_bytes = radix_topics_bytes(rt);
    nsubs = 0;
    uint64_t out[1024], want[1024], cl[1024], hd[1024];
    uint32_t gr[1024];
    for (long op = 0; op < iters; op++) {
        char f[64];
        rand_filter(f);
        uint64_t c = 1 + rndn(5);
        size_t at = nsubs;
        for (size_t i = 0; i < nsubs; i++)
            if (subs[i].client == c && strcmp(subs[i].f, f) == 0) at = i;
        if (rndn(2) && nsubs < MAXSUBS) {
            int rc = radix_subscribe(rt, U8(f), strlen(f), c, c * 100);
            CHECK(rc == (at < nsubs ? RADIX_REPLACED : RADIX_OK));
            if (at == nsubs) {
                strcpy(subs[nsubs].f, f);
                subs[nsubs++].client = c;
            }
        } else {
            int rc = radix_unsubscribe(rt, U8(f), strlen(f), c);
            CHECK(rc == (at < nsubs ? RADIX_OK : RADIX_NOT_FOUND));
            if (at < nsubs) subs[at] = subs[--nsubs];
        }
        if (radix_topics_subscriptions(rt) != nsubs) fprintf(stderr, "op %ld f=%s c=%llu %zu vs %zu\n", op, f, (unsigned long long)c, radix_topics_subscriptions(rt), nsubs);
        CHECK(radix_topics_subscriptions(rt) == nsubs);
        char t[64];
        rand_topic(t);
        size_t nw = 0, nent = 0;
        for (size_t i = 0; i < nsubs; i++) {
            if (brute_match(inner(subs[i].f), t)) {
                want[nw++] = subs[i].client;
                nent++;
            }
        }
        qsort(want, nw, sizeof(uint64_t), cmp_u64);
        size_t d = 0;
        for (size_t i = 0; i < nw; i++)
            if (!d || want[d - 1] != want[i]) want[d++] = want[i];
        size_t n = 0;
        int rc = radix_match(rt, m, U8(t), strlen(t), RADIX_SHARED_ALL, out, 1024, &n);
        if (t[0] == 0) {
            CHECK(rc == RADIX_E_EMPTY);
            continue;
        }
        CHECK(rc == RADIX_OK && n == d && memcmp(out, want, d * 8) == 0);
        rc = radix_match_detailed(rt, m, U8(t), strlen(t), RADIX_SHARED_ALL, cl, hd, gr, 1024, &n);
        CHECK(rc == RADIX_OK && n == nent);
        for (size_t i = 0; i < n; i++) CHECK(hd[i] == cl[i] * 100 && (i == 0 || cl[i - 1] <= cl[i]));
        if (failures) break;
    }
    CHECK(radix_topics_check(rt) == 0);
    for (uint64_t c = 1; c <= 5; c++) radix_unsubscribe_all(rt, c, NULL);
    CHECK(radix_topics_subscriptions(rt) == 0 && radix_topics_filters(rt) == 0);
    CHECK(radix_topics_nodes(rt) == 1 && radix_topics_bytes(rt) == empty_bytes);
    radix_match_ctx_free(m);
    radix_topics_free(rt);
}

/* ---- allocation-failure injection ------------------------------------------------- */
static void oom_tree(void) {
    static const char *base[] = {"foo", "foobar", "footer", "x", "xyz/1", "xyz/2"};
    static const char *add[] = {"fox", "foob", "foobarbaz", "a", "xyz/3", "fo", "zzzz"};
    for (size_t a = 0; a < sizeof(add) / sizeof(add[0]); a++) {
        for (long k = 1;; k++) {
            radix_tree *t = radix_tree_new();
            for (size_t i = 0; i < 6; i++) ins(t, base[i], i + 1);
            tree_dump(t, dump_a);
            size_t bytes = radix_tree_bytes(t);
            fail_after(k);
            int rc = ins(t, add[a], 99);
            fail_never();
            if (rc == RADIX_E_NOMEM) {
                tree_dump(t, dump_b);
                CHECK(strcmp(dump_a, dump_b) == 0 && radix_tree_bytes(t) == bytes);
                CHECK(radix_tree_check(t, 1) == 0);
                radix_tree_free(t, NULL, NULL);
                continue;
            }
            CHECK(rc == 1 && radix_tree_check(t, 1) == 0);
            /* removal never fails, even when every allocation fails */
            for (long j = 1; j < 6; j++) {
                fail_after(j);
                CHECK(radix_tree_remove(t, U8(base[j - 1]), strlen(base[j - 1]), NULL) == 1);
                fail_never();
                int crc = radix_tree_check(t, 0);
                if (crc) fprintf(stderr, "check after OOM remove of %s: %d\n", base[j - 1], crc);
                CHECK(crc == 0);
            }
            /* remove_prefix under OOM: completes, tree stays valid */
            size_t before = radix_tree_size(t);
            fail_after(1);
            size_t gone = radix_tree_remove_prefix(t, U8("xyz/"), 4, NULL, NULL);
            fail_never();
            CHECK(radix_tree_size(t) == before - gone && radix_tree_check(t, 0) == 0);
            CHECK(radix_tree_has_prefix(t, U8("xyz/"), 4) == 0);
            radix_tree *c = NULL;
            for (long j = 1; !c; j++) {
                fail_after(j);
                c = radix_tree_copy(t);
                fail_never();
            }
            CHECK(radix_tree_size(c) == radix_tree_size(t));
            radix_tree_free(c, NULL, NULL);
            radix_tree_free(t, NULL, NULL);
            break;
        }
    }
}

static radix_topics *seeded_topics(void) {
    static const char *f[] = {"foo/bar", "foo/bar/", "$share/baz/foo/bar", "+/bar", "foo/#",
                              "$SYS/foo/#"};
    radix_topics *rt = radix_topics_new(RADIX_F_STRICT_UTF8 | RADIX_F_INVERSION);
    for (size_t i = 0; i < 6; i++) radix_subscribe(rt, U8(f[i]), strlen(f[i]), i + 1, i);
    radix_subscribe(rt, U8("foo/bar"), 7, 9, 0);
    return rt;
}

static void oom_topics(void) {
    static const char *add[] = {"foo/bar", "foo/baz", "$share/baz/foo/bar", "$share/q/foo/bar",
                                "a/b/c/d/e/f", "foo/#"};
    for (size_t a = 0; a < sizeof(add) / sizeof(add[0]); a++) {
        for (long k = 1;; k++) {
            radix_topics *rt = seeded_topics();
            topics_dump(rt, 0, dump_a);
            size_t subs0 = radix_topics_subscriptions(rt), bytes = radix_topics_bytes(rt);
            fail_after(k);
            int rc = radix_subscribe(rt, U8(add[a]), strlen(add[a]), 50, 1);
            fail_never();
            if (rc == RADIX_E_NOMEM) {
                topics_dump(rt, 0, dump_b);
                CHECK(strcmp(dump_a, dump_b) == 0);
                CHECK(radix_topics_subscriptions(rt) == subs0 && radix_topics_bytes(rt) == bytes);
                CHECK(radix_topics_check(rt) == 0);
                radix_topics_free(rt);
                continue;
            }
            CHECK(rc == RADIX_OK && radix_topics_subscriptions(rt) == subs0 + 1);
            /* aliases under OOM */
            radix_alias_set(rt, 50, RADIX_ALIAS_OUT, 1, 5, U8("t/1"), 3);
            radix_alias_set(rt, 50, RADIX_ALIAS_OUT, 2, 5, U8("t/2"), 3);
            topics_dump(rt, 1, dump_a);
            for (long j = 1;; j++) {
                fail_after(j);
                int arc = radix_alias_set(rt, 50, RADIX_ALIAS_OUT, 1, 5, U8("t/2"), 3);
                fail_never();
                if (arc == RADIX_E_NOMEM) {
                    topics_dump(rt, 1, dump_b);
                    CHECK(strcmp(dump_a, dump_b) == 0);
                    continue;
                }
                CHECK(arc == RADIX_OK);
                uint16_t al = 0;
                CHECK(radix_alias_of_topic(rt, 50, RADIX_ALIAS_OUT, U8("t/2"), 3, &al) == RADIX_OK &&
                      al == 1);
                CHECK(radix_alias_of_topic(rt, 50, RADIX_ALIAS_OUT, U8("t/1"), 3, &al) ==
                      RADIX_NOT_FOUND);
                break;
            }
            /* a fresh match context under OOM: fails cleanly, then works */
            uint64_t out[32];
            size_t n = 0, want_n = 0;
            radix_match_ctx *ref = radix_match_ctx_new(5);
            CHECK(radix_match(rt, ref, U8("foo/bar"), 7, 0, out, 32, &want_n) == RADIX_OK);
            CHECK(want_n >= 5);
            radix_match_ctx_free(ref);
            for (long j = 1;; j++) {
                fail_after(j);
                radix_match_ctx *m = radix_match_ctx_new(5);
                int mrc = m ? radix_match(rt, m, U8("foo/bar"), 7, 0, out, 32, &n) : RADIX_E_NOMEM;
                fail_never();
                radix_match_ctx_free(m);
                if (mrc == RADIX_E_NOMEM) continue;
                CHECK(mrc == RADIX_OK && n == want_n);
                break;
            }
            for (long j = 1;; j++) {
                fail_after(j);
                size_t nr = 0;
                int urc = radix_unsubscribe_all(rt, 50, &nr);
                fail_never();
                CHECK(radix_topics_check(rt) == 0);
                if (urc == RADIX_E_NOMEM) {
                    CHECK(radix_topics_subscriptions(rt) == subs0 + 1);
                    continue;
                }
                CHECK(urc == RADIX_OK && nr == 1 && radix_topics_subscriptions(rt) == subs0);
                break;
            }
            radix_topics_free(rt);
            break;
        }
    }
}

static void oom_retained(void) {
    for (long k = 1;; k++) {
        radix_retained *r = NULL;
        fail_after(k);
        r = radix_retained_new(RADIX_F_STRICT_UTF8);
        int rc = r ? radix_retained_set(r, U8("a/b/c"), 5, 1) : RADIX_E_NOMEM;
        if (rc == RADIX_OK) rc = radix_retained_set(r, U8("a/x/c"), 5, 2);
        uint64_t out[4];
        size_t n = 0;
        if (rc == RADIX_OK) rc = radix_retained_match(r, U8("a/+/c"), 5, out, 4, &n);
        fail_never();
        if (rc == RADIX_E_NOMEM) {
            CHECK(!r || radix_retained_count(r) <= 2);
            radix_retained_free(r);
            continue;
        }
        CHECK(rc == RADIX_OK && n == 2);
        radix_retained_free(r);
        break;
    }
}

/* ---- retained index vs brute force ------------------------------------------------ */
static void fuzz_retained(long iters) {
    radix_retained *r = radix_retained_new(RADIX_F_STRICT_UTF8);
    static char topics[1024][64]; /* 780 distinct topics exist */
    size_t nt = 0;
    for (long op = 0; op < iters; op++) {
        char t[64];
        rand_topic(t);
        if (!t[0]) continue;
        size_t at = nt;
        for (size_t i = 0; i < nt; i++)
            if (strcmp(topics[i], t) == 0) at = i;
        if (rndn(4)) {
            int rc = radix_retained_set(r, U8(t), strlen(t), at < nt ? at : nt);
            CHECK(rc == (at < nt ? RADIX_REPLACED : RADIX_OK));
            if (at == nt) strcpy(topics[nt++], t);
        } else if (at < nt) {
            /* remove by swapping in the last topic and re-keying its handle */
            CHECK(radix_retained_remove(r, U8(t), strlen(t), NULL) == RADIX_OK);
            nt--;
            if (at != nt) {
                memmove(topics[at], topics[nt], sizeof(topics[at]));
                radix_retained_set(r, U8(topics[at]), strlen(topics[at]), at);
            }
        }
        CHECK(radix_retained_count(r) == nt);
        char f[64];
        rand_filter(f);
        static uint64_t out[1024];
        size_t n = 0;
        CHECK(radix_retained_match(r, U8(f), strlen(f), out, 1024, &n) == RADIX_OK);
        qsort(out, n, 8, cmp_u64);
        size_t w = 0;
        int ok = 1;
        for (size_t i = 0; i < nt; i++)
            if (brute_match(inner(f), topics[i])) {
                if (w >= n) ok = 0;
                w++;
            }
        CHECK(ok && w == n);
        for (size_t i = 0; ok && i < n; i++) CHECK(out[i] < nt && brute_match(inner(f), topics[out[i]]));
        if (failures) break;
    }
    radix_retained_free(r);
}

int main(int argc, char **argv) {
    const char *se = getenv("RADIX_TEST_SEED"), *it = getenv("RADIX_TEST_ITERS");
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : se ? strtoull(se, NULL, 0) : 20261121;
    long iters = argc > 2 ? strtol(argv[2], NULL, 0) : it ? strtol(it, NULL, 0) : 20000;
    rng_state = seed ? seed : 1;
    radix_set_allocator(test_alloc, test_free);
    unit_tree();
    unit_iter();
    regressions();
    fuzz_tree(iters);
    fuzz_topics(iters / 4);
    fuzz_retained(iters / 4);
    oom_tree();
    oom_topics();
    oom_retained();
    printf("radix_test: seed %llu, %ld iterations, %d checks, %d failures\n",
           (unsigned long long)seed, iters, checks, failures);
    return failures ? 1 : 0;
}
