/* clients.c: the client tree: subscription inversion (unsubscribe_all,
 * client_filters, client_remove) and topic aliases (spec 6.2.5).
 *
 * Keys:  be64(client) 'S' filter-as-sent            -> NULL
 *        be64(client) 'a' dir 'A' be16(alias)       -> topic copy (tlen32 + bytes)
 *        be64(client) 'a' dir 'T' topic             -> alias, tagged: (alias << 1) | 1
 * (odd, so it can never be mistaken for a block when the tree is freed).
 * Inbound aliases only use the 'A' keys (several aliases may name one topic);
 * outbound keeps 'A' and 'T' one-to-one.
 */
#include "topics.h"

#define ALIAS_TAG(a) ((void *)(((uintptr_t)(a) << 1) | 1u))
#define ALIAS_UNTAG(v) ((uint16_t)((uintptr_t)(v) >> 1))

static void prefix_key(uint8_t *k, uint64_t client, uint8_t tag) {
    for (int i = 0; i < 8; i++) k[i] = (uint8_t)(client >> (8 * (7 - i)));
    k[8] = tag;
}

int radix_unsubscribe_all(radix_topics *rt, uint64_t client, size_t *n_removed) {
    if (!rt || !(rt->flags & RADIX_F_INVERSION)) return RADIX_E_INVAL;
    uint8_t pfx[9];
    prefix_key(pfx, client, 'S');
    radix_iter *it = radix_iter_new(rt->clients);
    if (!it) return RADIX_E_NOMEM;
    /* Pass 1: the longest filter, so pass 2 needs no allocation at all. */
    size_t maxlen = 0;
    int rc = radix_iter_seek_prefix(it, pfx, 9);
    while (rc >= 0 && (rc = radix_iter_next(it)) == 1) {
        size_t kl;
        radix_iter_key(it, &kl);
        if (kl - 9 > maxlen) maxlen = kl - 9;
    }
    if (rc < 0) {
        radix_iter_free(it);
        return rc;
    }
    uint8_t *space = rmem_alloc(&rt->mem, maxlen + 3);
    if (!space) {
        radix_iter_free(it);
        return RADIX_E_NOMEM;
    }
    size_t n = 0;
    rc = radix_iter_seek_prefix(it, pfx, 9);
    /* The iterator already holds memory for the longest path: no NOMEM now. */
    while (rc >= 0 && (rc = radix_iter_next(it)) == 1) {
        size_t kl;
        const uint8_t *k = radix_iter_key(it, &kl);
        if (topics_unsub_tree(rt, k + 9, kl - 9, client, space) == RADIX_OK) n++;
    }
    rmem_free(&rt->mem, space);
    radix_iter_free(it);
    if (rc < 0) return rc;
    radix_tree_remove_prefix(rt->clients, pfx, 9, NULL, NULL);
    if (n_removed) *n_removed = n;
    return RADIX_OK;
}

int radix_client_filters(radix_topics *rt, uint64_t client, uint8_t *buf, size_t cap,
                         size_t *len_out, size_t *count_out) {
    if (!rt || !len_out || (!buf && cap) || !(rt->flags & RADIX_F_INVERSION)) return RADIX_E_INVAL;
    uint8_t pfx[9];
    prefix_key(pfx, client, 'S');
    radix_iter *it = radix_iter_new(rt->clients);
    if (!it) return RADIX_E_NOMEM;
    size_t need = 0, count = 0;
    int rc = radix_iter_seek_prefix(it, pfx, 9);
    while (rc >= 0 && (rc = radix_iter_next(it)) == 1) {
        size_t kl;
        const uint8_t *k = radix_iter_key(it, &kl);
        size_t fl = kl - 9;
        if (need + 2 + fl <= cap) {
            buf[need] = (uint8_t)(fl >> 8);
            buf[need + 1] = (uint8_t)fl;
            memcpy(buf + need + 2, k + 9, fl);
        }
        need += 2 + fl;
        count++;
    }
    radix_iter_free(it);
    if (rc < 0) return rc;
    *len_out = need;
    if (count_out) *count_out = count;
    return need <= cap ? RADIX_OK : RADIX_E_BUFFER;
}

static void free_topic_copy(void *v, void *ud) {
    if (!((uintptr_t)v & 1u)) rmem_free((radix_mem *)ud, v); /* tagged alias numbers own nothing */
}

int radix_alias_clear(radix_topics *rt, uint64_t client) {
    if (!rt) return RADIX_E_INVAL;
    uint8_t k[12];
    prefix_key(k, client, 'a');
    for (uint8_t dir = 0; dir < 2; dir++) {
        k[9] = dir;
        k[10] = 'A';
        radix_tree_remove_prefix(rt->clients, k, 11, free_topic_copy, &rt->mem);
        k[10] = 'T';
        radix_tree_remove_prefix(rt->clients, k, 11, NULL, NULL);
    }
    return RADIX_OK;
}

int radix_client_remove(radix_topics *rt, uint64_t client) {
    if (!rt) return RADIX_E_INVAL;
    if (rt->flags & RADIX_F_INVERSION) {
        int rc = radix_unsubscribe_all(rt, client, NULL);
        if (rc) return rc;
    }
    radix_alias_clear(rt, client);
    uint8_t k[9];
    prefix_key(k, client, 0); /* only the 8 id bytes are used */
    radix_tree_remove_prefix(rt->clients, k, 8, free_topic_copy, &rt->mem);
    return RADIX_OK;
}

/* topic copy: uint32 length then the bytes */
static uint8_t *topic_copy(radix_mem *m, const uint8_t *topic, size_t len) {
    uint8_t *c = rmem_alloc(m, 4 + len);
    if (!c) return NULL;
    uint32_t l32 = (uint32_t)len;
    memcpy(c, &l32, 4);
    memcpy(c + 4, topic, len);
    return c;
}
static size_t copy_len(const uint8_t *c) {
    uint32_t l32;
    memcpy(&l32, c, 4);
    return l32;
}

static int dir_ok(int dir) { return dir == RADIX_ALIAS_IN || dir == RADIX_ALIAS_OUT; }

int radix_alias_set(radix_topics *rt, uint64_t client, int dir, uint16_t alias, uint16_t max,
                    const uint8_t *topic, size_t len) {
    if (!rt || !dir_ok(dir) || (!topic && len)) return RADIX_E_INVAL;
    if (alias == 0 || alias > max) return RADIX_E_ALIAS_RANGE;
    int rc = validate_topic_levels(topic, len, rt->flags, rt->max_levels);
    if (rc) return rc;
    uint8_t ak[13];
    prefix_key(ak, client, 'a');
    ak[9] = (uint8_t)dir;
    ak[10] = 'A';
    ak[11] = (uint8_t)(alias >> 8);
    ak[12] = (uint8_t)alias;
    keybuf tk;
    if (kb_init(&tk, &rt->mem, 11 + len) != RADIX_OK) return RADIX_E_NOMEM;
    kb_put(&tk, ak, 10);
    kb_byte(&tk, 'T');
    kb_put(&tk, topic, len);
    uint8_t *copy = topic_copy(&rt->mem, topic, len);
    if (!copy) {
        kb_done(&tk);
        return RADIX_E_NOMEM;
    }
    if (dir == RADIX_ALIAS_IN) {
        void *old = NULL;
        int ins = radix_tree_insert(rt->clients, ak, 13, copy, &old);
        if (ins < 0) {
            rmem_free(&rt->mem, copy);
            kb_done(&tk);
            return ins;
        }
        if (ins == 0) rmem_free(&rt->mem, old);
        kb_done(&tk);
        return RADIX_OK;
    }
    /* Outbound: one-to-one. Insert both new keys first (rollback on OOM),
     * then drop the stale ones (removal never fails). */
    void *prev_alias = NULL;
    int tins = radix_tree_insert(rt->clients, tk.p, tk.len, ALIAS_TAG(alias), &prev_alias);
    if (tins < 0) {
        rmem_free(&rt->mem, copy);
        kb_done(&tk);
        return tins;
    }
    void *old_copy = NULL;
    int ains = radix_tree_insert(rt->clients, ak, 13, copy, &old_copy);
    if (ains < 0) {
        if (tins == 1) radix_tree_remove(rt->clients, tk.p, tk.len, NULL);
        else radix_tree_insert(rt->clients, tk.p, tk.len, prev_alias, NULL);
        rmem_free(&rt->mem, copy);
        kb_done(&tk);
        return ains;
    }
    if (ains == 0 && old_copy) {
        /* The alias named another topic: that topic loses its alias. */
        size_t ol = copy_len(old_copy);
        const uint8_t *ot = (const uint8_t *)old_copy + 4;
        if (ol != len || memcmp(ot, topic, len) != 0) {
            keybuf ok;
            if (kb_init(&ok, &rt->mem, 11 + ol) == RADIX_OK) {
                kb_put(&ok, ak, 10);
                kb_byte(&ok, 'T');
                kb_put(&ok, ot, ol);
                void *v = NULL;
                if (radix_tree_find(rt->clients, ok.p, ok.len, &v) && v == ALIAS_TAG(alias))
                    radix_tree_remove(rt->clients, ok.p, ok.len, NULL);
                kb_done(&ok);
            }
        }
        rmem_free(&rt->mem, old_copy);
    }
    if (tins == 0 && prev_alias != ALIAS_TAG(alias)) {
        /* The topic had another alias: forget that alias. */
        uint16_t pa = ALIAS_UNTAG(prev_alias);
        uint8_t pk[13];
        memcpy(pk, ak, 11);
        pk[11] = (uint8_t)(pa >> 8);
        pk[12] = (uint8_t)pa;
        void *pc = NULL;
        if (radix_tree_remove(rt->clients, pk, 13, &pc)) rmem_free(&rt->mem, pc);
    }
    kb_done(&tk);
    return RADIX_OK;
}

int radix_alias_topic(radix_topics *rt, uint64_t client, int dir, uint16_t alias, uint8_t *buf,
                      size_t cap, size_t *len_out) {
    if (!rt || !dir_ok(dir) || !len_out || (!buf && cap)) return RADIX_E_INVAL;
    uint8_t ak[13];
    prefix_key(ak, client, 'a');
    ak[9] = (uint8_t)dir;
    ak[10] = 'A';
    ak[11] = (uint8_t)(alias >> 8);
    ak[12] = (uint8_t)alias;
    void *v = NULL;
    if (!radix_tree_find(rt->clients, ak, 13, &v)) return RADIX_E_ALIAS_UNKNOWN;
    size_t l = copy_len(v);
    *len_out = l;
    if (l > cap) return RADIX_E_BUFFER;
    memcpy(buf, (const uint8_t *)v + 4, l);
    return RADIX_OK;
}

int radix_alias_of_topic(radix_topics *rt, uint64_t client, int dir, const uint8_t *topic,
                         size_t len, uint16_t *alias_out) {
    if (!rt || !dir_ok(dir) || !alias_out || (!topic && len)) return RADIX_E_INVAL;
    uint8_t pk[11];
    prefix_key(pk, client, 'a');
    pk[9] = (uint8_t)dir;
    if (dir == RADIX_ALIAS_OUT) {
        keybuf tk;
        if (kb_init(&tk, &rt->mem, 11 + len) != RADIX_OK) return RADIX_E_NOMEM;
        kb_put(&tk, pk, 10);
        kb_byte(&tk, 'T');
        kb_put(&tk, topic, len);
        void *v = NULL;
        int found = radix_tree_find(rt->clients, tk.p, tk.len, &v);
        kb_done(&tk);
        if (!found) return RADIX_NOT_FOUND;
        *alias_out = ALIAS_UNTAG(v);
        return RADIX_OK;
    }
    /* Inbound keeps only alias -> topic: scan this client's aliases (at most
     * 65,535) for the lowest alias naming the topic. */
    pk[10] = 'A';
    radix_iter *it = radix_iter_new(rt->clients);
    if (!it) return RADIX_E_NOMEM;
    int rc = radix_iter_seek_prefix(it, pk, 11);
    int result = RADIX_NOT_FOUND;
    while (rc >= 0 && (rc = radix_iter_next(it)) == 1) {
        size_t kl;
        const uint8_t *k = radix_iter_key(it, &kl);
        const uint8_t *c = radix_iter_value(it);
        if (kl == 13 && copy_len(c) == len && memcmp(c + 4, topic, len) == 0) {
            *alias_out = (uint16_t)((k[11] << 8) | k[12]);
            result = RADIX_OK;
            break;
        }
    }
    radix_iter_free(it);
    return rc < 0 ? rc : result;
}
