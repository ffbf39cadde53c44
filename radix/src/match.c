/* match.c: the normative matching algorithm (spec 6.2.3) and the shared
 * subscription policies (6.2.4).
 *
 * Per level: probe '#', probe '+', probe the literal level; at the last level
 * collect at the position and at "/#" (the parent rule, fix for D2). Pending
 * (cursor, level offset) pairs live on an explicit stack in the context; all
 * scratch buffers only grow, so a warm context matches without allocating.
 */
#include "topics.h"

typedef struct mstate {
    radix_pos p;
    size_t off;
} mstate;

typedef struct mrun {
    const sub_entry *e;
    uint32_t n;
    uint32_t group;
} mrun;

typedef struct mentry {
    uint64_t client;
    uint64_t handle;
    uint32_t group;
    uint32_t pad;
} mentry;

struct radix_match_ctx {
    radix_mem mem;
    uint64_t rng;
    mstate *stack;
    size_t scap;
    mrun *runs;
    size_t rcap, nruns;
    const rnode **dfs;
    size_t dcap;
    size_t *bounds, *bounds2;
    size_t bcap;
    uint64_t *ids, *ids2;
    size_t icap, nids;
    mentry *ents, *ents2;
    size_t ecap, nents;
    uint32_t ngroups;
    int detailed;
    uint32_t policy;
    size_t total;
};

radix_match_ctx *radix_match_ctx_new(uint64_t seed) {
    radix_mem mem = {0, 0};
    radix_match_ctx *m = rmem_alloc(&mem, sizeof(*m));
    if (!m) return NULL;
    memset(m, 0, sizeof(*m));
    m->mem = mem;
    m->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    return m;
}

void radix_match_ctx_free(radix_match_ctx *m) {
    if (!m) return;
    rmem_free(&m->mem, m->stack);
    rmem_free(&m->mem, m->runs);
    rmem_free(&m->mem, m->dfs);
    rmem_free(&m->mem, m->bounds);
    rmem_free(&m->mem, m->bounds2);
    rmem_free(&m->mem, m->ids);
    rmem_free(&m->mem, m->ids2);
    rmem_free(&m->mem, m->ents);
    rmem_free(&m->mem, m->ents2);
    radix_mem mm = m->mem;
    rmem_free(&mm, m);
}

size_t radix_match_ctx_allocs(const radix_match_ctx *m) { return m ? m->mem.allocs : 0; }
size_t radix_match_ctx_bytes(const radix_match_ctx *m) { return m ? m->mem.bytes : 0; }

/* splitmix64 */
static uint64_t rng_next(radix_match_ctx *m) {
    uint64_t z = (m->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int add_run(radix_match_ctx *m, const sub_entry *e, uint32_t n, uint32_t group) {
    if (!n) return RADIX_OK;
    if (m->nruns == m->rcap &&
        scratch_reserve(&m->mem, (void **)&m->runs, &m->rcap, m->nruns + 1, sizeof(mrun)))
        return RADIX_E_NOMEM;
    m->runs[m->nruns++] = (mrun){e, n, group};
    m->total += n;
    return RADIX_OK;
}

static int add_group(radix_match_ctx *m, sublist *l) {
    uint32_t g = ++m->ngroups;
    uint32_t n = l->n;
    if (!n) return RADIX_OK;
    switch (m->policy) {
    case RADIX_SHARED_ALL: return add_run(m, l->e, n, g);
    case RADIX_SHARED_ROUND_ROBIN: {
        uint32_t *rr = list_rr(l);
        uint32_t i = *rr % n;
        *rr = i + 1;
        return add_run(m, l->e + i, 1, g);
    }
    default: {
        uint32_t i = (uint32_t)(((rng_next(m) >> 32) * (uint64_t)n) >> 32);
        return add_run(m, l->e + i, 1, g);
    }
    }
}

/* Every key below a cursor: the share groups S 0xFF after 0xFE. */
static int collect_groups(radix_match_ctx *m, radix_pos q) {
    size_t depth = 0;
    if (m->dcap < 1 && scratch_reserve(&m->mem, (void **)&m->dfs, &m->dcap, 1, sizeof(rnode *)))
        return RADIX_E_NOMEM;
    m->dfs[depth++] = q.node;
    while (depth) {
        const rnode *n = m->dfs[--depth];
        if (n->iskey && n->value) {
            int rc = add_group(m, (sublist *)n->value);
            if (rc) return rc;
        }
        if (depth + n->nchild > m->dcap &&
            scratch_reserve(&m->mem, (void **)&m->dfs, &m->dcap, depth + n->nchild, sizeof(rnode *)))
            return RADIX_E_NOMEM;
        rnode **ch = node_children(n);
        for (int i = (int)n->nchild - 1; i >= 0; i--) m->dfs[depth++] = ch[i];
    }
    return RADIX_OK;
}

static int collect(radix_match_ctx *m, radix_pos q) {
    radix_pos r = q;
    void *v;
    if (pos_walk1(&r, MARK_TERM) && pos_key(&r, &v) && v) {
        const sublist *l = v;
        int rc = add_run(m, l->e, l->n, 0);
        if (rc) return rc;
    }
    r = q;
    if (pos_walk1(&r, MARK_SHARED)) return collect_groups(m, r);
    return RADIX_OK;
}

static int push_state(radix_match_ctx *m, size_t *depth, radix_pos p, size_t off) {
    if (*depth == m->scap &&
        scratch_reserve(&m->mem, (void **)&m->stack, &m->scap, *depth + 1, sizeof(mstate)))
        return RADIX_E_NOMEM;
    m->stack[(*depth)++] = (mstate){p, off};
    return RADIX_OK;
}

/* After walking the '+' or literal level: collect or descend. */
static int after_level(radix_match_ctx *m, size_t *depth, radix_pos q, int last, size_t end) {
    if (last) {
        int rc = collect(m, q);
        if (rc) return rc;
        if (pos_walk(&q, (const uint8_t *)"/#", 2)) return collect(m, q);
        return RADIX_OK;
    }
    if (pos_walk1(&q, '/')) return push_state(m, depth, q, end + 1);
    return RADIX_OK;
}

static int walk_topic(radix_topics *rt, radix_match_ctx *m, const uint8_t *topic, size_t len) {
    radix_pos p = radix_tree_root(rt->tree);
    if (!pos_walk1(&p, topic[0] == '$' ? '$' : '@')) return RADIX_OK;
    size_t depth = 0;
    int rc = push_state(m, &depth, p, 0);
    while (rc == RADIX_OK && depth) {
        mstate s = m->stack[--depth];
        const uint8_t *lv = topic + s.off;
        const uint8_t *slash = memchr(lv, '/', len - s.off);
        size_t end = slash ? (size_t)(slash - topic) : len;
        int last = slash == NULL;
        radix_pos q = s.p;
        if (pos_walk1(&q, '#')) {
            rc = collect(m, q);
            if (rc) break;
        }
        q = s.p;
        if (pos_walk1(&q, '+')) {
            rc = after_level(m, &depth, q, last, end);
            if (rc) break;
        }
        q = s.p;
        if (pos_walk(&q, lv, end - s.off)) rc = after_level(m, &depth, q, last, end);
    }
    return rc;
}

static int reserve_bounds(radix_match_ctx *m, size_t need) {
    if (need <= m->bcap) return RADIX_OK;
    size_t c1 = m->bcap, c2 = m->bcap;
    if (scratch_reserve(&m->mem, (void **)&m->bounds, &c1, need, sizeof(size_t))) return RADIX_E_NOMEM;
    if (scratch_reserve(&m->mem, (void **)&m->bounds2, &c2, need, sizeof(size_t))) return RADIX_E_NOMEM;
    m->bcap = c1 < c2 ? c1 : c2;
    return RADIX_OK;
}

/* ids mode: the largest run (typically a popular "#" filter) is kept aside;
 * the other runs are flattened and merged bottom-up, then merged once with the
 * largest run while de-duplicating. Merge work is ~ small * log(runs) + total. */
static int finish_ids(radix_match_ctx *m) {
    size_t n = m->total;
    size_t c1 = m->icap, c2 = m->icap;
    if (n > m->icap) {
        if (scratch_reserve(&m->mem, (void **)&m->ids, &c1, n, 8)) return RADIX_E_NOMEM;
        if (scratch_reserve(&m->mem, (void **)&m->ids2, &c2, n, 8)) return RADIX_E_NOMEM;
        m->icap = c1 < c2 ? c1 : c2;
    }
    if (reserve_bounds(m, m->nruns + 1)) return RADIX_E_NOMEM;
    size_t big = 0;
    for (size_t r = 1; r < m->nruns; r++)
        if (m->runs[r].n > m->runs[big].n) big = r;
    uint64_t *a = m->ids, *b = m->ids2;
    size_t *ba = m->bounds, *bb = m->bounds2;
    size_t k = 0, nr = 0;
    for (size_t r = 0; r < m->nruns; r++) {
        if (r == big) continue;
        ba[nr++] = k;
        const sub_entry *e = m->runs[r].e;
        for (uint32_t i = 0; i < m->runs[r].n; i++) a[k++] = e[i].client;
    }
    ba[nr] = k;
    while (nr > 1) {
        size_t out = 0, w = 0;
        for (size_t r = 0; r < nr; r += 2) {
            bb[out++] = w;
            if (r + 1 == nr) {
                memcpy(b + w, a + ba[r], (ba[r + 1] - ba[r]) * 8);
                w += ba[r + 1] - ba[r];
                continue;
            }
            size_t i = ba[r], ie = ba[r + 1], j = ba[r + 1], je = ba[r + 2];
            while (i < ie && j < je) b[w++] = a[j] < a[i] ? a[j++] : a[i++];
            while (i < ie) b[w++] = a[i++];
            while (j < je) b[w++] = a[j++];
        }
        bb[out] = w;
        uint64_t *t = a;
        a = b;
        b = t;
        size_t *tb = ba;
        ba = bb;
        bb = tb;
        nr = out;
    }
    /* a[0..k) sorted (with duplicates); merge with the largest run into b, de-duplicating */
    size_t d = 0;
    if (m->nruns) {
        const sub_entry *e = m->runs[big].e;
        size_t i = 0, j = 0, je = m->runs[big].n;
        while (i < k || j < je) {
            uint64_t v;
            if (j == je || (i < k && a[i] <= e[j].client)) v = a[i++];
            else v = e[j++].client;
            if (d == 0 || b[d - 1] != v) b[d++] = v;
        }
    }
    m->ids = b;
    m->ids2 = a;
    m->bounds = ba;
    m->bounds2 = bb;
    m->nids = d;
    return RADIX_OK;
}

/* detailed mode: flatten runs, stable merge by client (ties keep discovery order). */
static int finish_detailed(radix_match_ctx *m) {
    size_t n = m->total;
    size_t c1 = m->ecap, c2 = m->ecap;
    if (n > m->ecap) {
        if (scratch_reserve(&m->mem, (void **)&m->ents, &c1, n, sizeof(mentry))) return RADIX_E_NOMEM;
        if (scratch_reserve(&m->mem, (void **)&m->ents2, &c2, n, sizeof(mentry)))
            return RADIX_E_NOMEM;
        m->ecap = c1 < c2 ? c1 : c2;
    }
    if (reserve_bounds(m, m->nruns + 1)) return RADIX_E_NOMEM;
    mentry *a = m->ents, *b = m->ents2;
    size_t *ba = m->bounds, *bb = m->bounds2;
    size_t k = 0;
    for (size_t r = 0; r < m->nruns; r++) {
        ba[r] = k;
        const sub_entry *e = m->runs[r].e;
        for (uint32_t i = 0; i < m->runs[r].n; i++)
            a[k++] = (mentry){e[i].client, e[i].handle, m->runs[r].group, 0};
    }
    size_t nr = m->nruns;
    ba[nr] = k;
    while (nr > 1) {
        size_t out = 0, w = 0;
        for (size_t r = 0; r < nr; r += 2) {
            bb[out++] = w;
            if (r + 1 == nr) {
                memcpy(b + w, a + ba[r], (ba[r + 1] - ba[r]) * sizeof(mentry));
                w += ba[r + 1] - ba[r];
                continue;
            }
            size_t i = ba[r], ie = ba[r + 1], j = ba[r + 1], je = ba[r + 2];
            while (i < ie && j < je) b[w++] = a[j].client < a[i].client ? a[j++] : a[i++];
            while (i < ie) b[w++] = a[i++];
            while (j < je) b[w++] = a[j++];
        }
        bb[out] = w;
        mentry *t = a;
        a = b;
        b = t;
        size_t *tb = ba;
        ba = bb;
        bb = tb;
        nr = out;
    }
    if (a != m->ents) {
        m->ents2 = m->ents;
        m->ents = a;
    }
    if (ba != m->bounds) {
        m->bounds2 = m->bounds;
        m->bounds = ba;
    }
    m->nents = k;
    return RADIX_OK;
}

static int run_match(radix_topics *rt, radix_match_ctx *m, const uint8_t *topic, size_t len,
                     uint32_t flags, int detailed) {
    if (!rt || !m || (!topic && len)) return RADIX_E_INVAL;
    uint32_t policy = flags & 3u;
    if (policy == 3 || (flags & ~(uint32_t)(3u | RADIX_NO_VALIDATE))) return RADIX_E_INVAL;
    m->nids = 0;
    m->nents = 0;
    m->detailed = detailed;
    if (!(flags & RADIX_NO_VALIDATE)) {
        int rc = validate_topic_levels(topic, len, rt->flags, rt->max_levels);
        if (rc) return rc;
    } else if (len == 0) {
        return RADIX_E_EMPTY;
    }
    m->policy = policy;
    m->nruns = 0;
    m->total = 0;
    m->ngroups = 0;
    int rc = walk_topic(rt, m, topic, len);
    if (rc == RADIX_OK) rc = detailed ? finish_detailed(m) : finish_ids(m);
    if (rc) {
        m->nids = 0;
        m->nents = 0;
    }
    return rc;
}

int radix_match_fetch(radix_match_ctx *m, uint64_t *out, size_t cap, size_t *n_out) {
    if (!m || !n_out || (!out && cap)) return RADIX_E_INVAL;
    if (m->detailed) return RADIX_E_INVAL;
    *n_out = m->nids;
    if (m->nids > cap) return RADIX_E_BUFFER;
    if (m->nids) memcpy(out, m->ids, m->nids * 8);
    return RADIX_OK;
}

int radix_match(radix_topics *rt, radix_match_ctx *m, const uint8_t *topic, size_t len,
                uint32_t flags, uint64_t *out, size_t cap, size_t *n_out) {
    if (!n_out || (!out && cap)) return RADIX_E_INVAL;
    int rc = run_match(rt, m, topic, len, flags, 0);
    if (rc) {
        *n_out = 0;
        return rc;
    }
    return radix_match_fetch(m, out, cap, n_out);
}

int radix_match_fetch_detailed(radix_match_ctx *m, uint64_t *clients, uint64_t *handles,
                               uint32_t *group, size_t cap, size_t *n_out) {
    if (!m || !n_out || (cap && (!clients || !handles || !group))) return RADIX_E_INVAL;
    if (!m->detailed) return RADIX_E_INVAL;
    *n_out = m->nents;
    if (m->nents > cap) return RADIX_E_BUFFER;
    for (size_t i = 0; i < m->nents; i++) {
        clients[i] = m->ents[i].client;
        handles[i] = m->ents[i].handle;
        group[i] = m->ents[i].group;
    }
    return RADIX_OK;
}

int radix_match_detailed(radix_topics *rt, radix_match_ctx *m, const uint8_t *topic, size_t len,
                         uint32_t flags, uint64_t *clients, uint64_t *handles, uint32_t *group,
                         size_t cap, size_t *n_out) {
    if (!n_out || (cap && (!clients || !handles || !group))) return RADIX_E_INVAL;
    int rc = run_match(rt, m, topic, len, flags, 1);
    if (rc) {
        *n_out = 0;
        return rc;
    }
    return radix_match_fetch_detailed(m, clients, handles, group, cap, n_out);
}
