/* validate.c: MQTT topic-name and topic-filter validation (spec 6.2.2).
 *
 * Order: empty, too long, then the encoding pass left to right (NUL, UTF-8,
 * control, non-character: the first violation wins), then the structure pass.
 * Within one filter level a misplaced '+' is reported before a misplaced '#'.
 */
#include "internal.h"

#define MQTT_MAX_LEN 65535u

static int encoding_pass(const uint8_t *s, size_t len, uint32_t flags) {
    int strict = (flags & RADIX_F_STRICT_UTF8) != 0;
    size_t i = 0;
    while (i < len) {
        uint8_t b = s[i];
        uint32_t cp;
        if (b < 0x80) {
            if (b == 0) return RADIX_E_NUL;
            cp = b;
            i++;
        } else {
            size_t need;
            uint8_t lo = 0x80, hi = 0xBF;
            if (b >= 0xC2 && b <= 0xDF) {
                need = 1;
                cp = b & 0x1Fu;
            } else if (b >= 0xE0 && b <= 0xEF) {
                need = 2;
                cp = b & 0x0Fu;
                if (b == 0xE0) lo = 0xA0;      /* overlong */
                else if (b == 0xED) hi = 0x9F; /* surrogates */
            } else if (b >= 0xF0 && b <= 0xF4) {
                need = 3;
                cp = b & 0x07u;
                if (b == 0xF0) lo = 0x90;      /* overlong */
                else if (b == 0xF4) hi = 0x8F; /* > U+10FFFF */
            } else {
                return RADIX_E_UTF8;
            }
            if (len - i - 1 < need) return RADIX_E_UTF8;
            for (size_t k = 1; k <= need; k++) {
                uint8_t c = s[i + k];
                if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return RADIX_E_UTF8;
                cp = (cp << 6) | (c & 0x3Fu);
            }
            i += need + 1;
        }
        if (strict) {
            if ((cp >= 0x01 && cp <= 0x1F) || (cp >= 0x7F && cp <= 0x9F)) return RADIX_E_CONTROL;
            if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFEu) == 0xFFFEu) return RADIX_E_NONCHAR;
        }
    }
    return RADIX_OK;
}

static int count_levels_ok(const uint8_t *s, size_t len, uint32_t max_levels) {
    if (!max_levels) return 1;
    size_t levels = 1;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '/' && ++levels > max_levels) return 0;
    return 1;
}

int validate_topic_levels(const uint8_t *topic, size_t len, uint32_t flags, uint32_t max_levels) {
    if (!topic && len) return RADIX_E_INVAL;
    if (len == 0) return RADIX_E_EMPTY;
    if (len > MQTT_MAX_LEN) return RADIX_E_TOO_LONG;
    int rc = encoding_pass(topic, len, flags);
    if (rc) return rc;
    if (memchr(topic, '+', len) || memchr(topic, '#', len)) return RADIX_E_WILDCARD;
    if (!count_levels_ok(topic, len, max_levels)) return RADIX_E_LEVELS;
    return RADIX_OK;
}

int validate_filter_levels(const uint8_t *f, size_t len, uint32_t flags, uint32_t max_levels,
                           size_t *share_off, size_t *share_len, size_t *filter_off) {
    if (!f && len) return RADIX_E_INVAL;
    if (len == 0) return RADIX_E_EMPTY;
    if (len > MQTT_MAX_LEN) return RADIX_E_TOO_LONG;
    int rc = encoding_pass(f, len, flags);
    if (rc) return rc;
    size_t soff = 0, slen = 0, foff = 0;
    if (len >= 7 && memcmp(f, "$share/", 7) == 0) {
        const uint8_t *slash = memchr(f + 7, '/', len - 7);
        if (!slash) return RADIX_E_SHARE;
        soff = 7;
        slen = (size_t)(slash - f) - 7;
        if (slen == 0) return RADIX_E_SHARE;
        if (memchr(f + 7, '+', slen) || memchr(f + 7, '#', slen)) return RADIX_E_SHARE;
        foff = (size_t)(slash - f) + 1;
        if (foff == len) return RADIX_E_SHARE;
    }
    size_t start = foff;
    for (;;) {
        const uint8_t *slash = memchr(f + start, '/', len - start);
        size_t end = slash ? (size_t)(slash - f) : len;
        size_t ll = end - start;
        const uint8_t *lv = f + start;
        if (memchr(lv, '+', ll) && ll != 1) return RADIX_E_PLUS;
        if (memchr(lv, '#', ll) && (ll != 1 || end != len)) return RADIX_E_HASH;
        if (end == len) break;
        start = end + 1;
    }
    if (!count_levels_ok(f + foff, len - foff, max_levels)) return RADIX_E_LEVELS;
    if (share_off) *share_off = soff;
    if (share_len) *share_len = slen;
    if (filter_off) *filter_off = foff;
    return RADIX_OK;
}

int radix_validate_topic(const uint8_t *topic, size_t len, uint32_t flags) {
    return validate_topic_levels(topic, len, flags, 0);
}

int radix_validate_filter(const uint8_t *filter, size_t len, uint32_t flags, size_t *share_off,
                          size_t *share_len, size_t *filter_off) {
    return validate_filter_levels(filter, len, flags, 0, share_off, share_len, filter_off);
}
