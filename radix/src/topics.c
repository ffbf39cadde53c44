/* topics.c: Layer B subscriptions (spec 6.2.1): key layout, subscriber lists,
 * the optional client inversion tree and the counters. */
#include "topics.h"

int kb_init(keybuf *kb, radix_mem *mem, size_t need) {
    kb->len = 0;
    kb->mem = mem;
    if (need <= sizeof(kb->local)) {
        kb->p = kb->local;
        return RADIX_OK;
    }
    kb->p = rmem_alloc(mem, need);
    return kb->p ? RADIX_OK : RADIX_E_NOMEM;
}

void kb_done(keybuf *kb) {
    if (kb->p != kb->local) rmem_free(kb->mem, kb->p);
}

radix_topics *radix_topics_new(uint32_t flags) {
    if (flags & ~(uint32_t)(RADIX_F_STRICT_UTF8 | RADIX_F_INVERSION)) return NULL;
    radix_mem mem = {0, 0};
    radix_topics *rt = rmem_alloc(&mem, sizeof(*rt));
    if (!rt) return NULL;
    memset(rt, 0, sizeof(*rt));
    rt->mem = mem;
    rt->flags = flags;
    rt->tree = tree_new();
    rt->clients = tree_new();
    if (!rt->tree || !rt->clients) {
        radix_tree_free(rt->tree, NULL, NULL);
        radix_tree_free(rt->clients, NULL, NULL);
        radix_mem m = rt->mem;
        rmem_free(&m, rt);
        return NULL;
    }
    return rt;
}

/* Values of both trees: blocks (lists, alias topic copies), NULL, or odd
 * tagged integers (outbound alias numbers, see clients.c) that own nothing. */
static void free_list(void *v, void *ud) {
    if (!((uintptr_t)v & 1u)) rmem_free((radix_mem *)ud, v);
}

void radix_topics_free(radix_topics *rt) {
    if (!rt) return;
    radix_tree_free(rt->tree, free_list, &rt->mem);
    radix_tree_free(rt->clients, free_list, &rt->mem);
    radix_mem m = rt->mem;
    rmem_free(&m, rt);
}

int radix_topics_set_max_levels(radix_topics *rt, uint32_t max_levels) {
    if (!rt) return RADIX_E_INVAL;
    rt->max_levels = max_levels;
    return RADIX_OK;
}

/* H . F [. 0xFE . S] . 0xFF into kb (sized by the caller). */
static void build_topic_key(keybuf *kb, const uint8_t *f, size_t len, size_t soff, size_t slen,
                            size_t foff) {
    kb_byte(kb, f[foff] == '$' ? '$' : '@');
    kb_put(kb, f + foff, len - foff);
    if (slen) {
        kb_byte(kb, MARK_SHARED);
        kb_put(kb, f + soff, slen);
    }
    kb_byte(kb, MARK_TERM);
}

static size_t find_client(const sublist *l, uint64_t client, int *found) {
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (l->e[mid].client < client) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < l->n && l->e[lo].client == client;
    return lo;
}

static sublist *list_new(radix_mem *m, uint32_t cap, int group) {
    sublist *l = rmem_alloc(m, sizeof(sublist) + ((size_t)cap + (group ? 1 : 0)) * sizeof(sub_entry));
    if (!l) return NULL;
    l->n = 0;
    l->cap = cap;
    if (group) memset(&l->e[cap], 0, sizeof(sub_entry));
    return l;
}

int radix_subscribe(radix_topics *rt, const uint8_t *filter, size_t len, uint64_t client,
                    uint64_t handle) {
    if (!rt || (!filter && len)) return RADIX_E_INVAL;
    size_t soff, slen, foff;
    int rc = validate_filter_levels(filter, len, rt->flags, rt->max_levels, &soff, &slen, &foff);
    if (rc) return rc;
    keybuf kb, ck;
    if (kb_init(&kb, &rt->mem, len + 3) != RADIX_OK) return RADIX_E_NOMEM;
    build_topic_key(&kb, filter, len, soff, slen, foff);
    int inv = (rt->flags & RADIX_F_INVERSION) != 0;
    if (inv) {
        if (kb_init(&ck, &rt->mem, len + 9) != RADIX_OK) {
            kb_done(&kb);
            return RADIX_E_NOMEM;
        }
        kb_be64(&ck, client);
        kb_byte(&ck, 'S');
        kb_put(&ck, filter, len);
    }
    /* One walk for a new filter: try-insert a fresh one-entry list; when the
     * key exists the fresh list is dropped and the existing one is updated. */
    void *v = NULL;
    sublist *l = NULL, *grown = NULL, *fresh = list_new(&rt->mem, 1, slen != 0);
    size_t at = 0;
    int found = 0;
    if (!fresh) {
        rc = RADIX_E_NOMEM;
        goto done;
    }
    fresh->n = 1;
    fresh->e[0].client = client;
    fresh->e[0].handle = handle;
    int tins = radix_tree_try_insert(rt->tree, kb.p, kb.len, fresh, &v);
    if (tins < 0) {
        rmem_free(&rt->mem, fresh);
        rc = tins;
        goto done;
    }
    if (tins == 0) {
        rmem_free(&rt->mem, fresh);
        fresh = NULL;
        l = v;
        at = find_client(l, client, &found);
        if (found) {
            l->e[at].handle = handle;
            rc = RADIX_REPLACED;
            goto done;
        }
        if (l->n == l->cap) {
            if (l->cap > UINT32_MAX / 2) {
                rc = RADIX_E_NOMEM;
                goto done;
            }
            uint32_t ncap = l->cap < 4 ? l->cap + 1 : l->cap + l->cap / 2;
            grown = list_new(&rt->mem, ncap, slen != 0);
            if (!grown) {
                rc = RADIX_E_NOMEM;
                goto done;
            }
        }
    }
    if (inv) {
        int ins = radix_tree_insert(rt->clients, ck.p, ck.len, NULL, NULL);
        if (ins < 0) {
            if (fresh) {
                radix_tree_remove(rt->tree, kb.p, kb.len, NULL);
                rmem_free(&rt->mem, fresh);
            }
            if (grown) rmem_free(&rt->mem, grown);
            rc = RADIX_E_NOMEM;
            goto done;
        }
    }
    if (fresh) {
        rt->filters++;
    } else {
        sublist *dst = l;
        if (grown) {
            memcpy(grown->e, l->e, at * sizeof(sub_entry));
            memcpy(grown->e + at + 1, l->e + at, (l->n - at) * sizeof(sub_entry));
            grown->n = l->n + 1;
            if (slen) *list_rr(grown) = *list_rr(l);
            dst = grown;
            radix_tree_insert(rt->tree, kb.p, kb.len, grown, NULL); /* existing key: no allocation */
            rmem_free(&rt->mem, l);
        } else {
            memmove(l->e + at + 1, l->e + at, (l->n - at) * sizeof(sub_entry));
            l->n++;
        }
        dst->e[at].client = client;
        dst->e[at].handle = handle;
    }
    rt->subs++;
    rc = RADIX_OK;
done:
    kb_done(&kb);
    if (inv) kb_done(&ck);
    return rc;
}

/* keyspace: NULL, or a buffer of at least len + 3 bytes (no allocation). */
int topics_unsub_tree(radix_topics *rt, const uint8_t *filter, size_t len, uint64_t client,
                      uint8_t *keyspace) {
    size_t soff, slen, foff;
    int rc = validate_filter_levels(filter, len, rt->flags, 0, &soff, &slen, &foff);
    if (rc) return rc;
    keybuf kb;
    if (keyspace) {
        kb.p = keyspace;
        kb.len = 0;
        kb.mem = &rt->mem;
    } else if (kb_init(&kb, &rt->mem, len + 3) != RADIX_OK) {
        return RADIX_E_NOMEM;
    }
    build_topic_key(&kb, filter, len, soff, slen, foff);
    void *v = NULL;
    rc = RADIX_NOT_FOUND;
    if (radix_tree_find(rt->tree, kb.p, kb.len, &v)) {
        sublist *l = v;
        int found;
        size_t at = find_client(l, client, &found);
        if (found) {
            if (l->n == 1) {
                radix_tree_remove(rt->tree, kb.p, kb.len, NULL);
                rmem_free(&rt->mem, l);
                rt->filters--;
            } else {
                memmove(l->e + at, l->e + at + 1, (l->n - at - 1) * sizeof(sub_entry));
                l->n--;
            }
            rt->subs--;
            rc = RADIX_OK;
        }
    }
    if (!keyspace) kb_done(&kb);
    return rc;
}

int radix_unsubscribe(radix_topics *rt, const uint8_t *filter, size_t len, uint64_t client) {
    if (!rt || (!filter && len)) return RADIX_E_INVAL;
    int rc = validate_filter_levels(filter, len, rt->flags, 0, NULL, NULL, NULL);
    if (rc) return rc;
    keybuf ck;
    int inv = (rt->flags & RADIX_F_INVERSION) != 0;
    if (inv) {
        if (kb_init(&ck, &rt->mem, len + 9) != RADIX_OK) return RADIX_E_NOMEM;
        kb_be64(&ck, client);
        kb_byte(&ck, 'S');
        kb_put(&ck, filter, len);
    }
    rc = topics_unsub_tree(rt, filter, len, client, NULL);
    if (rc == RADIX_OK && inv) radix_tree_remove(rt->clients, ck.p, ck.len, NULL);
    if (inv) kb_done(&ck);
    return rc;
}

size_t radix_topics_subscriptions(const radix_topics *rt) { return rt ? rt->subs : 0; }
size_t radix_topics_filters(const radix_topics *rt) { return rt ? rt->filters : 0; }
size_t radix_topics_bytes(const radix_topics *rt) {
    return rt ? rt->mem.bytes + radix_tree_bytes(rt->tree) + radix_tree_bytes(rt->clients) : 0;
}
size_t radix_topics_allocs(const radix_topics *rt) {
    return rt ? rt->mem.allocs + radix_tree_allocs(rt->tree) + radix_tree_allocs(rt->clients) : 0;
}
size_t radix_topics_nodes(const radix_topics *rt) { return rt ? radix_tree_nodes(rt->tree) : 0; }

int radix_topics_dump(const radix_topics *rt, int which, char *buf, size_t cap, size_t *len_out) {
    if (!rt || (which != 0 && which != 1)) return RADIX_E_INVAL;
    return radix_tree_dump(which ? rt->clients : rt->tree, buf, cap, len_out);
}

int radix_topics_check(const radix_topics *rt) {
    if (!rt) return RADIX_E_INVAL;
    int rc = radix_tree_check(rt->tree, 0);
    if (rc) return rc;
    rc = radix_tree_check(rt->clients, 0);
    if (rc) return rc;
    if (radix_tree_size(rt->tree) != rt->filters) return -20;
    return 0;
}
