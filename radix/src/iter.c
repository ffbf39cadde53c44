/* iter.c: iterators over a Layer A tree.
 *
 * The iterator keeps the path from the root as a stack of nodes plus the
 * child index taken at each level (so climbing never re-scans edges), and the
 * key of the current node in a buffer (128 bytes inline, then heap). A
 * generation counter copied at seek time makes use after a mutation return
 * RADIX_E_STALE instead of touching freed nodes.
 */
#include "internal.h"

#define IT_JUST_SEEKED 1
#define IT_EOF 2
#define IT_INLINE 128

struct radix_iter {
    radix_tree *t;
    uint64_t gen;
    rnode **nodes;
    uint16_t *idx;
    size_t depth, scap;
    uint8_t *key;
    size_t klen, kcap;
    uint8_t *pfx;
    size_t pfxlen, pfxcap;
    int has_pfx;
    int flags;
    uint8_t inline_key[IT_INLINE];
};

radix_iter *radix_iter_new(radix_tree *t) {
    if (!t) return NULL;
    radix_iter *it = rmem_alloc(&t->mem, sizeof(*it));
    if (!it) return NULL;
    memset(it, 0, sizeof(*it));
    it->t = t;
    it->key = it->inline_key;
    it->kcap = IT_INLINE;
    it->flags = IT_EOF;
    it->gen = t->gen;
    return it;
}

void radix_iter_free(radix_iter *it) {
    if (!it) return;
    radix_mem *m = &it->t->mem;
    rmem_free(m, it->nodes);
    rmem_free(m, it->idx);
    rmem_free(m, it->pfx);
    if (it->key != it->inline_key) rmem_free(m, it->key);
    rmem_free(m, it);
}

static int reserve_stack(radix_iter *it, size_t need) {
    if (need <= it->scap) return RADIX_OK;
    size_t ncap = it->scap ? it->scap * 2 : 16;
    while (ncap < need) ncap *= 2;
    radix_mem *m = &it->t->mem;
    rnode **nn = rmem_alloc(m, ncap * sizeof(rnode *));
    uint16_t *ni = rmem_alloc(m, ncap * sizeof(uint16_t));
    if (!nn || !ni) {
        rmem_free(m, nn);
        rmem_free(m, ni);
        return RADIX_E_NOMEM;
    }
    if (it->depth) {
        memcpy(nn, it->nodes, it->depth * sizeof(rnode *));
        memcpy(ni, it->idx, it->depth * sizeof(uint16_t));
    }
    rmem_free(m, it->nodes);
    rmem_free(m, it->idx);
    it->nodes = nn;
    it->idx = ni;
    it->scap = ncap;
    return RADIX_OK;
}

static int reserve_key(radix_iter *it, size_t need) {
    if (need <= it->kcap) return RADIX_OK;
    size_t ncap = it->kcap * 2;
    while (ncap < need) ncap *= 2;
    uint8_t *nk = rmem_alloc(&it->t->mem, ncap);
    if (!nk) return RADIX_E_NOMEM;
    memcpy(nk, it->key, it->klen);
    if (it->key != it->inline_key) rmem_free(&it->t->mem, it->key);
    it->key = nk;
    it->kcap = ncap;
    return RADIX_OK;
}

static int it_reset(radix_iter *it) {
    it->depth = 0;
    it->klen = 0;
    it->gen = it->t->gen;
    it->flags = IT_EOF;
    if (reserve_stack(it, 1) != RADIX_OK) return RADIX_E_NOMEM;
    it->nodes[0] = it->t->root;
    it->depth = 1;
    return RADIX_OK;
}

static rnode *top(const radix_iter *it) { return it->nodes[it->depth - 1]; }

static int it_push(radix_iter *it, int c) {
    rnode *n = top(it);
    rnode *ch = node_children(n)[c];
    if (reserve_stack(it, it->depth + 1) != RADIX_OK) return RADIX_E_NOMEM;
    if (reserve_key(it, it->klen + 1 + ch->seglen) != RADIX_OK) return RADIX_E_NOMEM;
    it->idx[it->depth - 1] = (uint16_t)c;
    it->nodes[it->depth++] = ch;
    it->key[it->klen++] = node_edges(n)[c];
    memcpy(it->key + it->klen, node_seg(ch), ch->seglen);
    it->klen += ch->seglen;
    return RADIX_OK;
}

static int it_pop(radix_iter *it) {
    rnode *ch = it->nodes[--it->depth];
    it->klen -= 1 + (size_t)ch->seglen;
    return it->idx[it->depth - 1];
}

static int first_in_subtree(radix_iter *it) {
    while (!top(it)->iskey) {
        if (top(it)->nchild == 0) return 0;
        if (it_push(it, 0) != RADIX_OK) return RADIX_E_NOMEM;
    }
    return 1;
}

static int last_in_subtree(radix_iter *it) {
    while (top(it)->nchild) {
        if (it_push(it, top(it)->nchild - 1) != RADIX_OK) return RADIX_E_NOMEM;
    }
    return top(it)->iskey ? 1 : 0;
}

static int next_after_subtree(radix_iter *it) {
    while (it->depth > 1) {
        int c = it_pop(it);
        if (c + 1 < (int)top(it)->nchild) {
            if (it_push(it, c + 1) != RADIX_OK) return RADIX_E_NOMEM;
            return first_in_subtree(it);
        }
    }
    return 0;
}

static int step_next(radix_iter *it) {
    if (top(it)->nchild) {
        if (it_push(it, 0) != RADIX_OK) return RADIX_E_NOMEM;
        return first_in_subtree(it);
    }
    return next_after_subtree(it);
}

static int step_prev(radix_iter *it) {
    while (it->depth > 1) {
        int c = it_pop(it);
        if (c > 0) {
            if (it_push(it, c - 1) != RADIX_OK) return RADIX_E_NOMEM;
            return last_in_subtree(it);
        }
        if (top(it)->iskey) return 1;
    }
    return 0;
}

static int seek_ge(radix_iter *it, const uint8_t *k, size_t len) {
    size_t i = 0;
    for (;;) {
        rnode *n = top(it);
        const uint8_t *seg = node_seg(n);
        size_t j = 0;
        while (j < n->seglen && i + j < len && seg[j] == k[i + j]) j++;
        if (i + j == len) return first_in_subtree(it);
        if (j < n->seglen) return seg[j] > k[i + j] ? first_in_subtree(it) : next_after_subtree(it);
        i += j;
        uint8_t b = k[i];
        const uint8_t *e = node_edges(n);
        int at = 0;
        while (at < (int)n->nchild && e[at] < b) at++;
        if (at == (int)n->nchild) return next_after_subtree(it);
        if (it_push(it, at) != RADIX_OK) return RADIX_E_NOMEM;
        if (e[at] != b) return first_in_subtree(it);
        i++;
    }
}

static int seek_le(radix_iter *it, const uint8_t *k, size_t len) {
    size_t i = 0;
    for (;;) {
        rnode *n = top(it);
        const uint8_t *seg = node_seg(n);
        size_t j = 0;
        while (j < n->seglen && i + j < len && seg[j] == k[i + j]) j++;
        if (i + j == len) return (j == n->seglen && n->iskey) ? 1 : step_prev(it);
        if (j < n->seglen) return seg[j] < k[i + j] ? last_in_subtree(it) : step_prev(it);
        i += j;
        uint8_t b = k[i];
        const uint8_t *e = node_edges(n);
        int at = (int)n->nchild - 1;
        while (at >= 0 && e[at] > b) at--;
        if (at < 0) return n->iskey ? 1 : step_prev(it);
        if (it_push(it, at) != RADIX_OK) return RADIX_E_NOMEM;
        if (e[at] != b) return last_in_subtree(it);
        i++;
    }
}

static int key_equals(const radix_iter *it, const uint8_t *k, size_t len) {
    return it->klen == len && (len == 0 || memcmp(it->key, k, len) == 0);
}

static int in_prefix(const radix_iter *it) {
    if (!it->has_pfx) return 1;
    return it->pfxlen == 0 || (it->klen >= it->pfxlen && memcmp(it->key, it->pfx, it->pfxlen) == 0);
}

static int seek_impl(radix_iter *it, int op, const uint8_t *key, size_t len) {
    if (it_reset(it) != RADIX_OK) return RADIX_E_NOMEM;
    int rc;
    switch (op) {
    case RADIX_SEEK_FIRST: rc = first_in_subtree(it); break;
    case RADIX_SEEK_LAST: rc = last_in_subtree(it); break;
    case RADIX_SEEK_EQ:
        rc = seek_ge(it, key, len);
        if (rc == 1 && !key_equals(it, key, len)) rc = 0;
        break;
    case RADIX_SEEK_GE: rc = seek_ge(it, key, len); break;
    case RADIX_SEEK_GT:
        rc = seek_ge(it, key, len);
        if (rc == 1 && key_equals(it, key, len)) rc = step_next(it);
        break;
    case RADIX_SEEK_LE: rc = seek_le(it, key, len); break;
    case RADIX_SEEK_LT:
        rc = seek_le(it, key, len);
        if (rc == 1 && key_equals(it, key, len)) rc = step_prev(it);
        break;
    default: return RADIX_E_INVAL;
    }
    if (rc == 1 && !in_prefix(it)) rc = 0;
    it->flags = rc == 1 ? IT_JUST_SEEKED : IT_EOF;
    return rc;
}

int radix_iter_seek(radix_iter *it, int op, const uint8_t *key, size_t len) {
    if (!it || (!key && len)) return RADIX_E_INVAL;
    it->has_pfx = 0;
    return seek_impl(it, op, key, len);
}

int radix_iter_seek_prefix(radix_iter *it, const uint8_t *prefix, size_t len) {
    if (!it || (!prefix && len)) return RADIX_E_INVAL;
    if (len > it->pfxcap) {
        uint8_t *np = rmem_alloc(&it->t->mem, len);
        if (!np) return RADIX_E_NOMEM;
        rmem_free(&it->t->mem, it->pfx);
        it->pfx = np;
        it->pfxcap = len;
    }
    if (len) memcpy(it->pfx, prefix, len);
    it->pfxlen = len;
    it->has_pfx = 1;
    return seek_impl(it, RADIX_SEEK_GE, prefix, len);
}

/* The iterator needs the node path from the root to climb, so this re-walks
 * the prefix (O(len)); the cursor is only checked to agree with it. */
int radix_iter_seek_pos(radix_iter *it, const radix_pos *p, const uint8_t *prefix, size_t len) {
    if (!it || !p || (!prefix && len)) return RADIX_E_INVAL;
    radix_pos q = radix_tree_root(it->t);
    if (!pos_walk(&q, prefix, len) || q.node != p->node || q.off != p->off) return RADIX_E_INVAL;
    return radix_iter_seek_prefix(it, prefix, len);
}

static int step(radix_iter *it, int forward) {
    if (!it) return RADIX_E_INVAL;
    if (it->gen != it->t->gen) return RADIX_E_STALE;
    if (it->flags & IT_EOF) return 0;
    if (it->flags & IT_JUST_SEEKED) {
        it->flags = 0;
        return 1;
    }
    int rc = forward ? step_next(it) : step_prev(it);
    if (rc == 1 && !in_prefix(it)) rc = 0;
    if (rc != 1) it->flags = IT_EOF;
    return rc;
}

int radix_iter_next(radix_iter *it) { return step(it, 1); }
int radix_iter_prev(radix_iter *it) { return step(it, 0); }

int radix_iter_stale(const radix_iter *it) { return !it || it->gen != it->t->gen; }

const uint8_t *radix_iter_key(const radix_iter *it, size_t *len) {
    if (!it || (it->flags & IT_EOF) || it->gen != it->t->gen) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = it->klen;
    return it->key;
}

void *radix_iter_value(const radix_iter *it) {
    if (!it || (it->flags & IT_EOF) || !it->depth || it->gen != it->t->gen) return NULL;
    return top(it)->value;
}

int radix_iter_copy(radix_iter *dst, const radix_iter *src) {
    if (!dst || !src || dst->t != src->t) return RADIX_E_INVAL;
    if (reserve_stack(dst, src->depth) != RADIX_OK) return RADIX_E_NOMEM;
    if (reserve_key(dst, src->klen) != RADIX_OK) return RADIX_E_NOMEM;
    if (src->pfxlen > dst->pfxcap) {
        uint8_t *np = rmem_alloc(&dst->t->mem, src->pfxlen);
        if (!np) return RADIX_E_NOMEM;
        rmem_free(&dst->t->mem, dst->pfx);
        dst->pfx = np;
        dst->pfxcap = src->pfxlen;
    }
    if (src->depth) {
        memcpy(dst->nodes, src->nodes, src->depth * sizeof(rnode *));
        memcpy(dst->idx, src->idx, src->depth * sizeof(uint16_t));
    }
    if (src->klen) memcpy(dst->key, src->key, src->klen);
    if (src->pfxlen) memcpy(dst->pfx, src->pfx, src->pfxlen);
    dst->depth = src->depth;
    dst->klen = src->klen;
    dst->pfxlen = src->pfxlen;
    dst->has_pfx = src->has_pfx;
    dst->flags = src->flags;
    dst->gen = src->gen;
    return RADIX_OK;
}
