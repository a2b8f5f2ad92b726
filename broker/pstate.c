#include "pstate.h"

#include "sk_err.h"

const sk_pbatch *sk_pstate_newest(const sk_pstate *ps)
{
    return ps && ps->n ? &ps->b[ps->head] : NULL;
}

int sk_pstate_check(const sk_pstate *ps, int16_t epoch, int32_t first_seq, int32_t last_seq,
                    const sk_pbatch **dup)
{
    *dup = NULL;
    if (!ps || ps->n == 0)
        return SK_PSTATE_APPEND;
    if (epoch == ps->epoch) {
        for (int i = 0; i < ps->n; i++) {
            const sk_pbatch *b = &ps->b[(ps->head + SK_PSTATE_BATCHES - i) % SK_PSTATE_BATCHES];
            if (b->first_seq == first_seq && b->last_seq == last_seq) {
                *dup = b;
                return SK_PSTATE_DUPLICATE;
            }
        }
    }
    if (epoch < ps->epoch)
        return SK_KAFKA_INVALID_PRODUCER_EPOCH;
    if (epoch > ps->epoch)
        return first_seq == 0 ? SK_PSTATE_APPEND : SK_KAFKA_OUT_OF_ORDER_SEQUENCE_NUMBER;
    int32_t expected = sk_seq_add(ps->b[ps->head].last_seq, 1);
    return first_seq == expected ? SK_PSTATE_APPEND : SK_KAFKA_OUT_OF_ORDER_SEQUENCE_NUMBER;
}

void sk_pstate_push(sk_pstate *ps, int16_t epoch, const sk_pbatch *pb)
{
    if (ps->n && epoch != ps->epoch)
        ps->n = 0;
    ps->epoch = epoch;
    ps->head = ps->n ? (uint8_t)((ps->head + 1) % SK_PSTATE_BATCHES) : 0;
    ps->b[ps->head] = *pb;
    if (ps->n < SK_PSTATE_BATCHES)
        ps->n++;
}
