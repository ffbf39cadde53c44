/* topics.h: Layer B internals shared by topics.c, match.c and clients.c. */
#ifndef JETMQ_RADIX_TOPICS_H
#define JETMQ_RADIX_TOPICS_H

#include "internal.h"

#define MARK_SHARED 0xFE
#define MARK_TERM 0xFF

typedef struct sub_entry {
    uint64_t client;
    uint64_t handle;
} sub_entry;

/* Value of a filter key: entries sorted by client, behind an 8-byte header.
 * A shared group's list has one extra slot after its `cap` entries holding the
 * round-robin cursor (plain increment: one owner thread, see radix.h); plain
 * lists do not pay for it. */
typedef struct sublist {
    uint32_t n, cap;
    sub_entry e[];
} sublist;

static inline uint32_t *list_rr(sublist *l) { return (uint32_t *)(void *)&l->e[l->cap]; }

struct radix_topics {
    radix_mem mem; /* the struct itself and the subscriber lists */
    radix_tree *tree;
    radix_tree *clients;
    uint32_t flags;
    uint32_t max_levels;
    size_t subs;
    size_t filters;
};

/* Small-buffer key builder: stack storage, heap only for long keys. */
typedef struct keybuf {
    uint8_t *p;
    size_t len;
    radix_mem *mem;
    uint8_t local[256];
} keybuf;

int kb_init(keybuf *kb, radix_mem *mem, size_t need);
void kb_done(keybuf *kb);
static inline void kb_put(keybuf *kb, const void *s, size_t n) {
    if (n) memcpy(kb->p + kb->len, s, n);
    kb->len += n;
}
static inline void kb_byte(keybuf *kb, uint8_t b) { kb->p[kb->len++] = b; }
static inline void kb_be64(keybuf *kb, uint64_t v) {
    for (int i = 7; i >= 0; i--) kb_byte(kb, (uint8_t)(v >> (8 * i)));
}

/* Remove one (filter, client) from the topic tree only (no client tree). */
int topics_unsub_tree(radix_topics *rt, const uint8_t *filter, size_t len, uint64_t client,
                      uint8_t *keyspace);

#endif
