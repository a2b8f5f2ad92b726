/*
 * types: the broker's shared data types, and nothing else.
 *
 * A types-only header, so that modules can point at each other's objects
 * without include cycles. Functions live in each module's own header.
 * Everything here belongs to the event-loop thread unless a field says
 * otherwise.
 */
#ifndef TYPES_H
#define TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kc.h"
#include "pace.h"
#include "progress.h"
#include "txidx.h"
#include "wal.h"

struct event;
struct event_base;
struct bufferevent;
struct evconnlistener;
typedef struct sk_config sk_config;
typedef struct sk_map sk_map;
typedef struct sk_workq sk_workq;
typedef struct sk_arena sk_arena;

typedef struct sk_node sk_node;
typedef struct sk_conn sk_conn;
typedef struct sk_req sk_req;
typedef struct sk_topic sk_topic;
typedef struct sk_part sk_part;
typedef struct sk_cbatch sk_cbatch;
typedef struct sk_pstate sk_pstate;
typedef struct sk_store sk_store;
typedef struct sk_waiter sk_waiter;
typedef struct sk_groups sk_groups;
typedef struct sk_txns sk_txns;

/* ---- topic configuration ---- */

/* The values Skiff honours, resolved from topic overrides and broker
 * defaults; plus the overrides as given, for DescribeConfigs. */
/* cleanup.policy's items. */
#define SK_POLICY_DELETE 1
#define SK_POLICY_COMPACT 2

typedef struct sk_tconf {
    int policy;              /* SK_POLICY_* bits */
    int64_t delete_retention_ms, min_compaction_lag_ms, max_compaction_lag_ms;
    double min_dirty_ratio;
    int64_t retention_ms;    /* -1: forever */
    int64_t retention_bytes; /* -1: no limit */
    int32_t max_message_bytes;
    bool log_append_time;
    int64_t ts_before_max_ms;
    int64_t ts_after_max_ms;
    bool recompress;     /* compression.type names a codec (not producer) */
    int8_t codec;        /* ... that KB_CODEC_*: batches in another are recompressed */
    int32_t codec_level; /* compression.<codec>.level of that codec */
    int noverrides;
    char **names; /* malloc'd, noverrides entries each */
    char **values;
} sk_tconf;

/* ---- partitions and topics ---- */

/* One batch in the WAL cache. Invariants: data holds exactly len bytes of a
 * RecordBatch with its final offsets; entries of a partition are in offset
 * order in part->cq, and all entries are in LSN order in the node's global
 * FIFO (gnext). An entry leaves the cache only once the SQLite view covers
 * its LSN, so every batch below the HW is in the cache or in the view. */
struct sk_cbatch {
    sk_ref ref; /* first: the cache holds one, each response still sending
                   its bytes one; data stays until the last goes */
    sk_part *part; /* dangling once evicted: only the cache follows it */
    sk_cbatch *gnext;
    int64_t base, last;
    int64_t max_ts;
    wal_lsn lsn;   /* of its record in the own WAL */
    uint32_t len;
    uint32_t cost; /* bytes it counts in the cache's size: len, plus what of its
                      request frame it alone keeps in memory (sk_cache_charge) */
    bool linked;   /* that record is a LINK (docs/zones.md), not the batch's bytes */
    bool crc_checked; /* validated on its way in: its CRC field is right */
    /* The bytes: right after this struct (backing NULL), or in place in the
     * request frame that carried them, which the entry holds (backing, put
     * when the entry is freed). */
    sk_ref *backing;
    uint8_t *data;
};

/* Idempotent producer state of one producer id on one partition: its epoch
 * and the last five batches (the clients' in-flight limit). */
#define SK_PSTATE_BATCHES 5
typedef struct sk_pbatch {
    int32_t first_seq, last_seq;
    int64_t base, last;
    int64_t timestamp; /* LogAppendTime given, or -1 */
    wal_lsn lsn_end;   /* durable once the WAL's durable LSN reaches it */
} sk_pbatch;

struct sk_pstate {
    int64_t pid;
    int16_t epoch;
    uint8_t n;    /* batches held (<= SK_PSTATE_BATCHES) */
    uint8_t head; /* index of the newest */
    sk_pbatch b[SK_PSTATE_BATCHES];
    int64_t last_ts; /* wall-clock ms of the last append, for expiry */
};

/* Something parked on partitions until their high watermark moves: a
 * fetch, or a proxy's follow request. plog calls wake when the watermark
 * moves or the partition goes; stop at shutdown (answer now). Both unpark
 * it from every partition it waits on. */
struct sk_waiter {
    void (*wake)(sk_waiter *w);
    void (*stop)(sk_waiter *w);
};

/* What this node does with a partition. A single node serves all of its
 * partitions; in a cluster a node serves those whose main it is
 * (docs/cluster.md): it adopts them, serves them, and hands them over. */
typedef enum sk_own {
    SK_OWN_NONE,     /* another node's, or nobody's yet: no state here */
    SK_OWN_ADOPTING, /* its state is being read and appended here: not served yet */
    SK_OWN_ACTIVE,   /* served: this node is its main */
    SK_OWN_LEAVING,  /* no longer served: its HANDOFF is being written */
} sk_own;

struct sk_part {
    sk_topic *topic;
    int32_t index;
    sk_own own;
    int32_t main_node; /* cluster: the node serving it (-1: none now) */
    int64_t claim_rev; /* cluster: etcd revision at which this node became its main */
    uint64_t adopt_end; /* cluster: end LSN of its ADOPT record in this node's WAL (0: none) */
    uint64_t stream; /* id of the partition's data in objects, never reused */
    int32_t leader_epoch;
    int64_t log_start;   /* first offset that can be read */
    int64_t next_offset; /* next offset to assign (includes appends not durable yet) */
    int64_t hw;          /* high watermark: end of the durable log */
    int64_t max_ts;      /* largest batch maxTimestamp, for ListOffsets -3 */
    int64_t max_ts_base; /* base offset of the batch that holds it */
    /* cached batches, a ring of pointers in offset order */
    sk_cbatch **cq;
    uint32_t cq_head, cq_len, cq_cap;
    sk_map *producers; /* pid (int64) -> sk_pstate */
    sk_txidx txidx;    /* open and aborted transactions (txidx.h) */
    struct sk_obj_loc *obj_hint; /* the object range the last read from objects used */
    /* the range after obj_hint, read ahead once reads near obj_hint's end */
    struct sk_obj_loc *obj_next;
    /* parked fetches to wake when hw moves */
    sk_waiter **waiters;
    int nwaiters, capwaiters;
};

struct sk_topic {
    char *name;
    kc_uuid id;
    int32_t nparts;
    sk_part **parts;
    sk_tconf conf;
    int16_t replication_factor; /* as created, reported to clients */
    bool internal;              /* __consumer_offsets (a cluster's) */
    uint64_t first_stream;      /* stream id of partition 0 (others: see parts) */
};

/* ---- connections and requests ---- */

typedef enum sk_req_state {
    SK_REQ_RUNNING,  /* handler working or waiting (WAL, long-poll, worker) */
    SK_REQ_DONE,     /* response encoded in out */
    SK_REQ_SILENT,   /* finished without a response (acks=0) */
    SK_REQ_CLOSE,    /* the connection must close once earlier replies are out */
} sk_req_state;

typedef struct sk_api_entry sk_api_entry;

struct sk_req {
    sk_conn *conn; /* counted reference; conn->closed may be set meanwhile */
    sk_req *next;  /* the connection's FIFO, in arrival order */
    sk_node *node;
    kc_req_header hdr;
    const sk_api_entry *entry;
    int16_t version;
    bool flexible;
    sk_req_state state;
    uint8_t *frame; /* the request bytes (header + body), inside frame_ref */
    size_t frame_len;
    sk_ref *frame_ref; /* held: by the request, and by cache entries that keep
                          batches of the frame in place (append.h) */
    sk_arena *arena; /* everything decoded and built for this request */
    void *body;      /* decoded request struct */
    void *resp;      /* response struct, encoded by sk_req_respond */
    uint8_t *out;    /* encoded response frame (size prefix included) */
    size_t out_len;  /* bytes in out: the frame less the pieces below */
    kc_piece *pieces; /* record bytes left out of `out`, each held (sk_ref) */
    int npieces;
    int64_t start_us;
    int pending; /* asynchronous steps outstanding (WAL appends, jobs) */
    void *hctx;  /* the handler's own state */
    void (*cleanup)(sk_req *r); /* frees hctx when the request goes */
    /* Requests that wait for several asynchronous steps (WAL appends): the
     * first error they met, and what to run when the last one is done. */
    int async_err;
    void (*on_done)(sk_req *r);
    bool close_after_reply; /* close the connection once this answer is out */
    bool raw_sasl;          /* a bare SASL token (sasl.h), answered bare */
};

/* ---- the node ---- */

#define SK_METRICS_BUCKETS 12
#define SK_METRICS_APIS 128
typedef struct sk_latency {
    uint64_t counts[SK_METRICS_BUCKETS + 1]; /* the last one is +Inf */
    uint64_t sum_us, count;
} sk_latency;

struct evhttp;

struct sk_node {
    sk_config *cfg;
    struct event_base *base;
    struct sk_vlog *log; /* the node's own log: its WAL and SQLite view */
    wal *wal;            /* the own log's (sk_vlog_wal), for short */
    sk_store *store;     /* the own log's (sk_vlog_store), for short */
    sk_workq *readers; /* reads of storage and the SQLite view */
    sk_groups *groups;
    sk_txns *txns; /* the transaction coordinator; NULL in a cluster */
    struct sk_fs_cache *fsessions; /* fetch sessions (fsession.h), made at first use */
    struct zone_map *zones;
    struct sk_xzone *xzone; /* cross-zone accounting (xzone.h) */
    struct sk_tier *tier;
    struct sk_cluster *cluster; /* NULL for a single node */
    struct pay_log *payload;    /* cluster: this node's payload log (proxy/payload.h) */
    const struct sk_cmeta_ops *cmeta; /* where metadata changes go (cmeta.h) */

    char cluster_id[32];
    int64_t next_pid;
    int64_t pid_block_end;  /* cluster: the end of this node's block of producer ids */
    bool creating_internal; /* cluster: __consumer_offsets is being created */
    uint64_t next_stream; /* next partition stream id to hand out */

    /* Broker properties changed at runtime (AlterConfigs), with the values
     * they replaced, so that deleting one restores the configured value. */
    int ndyn;
    char **dyn_names, **dyn_values, **dyn_static;

    sk_map *topics_by_name; /* name -> sk_topic */
    sk_map *gconfs;         /* group id -> its config overrides (gconf.h); NULL: none */
    sk_map *uconfs;         /* single node: user -> its SCRAM credentials (gconf.h) */
    struct sk_acl_set *acls; /* the ACL bindings (acls.h), NULL until first used */
    struct etcd_watch *acl_watch; /* cluster: the watch of config/acl/ (cmeta_etcd.c) */
    sk_map *topics_by_id;   /* 16-byte id -> sk_topic */

    /* WAL cache: global FIFO in LSN order */
    sk_cbatch *cache_head, *cache_tail;
    size_t cache_bytes;
    wal_lsn store_applied; /* the SQLite view covers the own WAL below this */
    wal_lsn adopt_hi;      /* cluster: the highest adopt_end of any partition */
    /* Where the last record ends that changed what reads show at once
     * (metadata, groups' offsets and states): such a change is in memory
     * when appended, durable later, and the reads marked so in the dispatch
     * table answer only once the WAL is durable up to here, so that nothing
     * they show can be taken back by a crash. */
    wal_lsn shown_end;

    bool retention_running;
    bool retention_again;
    bool retention_again_periodic; /* the re-run stands for a periodic sweep */
    sk_progress progress;          /* long work under way (progress.h) */
    struct event *shutdown_ev;
    int64_t shutdown_deadline;
    sk_conn *reap_list; /* connections to free, from their own event */
    struct event *reap_ev;

    struct evconnlistener *listeners[8];
    int nlisteners;
    int listener_index_of[8]; /* config listener index per evconnlistener */
    sk_conn *conns;           /* all open connections */
    size_t nconns;
    bool stopping;
    bool draining; /* cluster: SIGTERM came, partitions move away first */
    int exit_code; /* of sk_node_run: 0, or 3 when the WAL was taken over */
    bool paused;   /* reading stopped: WAL back-pressure */
    sk_pace pace;  /* producers slowed down as the WAL fills (pace.h) */
    struct event *pace_ev;
    size_t pace_turn; /* which producer wakes first when tokens are back (net.c) */
    struct event *retention_ev;
    struct event *sig_ev[3];
    struct ssl_ctx_st *tls_ctx; /* SSL and SASL_SSL listeners' (tls.h); NULL: none */
    struct sk_pmap *pmap;       /* ssl.principal.mapping.rules (pmap.h), with tls_ctx */
    bool tls_reloading;         /* a SIGHUP reload is reading the files */
    int64_t started_ms;

    /* counters for metrics */
    uint64_t n_requests, n_produced_batches, n_produced_bytes, n_fetched_bytes;
    uint64_t n_wal_full_refusals; /* partitions' batches refused: the WAL was full */
    struct {
        uint64_t requests[SK_METRICS_APIS];
        sk_latency produce_latency;
        sk_latency request_latency[SK_METRICS_APIS]; /* arrival to answer, by API key */
    } metrics;
    struct evhttp *http;
};

#endif
