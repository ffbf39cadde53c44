#include "radix.h"

const char *radix_version(void) { return "0.1.0"; }
