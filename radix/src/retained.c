/* retained.c: the retained-topic index (beyond mr_rax; spec section 10).
 *
 * A Layer A tree keyed H . topic ('$' or '@' as for filters) whose value slot
 * holds the caller's 64-bit handle. Matching a FILTER walks the tree with an
 * explicit stack of (cursor, filter level): a literal level is one walk, '+'
 * enumerates the distinct level values present below the cursor, '#' emits
 * the whole subtree (and the parent key). Work is proportional to the tree
 * positions the filter can reach plus the output, never to the store size.
 */
#include "internal.h"

struct radix_retained {
    radix_mem mem;
    radix_tree *tree;
    uint32_t flags;
    uint64_t *out;
    size_t ocap, nout;
    struct rstate {
        const rnode *n;
        uint32_t off;
        uint32_t pad;
        size_t flevel; /* offset of the filter level to match at this position */
    } *stack;
    size_t scap;
    const rnode **dfs;
    size_t dcap;
};

radix_retained *radix_retained_new(uint32_t flags) {
    if (flags & ~(uint32_t)RADIX_F_STRICT_UTF8) return NULL;
    radix_mem mem = {0, 0};
    radix_retained *r = rmem_alloc(&mem, sizeof(*r));
    if (!r) return NULL;
    memset(r, 0, sizeof(*r));
    r->mem = mem;
    r->flags = flags;
    r->tree = tree_new();
    if (!r->tree) {
        radix_mem m = r->mem;
        rmem_free(&m, r);
        return NULL;
    }
    return r;
}

void radix_retained_free(radix_retained *r) {
    if (!r) return;
    radix_tree_free(r->tree, NULL, NULL);
    rmem_free(&r->mem, r->out);
    rmem_free(&r->mem, r->stack);
    rmem_free(&r->mem, r->dfs);
    radix_mem m = r->mem;
    rmem_free(&m, r);
}

/* Run fn on H . topic without allocating for short topics. */
#define WITH_KEY(r, topic, len, body)                                                              \
    do {                                                                                           \
        uint8_t local_[256];                                                                       \
        uint8_t *key_ = (len) + 1 <= sizeof(local_) ? local_ : rmem_alloc(&(r)->mem, (len) + 1);   \
        if (!key_) return RADIX_E_NOMEM;                                                           \
        key_[0] = (topic)[0] == '$' ? '$' : '@';                                                   \
        memcpy(key_ + 1, (topic), (len));                                                          \
        body;                                                                                      \
        if (key_ != local_) rmem_free(&(r)->mem, key_);                                            \
    } while (0)

int radix_retained_set(radix_retained *r, const uint8_t *topic, size_t len, uint64_t handle) {
    if (!r || (!topic && len)) return RADIX_E_INVAL;
    int rc = validate_topic_levels(topic, len, r->flags, 0);
    if (rc) return rc;
    WITH_KEY(r, topic, len, {
        int ins = radix_tree_insert(r->tree, key_, len + 1, (void *)(uintptr_t)handle, NULL);
        rc = ins < 0 ? ins : (ins == 1 ? RADIX_OK : RADIX_REPLACED);
    });
    return rc;
}

int radix_retained_remove(radix_retained *r, const uint8_t *topic, size_t len, uint64_t *old) {
    if (!r || (!topic && len)) return RADIX_E_INVAL;
    if (len == 0) return RADIX_NOT_FOUND;
    int rc;
    WITH_KEY(r, topic, len, {
        void *v = NULL;
        rc = radix_tree_remove(r->tree, key_, len + 1, &v) ? RADIX_OK : RADIX_NOT_FOUND;
        if (rc == RADIX_OK && old) *old = (uint64_t)(uintptr_t)v;
    });
    return rc;
}

int radix_retained_get(const radix_retained *r, const uint8_t *topic, size_t len,
                       uint64_t *handle) {
    if (!r || (!topic && len)) return RADIX_E_INVAL;
    if (len == 0) return RADIX_NOT_FOUND;
    radix_pos p = radix_tree_root(r->tree);
    if (!pos_walk1(&p, topic[0] == '$' ? '$' : '@') || !pos_walk(&p, topic, len)) return RADIX_NOT_FOUND;
    void *v;
    if (!pos_key(&p, &v)) return RADIX_NOT_FOUND;
    if (handle) *handle = (uint64_t)(uintptr_t)v;
    return RADIX_OK;
}

size_t radix_retained_count(const radix_retained *r) { return r ? radix_tree_size(r->tree) : 0; }
size_t radix_retained_bytes(const radix_retained *r) {
    return r ? r->mem.bytes + radix_tree_bytes(r->tree) : 0;
}

static int emit(radix_retained *r, const void *v) {
    if (r->nout == r->ocap &&
        scratch_reserve(&r->mem, (void **)&r->out, &r->ocap, r->nout + 1, sizeof(uint64_t)))
        return RADIX_E_NOMEM;
    r->out[r->nout++] = (uint64_t)(uintptr_t)v;
    return RADIX_OK;
}

static int push(radix_retained *r, size_t *depth, const rnode *n, uint32_t off, size_t flevel) {
    if (*depth == r->scap &&
        scratch_reserve(&r->mem, (void **)&r->stack, &r->scap, *depth + 1, sizeof(*r->stack)))
        return RADIX_E_NOMEM;
    r->stack[(*depth)++] = (struct rstate){n, off, 0, flevel};
    return RADIX_OK;
}

/* Every key at or below cursor p ('#'). */
static int emit_subtree(radix_retained *r, radix_pos p) {
    size_t depth = 0;
    const rnode *n = p.node;
    if (p.off == n->seglen && n->iskey) {
        int rc = emit(r, n->value);
        if (rc) return rc;
    }
    if (p.off < n->seglen) {
        if (r->dcap < 1 && scratch_reserve(&r->mem, (void **)&r->dfs, &r->dcap, 1, sizeof(rnode *)))
            return RADIX_E_NOMEM;
        r->dfs[depth++] = n;
    } else {
        if (n->nchild > r->dcap &&
            scratch_reserve(&r->mem, (void **)&r->dfs, &r->dcap, n->nchild, sizeof(rnode *)))
            return RADIX_E_NOMEM;
        for (int i = (int)n->nchild - 1; i >= 0; i--) r->dfs[depth++] = node_children(n)[i];
    }
    while (depth) {
        const rnode *x = r->dfs[--depth];
        if (x->iskey) {
            int rc = emit(r, x->value);
            if (rc) return rc;
        }
        if (depth + x->nchild > r->dcap &&
            scratch_reserve(&r->mem, (void **)&r->dfs, &r->dcap, depth + x->nchild, sizeof(rnode *)))
            return RADIX_E_NOMEM;
        for (int i = (int)x->nchild - 1; i >= 0; i--) r->dfs[depth++] = node_children(x)[i];
    }
    return RADIX_OK;
}

typedef struct {
    const uint8_t *f;
    size_t len;
} filt;

/* At cursor q, the filter level ending at `end` has been matched. */
static int level_done(radix_retained *r, size_t *depth, radix_pos q, filt F, size_t end) {
    if (end == F.len) {
        void *v;
        if (pos_key(&q, &v)) return emit(r, v);
        return RADIX_OK;
    }
    /* The next level is "#" (it must be the last): the parent key matches too. */
    if (end + 2 == F.len && F.f[end + 1] == '#') {
        void *v;
        if (pos_key(&q, &v)) {
            int rc = emit(r, v);
            if (rc) return rc;
        }
    }
    if (pos_walk1(&q, '/')) return push(r, depth, q.node, q.off, end + 1);
    return RADIX_OK;
}

/* '+': enumerate every level value below p (bytes up to the next '/'). */
static int plus_level(radix_retained *r, size_t *depth, radix_pos p, filt F, size_t end) {
    size_t d0 = 0;
    /* Use the dfs stack for positions inside this level: (node, off) pairs
     * are encoded as a node plus a flag that the whole node is in-level. */
    const rnode *n = p.node;
    uint32_t off = p.off;
    /* Scan the rest of the start node's seg first. */
    const uint8_t *seg = node_seg(n);
    const uint8_t *slash = off < n->seglen ? memchr(seg + off, '/', n->seglen - off) : NULL;
    if (slash) {
        radix_pos q = {n, (uint32_t)(slash - seg)};
        return level_done(r, depth, q, F, end);
    }
    radix_pos q = {n, n->seglen};
    int rc = level_done(r, depth, q, F, end);
    if (rc) return rc;
    /* Children: edge '/' ends the level at the node end (handled above by
     * level_done walking '/'); other edges continue the level. */
    if (n->nchild > r->dcap &&
        scratch_reserve(&r->mem, (void **)&r->dfs, &r->dcap, n->nchild, sizeof(rnode *)))
        return RADIX_E_NOMEM;
    for (int i = (int)n->nchild - 1; i >= 0; i--)
        if (node_edges(n)[i] != '/') r->dfs[d0++] = node_children(n)[i];
    while (d0) {
        const rnode *x = r->dfs[--d0];
        const uint8_t *xs = node_seg(x);
        const uint8_t *sl = x->seglen ? memchr(xs, '/', x->seglen) : NULL;
        if (sl) {
            radix_pos qq = {x, (uint32_t)(sl - xs)};
            rc = level_done(r, depth, qq, F, end);
            if (rc) return rc;
            continue;
        }
        radix_pos qq = {x, x->seglen};
        rc = level_done(r, depth, qq, F, end);
        if (rc) return rc;
        if (d0 + x->nchild > r->dcap &&
            scratch_reserve(&r->mem, (void **)&r->dfs, &r->dcap, d0 + x->nchild, sizeof(rnode *)))
            return RADIX_E_NOMEM;
        for (int i = (int)x->nchild - 1; i >= 0; i--)
            if (node_edges(x)[i] != '/') r->dfs[d0++] = node_children(x)[i];
    }
    return RADIX_OK;
}

static int retained_walk(radix_retained *r, filt F) {
    radix_pos p = radix_tree_root(r->tree);
    if (!pos_walk1(&p, F.f[0] == '$' ? '$' : '@')) return RADIX_OK;
    size_t depth = 0;
    int rc = push(r, &depth, p.node, p.off, 0);
    while (rc == RADIX_OK && depth) {
        struct rstate s = r->stack[--depth];
        radix_pos q = {s.n, s.off};
        const uint8_t *lv = F.f + s.flevel;
        const uint8_t *slash = memchr(lv, '/', F.len - s.flevel);
        size_t end = slash ? (size_t)(slash - F.f) : F.len;
        size_t ll = end - s.flevel;
        if (ll == 1 && lv[0] == '#') {
            rc = emit_subtree(r, q);
        } else if (ll == 1 && lv[0] == '+') {
            rc = plus_level(r, &depth, q, F, end);
        } else if (pos_walk(&q, lv, ll)) {
            rc = level_done(r, &depth, q, F, end);
        }
    }
    return rc;
}

int radix_retained_fetch(radix_retained *r, uint64_t *out, size_t cap, size_t *n_out) {
    if (!r || !n_out || (!out && cap)) return RADIX_E_INVAL;
    *n_out = r->nout;
    if (r->nout > cap) return RADIX_E_BUFFER;
    if (r->nout) memcpy(out, r->out, r->nout * sizeof(uint64_t));
    return RADIX_OK;
}

int radix_retained_match(radix_retained *r, const uint8_t *filter, size_t len, uint64_t *out,
                         size_t cap, size_t *n_out) {
    if (!r || !n_out || (!filter && len) || (!out && cap)) return RADIX_E_INVAL;
    size_t foff;
    r->nout = 0;
    *n_out = 0;
    int rc = validate_filter_levels(filter, len, r->flags, 0, NULL, NULL, &foff);
    if (rc) return rc;
    filt F = {filter + foff, len - foff};
    rc = retained_walk(r, F);
    if (rc) {
        r->nout = 0;
        return rc;
    }
    return radix_retained_fetch(r, out, cap, n_out);
}
