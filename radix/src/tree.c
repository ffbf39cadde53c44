/* tree.c: Layer A, the compressed radix tree (layout drawn in radix.h).
 *
 * Mutations allocate every replacement block before unlinking anything, so
 * an allocation failure returns RADIX_E_NOMEM with the tree untouched.
 * Removal never needs memory: a failed shrink compacts the node in place and
 * a failed merge leaves the tree valid but less compact. Nothing here recurses
 * on input: frees thread a work list through the nodes' value slots, copies
 * and checks use explicit heap stacks.
 */
#include "internal.h"

static rnode *node_new(radix_tree *t, const uint8_t *seg, size_t seglen, size_t nchild) {
    if (seglen > UINT32_MAX) return NULL;
    rnode *n = rmem_alloc(&t->mem, node_size(seglen, nchild));
    if (!n) return NULL;
    n->seglen = (uint32_t)seglen;
    n->nchild = (uint16_t)nchild;
    n->iskey = 0;
    n->pad = 0;
    n->value = NULL;
    if (seglen) memcpy(node_seg(n), seg, seglen);
    return n;
}

static void node_free(radix_tree *t, rnode *n) { rmem_free(&t->mem, n); }

radix_tree *tree_new(void) {
    radix_mem mem = {0, 0};
    radix_tree *t = rmem_alloc(&mem, sizeof(*t));
    if (!t) return NULL;
    t->mem = mem;
    t->size = 0;
    t->nodes = 0;
    t->gen = 0;
    t->root = node_new(t, NULL, 0, 0);
    if (!t->root) {
        radix_mem m2 = t->mem;
        rmem_free(&m2, t);
        return NULL;
    }
    t->nodes = 1;
    return t;
}

radix_tree *radix_tree_new(void) { return tree_new(); }

/* Free the whole subtree under n (n included) without recursion or memory:
 * the work list is threaded through the value slots. Returns keys freed. */
static size_t free_subtree(radix_tree *t, rnode *n, void (*free_value)(void *, void *), void *ud) {
    size_t keys = 0;
    if (n->iskey) {
        keys++;
        if (free_value) free_value(n->value, ud);
    }
    n->value = NULL;
    rnode *list = n;
    while (list) {
        rnode *x = list;
        list = (rnode *)x->value;
        rnode **ch = node_children(x);
        for (uint16_t i = 0; i < x->nchild; i++) {
            rnode *c = ch[i];
            if (c->iskey) {
                keys++;
                if (free_value) free_value(c->value, ud);
            }
            c->value = list;
            list = c;
        }
        node_free(t, x);
        t->nodes--;
    }
    return keys;
}

void radix_tree_free(radix_tree *t, void (*free_value)(void *, void *), void *ud) {
    if (!t) return;
    free_subtree(t, t->root, free_value, ud);
    radix_mem m = t->mem;
    rmem_free(&m, t);
}

/* Copy of n with its seg replaced by seg[0..seglen) and the same children. */
static rnode *node_clone_seg(radix_tree *t, const rnode *n, const uint8_t *seg, size_t seglen) {
    rnode *c = node_new(t, seg, seglen, n->nchild);
    if (!c) return NULL;
    c->iskey = n->iskey;
    c->value = n->value;
    memcpy(node_children(c), node_children(n), n->nchild * sizeof(rnode *));
    memcpy(node_edges(c), node_edges(n), n->nchild);
    return c;
}

static int tree_insert(radix_tree *t, const uint8_t *key, size_t len, void *value, void **old,
                       int overwrite) {
    if (!t || (!key && len)) return RADIX_E_INVAL;
    if (len > UINT32_MAX) return RADIX_E_INVAL;
    rnode **slot = &t->root;
    rnode *n = t->root;
    size_t i = 0;
    for (;;) {
        const uint8_t *seg = node_seg(n);
        size_t j = 0;
        while (j < n->seglen && i + j < len && seg[j] == key[i + j]) j++;
        if (j < n->seglen) {
            /* Split n at offset j: upper [0, j) and lower (j, seglen). */
            size_t nup = (i + j == len) ? 1 : 2;
            rnode *up = node_new(t, seg, j, nup);
            rnode *low = node_clone_seg(t, n, seg + j + 1, n->seglen - j - 1);
            rnode *leaf = NULL;
            if (nup == 2) leaf = node_new(t, key + i + j + 1, len - i - j - 1, 0);
            if (!up || !low || (nup == 2 && !leaf)) {
                if (up) node_free(t, up);
                if (low) node_free(t, low);
                if (leaf) node_free(t, leaf);
                return RADIX_E_NOMEM;
            }
            uint8_t eb = seg[j];
            if (nup == 1) {
                up->iskey = 1;
                up->value = value;
                node_children(up)[0] = low;
                node_edges(up)[0] = eb;
            } else {
                leaf->iskey = 1;
                leaf->value = value;
                uint8_t kb = key[i + j];
                int lo_first = eb < kb;
                node_children(up)[lo_first ? 0 : 1] = low;
                node_edges(up)[lo_first ? 0 : 1] = eb;
                node_children(up)[lo_first ? 1 : 0] = leaf;
                node_edges(up)[lo_first ? 1 : 0] = kb;
            }
            node_free(t, n);
            *slot = up;
            t->nodes += nup;
            t->size++;
            t->gen++;
            if (old) *old = NULL;
            return 1;
        }
        i += j;
        if (i == len) {
            if (n->iskey) {
                if (old) *old = n->value;
                if (overwrite) {
                    n->value = value;
                    t->gen++;
                }
                return 0;
            }
            n->iskey = 1;
            n->value = value;
            t->size++;
            t->gen++;
            if (old) *old = NULL;
            return 1;
        }
        uint8_t b = key[i];
        const uint8_t *e = node_edges(n);
        size_t at = 0;
        while (at < n->nchild && e[at] < b) at++;
        if (at < n->nchild && e[at] == b) {
            slot = &node_children(n)[at];
            n = *slot;
            i++;
            continue;
        }
        /* Add a child edge b -> leaf holding the rest of the key. */
        rnode *leaf = node_new(t, key + i + 1, len - i - 1, 0);
        rnode *grown = node_new(t, seg, n->seglen, (size_t)n->nchild + 1);
        if (!leaf || !grown) {
            if (leaf) node_free(t, leaf);
            if (grown) node_free(t, grown);
            return RADIX_E_NOMEM;
        }
        leaf->iskey = 1;
        leaf->value = value;
        grown->iskey = n->iskey;
        grown->value = n->value;
        rnode **gc = node_children(grown), **nc = node_children(n);
        uint8_t *ge = node_edges(grown);
        memcpy(gc, nc, at * sizeof(rnode *));
        memcpy(ge, e, at);
        gc[at] = leaf;
        ge[at] = b;
        memcpy(gc + at + 1, nc + at, (n->nchild - at) * sizeof(rnode *));
        memcpy(ge + at + 1, e + at, n->nchild - at);
        node_free(t, n);
        *slot = grown;
        t->nodes++;
        t->size++;
        t->gen++;
        if (old) *old = NULL;
        return 1;
    }
}

int radix_tree_insert(radix_tree *t, const uint8_t *key, size_t len, void *value, void **old) {
    return tree_insert(t, key, len, value, old, 1);
}

int radix_tree_try_insert(radix_tree *t, const uint8_t *key, size_t len, void *value, void **old) {
    return tree_insert(t, key, len, value, old, 0);
}

/* Exact lookup; returns the key node or NULL. */
static rnode *tree_lookup(const radix_tree *t, const uint8_t *key, size_t len) {
    const rnode *n = t->root;
    size_t i = 0;
    for (;;) {
        if (n->seglen > len - i) return NULL;
        if (n->seglen && memcmp(node_seg(n), key + i, n->seglen) != 0) return NULL;
        i += n->seglen;
        if (i == len) return n->iskey ? (rnode *)(uintptr_t)n : NULL;
        int c = node_find_child(n, key[i]);
        if (c < 0) return NULL;
        n = node_children(n)[c];
        i++;
    }
}

int radix_tree_find(const radix_tree *t, const uint8_t *key, size_t len, void **value) {
    if (!t || (!key && len)) return 0;
    rnode *n = tree_lookup(t, key, len);
    if (!n) return 0;
    if (value) *value = n->value;
    return 1;
}

/* Merge the non-key single-child node at *slot with its child. Best effort. */
static void try_merge(radix_tree *t, rnode **slot) {
    rnode *n = *slot;
    if (n == t->root || n->iskey || n->nchild != 1) return;
    rnode *c = node_children(n)[0];
    size_t sl = (size_t)n->seglen + 1 + c->seglen;
    if (sl > UINT32_MAX) return;
    rnode *m = rmem_alloc(&t->mem, node_size(sl, c->nchild));
    if (!m) return;
    m->seglen = (uint32_t)sl;
    m->nchild = c->nchild;
    m->iskey = c->iskey;
    m->pad = 0;
    m->value = c->value;
    memcpy(node_children(m), node_children(c), c->nchild * sizeof(rnode *));
    memcpy(node_edges(m), node_edges(c), c->nchild);
    uint8_t *s = node_seg(m);
    memcpy(s, node_seg(n), n->seglen);
    s[n->seglen] = node_edges(n)[0];
    memcpy(s + n->seglen + 1, node_seg(c), c->seglen);
    node_free(t, n);
    node_free(t, c);
    *slot = m;
    t->nodes--;
}

/* Drop child idx of the node at *slot (the child is already freed). Never
 * fails: without memory for a smaller block the node is compacted in place. */
static void remove_child(radix_tree *t, rnode **slot, int idx) {
    rnode *n = *slot;
    size_t nc = n->nchild;
    rnode *s = rmem_alloc(&t->mem, node_size(n->seglen, nc - 1));
    if (s) {
        s->seglen = n->seglen;
        s->nchild = (uint16_t)(nc - 1);
        s->iskey = n->iskey;
        s->pad = 0;
        s->value = n->value;
        rnode **sc = node_children(s), **oc = node_children(n);
        uint8_t *se = node_edges(s), *oe = node_edges(n);
        memcpy(sc, oc, (size_t)idx * sizeof(rnode *));
        memcpy(sc + idx, oc + idx + 1, (nc - (size_t)idx - 1) * sizeof(rnode *));
        memcpy(se, oe, (size_t)idx);
        memcpy(se + idx, oe + idx + 1, nc - (size_t)idx - 1);
        memcpy(node_seg(s), node_seg(n), n->seglen);
        node_free(t, n);
        *slot = s;
        return;
    }
    rnode **oc = node_children(n);
    uint8_t *oe = node_edges(n);
    uint8_t *os = oe + nc;
    memmove(oc + idx, oc + idx + 1, (nc - (size_t)idx - 1) * sizeof(rnode *));
    uint8_t *ne = oe - sizeof(rnode *);
    memmove(ne, oe, (size_t)idx);
    memmove(ne + idx, oe + idx + 1, nc - (size_t)idx - 1);
    memmove(ne + nc - 1, os, n->seglen);
    n->nchild = (uint16_t)(nc - 1);
}

/* Free childless non-key nodes on the path of key (they can only appear after
 * a merge failed for lack of memory and the single child later went away).
 * No parent pointers and no allocation: re-walk from the root each time. */
static void prune_empty(radix_tree *t, const uint8_t *key, size_t len) {
    for (;;) {
        rnode **pslot = NULL, **slot = &t->root, **found = NULL;
        int idx = -1;
        size_t i = 0;
        for (;;) {
            rnode *n = *slot;
            if (n != t->root && !n->iskey && n->nchild == 0) {
                found = pslot;
                break;
            }
            if (n->seglen > len - i || (n->seglen && memcmp(node_seg(n), key + i, n->seglen) != 0))
                break;
            i += n->seglen;
            if (i == len) break;
            int c = node_find_child(n, key[i]);
            if (c < 0) break;
            pslot = slot;
            slot = &node_children(n)[c];
            idx = c;
            i++;
        }
        if (!found) return;
        node_free(t, *slot);
        t->nodes--;
        remove_child(t, found, idx);
        try_merge(t, found);
    }
}

/* After the child idx of *pslot was unlinked: merge or prune the parent. */
static void fixup_parent(radix_tree *t, rnode **pslot, const uint8_t *key, size_t len) {
    rnode *p = *pslot;
    if (p == t->root || p->iskey) return;
    if (p->nchild == 1) try_merge(t, pslot);
    else if (p->nchild == 0) prune_empty(t, key, len);
}

/* After the node at *slot (child idx of *pslot) lost its key: free it when it
 * is childless and fix the parent, or merge it with a single child. */
static void fixup_after_unkey(radix_tree *t, rnode **pslot, rnode **slot, int idx,
                              const uint8_t *key, size_t len) {
    rnode *n = *slot;
    if (n == t->root) return;
    if (n->nchild == 0) {
        node_free(t, n);
        t->nodes--;
        remove_child(t, pslot, idx);
        fixup_parent(t, pslot, key, len);
    } else if (n->nchild == 1) {
        try_merge(t, slot);
    }
}

int radix_tree_remove(radix_tree *t, const uint8_t *key, size_t len, void **old) {
    if (!t || (!key && len)) return 0;
    rnode **pslot = NULL, **slot = &t->root;
    rnode *n = t->root;
    int idx = -1;
    size_t i = 0;
    for (;;) {
        if (n->seglen > len - i) return 0;
        if (n->seglen && memcmp(node_seg(n), key + i, n->seglen) != 0) return 0;
        i += n->seglen;
        if (i == len) break;
        int c = node_find_child(n, key[i]);
        if (c < 0) return 0;
        pslot = slot;
        slot = &node_children(n)[c];
        idx = c;
        n = *slot;
        i++;
    }
    if (!n->iskey) return 0;
    if (old) *old = n->value;
    n->iskey = 0;
    n->value = NULL;
    t->size--;
    t->gen++;
    fixup_after_unkey(t, pslot, slot, idx, key, len);
    return 1;
}

size_t radix_tree_remove_prefix(radix_tree *t, const uint8_t *prefix, size_t len,
                                void (*free_value)(void *, void *), void *ud) {
    if (!t || (!prefix && len)) return 0;
    rnode **pslot = NULL, **slot = &t->root;
    rnode *n = t->root;
    int idx = -1;
    size_t i = 0;
    for (;;) {
        size_t rest = len - i;
        size_t cmp = n->seglen < rest ? n->seglen : rest;
        if (cmp && memcmp(node_seg(n), prefix + i, cmp) != 0) return 0;
        if (rest <= n->seglen) break; /* the prefix ends inside or at the end of n */
        i += n->seglen;
        int c = node_find_child(n, prefix[i]);
        if (c < 0) return 0;
        pslot = slot;
        slot = &node_children(n)[c];
        idx = c;
        n = *slot;
        i++;
    }
    size_t removed;
    if (n == t->root) {
        removed = 0;
        if (n->iskey) {
            removed++;
            if (free_value) free_value(n->value, ud);
        }
        rnode **ch = node_children(n);
        for (uint16_t k = 0; k < n->nchild; k++) removed += free_subtree(t, ch[k], free_value, ud);
        n->iskey = 0;
        n->value = NULL;
        n->nchild = 0; /* root seg is empty: nothing to move */
        rnode *fresh = node_new(t, NULL, 0, 0); /* best effort: give back the child slots */
        if (fresh) {
            node_free(t, n);
            t->root = fresh;
        }
    } else {
        removed = free_subtree(t, n, free_value, ud);
        remove_child(t, pslot, idx);
        fixup_parent(t, pslot, prefix, len);
    }
    t->size -= removed;
    t->gen++;
    return removed;
}

int radix_tree_has_prefix(const radix_tree *t, const uint8_t *prefix, size_t len) {
    if (!t || (!prefix && len)) return 0;
    const rnode *n = t->root;
    size_t i = 0;
    for (;;) {
        size_t rest = len - i;
        size_t cmp = n->seglen < rest ? n->seglen : rest;
        if (cmp && memcmp(node_seg(n), prefix + i, cmp) != 0) return 0;
        if (rest <= n->seglen) return n == t->root ? t->size > 0 : 1;
        i += n->seglen;
        int c = node_find_child(n, prefix[i]);
        if (c < 0) return 0;
        n = node_children(n)[c];
        i++;
    }
}

size_t radix_tree_size(const radix_tree *t) { return t ? t->size : 0; }
size_t radix_tree_nodes(const radix_tree *t) { return t ? t->nodes : 0; }
size_t radix_tree_bytes(const radix_tree *t) { return t ? t->mem.bytes : 0; }
size_t radix_tree_allocs(const radix_tree *t) { return t ? t->mem.allocs : 0; }
uint64_t radix_tree_generation(const radix_tree *t) { return t ? t->gen : 0; }

radix_tree *radix_tree_copy(const radix_tree *src) {
    if (!src) return NULL;
    radix_tree *t = tree_new();
    if (!t) return NULL;
    rnode *root = node_clone_seg(t, src->root, NULL, 0);
    if (!root) {
        radix_tree_free(t, NULL, NULL);
        return NULL;
    }
    node_free(t, t->root);
    t->root = root;
    /* Work stack of new nodes whose child slots still point into src. */
    radix_mem smem = {0, 0};
    rnode **stack = NULL;
    size_t cap = 0, depth = 0;
    int rc = scratch_reserve(&smem, (void **)&stack, &cap, 1, sizeof(rnode *));
    if (rc == RADIX_OK) stack[depth++] = root;
    else root->nchild = 0; /* its child slots still point into src */
    while (rc == RADIX_OK && depth) {
        rnode *x = stack[depth - 1];
        rnode **ch = node_children(x);
        /* Clone all children of x at once, then replace x by them. */
        rc = scratch_reserve(&smem, (void **)&stack, &cap, depth + x->nchild, sizeof(rnode *));
        if (rc != RADIX_OK) break;
        uint16_t k = 0;
        for (; k < x->nchild; k++) {
            const rnode *o = ch[k];
            rnode *c = node_clone_seg(t, o, node_seg(o), o->seglen);
            if (!c) break;
            ch[k] = c;
            t->nodes++;
        }
        if (k < x->nchild) {
            /* The clones made so far still point into src: drop them; x stays
             * on the stack and is cut below. */
            for (uint16_t q = 0; q < k; q++) {
                node_free(t, ch[q]);
                t->nodes--;
            }
            rc = RADIX_E_NOMEM;
            break;
        }
        depth--;
        for (k = 0; k < x->nchild; k++) stack[depth++] = ch[k];
    }
    if (rc != RADIX_OK) {
        /* Every node on the stack may still point into src: cut those links. */
        for (size_t q = 0; q < depth; q++) stack[q]->nchild = 0;
        rmem_free(&smem, stack);
        radix_tree_free(t, NULL, NULL);
        return NULL;
    }
    rmem_free(&smem, stack);
    t->size = src->size;
    return t;
}
