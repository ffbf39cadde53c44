/* internal.h: shared by the radix C sources; not part of the public API. */
#ifndef JETMQ_RADIX_INTERNAL_H
#define JETMQ_RADIX_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "radix.h"

_Static_assert(sizeof(void *) == 8, "radix assumes 64-bit pointers (handles live in value slots)");

/* Per-object accounting: every allocation of an object goes through its own
 * radix_mem, so bytes and allocation counts are exact per tree / context. */
typedef struct radix_mem {
    size_t bytes;  /* live bytes, including the 8-byte size prefix of each block */
    size_t allocs; /* allocations made so far (monotonic) */
} radix_mem;

void *rmem_alloc(radix_mem *m, size_t n);
void rmem_free(radix_mem *m, void *p);
size_t rmem_size(const void *p);

/* Layer A node: one block, see radix.h. */
typedef struct rnode {
    uint32_t seglen;
    uint16_t nchild;
    uint8_t iskey;
    uint8_t pad;
    void *value;
} rnode;

static inline rnode **node_children(const rnode *n) {
    return (rnode **)((uint8_t *)(uintptr_t)n + sizeof(rnode));
}
static inline uint8_t *node_edges(const rnode *n) {
    return (uint8_t *)(node_children(n) + n->nchild);
}
static inline uint8_t *node_seg(const rnode *n) { return node_edges(n) + n->nchild; }
static inline size_t node_size(size_t seglen, size_t nchild) {
    return sizeof(rnode) + nchild * (sizeof(rnode *) + 1) + seglen;
}
/* Index of the child on edge b, or -1. Edges are sorted: early exit. */
static inline int node_find_child(const rnode *n, uint8_t b) {
    const uint8_t *e = node_edges(n);
    for (int i = 0; i < (int)n->nchild; i++) {
        if (e[i] == b) return i;
        if (e[i] > b) return -1;
    }
    return -1;
}

struct radix_tree {
    rnode *root;
    size_t size;
    size_t nodes;
    uint64_t gen;
    radix_mem mem;
};

/* Tree constructor sharing nothing; used by Layer B and the retained index. */
radix_tree *tree_new(void);

/* Walk bytes from a cursor without the public NULL checks (hot path). */
static inline int pos_walk(radix_pos *p, const uint8_t *s, size_t n) {
    const rnode *node = (const rnode *)p->node;
    uint32_t off = p->off;
    for (size_t i = 0; i < n; i++) {
        if (off < node->seglen) {
            if (node_seg(node)[off] != s[i]) return 0;
            off++;
        } else {
            int c = node_find_child(node, s[i]);
            if (c < 0) return 0;
            node = node_children(node)[c];
            off = 0;
        }
    }
    p->node = node;
    p->off = off;
    return 1;
}
static inline int pos_walk1(radix_pos *p, uint8_t b) {
    const rnode *node = (const rnode *)p->node;
    if (p->off < node->seglen) {
        if (node_seg(node)[p->off] != b) return 0;
        p->off++;
        return 1;
    }
    int c = node_find_child(node, b);
    if (c < 0) return 0;
    p->node = node_children(node)[c];
    p->off = 0;
    return 1;
}
static inline int pos_key(const radix_pos *p, void **value) {
    const rnode *n = (const rnode *)p->node;
    if (p->off == n->seglen && n->iskey) {
        if (value) *value = n->value;
        return 1;
    }
    return 0;
}

/* Growable scratch array in a radix_mem (only grows; no shrink). */
int scratch_reserve(radix_mem *m, void **buf, size_t *cap, size_t need, size_t elem);

/* UTF-8 / structure validation helpers shared by topics and retained. */
int validate_topic_levels(const uint8_t *topic, size_t len, uint32_t flags, uint32_t max_levels);
int validate_filter_levels(const uint8_t *filter, size_t len, uint32_t flags, uint32_t max_levels,
                           size_t *share_off, size_t *share_len, size_t *filter_off);

#endif
