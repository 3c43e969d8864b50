/* runtime/session_unkeyed.h — a session whose blocks are never registered in the prefix cache (nor noted for the
 * disk store): for work whose tokens must leave no trace, such as runtime/warm_up.c's synthetic prompts. */
#ifndef HEARTH_RUNTIME_SESSION_UNKEYED_H
#define HEARTH_RUNTIME_SESSION_UNKEYED_H

#include "hearth.h"

void session_set_unkeyed(struct hearth_session *s);

#endif
