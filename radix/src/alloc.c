/* alloc.c: the allocator hook and per-object accounting. */
#include "internal.h"

static void *(*g_alloc)(size_t) = NULL;
static void (*g_free)(void *) = NULL;

void radix_set_allocator(void *(*alloc_fn)(size_t), void (*free_fn)(void *)) {
    g_alloc = alloc_fn;
    g_free = free_fn;
}

/* Blocks carry an 8-byte size prefix so accounting stays exact even when a
 * node is compacted in place after a failed shrink. */
void *rmem_alloc(radix_mem *m, size_t n) {
    if (n > SIZE_MAX - 8) return NULL;
    size_t total = n + 8;
    uint64_t *p = g_alloc ? g_alloc(total) : malloc(total);
    if (!p) return NULL;
    p[0] = (uint64_t)total;
    m->bytes += total;
    m->allocs++;
    return p + 1;
}

void rmem_free(radix_mem *m, void *p) {
    if (!p) return;
    uint64_t *b = (uint64_t *)p - 1;
    m->bytes -= (size_t)b[0];
    if (g_free) {
        g_free(b);
    } else {
        free(b);
    }
}

size_t rmem_size(const void *p) { return (size_t)((const uint64_t *)p)[-1] - 8; }

int scratch_reserve(radix_mem *m, void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return RADIX_OK;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return RADIX_E_NOMEM;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem) return RADIX_E_NOMEM;
    void *nb = rmem_alloc(m, ncap * elem);
    if (!nb) return RADIX_E_NOMEM;
    if (*buf) {
        memcpy(nb, *buf, *cap * elem);
        rmem_free(m, *buf);
    }
    *buf = nb;
    *cap = ncap;
    return RADIX_OK;
}
