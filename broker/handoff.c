#include "handoff.h"

#include "sk_err.h"

int16_t sk_handoff_ready(sk_node *n, const kc_uuid *topic, int32_t part, int32_t epoch,
                         int64_t src_log, int64_t src_lsn)
{
    (void)n;
    (void)topic;
    (void)part;
    (void)epoch;
    (void)src_log;
    (void)src_lsn;
    /* A single node hands nothing over. */
    return SK_KAFKA_INVALID_REQUEST;
}
