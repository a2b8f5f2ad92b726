#include "metrics.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "fsession.h"
#include "plog.h"
#include "groups.h"
#include "kc.h"
#include "net.h"
#include "node.h"
#include "sk_log.h"
#include "sk_map.h"
#include "objfmt.h"
#include "objstore.h"
#include "blockcache.h"
#include "wal.h"
#include "sk_time.h"
#include "tier.h"
#include "xzone.h"

#define SKIFF_VERSION "0.1.0"

/* Upper bounds of the latency buckets, in microseconds. */
static const int64_t bucket_us[SK_METRICS_BUCKETS] = {
    250, 500, 1000, 2000, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, 5000000,
};

void sk_metrics_observe(sk_latency *h, int64_t us)
{
    int i = 0;
    while (i < SK_METRICS_BUCKETS && us > bucket_us[i])
        i++;
    h->counts[i]++;
    h->sum_us += (uint64_t)(us > 0 ? us : 0);
    h->count++;
}

/* One series of a histogram: counts[nb] is the +Inf bucket; labels is
 * `name="value",...` or "". */
static void hist_series(struct evbuffer *b, const char *name, const char *labels,
                        const uint64_t *counts, const int64_t *bounds_us, int nb, double sum_s)
{
    const char *sep = *labels ? "," : "";
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += counts[i];
        evbuffer_add_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                            (double)bounds_us[i] / 1e6, (unsigned long long)cum);
    }
    cum += counts[nb];
    evbuffer_add_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                        (unsigned long long)cum);
    if (*labels)
        evbuffer_add_printf(b, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels, sum_s, name,
                            labels, (unsigned long long)cum);
    else
        evbuffer_add_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, sum_s, name,
                            (unsigned long long)cum);
}

static void put_histogram(struct evbuffer *b, const char *name, const char *help,
                          const sk_latency *h)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    hist_series(b, name, "", h->counts, bucket_us, SK_METRICS_BUCKETS, (double)h->sum_us / 1e6);
}

static void put_request_latency(sk_node *n, struct evbuffer *b)
{
    const char *name = "skiff_request_latency_seconds";
    evbuffer_add_printf(b, "# HELP %s Time from a request's arrival to its answer, by API "
                           "(a fetch's wait included).\n# TYPE %s histogram\n", name, name);
    for (int k = 0; k < SK_METRICS_APIS; k++) {
        const sk_latency *h = &n->metrics.request_latency[k];
        const kc_api *api = kc_api_get((int16_t)k);
        if (!h->count || !api)
            continue;
        char labels[96];
        snprintf(labels, sizeof labels, "api=\"%s\"", api->name);
        hist_series(b, name, labels, h->counts, bucket_us, SK_METRICS_BUCKETS,
                    (double)h->sum_us / 1e6);
    }
}

static void put_wal_hist(struct evbuffer *b, const char *name, const char *help,
                         const uint64_t *counts, uint64_t sum_us)
{
    int64_t bounds[WAL_COMMIT_BUCKETS];
    for (int i = 0; i < WAL_COMMIT_BUCKETS; i++)
        bounds[i] = wal_commit_bucket_us(i);
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    hist_series(b, name, "", counts, bounds, WAL_COMMIT_BUCKETS, (double)sum_us / 1e6);
}

/* A commit's latency, and the parts of it the storage backend can tell
 * (docs/operations.md): the rest is the loop's wake-up. */
static void put_wal_commit_latency(struct evbuffer *b, const wal_stats *ws)
{
    put_wal_hist(b, "skiff_wal_commit_latency_seconds",
                 "Duration of group commits (one write and one sync), as the loop sees them.",
                 ws->commit_hist, ws->commit_us_sum);
    put_wal_hist(b, "skiff_wal_io_wait_seconds",
                 "Time group commits waited in the WAL's I/O queue before their write began.",
                 ws->io_wait_hist, ws->io_wait_us_sum);
    put_wal_hist(b, "skiff_wal_io_latency_seconds",
                 "Duration of group commits' write and sync on the WAL's I/O thread.",
                 ws->io_hist, ws->io_us_sum);
}

static void counter(struct evbuffer *b, const char *name, const char *help, uint64_t v)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                        (unsigned long long)v);
}

/* A counter of seconds, from microseconds. */
static void counter_s(struct evbuffer *b, const char *name, const char *help, uint64_t us)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %.6f\n", name, help, name, name,
                        (double)us / 1e6);
}

static void gauge(struct evbuffer *b, const char *name, const char *help, double v)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s ", name, help, name, name);
    if (v == (double)(int64_t)v)
        evbuffer_add_printf(b, "%lld\n", (long long)v);
    else
        evbuffer_add_printf(b, "%.6f\n", v);
}

/* A cluster member's part in the cluster (docs/cluster.md). */
static void render_cluster(sk_node *n, struct evbuffer *b)
{
    sk_cluster_stats st;
    sk_cluster_get_stats(n->cluster, &st);
    gauge(b, "skiff_cluster_log_id", "The log this incarnation of the node writes.",
          (double)st.log_id);
    gauge(b, "skiff_cluster_controller", "1 while this node holds the controller duties.",
          st.controller ? 1 : 0);
    gauge(b, "skiff_cluster_live_nodes", "Nodes whose lease is alive.", (double)st.live_nodes);
    gauge(b, "skiff_cluster_partitions_served",
          "Partitions this node serves, adopts or hands over now.", (double)st.partitions_served);
    gauge(b, "skiff_cluster_custody_logs", "Dead logs in this node's custody now.",
          (double)st.custody_logs);
    gauge(b, "skiff_cluster_lease_remaining_seconds",
          "Until the lease deadline, past which nothing is acknowledged (negative: passed).",
          st.lease_left_s);
    counter(b, "skiff_cluster_keepalives_total", "Lease keep-alives answered.", st.keepalives);
    counter(b, "skiff_cluster_keepalive_failures_total", "Lease keep-alives that failed.",
            st.keepalive_failures);
    counter(b, "skiff_cluster_watch_resets_total",
            "Times the watch of etcd lost its history and every key was read again.",
            st.watch_resets);
    counter(b, "skiff_cluster_adopted_total", "Partitions adopted by this node.", st.adopted);
    counter(b, "skiff_cluster_left_total", "Partitions handed over from this node's log.",
            st.left);
    counter(b, "skiff_cluster_handoffs_published_total",
            "HANDOFF records published (own log and logs in custody).", st.published);
    counter(b, "skiff_cluster_handoff_publish_retries_total",
            "Publishes of HANDOFF records that etcd did not take at once.", st.publish_retries);
    counter(b, "skiff_cluster_handoff_rpcs_total",
            "HandoffReady RPCs sent to the nodes taking partitions over.", st.rpc_sent);
    counter(b, "skiff_cluster_handoff_rpc_failures_total",
            "HandoffReady RPCs that failed or were refused (the target still learns of the "
            "handoff from etcd).", st.rpc_failed);
    gauge(b, "skiff_cluster_last_adopt_seconds",
          "From etcd naming this node until it served, for the last adoption.", st.last_adopt_s);
    gauge(b, "skiff_cluster_last_leave_seconds",
          "From a move's start until its HANDOFF was published, for the last one.",
          st.last_leave_s);
    counter(b, "skiff_cluster_custody_opened_total", "Dead logs fenced and replayed here.",
            st.custody_opened);
    counter(b, "skiff_cluster_custody_finished_total", "Dead logs emptied and deleted here.",
            st.custody_finished);
    gauge(b, "skiff_cluster_custody_last_open_seconds",
          "Fencing, view restore and replay of the last dead log taken into custody.",
          st.custody_last_open_s);
    counter(b, "skiff_controller_rounds_total", "Placement rounds run as controller.", st.rounds);
    counter(b, "skiff_controller_actions_total", "Placement decisions sent to etcd.", st.actions);
    counter(b, "skiff_controller_conflicts_total",
            "Placement decisions etcd refused because the key changed first.", st.conflicts);
    counter(b, "skiff_etcd_requests_total", "Requests sent to etcd.", st.etcd_requests);
    counter(b, "skiff_etcd_errors_total", "etcd requests that failed.", st.etcd_errors);
    counter(b, "skiff_etcd_timeouts_total", "etcd requests without an answer in time.",
            st.etcd_timeouts);
    counter(b, "skiff_etcd_endpoint_switches_total", "Moves to another etcd endpoint.",
            st.etcd_switches);
    counter(b, "skiff_etcd_watch_resumes_total", "Watches resumed after a broken stream.",
            st.etcd_watch_resumes);
    evbuffer_add_printf(b, "# HELP skiff_etcd_request_seconds Latency of answered etcd requests.\n"
                           "# TYPE skiff_etcd_request_seconds summary\n"
                           "skiff_etcd_request_seconds_sum %.6f\nskiff_etcd_request_seconds_count %llu\n",
                        st.etcd_latency_sum_s, (unsigned long long)st.etcd_latency_count);
}

/* Open connections by the peer's zone (as zone routing learned it) and kind:
 * a Kafka client, or another node. Zones are broker.rack-like names
 * ([a-zA-Z0-9._-]): nothing to escape. */
static void render_connections(sk_node *n, struct evbuffer *b)
{
    enum { MAXZ = 32 };
    const char *zone[MAXZ];
    uint64_t count[MAXZ][2] = {{0}};
    int nz = 0;
    for (sk_conn *c = n->conns; c; c = c->next) {
        const char *z = c->zone_known && c->zone[0] ? c->zone : "(unknown)";
        int i = 0;
        while (i < nz && strcmp(zone[i], z) != 0)
            i++;
        if (i == nz && nz == MAXZ)
            z = "(other)", i = MAXZ - 1;
        else if (i == nz)
            zone[nz++] = z;
        count[i][c->from_node >= 0]++;
    }
    evbuffer_add_printf(b, "# HELP skiff_connections_by_zone Open connections by the peer's zone "
                           "and kind (client or node).\n# TYPE skiff_connections_by_zone gauge\n");
    for (int i = 0; i < nz; i++)
        for (int k = 0; k < 2; k++)
            if (count[i][k])
                evbuffer_add_printf(b, "skiff_connections_by_zone{zone=\"%s\",peer=\"%s\"} %llu\n",
                                    zone[i], k ? "node" : "client",
                                    (unsigned long long)count[i][k]);
}

/* Objects by kind, from the registry's listing of the last compaction pass
 * (absent before the first: the registry is not read on the loop). */
static void render_objects(struct evbuffer *b, const sk_tier_stats *ts)
{
    if (!ts->listed_ms)
        return;
    static const char *kinds[3] = {NULL, "stream", "stream_set"};
    evbuffer_add_printf(b, "# HELP skiff_s3_objects Live objects this node's log holds, by kind "
                           "(as of the last compaction pass).\n# TYPE skiff_s3_objects gauge\n");
    for (int k = OBJFMT_SO; k <= OBJFMT_SSO; k++)
        evbuffer_add_printf(b, "skiff_s3_objects{kind=\"%s\"} %llu\n", kinds[k],
                            (unsigned long long)ts->objects[k]);
    evbuffer_add_printf(b, "# HELP skiff_s3_object_bytes Bytes of those objects, by kind.\n"
                           "# TYPE skiff_s3_object_bytes gauge\n");
    for (int k = OBJFMT_SO; k <= OBJFMT_SSO; k++)
        evbuffer_add_printf(b, "skiff_s3_object_bytes{kind=\"%s\"} %llu\n", kinds[k],
                            (unsigned long long)ts->object_bytes[k]);
}

/* Producers slowed down as the WAL fills (pace.h). */
static void render_pace(const sk_node *n, struct evbuffer *b)
{
    const sk_pace *p = &n->pace;
    gauge(b, "skiff_wal_fill_ratio",
          "WAL bytes retained as a share of wal.max.retained.bytes (the fuller of the own "
          "and the payload log).", sk_node_wal_fill(n));
    if (n->tier)
        gauge(b, "skiff_s3_upload_rate_bytes_per_second",
              "WAL bytes per second recent uploads took, from start to registration; 0 "
              "before the first and while uploads fail.", sk_tier_upload_rate(n->tier));
    gauge(b, "skiff_produce_pace_bytes_per_second",
          "Request bytes per second producers may send while the WAL fills past half of "
          "wal.max.retained.bytes; 0 when not paced.", p->active ? p->rate * 1000.0 : 0.0);
    counter_s(b, "skiff_produce_paced_seconds_total",
              "Time connections which produce were not read because the WAL was filling.",
              (uint64_t)sk_pace_held_ms(p, sk_mono_ms()) * 1000);
    counter(b, "skiff_produce_wal_full_refusals_total",
            "Partition batches refused with NOT_ENOUGH_REPLICAS because the WAL held "
            "wal.max.retained.bytes.", n->n_wal_full_refusals);
}

static void render_blockcache(sk_node *n, struct evbuffer *b)
{
    blockcache_stats bs;
    sk_tier_blockcache_stats(n->tier, &bs);
    counter(b, "skiff_s3_block_cache_hits_total", "Object blocks wanted and found in the cache.",
            bs.hits);
    counter(b, "skiff_s3_block_cache_misses_total", "Object blocks wanted and read from the store.",
            bs.misses);
    counter(b, "skiff_s3_block_cache_evictions_total", "Blocks evicted from the cache.",
            bs.evictions);
    gauge(b, "skiff_s3_block_cache_bytes", "Memory held by cached object blocks.", (double)bs.used);
    gauge(b, "skiff_s3_block_cache_read_once_bytes",
          "Cached blocks that one reader has read (the ring a catch-up cycles through).",
          (double)bs.once_bytes);
    counter(b, "skiff_s3_block_cache_read_once_evictions_total",
            "Blocks read once, evicted to keep them within their share of the cache.",
            bs.once_evictions);
    counter(b, "skiff_s3_block_gets_total",
            "Ranged GETs of object blocks (adjacent blocks merged into one GET).", bs.gets);
    counter(b, "skiff_s3_block_get_bytes_total", "Bytes asked for by those GETs.", bs.get_bytes);
    counter_s(b, "skiff_s3_block_get_seconds_total",
              "Durations of the block GETs that ended, summed.", bs.get_us);
    counter(b, "skiff_s3_block_readahead_total", "Blocks fetched ahead of the reads.",
            bs.readahead);
    gauge(b, "skiff_s3_block_gets_in_flight", "Block GETs in flight now.",
          (double)bs.gets_in_flight);
    gauge(b, "skiff_s3_block_get_bytes_in_flight", "Bytes of the block GETs in flight now.",
          (double)bs.get_bytes_in_flight);
    counter(b, "skiff_s3_block_buffers_reused_total",
            "Block fetches that reused a freed block's buffer rather than allocate one.",
            bs.buffers_reused);
    gauge(b, "skiff_s3_block_buffer_pool_bytes", "Free block buffers kept for the next fetches.",
          (double)bs.pool_bytes);
    counter(b, "skiff_s3_block_waits_total",
            "Reads from objects that waited for a block GET (the others found every block "
            "cached).",
            bs.waits);
    counter_s(b, "skiff_s3_block_wait_seconds_total", "How long those reads waited, summed.",
              bs.wait_us);
}

/* A label value as the exposition format wants it: \\, \" and \\n escaped. */
static void put_label_value(struct evbuffer *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            evbuffer_add_printf(b, "\\%c", *v);
        else if (*v == '\n')
            evbuffer_add(b, "\\n", 2);
        else
            evbuffer_add(b, v, 1);
    }
}

static void put_group_offset(void *arg, const char *group, const char *topic, int32_t part,
                             int64_t offset)
{
    struct evbuffer *b = arg;
    evbuffer_add_printf(b, "skiff_consumer_group_committed_offset{group=\"");
    put_label_value(b, group);
    evbuffer_add_printf(b, "\",topic=\"%s\",partition=\"%d\"} %lld\n", topic, part,
                        (long long)offset);
}

/* Committed offsets of the groups this node coordinates; their lag is the
 * partition's high watermark, from its main, less this (the recording rule
 * skiff:consumer_group_lag in deploy/prometheus/skiff-alerts.yml). */
static void render_group_offsets(sk_node *n, struct evbuffer *b)
{
    evbuffer_add_printf(b, "# HELP skiff_consumer_group_committed_offset Committed offset of a "
                           "group coordinated here, by partition.\n"
                           "# TYPE skiff_consumer_group_committed_offset gauge\n");
    if (n->groups)
        sk_groups_each_offset(n->groups, put_group_offset, b);
}

/* Topic names are [a-zA-Z0-9._-]: nothing to escape in a label value. */
void sk_metrics_render(sk_node *n, struct evbuffer *b)
{
    evbuffer_add_printf(b, "# HELP skiff_build_info Version of this skiffd.\n"
                           "# TYPE skiff_build_info gauge\nskiff_build_info{version=\"%s\",node=\"%d\","
                           "zone=\"%s\"} 1\n",
                        SKIFF_VERSION, n->cfg->node_id, n->cfg->broker_rack);
    gauge(b, "skiff_uptime_seconds", "Seconds since the node started.",
          (double)(sk_now_ms() - n->started_ms) / 1000.0);
    gauge(b, "skiff_connections", "Open client connections.", (double)n->nconns);

    evbuffer_add_printf(b, "# HELP skiff_requests_total Requests received, by API.\n"
                           "# TYPE skiff_requests_total counter\n");
    for (int k = 0; k < SK_METRICS_APIS; k++) {
        if (!n->metrics.requests[k])
            continue;
        const kc_api *api = kc_api_get((int16_t)k);
        evbuffer_add_printf(b, "skiff_requests_total{api=\"%s\"} %llu\n", api ? api->name : "?",
                            (unsigned long long)n->metrics.requests[k]);
    }
    put_request_latency(n, b);
    render_connections(n, b);
    put_histogram(b, "skiff_produce_latency_seconds",
                  "Time from a produce request's arrival to its answer (durable).",
                  &n->metrics.produce_latency);
    counter(b, "skiff_produced_batches_total", "Record batches appended.", n->n_produced_batches);
    counter(b, "skiff_produced_bytes_total", "Record batch bytes appended.", n->n_produced_bytes);
    counter(b, "skiff_fetched_bytes_total", "Record batch bytes sent to consumers.",
            n->n_fetched_bytes);
    const sk_fs_cache *fsc = n->fsessions; /* made at the first fetch session */
    gauge(b, "skiff_fetch_sessions", "Fetch sessions (KIP-227) cached.",
          fsc ? (double)sk_fs_count(fsc) : 0);
    gauge(b, "skiff_fetch_session_partitions", "Partitions of the cached fetch sessions.",
          fsc ? (double)sk_fs_partitions(fsc) : 0);
    counter(b, "skiff_fetch_sessions_created_total", "Fetch sessions created by full fetches.",
            fsc ? sk_fs_created(fsc) : 0);
    counter(b, "skiff_fetch_session_evictions_total",
            "Fetch sessions evicted to make room for a new one.", fsc ? sk_fs_evictions(fsc) : 0);

    if (n->wal) {
        wal_stats ws;
        wal_get_stats(n->wal, &ws);
        counter(b, "skiff_wal_appends_total", "Records appended to the WAL.", ws.appends);
        counter(b, "skiff_wal_commits_total", "Group commits (one write and one sync each).",
                ws.commits);
        counter(b, "skiff_wal_written_bytes_total", "Bytes written to the WAL.", ws.bytes_written);
        gauge(b, "skiff_wal_last_commit_seconds", "Duration of the last write+sync.",
              (double)ws.last_commit_us / 1e6);
        put_wal_commit_latency(b, &ws);
        gauge(b, "skiff_wal_segments", "WAL segments retained.", (double)ws.segments);
        gauge(b, "skiff_wal_pending_bytes", "Bytes appended and not yet durable.",
              (double)wal_pending_bytes(n->wal));
        gauge(b, "skiff_wal_retained_bytes", "Bytes between the WAL's start and its end.",
              (double)(wal_end_lsn(n->wal) - wal_start_lsn(n->wal)));
        gauge(b, "skiff_view_lag_bytes",
              "WAL bytes durable but not yet reflected in the SQLite view.",
              (double)(wal_durable_lsn(n->wal) > n->store_applied
                           ? wal_durable_lsn(n->wal) - n->store_applied
                           : 0));
        gauge(b, "skiff_wal_failed", "1 when the WAL failed and the node refuses writes.",
              wal_failed(n->wal) ? 1 : 0);
        gauge(b, "skiff_wal_unavailable",
              "1 while the volume has not completed an operation for wal.io.timeout.ms.",
              ws.unavailable ? 1 : 0);
        gauge(b, "skiff_wal_outage_seconds", "How long the current storage trouble lasts.",
              (double)ws.outage_ms / 1000.0);
        counter(b, "skiff_wal_retries_total",
                "WAL operations issued again after a transient error.", ws.retries);
        counter(b, "skiff_wal_buffers_allocated_total",
                "Group-commit buffers allocated or grown (flat once the reused ones are warm).",
                ws.buffers_allocated);
        counter(b, "skiff_wal_lease_lapses_total",
                "Times acknowledgements stopped for want of a renewed lease.", ws.lease_lapses);
        gauge(b, "skiff_wal_owner_epoch", "The owner epoch this node holds the WAL with.",
              (double)ws.owner_epoch);
    }
    if (n->tier) {
        sk_tier_stats ts;
        sk_tier_stats_get(n->tier, &ts);
        counter(b, "skiff_s3_uploads_total", "Uploads of WAL data into objects.", ts.uploads);
        counter(b, "skiff_s3_upload_bytes_total", "Batch bytes uploaded.", ts.upload_bytes);
        counter(b, "skiff_s3_uploads_pieced_total",
                "Uploads read back from the WAL whose first quarter went to the object store while they read the rest.",
                ts.upload_pieced);
        counter(b, "skiff_s3_upload_failures_total",
                "Uploads of WAL data that failed, in S3 or registering their objects (retried).",
                ts.upload_failures);
        if (ts.last_upload_ms)
            gauge(b, "skiff_s3_last_upload_timestamp_seconds",
                  "When the last upload of WAL data completed (Unix time).",
                  (double)ts.last_upload_ms / 1000.0);
        counter(b, "skiff_s3_objects_put_total", "Objects written (uploads and compaction).",
                ts.objects_put);
        counter(b, "skiff_s3_stream_objects_put_total", "StreamObjects written.", ts.so_put);
        counter(b, "skiff_s3_stream_set_objects_put_total", "StreamSetObjects written.",
                ts.sso_put);
        counter(b, "skiff_s3_compactions_total", "Compactions registered.", ts.compactions);
        counter(b, "skiff_log_cleaner_passes_total",
                "Compaction passes over keyed topics (cleanup.policy=compact) registered.",
                ts.cleaner_passes);
        counter(b, "skiff_log_cleaner_bytes_read_total",
                "Object bytes rewritten by compaction passes over keyed topics.",
                ts.cleaner_bytes_in);
        counter(b, "skiff_log_cleaner_records_removed_total",
                "Records removed by compaction of keyed topics (older values, expired "
                "tombstones).",
                ts.cleaner_records_removed);
        counter(b, "skiff_s3_objects_deleted_total", "Retired objects deleted.",
                ts.objects_deleted);
        counter(b, "skiff_s3_orphans_deleted_total", "Unregistered objects deleted.",
                ts.orphans_deleted);
        counter(b, "skiff_s3_view_snapshots_total", "Snapshots of the SQLite view stored.",
                ts.snapshots);
        counter(b, "skiff_s3_read_bytes_total", "Batch bytes read from objects.", ts.read_bytes);
        counter(b, "skiff_s3_prefetches_total",
                "Object ranges read ahead because a reader neared the end of the one before.",
                ts.prefetches);
        counter(b, "skiff_s3_prefetch_errors_total", "Reads ahead into a next range that failed.",
                ts.prefetch_errors);
        gauge(b, "skiff_s3_upload_trigger_bytes",
              "Upload lag that starts an upload, and the most one holds beyond the WAL cache.",
              (double)sk_tier_upload_trigger(n->cfg));
        if (n->wal)
            gauge(b, "skiff_s3_upload_lag_bytes", "Durable WAL bytes not uploaded yet.",
                  (double)(wal_durable_lsn(n->wal) > ts.uploaded ? wal_durable_lsn(n->wal) - ts.uploaded
                                                                 : 0));
        objstore_stats os;
        sk_tier_objstore_stats(n->tier, &os);
        counter(b, "skiff_s3_requests_total", "Object store requests sent (attempts).",
                os.requests);
        counter(b, "skiff_s3_retries_total", "Object store requests retried.", os.retries);
        counter(b, "skiff_s3_errors_total", "Object store operations failed after retries.",
                os.ops_failed);
        counter(b, "skiff_s3_bytes_up_total", "Bytes sent to the object store.", os.bytes_up);
        counter(b, "skiff_s3_bytes_down_total", "Bytes read from the object store.",
                os.bytes_down);
        gauge(b, "skiff_s3_requests_in_flight", "Object store requests in flight now.",
              (double)os.inflight);
        gauge(b, "skiff_s3_requests_in_flight_peak", "Most object store requests in flight at once.",
              (double)os.inflight_peak);
        gauge(b, "skiff_s3_requests_queued", "Object store requests waiting for a slot.",
              (double)os.queued);
        render_blockcache(n, b);
        render_objects(b, &ts);
    }
    if (n->cluster)
        render_cluster(n, b);
    sk_progress_metrics(&n->progress, b);
    sk_xzone_metrics(n, b);
    gauge(b, "skiff_cache_bytes", "Bytes of recent batches held in memory.", (double)n->cache_bytes);
    gauge(b, "skiff_back_pressure", "1 while the node has stopped reading requests.",
          n->paused ? 1 : 0);
    render_pace(n, b);

    size_t ntopics = sk_map_count(n->topics_by_id), nparts = 0;
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v))
        nparts += (size_t)((sk_topic *)v)->nparts;
    render_group_offsets(n, b);
    gauge(b, "skiff_topics", "Topics.", (double)ntopics);
    gauge(b, "skiff_partitions", "Partitions.", (double)nparts);

    evbuffer_add_printf(b, "# HELP skiff_partition_high_watermark High watermark per partition.\n"
                           "# TYPE skiff_partition_high_watermark gauge\n");
    it = 0;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *t = v;
        for (int32_t i = 0; i < t->nparts; i++)
            if (sk_part_serving(t->parts[i]))
                evbuffer_add_printf(
                    b, "skiff_partition_high_watermark{topic=\"%s\",partition=\"%d\"} %lld\n",
                    t->name, i, (long long)t->parts[i]->hw);
    }
    evbuffer_add_printf(b, "# HELP skiff_partition_log_start_offset First readable offset per partition.\n"
                           "# TYPE skiff_partition_log_start_offset gauge\n");
    it = 0;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *t = v;
        for (int32_t i = 0; i < t->nparts; i++)
            if (sk_part_serving(t->parts[i]))
                evbuffer_add_printf(
                    b, "skiff_partition_log_start_offset{topic=\"%s\",partition=\"%d\"} %lld\n",
                    t->name, i, (long long)t->parts[i]->log_start);
    }
}

/* uri is `path`, with or without a query. */
static bool is_path(const char *uri, const char *path)
{
    size_t n = strlen(path);
    return strncmp(uri, path, n) == 0 && (uri[n] == 0 || uri[n] == '?');
}

static void http_cb(struct evhttp_request *req, void *arg)
{
    sk_node *n = arg;
    const char *uri = evhttp_request_get_uri(req);
    bool zones = is_path(uri, "/zones");
    if (!zones && !is_path(uri, "/metrics")) {
        evhttp_send_error(req, HTTP_NOTFOUND, "try /metrics or /zones");
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    if (zones)
        sk_xzone_report(n, b);
    else
        sk_metrics_render(n, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      zones ? "text/plain; charset=utf-8" : "text/plain; version=0.0.4");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

int sk_metrics_start(sk_node *n, char *why, size_t whylen)
{
    const char *spec = n->cfg->metrics_listener;
    if (!spec || !*spec)
        return 0;
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec) {
        snprintf(why, whylen, "property metrics.listener: '%s' is not host:port", spec);
        return -1;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - spec), spec);
    int port = atoi(colon + 1);
    n->http = evhttp_new(n->base);
    if (!n->http || evhttp_bind_socket(n->http, host, (ev_uint16_t)port) != 0) {
        snprintf(why, whylen, "property metrics.listener: cannot listen on %s", spec);
        return -1;
    }
    evhttp_set_gencb(n->http, http_cb, n);
    SK_INFO("metrics", "Prometheus metrics at http://%s/metrics", spec);
    return 0;
}

void sk_metrics_stop(sk_node *n)
{
    if (n->http) {
        evhttp_free(n->http);
        n->http = NULL;
    }
}
