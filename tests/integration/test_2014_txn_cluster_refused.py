"""A cluster has no transaction coordinator yet (docs/transactions.md): every transaction
API refuses cleanly with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients raise at
once as fatal, and the nodes keep serving."""

import pytest

import kgroup as kg
import kproto as k

pytestmark = pytest.mark.cluster

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def test_transaction_apis_refused(cluster_factory, topic_name):
    cl = cluster_factory(2).start()
    cl.create_topic(topic_name, 2, via=1)
    n = cl.nodes[1]
    with n.conn() as c:
        r = kg.find_coordinator(c, "t2014", 1, 3)
        assert r["ErrorCode"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, r
        assert "not supported" in r["ErrorMessage"], r
        r = c.request(22, 4, {"TransactionalId": "t2014", "TransactionTimeoutMs": 60000,
                              "ProducerId": -1, "ProducerEpoch": -1})
        assert r["ErrorCode"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, r
        r = c.request(24, 3, {"TransactionalId": "t2014", "ProducerId": 1, "ProducerEpoch": 0,
                              "Topics": [{"Name": topic_name, "Partitions": [0]}]})
        assert [p["ErrorCode"] for t in r["Results"] for p in t["Partitions"]] == \
            [TRANSACTIONAL_ID_AUTHORIZATION_FAILED], r
        r = c.request(26, 3, {"TransactionalId": "t2014", "ProducerId": 1, "ProducerEpoch": 0,
                              "Committed": True})
        assert r["ErrorCode"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, r
        # Idempotent producers are still served.
        r = k.init_producer_id(c, 4)
        assert r["ErrorCode"] == 0 and r["ProducerId"] >= 0, r
