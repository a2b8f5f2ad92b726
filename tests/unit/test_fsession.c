/* fsession, the fetch session cache, driven with fake time: creation and
 * epochs, the session errors Kafka answers, puts, forgets and an emptied
 * session, the news test of incremental answers and the round-robin order,
 * and eviction as Kafka's FetchSessionCache does it (stale sessions first,
 * then the smallest sufficiently old one, never a bigger one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fsession.h"
#include "sk_err.h"

#define EVICT 120000

static sk_fs_key key(const char *topic, int32_t part)
{
    sk_fs_key k;
    memset(&k, 0, sizeof k);
    k.topic = (kc_str){topic, (int32_t)strlen(topic)};
    k.partition = part;
    return k;
}

static sk_fs_params params(int64_t off)
{
    return (sk_fs_params){off, -1, 1 << 20, -1, -1};
}

/* A session of `n` partitions of topic "t", created at `now`. */
static sk_fs_session *make(sk_fs_cache *c, int64_t now, int n)
{
    sk_fs_session *s = sk_fs_create(c, now, false, false, n);
    if (!s)
        return NULL;
    for (int i = 0; i < n; i++) {
        sk_fs_key k = key("t", i);
        sk_fs_params p = params(0);
        assert_int_equal(sk_fs_put(s, &k, &p, 10, 0), 0);
    }
    return s;
}

static void test_create_and_epochs(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(10, EVICT, 1);
    sk_fs_session *s = make(c, 0, 2);
    assert_non_null(s);
    int32_t id = sk_fs_id(s);
    assert_true(id > 0);
    assert_int_equal(sk_fs_epoch(s), 1);
    assert_int_equal(sk_fs_count(c), 1);
    assert_int_equal(sk_fs_partitions(c), 2);
    assert_int_equal(sk_fs_created(c), 1);

    sk_fs_session *got;
    assert_int_equal(sk_fs_get(c, id + 1, 1, false, &got), SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND);
    assert_null(got);
    assert_int_equal(sk_fs_get(c, id, 2, false, &got), SK_KAFKA_INVALID_FETCH_SESSION_EPOCH);
    assert_int_equal(sk_fs_get(c, id, 1, true, &got), SK_KAFKA_FETCH_SESSION_TOPIC_ID_ERROR);
    assert_int_equal(sk_fs_get(c, id, 1, false, &got), 0);
    assert_ptr_equal(got, s);
    assert_true(sk_fs_commit(c, s, 10));
    assert_int_equal(sk_fs_epoch(s), 2);
    /* The old epoch is now wrong. */
    assert_int_equal(sk_fs_get(c, id, 1, false, &got), SK_KAFKA_INVALID_FETCH_SESSION_EPOCH);

    assert_true(sk_fs_remove(c, id));
    assert_false(sk_fs_remove(c, id));
    assert_int_equal(sk_fs_count(c), 0);
    assert_int_equal(sk_fs_partitions(c), 0);
    sk_fs_destroy(c);
}

static void test_put_forget_and_empty(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(10, EVICT, 2);
    sk_fs_session *s = make(c, 0, 2);
    sk_fs_key k0 = key("t", 0), k1 = key("t", 1), u = key("u", 0);
    sk_fs_params p = params(42);
    /* An update keeps the partition's place and its answered marks. */
    assert_int_equal(sk_fs_put(s, &k0, &p, -1, -1), 0);
    sk_fs_part *f = sk_fs_first(s);
    assert_int_equal(f->key.partition, 0);
    assert_int_equal(f->req.fetch_offset, 42);
    assert_int_equal(f->hw, 10);
    /* A new one goes to the end. */
    assert_int_equal(sk_fs_put(s, &u, &p, -1, -1), 0);
    assert_int_equal(sk_fs_size(s), 3);
    assert_string_equal(f->next->next->key.topic.p, "u");
    assert_int_equal(sk_fs_partitions(c), 3);
    /* Forgetting an unknown partition is harmless. */
    sk_fs_key none = key("v", 7);
    sk_fs_forget(s, &none);
    sk_fs_forget(s, &k0);
    sk_fs_forget(s, &k1);
    assert_null(sk_fs_lookup(s, &k0));
    assert_non_null(sk_fs_lookup(s, &u));
    assert_true(sk_fs_commit(c, s, 5));
    sk_fs_forget(s, &u);
    /* Emptied: removed, and the request is served sessionless. */
    int32_t id = sk_fs_id(s);
    assert_false(sk_fs_commit(c, s, 6));
    assert_null(sk_fs_find(c, id));
    assert_int_equal(sk_fs_partitions(c), 0);
    sk_fs_destroy(c);
}

static void test_answers_and_order(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(10, EVICT, 3);
    sk_fs_session *s = make(c, 0, 3); /* hw 10, log start 0 each */
    sk_fs_part *p0 = sk_fs_first(s), *p1 = p0->next, *p2 = p1->next;
    sk_fs_answer same = {10, 0, 0, false, false};
    assert_false(sk_fs_answered(s, p0, &same));
    sk_fs_answer hw = {11, 0, 0, false, false};
    assert_true(sk_fs_answered(s, p0, &hw));
    assert_false(sk_fs_answered(s, p0, &hw)); /* remembered */
    sk_fs_answer ls = {11, 3, 0, false, false};
    assert_true(sk_fs_answered(s, p0, &ls));
    sk_fs_answer other = {10, 0, 0, false, true};
    assert_true(sk_fs_answered(s, p1, &other));
    /* An error is always sent, and the partition again once it is gone. */
    sk_fs_answer err = {10, 0, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, false, false};
    assert_true(sk_fs_answered(s, p2, &err));
    assert_int_equal(p2->hw, -1);
    assert_true(sk_fs_answered(s, p2, &same));
    assert_false(sk_fs_answered(s, p2, &same));
    /* Records: sent, and the partition moves to the end. */
    sk_fs_answer recs = {10, 0, 0, true, false};
    assert_true(sk_fs_answered(s, p1, &recs));
    assert_ptr_equal(sk_fs_first(s), p0);
    assert_ptr_equal(p0->next, p2);
    assert_ptr_equal(p2->next, p1);
    assert_null(p1->next);
    assert_true(sk_fs_answered(s, p0, &(sk_fs_answer){11, 3, 0, true, false}));
    assert_ptr_equal(sk_fs_first(s), p2);
    assert_ptr_equal(p1->next, p0);
    sk_fs_destroy(c);
}

static void test_full_cache_refuses_young_sessions(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(2, EVICT, 4);
    assert_non_null(make(c, 0, 1));
    assert_non_null(make(c, 0, 1));
    /* Neither is stale nor old enough: no room, even for a bigger one. */
    assert_null(sk_fs_create(c, 1000, false, false, 50));
    assert_int_equal(sk_fs_count(c), 2);
    assert_int_equal(sk_fs_created(c), 2);
    assert_int_equal(sk_fs_evictions(c), 0);
    sk_fs_destroy(c);
}

static void test_evicts_stale_first(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(2, EVICT, 5);
    sk_fs_session *a = make(c, 0, 5), *b = make(c, 0, 1);
    int32_t ida = sk_fs_id(a), idb = sk_fs_id(b);
    sk_fs_session *got;
    assert_int_equal(sk_fs_get(c, idb, 1, false, &got), 0);
    assert_true(sk_fs_commit(c, b, EVICT)); /* b used at 120 s, a idle since 0 */
    /* At exactly eviction_ms idle a session is not stale yet. */
    assert_null(sk_fs_create(c, EVICT, false, false, 1));
    sk_fs_session *n = sk_fs_create(c, EVICT + 1, false, false, 1);
    assert_non_null(n);
    assert_null(sk_fs_find(c, ida)); /* the stale one, although bigger */
    assert_non_null(sk_fs_find(c, idb));
    assert_int_equal(sk_fs_evictions(c), 1);
    assert_int_equal(sk_fs_partitions(c), 1);
    sk_fs_destroy(c);
}

static void test_evicts_smaller_old_session(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(2, EVICT, 6);
    sk_fs_session *a = make(c, 0, 3), *b = make(c, 0, 2);
    int32_t ida = sk_fs_id(a), idb = sk_fs_id(b);
    /* Both are used after they got old: evictable by anyone. */
    sk_fs_session *got;
    int64_t t = EVICT + 10;
    assert_int_equal(sk_fs_get(c, ida, 1, false, &got), 0);
    assert_true(sk_fs_commit(c, a, t));
    assert_int_equal(sk_fs_get(c, idb, 1, false, &got), 0);
    assert_true(sk_fs_commit(c, b, t));
    /* Same size as the smallest: not more valuable, refused. */
    assert_null(sk_fs_create(c, t + 1, false, false, 2));
    /* Bigger: the smallest goes. */
    assert_non_null(sk_fs_create(c, t + 1, false, false, 3));
    assert_null(sk_fs_find(c, idb));
    assert_non_null(sk_fs_find(c, ida));
    assert_int_equal(sk_fs_evictions(c), 1);
    sk_fs_destroy(c);
}

static void test_old_but_unused_is_not_evictable(void **st)
{
    (void)st;
    /* Kafka marks a session evictable when it is used after it got old; one
     * created long ago but last used young is kept until it goes stale. */
    sk_fs_cache *c = sk_fs_new(1, EVICT, 7);
    sk_fs_session *a = make(c, 0, 1);
    sk_fs_session *got;
    assert_int_equal(sk_fs_get(c, sk_fs_id(a), 1, false, &got), 0);
    assert_true(sk_fs_commit(c, a, EVICT - 1));
    assert_null(sk_fs_create(c, EVICT + 100, false, false, 9));
    assert_non_null(sk_fs_create(c, 2 * EVICT, false, false, 9)); /* stale now */
    sk_fs_destroy(c);
}

static void test_privileged_outranks_consumers(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(1, EVICT, 8);
    sk_fs_session *a = make(c, 0, 10);
    int32_t ida = sk_fs_id(a);
    /* A young consumer session can be taken by a follower, not by a consumer. */
    assert_null(sk_fs_create(c, 5, false, false, 100));
    sk_fs_session *f = sk_fs_create(c, 5, true, false, 1);
    assert_non_null(f);
    assert_null(sk_fs_find(c, ida));
    /* ... and a young follower session by nobody. */
    assert_null(sk_fs_create(c, 6, true, false, 100));
    sk_fs_destroy(c);
}

static void test_caps(void **st)
{
    (void)st;
    sk_fs_cache *z = sk_fs_new(0, EVICT, 9);
    assert_null(sk_fs_create(z, 0, false, false, 1));
    sk_fs_destroy(z);
    sk_fs_cache *c = sk_fs_new(1, EVICT, 9);
    assert_null(sk_fs_create(c, 0, false, false, SK_FS_MAX_PARTS + 1));
    sk_fs_session *s = sk_fs_create(c, 0, false, false, 1);
    char longname[1100];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    sk_fs_key k = key(longname, 0);
    sk_fs_params p = params(0);
    assert_int_equal(sk_fs_put(s, &k, &p, -1, -1), SK_ERR_NOMEM);
    assert_null(sk_fs_lookup(s, &k));
    /* Sessions by topic id. */
    sk_fs_session *ids = NULL;
    assert_true(sk_fs_remove(c, sk_fs_id(s)));
    ids = sk_fs_create(c, 0, false, true, 1);
    sk_fs_key ka = key("", 0), kb = key("", 0);
    ka.topic_id.b[0] = 1;
    kb.topic_id.b[0] = 2;
    assert_int_equal(sk_fs_put(ids, &ka, &p, -1, -1), 0);
    assert_non_null(sk_fs_lookup(ids, &ka));
    assert_null(sk_fs_lookup(ids, &kb));
    sk_fs_destroy(c);
}

static void test_epoch_wraps_to_one(void **st)
{
    (void)st;
    sk_fs_cache *c = sk_fs_new(4, EVICT, 10);
    sk_fs_session *s = make(c, 0, 1);
    sk_fs_session *got;
    int32_t id = sk_fs_id(s);
    int32_t ids[3] = {id, 0, 0};
    /* Distinct ids. */
    ids[1] = sk_fs_id(make(c, 0, 1));
    ids[2] = sk_fs_id(make(c, 0, 1));
    assert_true(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sk_fs_get(c, id, sk_fs_epoch(s), false, &got), 0);
        assert_true(sk_fs_commit(c, s, i));
    }
    assert_int_equal(sk_fs_epoch(s), 6);
    sk_fs_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_epochs),
        cmocka_unit_test(test_put_forget_and_empty),
        cmocka_unit_test(test_answers_and_order),
        cmocka_unit_test(test_full_cache_refuses_young_sessions),
        cmocka_unit_test(test_evicts_stale_first),
        cmocka_unit_test(test_evicts_smaller_old_session),
        cmocka_unit_test(test_old_but_unused_is_not_evictable),
        cmocka_unit_test(test_privileged_outranks_consumers),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_epoch_wraps_to_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
