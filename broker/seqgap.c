/* seqgap: see seqgap.h. */
#include "seqgap.h"

#include <string.h>

void sk_seqgaps_init(sk_seqgaps *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < SK_SEQGAPS; i++)
        s->g[i].producer_id = -1;
}

/* Sequences wrap from INT32_MAX to 0, as Kafka's do. */
static int32_t seq_after(const sk_seqbatch *b)
{
    return (int32_t)(((int64_t)b->base_sequence + b->last_offset_delta + 1) %
                     ((int64_t)INT32_MAX + 1));
}

static sk_seqgap *find(const sk_seqgaps *s, const sk_seqbatch *b)
{
    if (b->producer_id < 0 || b->base_sequence < 0)
        return NULL;
    for (int i = 0; i < SK_SEQGAPS; i++) {
        const sk_seqgap *g = &s->g[i];
        if (g->producer_id == b->producer_id && g->producer_epoch == b->producer_epoch &&
            g->part == b->part && memcmp(g->topic.b, b->topic.b, sizeof g->topic.b) == 0)
            return (sk_seqgap *)g;
    }
    return NULL;
}

void sk_seqgap_note(sk_seqgaps *s, const sk_seqbatch *b)
{
    if (b->producer_id < 0 || b->base_sequence < 0)
        return;
    sk_seqgap *g = find(s, b);
    if (!g) {
        g = &s->g[s->next];
        s->next = (s->next + 1) % SK_SEQGAPS;
        *g = (sk_seqgap){b->topic, b->part, b->producer_epoch, b->producer_id, 0};
    }
    g->next_seq = seq_after(b);
}

bool sk_seqgap_follows(const sk_seqgaps *s, const sk_seqbatch *b)
{
    const sk_seqgap *g = find(s, b);
    return g && g->next_seq == b->base_sequence;
}

void sk_seqgap_close(sk_seqgaps *s, const sk_seqbatch *b)
{
    sk_seqgap *g = find(s, b);
    if (g)
        g->producer_id = -1;
}
