/* debug.c: the invariant checker, the tree printer and the cursor API. */
#include "internal.h"

typedef struct {
    const rnode *n;
    size_t depth;
    int edge; /* -1 for the root */
} dfs_item;

int radix_tree_check(const radix_tree *t, int strict) {
    if (!t || !t->root) return -1;
    if (t->root->seglen != 0) return -2;
    radix_mem m = {0, 0};
    dfs_item *st = NULL;
    size_t cap = 0, depth = 0, keys = 0, nodes = 0;
    int rc = 0;
    if (scratch_reserve(&m, (void **)&st, &cap, 1, sizeof(*st)) != RADIX_OK) return RADIX_E_NOMEM;
    st[depth++] = (dfs_item){t->root, 0, -1};
    while (depth && rc == 0) {
        dfs_item it = st[--depth];
        const rnode *n = it.n;
        nodes++;
        if (n->iskey) keys++;
        if (n != t->root) {
            if (!n->iskey && n->nchild == 0) rc = -3;
            else if (strict && !n->iskey && n->nchild == 1) rc = -4;
        }
        if (!n->iskey && n->value) rc = -5;
        const uint8_t *e = node_edges(n);
        for (uint16_t i = 1; i < n->nchild && rc == 0; i++)
            if (e[i - 1] >= e[i]) rc = -6;
        if (rc) break;
        if (scratch_reserve(&m, (void **)&st, &cap, depth + n->nchild, sizeof(*st)) != RADIX_OK) {
            rc = RADIX_E_NOMEM;
            break;
        }
        for (int i = (int)n->nchild - 1; i >= 0; i--)
            st[depth++] = (dfs_item){node_children(n)[i], it.depth + 1, e[i]};
    }
    rmem_free(&m, st);
    if (rc) return rc;
    if (keys != t->size) return -7;
    if (nodes != t->nodes) return -8;
    return 0;
}

typedef struct {
    char *buf;
    size_t cap;
    size_t len;
} outbuf;

static void out_ch(outbuf *o, char c) {
    if (o->len < o->cap) o->buf[o->len] = c;
    o->len++;
}
static void out_str(outbuf *o, const char *s) {
    while (*s) out_ch(o, *s++);
}
static void out_byte(outbuf *o, uint8_t b) {
    static const char hex[] = "0123456789abcdef";
    if (b >= 0x20 && b < 0x7f && b != '\\' && b != '"') {
        out_ch(o, (char)b);
    } else {
        out_str(o, "\\x");
        out_ch(o, hex[b >> 4]);
        out_ch(o, hex[b & 15]);
    }
}

/* Format, one node per line in depth-first order:
 *   <2*depth spaces>'<edge>' "<seg>"[ =key]
 * the root line is `(root)`; bytes outside printable ASCII are \xNN. */
int radix_tree_dump(const radix_tree *t, char *buf, size_t cap, size_t *len_out) {
    if (!t || !len_out || (!buf && cap)) return RADIX_E_INVAL;
    outbuf o = {buf, cap, 0};
    radix_mem m = {0, 0};
    dfs_item *st = NULL;
    size_t scap = 0, depth = 0;
    if (scratch_reserve(&m, (void **)&st, &scap, 1, sizeof(*st)) != RADIX_OK) return RADIX_E_NOMEM;
    st[depth++] = (dfs_item){t->root, 0, -1};
    while (depth) {
        dfs_item it = st[--depth];
        const rnode *n = it.n;
        for (size_t i = 0; i < it.depth; i++) out_str(&o, "  ");
        if (it.edge < 0) {
            out_str(&o, "(root)");
        } else {
            out_ch(&o, '\'');
            out_byte(&o, (uint8_t)it.edge);
            out_str(&o, "' \"");
            for (uint32_t i = 0; i < n->seglen; i++) out_byte(&o, node_seg(n)[i]);
            out_ch(&o, '"');
        }
        if (n->iskey) out_str(&o, " =key");
        out_ch(&o, '\n');
        if (scratch_reserve(&m, (void **)&st, &scap, depth + n->nchild, sizeof(*st)) != RADIX_OK) {
            rmem_free(&m, st);
            return RADIX_E_NOMEM;
        }
        for (int i = (int)n->nchild - 1; i >= 0; i--)
            st[depth++] = (dfs_item){node_children(n)[i], it.depth + 1, node_edges(n)[i]};
    }
    rmem_free(&m, st);
    *len_out = o.len;
    return o.len <= cap ? RADIX_OK : RADIX_E_BUFFER;
}

radix_pos radix_tree_root(const radix_tree *t) {
    radix_pos p = {t ? t->root : NULL, 0};
    return p;
}

int radix_pos_walk(const radix_tree *t, radix_pos *p, const uint8_t *s, size_t n) {
    if (!t || !p || !p->node || (!s && n)) return 0;
    return pos_walk(p, s, n);
}

int radix_pos_is_key(const radix_pos *p, void **value) {
    if (!p || !p->node) return 0;
    return pos_key(p, value);
}

int radix_pos_has_children(const radix_pos *p) {
    if (!p || !p->node) return 0;
    const rnode *n = p->node;
    return p->off < n->seglen || n->nchild > 0;
}
