/* radix.h: public API of the jetmq radix tree and MQTT topic index.
 *
 * Placeholder from the foundation commit: the radix issue fills in the tree,
 * the topic index and the retained index. The text between the CDEF markers
 * is fed verbatim to cffi's cdef(), so it holds plain declarations only.
 */
#ifndef JETMQ_RADIX_H
#define JETMQ_RADIX_H

#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */
const char *radix_version(void);
/* CDEF-END */

#endif
