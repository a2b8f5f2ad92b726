/* seqgap: the batches that follow on from one answered REQUEST_TIMED_OUT
 * unlinked are answered so too, per producer, epoch and partition; a link
 * closes the gap; sequences wrap; the oldest gap is forgotten first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "seqgap.h"

static sk_seqbatch batch(uint8_t topic, int32_t part, int64_t pid, int16_t epoch, int32_t base,
                         int32_t delta)
{
    sk_seqbatch b;
    memset(&b, 0, sizeof b);
    b.topic.b[0] = topic;
    b.part = part;
    b.producer_id = pid;
    b.producer_epoch = epoch;
    b.base_sequence = base;
    b.last_offset_delta = delta;
    return b;
}

static void test_batches_behind_a_gap_follow_on(void **state)
{
    (void)state;
    sk_seqgaps s;
    sk_seqgaps_init(&s);
    sk_seqbatch a = batch(1, 7, 42, 0, 217, 1); /* 217..218, timed out */
    sk_seqbatch b = batch(1, 7, 42, 0, 219, 400);
    sk_seqbatch c = batch(1, 7, 42, 0, 620, 0);
    assert_false(sk_seqgap_follows(&s, &b));
    sk_seqgap_note(&s, &a);
    assert_true(sk_seqgap_follows(&s, &b));
    assert_false(sk_seqgap_follows(&s, &c)); /* not where the gap ends */
    sk_seqgap_note(&s, &b);                  /* b answered as a too */
    assert_true(sk_seqgap_follows(&s, &c));
    /* Another partition, producer, epoch or topic is not concerned. */
    sk_seqbatch other[] = {batch(1, 8, 42, 0, 620, 0), batch(1, 7, 43, 0, 620, 0),
                           batch(1, 7, 42, 1, 620, 0), batch(2, 7, 42, 0, 620, 0)};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        assert_false(sk_seqgap_follows(&s, &other[i]));
    /* The client sends a again and it is linked: the sequence is whole. */
    sk_seqgap_close(&s, &a);
    assert_false(sk_seqgap_follows(&s, &c));
}

static void test_not_idempotent_never_a_gap(void **state)
{
    (void)state;
    sk_seqgaps s;
    sk_seqgaps_init(&s);
    sk_seqbatch a = batch(1, 0, -1, -1, -1, 4);
    sk_seqgap_note(&s, &a);
    sk_seqbatch b = batch(1, 0, -1, -1, -1, 4);
    assert_false(sk_seqgap_follows(&s, &b));
}

static void test_sequences_wrap(void **state)
{
    (void)state;
    sk_seqgaps s;
    sk_seqgaps_init(&s);
    sk_seqbatch a = batch(1, 0, 5, 0, INT32_MAX - 1, 2); /* MAX-1, MAX, 0 */
    sk_seqgap_note(&s, &a);
    sk_seqbatch b = batch(1, 0, 5, 0, 1, 0);
    assert_true(sk_seqgap_follows(&s, &b));
}

static void test_oldest_gap_forgotten_first(void **state)
{
    (void)state;
    sk_seqgaps s;
    sk_seqgaps_init(&s);
    for (int64_t pid = 0; pid <= SK_SEQGAPS; pid++) {
        sk_seqbatch a = batch(1, 0, pid, 0, 0, 0);
        sk_seqgap_note(&s, &a);
    }
    sk_seqbatch first = batch(1, 0, 0, 0, 1, 0), last = batch(1, 0, SK_SEQGAPS, 0, 1, 0);
    assert_false(sk_seqgap_follows(&s, &first));
    assert_true(sk_seqgap_follows(&s, &last));
    sk_seqbatch second = batch(1, 0, 1, 0, 1, 0);
    assert_true(sk_seqgap_follows(&s, &second));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_behind_a_gap_follow_on),
        cmocka_unit_test(test_not_idempotent_never_a_gap),
        cmocka_unit_test(test_sequences_wrap),
        cmocka_unit_test(test_oldest_gap_forgotten_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
