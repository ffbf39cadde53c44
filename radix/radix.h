/* radix.h: public API of the jetmq radix tree (Layer A), the MQTT topic
 * index (Layer B) and the retained-topic index.
 *
 * Everything between the CDEF markers is fed verbatim to cffi's cdef(), so it
 * holds plain declarations only (no #include, no macros). The rest of this
 * comment is the map of the data structure.
 *
 * ---------------------------------------------------------------------------
 * Layer A: a compressed (Patricia-style) radix tree
 * ---------------------------------------------------------------------------
 * Every node is ONE allocation:
 *
 *   +----------+---------+-------+-------+---------------+-------------+-----------+
 *   | seglen32 | nchild16| iskey | pad   | value (void*) | child[nchild]| edge[nchild]| seg[seglen]
 *   +----------+---------+-------+-------+---------------+-------------+-----------+
 *
 * The byte that leads from a parent to a child lives in the PARENT (edge[i]);
 * the child then holds the rest of the run of single-child bytes in its own
 * `seg`. The path of a node is  parent path . edge . seg, and the key flag
 * marks the end of that path (not the beginning, as in antirez/rax). Edges
 * are kept sorted, so depth-first order is lexicographic key order.
 *
 * Inserting "foo", "foobar" and "footer" (values omitted):
 *
 *      (root) ""                         (root) ""
 *         |  'f'                            |  'f'
 *      [ "oo" ] key                      [ "oo" ] key
 *         |  'b'          then "footer"     | 'b'      | 't'
 *      [ "ar" ] key         ========>    ["ar"] key  ["er"] key
 *
 * and "fox" then splits the "oo" node at offset 1:
 *
 *         (root)
 *           | 'f'
 *        [ "o" ]            <- not a key, two children
 *       'o' |     'x'
 *      [ "" ] key   [ "" ] key ("fox")
 *      'b' | 't'
 *    ["ar"]  ["er"]
 *
 * Invariants (checked by radix_tree_check): the root has an empty seg; every
 * other node is a key or has at least one child; a non-root node that is not
 * a key has at least two children (otherwise it is merged with its only child:
 * "re-compression"). Removal re-compresses best-effort: if the merge cannot
 * allocate, the tree stays valid, only less compact (radix_tree_check with
 * strict = 0 accepts that).
 *
 * A cursor (radix_pos) is (node, off) with 0 <= off <= seglen: `off` bytes
 * of the node's seg have been consumed; off == seglen is the end of the node
 * (where its key flag and children are). Cursors are plain values the caller
 * keeps on its own stack; they are valid until the next mutation.
 *
 * ---------------------------------------------------------------------------
 * Layer B: MQTT topic index ("mr_rax, corrected")
 * ---------------------------------------------------------------------------
 *   normal subscription :  H . F . 0xFF               -> sorted {client, handle} list
 *   shared subscription :  H . F . 0xFE . S . 0xFF    -> group list (+ round-robin cursor)
 *   H = '$' if F starts with '$', else '@'.  F = filter as received, after
 *   stripping "$share/S/". Levels keep their '/' separators, so the mapping
 *   from filters to keys is one-to-one (fixes mr_rax defect D1). 0xFE / 0xFF
 *   never occur in UTF-8, so they cannot collide with filter bytes.
 *
 *   The seed subscriptions of spec section 7.1 give this tree:
 *
 *     (root)
 *      '$' -> "$SYS/foo/#" 0xFF                         {1}
 *      '@' -> "+/bar" 0xFF                              {7}
 *           -> "foo/"
 *                 '#' 0xFF                              {1, 8, 128}
 *                 "bar" 0xFE "baz" 0xFF                 group {4, 5}
 *                           "bazzle" 0xFF               group {6}
 *                       0xFF                            {1, 2}
 *                       "/" 0xFF                        {3}
 *           -> E9 85 92 '/' E5 90 A7 0xFF               {8}
 *
 * Client tree (a second Layer A tree): be64(client) . 'S' . filter-as-sent
 * for the subscription inversion; be64(client) . 'a' . dir . 'A' . be16(alias)
 * -> topic copy and be64(client) . 'a' . dir . 'T' . topic -> alias.
 *
 * Retained index: a Layer A tree keyed H . topic, value = a 64-bit handle.
 *
 * ---------------------------------------------------------------------------
 * Threads and memory
 * ---------------------------------------------------------------------------
 * No function calls back into Python or takes a lock. cffi releases the GIL
 * around every call, so exactly one thread may own a tree / topic index /
 * retained index / match context at a time. The only global mutable state is
 * the optional allocator hook (radix_set_allocator), to be set before any
 * object is created. Every allocation failure returns RADIX_E_NOMEM and leaves
 * the structure unchanged (removals never fail).
 */
#ifndef JETMQ_RADIX_H
#define JETMQ_RADIX_H

#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */
enum {
    RADIX_OK = 0,
    RADIX_REPLACED = 1,
    RADIX_NOT_FOUND = 2,
    RADIX_E_NOMEM = -1,
    RADIX_E_INVAL = -2,
    RADIX_E_BUFFER = -3,
    RADIX_E_STALE = -4,
    RADIX_E_EMPTY = -10,
    RADIX_E_TOO_LONG = -11,
    RADIX_E_NUL = -12,
    RADIX_E_UTF8 = -13,
    RADIX_E_CONTROL = -14,
    RADIX_E_NONCHAR = -15,
    RADIX_E_WILDCARD = -16,
    RADIX_E_PLUS = -17,
    RADIX_E_HASH = -18,
    RADIX_E_SHARE = -19,
    RADIX_E_LEVELS = -20,
    RADIX_E_ALIAS_RANGE = -30,
    RADIX_E_ALIAS_UNKNOWN = -31
};

/* radix_topics_new flags and validation flags */
enum {
    RADIX_F_STRICT_UTF8 = 1,
    RADIX_F_INVERSION = 2
};

/* match flags */
enum {
    RADIX_SHARED_RANDOM = 0,
    RADIX_SHARED_ROUND_ROBIN = 1,
    RADIX_SHARED_ALL = 2,
    RADIX_NO_VALIDATE = 8
};

/* iterator seek operators */
enum {
    RADIX_SEEK_FIRST = 0,
    RADIX_SEEK_LAST = 1,
    RADIX_SEEK_EQ = 2,
    RADIX_SEEK_GE = 3,
    RADIX_SEEK_GT = 4,
    RADIX_SEEK_LE = 5,
    RADIX_SEEK_LT = 6
};

/* alias directions */
enum {
    RADIX_ALIAS_IN = 0,
    RADIX_ALIAS_OUT = 1
};

const char *radix_version(void);

/* Allocator hook (the only global state). NULL restores malloc/free. Set it
 * before creating any object; memory must be freed by the hook that made it. */
void radix_set_allocator(void *(*alloc_fn)(size_t), void (*free_fn)(void *));

/* ---- Layer A ---------------------------------------------------------- */
typedef struct radix_tree radix_tree;
typedef struct radix_iter radix_iter;
typedef struct {
    const void *node;
    uint32_t off;
} radix_pos;

/* Empty tree, NULL on OOM. */
radix_tree *radix_tree_new(void);
/* Free the tree; free_value(value, ud) is called for every key (may be NULL). */
void radix_tree_free(radix_tree *t, void (*free_value)(void *, void *), void *ud);
/* 1 = new key, 0 = existing key whose value was replaced (*old = previous;
 * old may be NULL). RADIX_E_NOMEM / RADIX_E_INVAL leave the tree unchanged. */
int radix_tree_insert(radix_tree *t, const uint8_t *key, size_t len, void *value, void **old);
/* Like insert, but an existing key keeps its value: returns 0, *old = current. */
int radix_tree_try_insert(radix_tree *t, const uint8_t *key, size_t len, void *value, void **old);
/* 1 found (*value set when value != NULL), 0 not found. */
int radix_tree_find(const radix_tree *t, const uint8_t *key, size_t len, void **value);
/* 1 removed (*old = its value), 0 absent. Never fails for lack of memory. */
int radix_tree_remove(radix_tree *t, const uint8_t *key, size_t len, void **old);
/* Remove every key starting with prefix (the equal key too); returns how many. */
size_t radix_tree_remove_prefix(radix_tree *t, const uint8_t *prefix, size_t len,
                                void (*free_value)(void *, void *), void *ud);
/* 1 if some key starts with prefix. */
int radix_tree_has_prefix(const radix_tree *t, const uint8_t *prefix, size_t len);
size_t radix_tree_size(const radix_tree *t);
size_t radix_tree_nodes(const radix_tree *t);
size_t radix_tree_bytes(const radix_tree *t);
size_t radix_tree_allocs(const radix_tree *t);
uint64_t radix_tree_generation(const radix_tree *t);
/* Deep copy (values copied as pointers); NULL on OOM. */
radix_tree *radix_tree_copy(const radix_tree *t);
/* 0 = all invariants hold; a negative number names the first violation.
 * strict = 1 also demands full re-compression. */
int radix_tree_check(const radix_tree *t, int strict);
/* Debug rendering, one node per line. RADIX_E_BUFFER: *len_out = needed. */
int radix_tree_dump(const radix_tree *t, char *buf, size_t cap, size_t *len_out);

/* Cursors (replace mr_rax's relative seeks). */
radix_pos radix_tree_root(const radix_tree *t);
int radix_pos_walk(const radix_tree *t, radix_pos *p, const uint8_t *s, size_t n);
int radix_pos_is_key(const radix_pos *p, void **value);
int radix_pos_has_children(const radix_pos *p);

/* Iterators. Seek returns 1 positioned / 0 nothing there; the first
 * next()/prev() after a seek returns the seeked key. next/prev: 1 on a key,
 * 0 at the end, RADIX_E_STALE after a mutation of the tree, RADIX_E_NOMEM. */
radix_iter *radix_iter_new(radix_tree *t);
void radix_iter_free(radix_iter *it);
int radix_iter_copy(radix_iter *dst, const radix_iter *src);
int radix_iter_seek(radix_iter *it, int op, const uint8_t *key, size_t len);
int radix_iter_seek_prefix(radix_iter *it, const uint8_t *prefix, size_t len);
int radix_iter_seek_pos(radix_iter *it, const radix_pos *p, const uint8_t *prefix, size_t len);
int radix_iter_next(radix_iter *it);
int radix_iter_prev(radix_iter *it);
/* Key and value of the current position; NULL at the end or when stale
 * (the nodes may be gone). The key stays valid until the next step. */
const uint8_t *radix_iter_key(const radix_iter *it, size_t *len);
void *radix_iter_value(const radix_iter *it);
/* 1 when the tree changed since the iterator's last seek. */
int radix_iter_stale(const radix_iter *it);

/* ---- validation ------------------------------------------------------- */
int radix_validate_topic(const uint8_t *topic, size_t len, uint32_t flags);
int radix_validate_filter(const uint8_t *filter, size_t len, uint32_t flags,
                          size_t *share_off, size_t *share_len, size_t *filter_off);

/* ---- Layer B ---------------------------------------------------------- */
typedef struct radix_topics radix_topics;
typedef struct radix_match_ctx radix_match_ctx;

radix_topics *radix_topics_new(uint32_t flags);
void radix_topics_free(radix_topics *rt);
int radix_topics_set_max_levels(radix_topics *rt, uint32_t max_levels);

int radix_subscribe(radix_topics *rt, const uint8_t *filter, size_t len, uint64_t client,
                    uint64_t handle);
int radix_unsubscribe(radix_topics *rt, const uint8_t *filter, size_t len, uint64_t client);
int radix_unsubscribe_all(radix_topics *rt, uint64_t client, size_t *n_removed);
int radix_client_filters(radix_topics *rt, uint64_t client, uint8_t *buf, size_t cap,
                         size_t *len_out, size_t *count_out);
int radix_client_remove(radix_topics *rt, uint64_t client);

radix_match_ctx *radix_match_ctx_new(uint64_t seed);
void radix_match_ctx_free(radix_match_ctx *m);
size_t radix_match_ctx_allocs(const radix_match_ctx *m);
size_t radix_match_ctx_bytes(const radix_match_ctx *m);
int radix_match(radix_topics *rt, radix_match_ctx *m, const uint8_t *topic, size_t len,
                uint32_t flags, uint64_t *out, size_t cap, size_t *n_out);
int radix_match_fetch(radix_match_ctx *m, uint64_t *out, size_t cap, size_t *n_out);
int radix_match_detailed(radix_topics *rt, radix_match_ctx *m, const uint8_t *topic, size_t len,
                         uint32_t flags, uint64_t *clients, uint64_t *handles, uint32_t *group,
                         size_t cap, size_t *n_out);
int radix_match_fetch_detailed(radix_match_ctx *m, uint64_t *clients, uint64_t *handles,
                               uint32_t *group, size_t cap, size_t *n_out);

int radix_alias_set(radix_topics *rt, uint64_t client, int dir, uint16_t alias, uint16_t max,
                    const uint8_t *topic, size_t len);
int radix_alias_topic(radix_topics *rt, uint64_t client, int dir, uint16_t alias, uint8_t *buf,
                      size_t cap, size_t *len_out);
int radix_alias_of_topic(radix_topics *rt, uint64_t client, int dir, const uint8_t *topic,
                         size_t len, uint16_t *alias_out);
int radix_alias_clear(radix_topics *rt, uint64_t client);

size_t radix_topics_subscriptions(const radix_topics *rt);
size_t radix_topics_filters(const radix_topics *rt);
size_t radix_topics_bytes(const radix_topics *rt);
size_t radix_topics_allocs(const radix_topics *rt);
size_t radix_topics_nodes(const radix_topics *rt);
/* which: 0 = topic tree, 1 = client tree */
int radix_topics_dump(const radix_topics *rt, int which, char *buf, size_t cap, size_t *len_out);
int radix_topics_check(const radix_topics *rt);

/* ---- retained index ------------------------------------------------------ */
typedef struct radix_retained radix_retained;

radix_retained *radix_retained_new(uint32_t flags);
void radix_retained_free(radix_retained *r);
/* RADIX_OK = new topic, RADIX_REPLACED = handle replaced, or a validation error. */
int radix_retained_set(radix_retained *r, const uint8_t *topic, size_t len, uint64_t handle);
int radix_retained_remove(radix_retained *r, const uint8_t *topic, size_t len, uint64_t *old);
int radix_retained_get(const radix_retained *r, const uint8_t *topic, size_t len, uint64_t *handle);
/* Handles of stored topics matching the filter ("$share/S/" is stripped). */
int radix_retained_match(radix_retained *r, const uint8_t *filter, size_t len, uint64_t *out,
                         size_t cap, size_t *n_out);
int radix_retained_fetch(radix_retained *r, uint64_t *out, size_t cap, size_t *n_out);
size_t radix_retained_count(const radix_retained *r);
size_t radix_retained_bytes(const radix_retained *r);
/* CDEF-END */

#endif
