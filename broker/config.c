#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kbatch.h"
#include "pmap.h"
#include "sk_err.h"
#include "sk_log.h"
#include "zone.h"

#define OFF(f) offsetof(sk_config, f)
#define I32MAX 2147483647LL
#define I64MAX INT64_MAX

static const char *check_listeners(const char *v)
{
    static char why[256];
    sk_listener tmp[SK_MAX_LISTENERS];
    int n;
    if (!*v)
        return NULL;
    if (sk_parse_listeners(v, tmp, &n, why, sizeof why) != 0)
        return why;
    return NULL;
}

static const char *check_nonempty_listeners(const char *v)
{
    if (!*v)
        return "must name at least one listener, e.g. PLAINTEXT://localhost:9092";
    return check_listeners(v);
}

static const char *check_zone_cidrs(const char *v)
{
    static char why[300];
    zone_map *m = zone_map_new(v, "", why, sizeof why);
    if (!m)
        return why;
    zone_map_destroy(m);
    return NULL;
}

static const char *check_listener_zones(const char *v)
{
    static char why[300];
    zone_map *m = zone_map_new("", v, why, sizeof why);
    if (!m)
        return why;
    zone_map_destroy(m);
    return NULL;
}

static const char *check_log_level(const char *v)
{
    return sk_log_parse_level(v) < 0 ? "must be one of error, warn, info, debug" : NULL;
}

static const char *check_ts_type(const char *v)
{
    if (strcmp(v, "CreateTime") == 0 || strcmp(v, "LogAppendTime") == 0)
        return NULL;
    return "must be CreateTime or LogAppendTime";
}

static const char *check_ratio(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    return *v && !*end && x >= 0 && x <= 1 ? NULL : "must be a number between 0 and 1";
}

static const char *check_compression(const char *v)
{
    if (strcmp(v, "producer") == 0 || kb_codec_named(v, strlen(v)) >= 0)
        return NULL;
    return "must be one of uncompressed, zstd, lz4, snappy, gzip, producer";
}

static const char *check_wal_url(const char *v)
{
    if (!*v || strncmp(v, "file://", 7) == 0 || strncmp(v, "nfs://", 6) == 0)
        return NULL;
    return "must be a file:// or nfs:// URL";
}

static const char *check_objects_url(const char *v)
{
    if (!*v || strncmp(v, "file://", 7) == 0 || strncmp(v, "s3://", 5) == 0)
        return NULL;
    return "must be an s3:// or file:// URL";
}

static const char *check_etcd_endpoints(const char *v)
{
    if (!*v)
        return NULL;
    const char *p = v;
    while (*p) {
        if (strncmp(p, "http://", 7) != 0)
            return "each endpoint must be http://host:port";
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len <= 7 || !memchr(p + 7, ':', len - 7))
            return "each endpoint must be http://host:port";
        p += len;
        if (*p == ',')
            p++;
    }
    return NULL;
}

static const char *check_assignors(const char *v)
{
    size_t n = 0;
    while (*v) {
        size_t l = strcspn(v, ", ");
        if ((l == 7 && strncmp(v, "uniform", 7) == 0) || (l == 5 && strncmp(v, "range", 5) == 0))
            n++;
        else if (l > 0)
            return "assignors are uniform and range";
        v += l;
        v += strspn(v, ", ");
    }
    return n ? NULL : "name at least one assignor (uniform, range)";
}

static const char *check_migration_policy(const char *v)
{
    static const char *ok[] = {"bidirectional", "upgrade", "downgrade", "disabled"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcasecmp(v, ok[i]) == 0)
            return NULL;
    return "must be one of bidirectional, upgrade, downgrade, disabled";
}

static const char *check_etcd_prefix(const char *v)
{
    size_t n = strlen(v);
    if (n < 2 || v[0] != '/' || v[n - 1] != '/' || n > 128)
        return "must start and end with '/' (at most 128 bytes)";
    return NULL;
}

static const char *check_price(const char *v)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !(d >= 0.0 && d < 1e6))
        return "must be a number of dollars, 0 or more, e.g. 0.01";
    return NULL;
}

static const char *check_rack(const char *v)
{
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return "may hold only letters, digits, '-', '_' and '.'";
    return NULL;
}

static const char *const secproto_names[] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"};

const char *sk_secproto_name(sk_secproto p)
{
    return (unsigned)p < 4 ? secproto_names[p] : "?";
}

/* Checks "NAME:PROTOCOL,..."; with `listener`, finds its protocol (else
 * SK_ERR_NOENT). */
static int parse_protocol_map(const char *map, const char *listener, sk_secproto *out,
                              char *why, size_t whylen)
{
    const char *p = map;
    while (*p) {
        size_t l = strcspn(p, ",");
        const char *colon = memchr(p, ':', l);
        size_t nl = colon ? (size_t)(colon - p) : 0;
        int proto = -1;
        for (int i = 0; colon && i < 4; i++)
            if (strlen(secproto_names[i]) == l - nl - 1 &&
                strncmp(colon + 1, secproto_names[i], l - nl - 1) == 0)
                proto = i;
        if (nl == 0 || proto < 0) {
            snprintf(why, whylen, "'%.*s' is not NAME:PROTOCOL with PROTOCOL one of PLAINTEXT, "
                     "SSL, SASL_PLAINTEXT, SASL_SSL", (int)(l > 100 ? 100 : l), p);
            return SK_ERR_INVAL;
        }
        if (listener && strlen(listener) == nl && strncasecmp(listener, p, nl) == 0) {
            *out = (sk_secproto)proto;
            return 0;
        }
        p += l + (p[l] == ',');
    }
    return listener ? SK_ERR_NOENT : 0;
}

static const char *check_protocol_map(const char *v)
{
    static char why[256];
    if (parse_protocol_map(v, NULL, NULL, why, sizeof why) != 0)
        return why;
    return NULL;
}

static bool in_list(const char *list, const char *word, size_t wl)
{
    size_t n = strlen(list);
    for (const char *p = list; p < list + n;) {
        size_t l = strcspn(p, ",");
        if (l == wl && strncmp(p, word, wl) == 0)
            return true;
        p += l + (p[l] == ',');
    }
    return false;
}

/* Each comma-separated item of v is one of `allowed` (comma-separated). */
static const char *check_items(const char *v, const char *allowed, const char *msg)
{
    const char *p = v;
    while (*p) {
        while (*p == ' ')
            p++;
        size_t l = strcspn(p, ", ");
        if (l == 0 || !in_list(allowed, p, l))
            return msg;
        p += l;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
    }
    return NULL;
}

static const char *check_pem(const char *v)
{
    return strcmp(v, "PEM") == 0 ? NULL : "must be PEM (the only store type served)";
}

static const char *check_tls_protocols(const char *v)
{
    if (!*v)
        return "must name at least one of TLSv1.2, TLSv1.3";
    return check_items(v, "TLSv1.2,TLSv1.3", "must be a list of TLSv1.2, TLSv1.3");
}

static const char *check_client_auth(const char *v)
{
    if (strcmp(v, "none") == 0 || strcmp(v, "requested") == 0 || strcmp(v, "required") == 0)
        return NULL;
    return "must be none, requested or required";
}

static const char *check_mapping_rules(const char *v)
{
    static char why[200];
    sk_pmap *m = NULL;
    if (sk_pmap_parse(v, &m, why, sizeof why) != 0)
        return why;
    sk_pmap_free(m);
    return NULL;
}

static const char *check_endpoint_id(const char *v)
{
    return !*v || strcasecmp(v, "https") == 0 ? NULL : "must be https or empty";
}

static const char *check_inter_protocol(const char *v)
{
    for (int i = 0; *v && i < 4; i++)
        if (strcmp(v, secproto_names[i]) == 0)
            return NULL;
    return *v ? "must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL" : NULL;
}

static const char *check_mechanisms(const char *v)
{
    return check_items(v, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                       "must be a list of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512");
}

static const char *check_authorizer(const char *v)
{
    if (!*v || strcmp(v, SK_AUTHORIZER_CLASS) == 0 ||
        strcmp(v, "kafka.security.authorizer.AclAuthorizer") == 0)
        return NULL;
    return "must be empty or " SK_AUTHORIZER_CLASS " (the built-in authorizer)";
}

/* The table. Keep it sorted by group, then by importance. */
const sk_prop sk_props[] = {
    /* Node */
    {"node.id", SK_PROP_INT, OFF(node_id), "1", 0, I32MAX, "Node",
     "Identifier of this node in the cluster; returned to clients as the broker id.", NULL, false},
    {"broker.rack", SK_PROP_STRING, OFF(broker_rack), "", 0, 0, "Node",
     "The availability zone of this node (Kafka's rack). Clients of a known zone are served "
     "by nodes of their zone.",
     check_rack, false},
    {"listeners", SK_PROP_STRING, OFF(listeners_str), "PLAINTEXT://localhost:9092", 0, 0, "Node",
     "Comma-separated NAME://host:port addresses to listen on. An empty host binds every "
     "interface.",
     check_nonempty_listeners, false},
    {"advertised.listeners", SK_PROP_STRING, OFF(advertised_listeners_str), "", 0, 0, "Node",
     "Addresses given to clients in Metadata, per listener name. Defaults to `listeners` "
     "(with the machine's host name where a listener has no host).",
     check_listeners, false},
    {"data.dir", SK_PROP_STRING, OFF(data_dir), "./skiff-data", 0, 0, "Node",
     "Local state directory: the SQLite view of partition metadata and, by default, the WAL. "
     "Nothing here is needed to recover data that the WAL holds.",
     NULL, false},
    {"client.zone.cidrs", SK_PROP_STRING, OFF(client_zone_cidrs), "", 0, 0, "Node",
     "Zones of clients by address, as prefix=zone pairs (10.0.0.0/16=us-east-1a,...), used "
     "when a client's client.id names no zone (skiff_az=<zone>).",
     check_zone_cidrs, false},
    {"listener.zones", SK_PROP_STRING, OFF(listener_zones), "", 0, 0, "Node",
     "Zones of clients by the listener they connect to (LISTENER_NAME=zone,...), the last "
     "resort of zone detection.",
     check_listener_zones, false},
    {"metrics.listener", SK_PROP_STRING, OFF(metrics_listener), "", 0, 0, "Node",
     "host:port on which to serve Prometheus metrics at /metrics, and the cross-zone report "
     "at /zones (empty: off).",
     NULL, false},
    {"zone.transfer.price.per.gib", SK_PROP_STRING, OFF(zone_transfer_price_per_gib), "0.01", 0,
     0, "Node",
     "Dollars per GiB that cross availability zones, in each direction: AWS bills $0.01 out "
     "of the sending instance and $0.01 into the receiving one. The /zones report of "
     "metrics.listener prices this node's side, what it sends and receives across zones, "
     "with it.",
     check_price, false},
    {"log.level", SK_PROP_STRING, OFF(log_level), "info", 0, 0, "Node",
     "Verbosity of the node's log on standard error: error, warn, info or debug.",
     check_log_level, false},

    /* Security */
    {"listener.security.protocol.map", SK_PROP_STRING, OFF(listener_security_protocol_map),
     "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", 0, 0,
     "Security",
     "The security protocol of each listener name (NAME:PROTOCOL,...), among PLAINTEXT, SSL, "
     "SASL_PLAINTEXT and SASL_SSL.",
     check_protocol_map, false},
    {"ssl.keystore.type", SK_PROP_STRING, OFF(ssl_keystore_type), "PEM", 0, 0, "Security",
     "Format of ssl.keystore.location: PEM.", check_pem, false},
    {"ssl.keystore.location", SK_PROP_STRING, OFF(ssl_keystore_location), "", 0, 0, "Security",
     "PEM file with the private key and the certificate chain (the node's own certificate "
     "first) of SSL and SASL_SSL listeners. Read again on SIGHUP.",
     NULL, false},
    {"ssl.key.password", SK_PROP_PASSWORD, OFF(ssl_key_password), "", 0, 0, "Security",
     "Password of the private key in ssl.keystore.location when it is encrypted.", NULL,
     false},
    {"ssl.truststore.type", SK_PROP_STRING, OFF(ssl_truststore_type), "PEM", 0, 0, "Security",
     "Format of ssl.truststore.location: PEM.", check_pem, false},
    {"ssl.truststore.location", SK_PROP_STRING, OFF(ssl_truststore_location), "", 0, 0,
     "Security",
     "PEM file of the certificate authorities client certificates are checked against "
     "(ssl.client.auth). Read again on SIGHUP.",
     NULL, false},
    {"ssl.enabled.protocols", SK_PROP_STRING, OFF(ssl_enabled_protocols), "TLSv1.2,TLSv1.3", 0,
     0, "Security", "TLS versions accepted: TLSv1.2, TLSv1.3.", check_tls_protocols, false},
    {"ssl.client.auth", SK_PROP_STRING, OFF(ssl_client_auth), "none", 0, 0, "Security",
     "Client certificates on SSL listeners: none (not asked for), requested (checked when "
     "given) or required. A checked certificate's subject is the client's principal. "
     "SASL_SSL listeners never ask for one (their clients authenticate with SASL).",
     check_client_auth, false},
    {"ssl.principal.mapping.rules", SK_PROP_STRING, OFF(ssl_principal_mapping_rules), "DEFAULT",
     0, 0, "Security",
     "How a client certificate becomes a principal, as in Kafka: rules tried in order, "
     "separated by commas, the first that applies giving the user name: DEFAULT, the "
     "subject's distinguished name (User:CN=alice,O=example), or "
     "RULE:pattern/replacement/[LU] (pattern matching the whole name, $1.. its groups, "
     "L or U to lower- or upper-case). A certificate no rule applies to is refused.",
     check_mapping_rules, false},
    {"ssl.endpoint.identification.algorithm", SK_PROP_STRING,
     OFF(ssl_endpoint_identification_algorithm), "https", 0, 0, "Security",
     "https: a node connecting to another node's SSL inter-broker listener checks that the "
     "certificate names the address it dialled (DNS name or IP address); empty: the "
     "certificate's chain alone is checked.",
     check_endpoint_id, false},
    {"security.inter.broker.protocol", SK_PROP_STRING, OFF(security_inter_broker_protocol), "",
     0, 0, "Security",
     "Instead of inter.broker.listener.name (not both): node-to-node traffic uses the "
     "listener named after this protocol (SSL: the listener SSL://...).",
     check_inter_protocol, false},
    {"sasl.enabled.mechanisms", SK_PROP_STRING, OFF(sasl_enabled_mechanisms),
     "SCRAM-SHA-256,SCRAM-SHA-512", 0, 0, "Security",
     "SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners: PLAIN, SCRAM-SHA-256, "
     "SCRAM-SHA-512. SCRAM users are kept in the cluster metadata (kafka-configs.sh "
     "--entity-type users); PLAIN users come from "
     "listener.name.<listener>.plain.sasl.jaas.config (user_NAME=\"password\" entries, "
     "a password property).",
     check_mechanisms, false},
    {"connections.max.reauth.ms", SK_PROP_LONG, OFF(connections_max_reauth_ms), "0", 0, I64MAX,
     "Security",
     "Lifetime of a SASL session (KIP-368): clients re-authenticate before it ends, and a "
     "connection that has not is closed at its next request (0: no limit).",
     NULL, false},
    {"authorizer.class.name", SK_PROP_STRING, OFF(authorizer_class_name), "", 0, 0, "Security",
     "The authorizer: empty (every principal may do everything) or "
     "org.apache.kafka.metadata.authorizer.StandardAuthorizer, Skiff's built-in one, which "
     "checks every request against the ACLs kept in the cluster metadata (kafka-acls.sh).",
     check_authorizer, false},
    {"super.users", SK_PROP_STRING, OFF(super_users), "", 0, 0, "Security",
     "Principals the authorizer allows everything, separated by semicolons "
     "(User:admin;User:CN=ops).",
     NULL, false},
    {"allow.everyone.if.no.acl.found", SK_PROP_BOOL, OFF(allow_everyone_if_no_acl_found),
     "false", 0, 0, "Security",
     "With the authorizer on: whether a resource that no ACL names is open to every "
     "principal.",
     NULL, false},
    {"connection.failed.authentication.delay.ms", SK_PROP_INT,
     OFF(connection_failed_authentication_delay_ms), "100", 0, 60000, "Security",
     "How long the answer to a failed authentication is held back.", NULL, false},

    /* Storage */
    {"wal.url", SK_PROP_STRING, OFF(wal_url), "", 0, 0, "Storage",
     "Where the write-ahead log lives: file:///path (local disk or a kernel-mounted NFS/FSx "
     "path) or nfs://host/export/path?version=3. Default: file://<data.dir>/wal.",
     check_wal_url, false},
    {"wal.segment.bytes", SK_PROP_LONG, OFF(wal_segment_bytes), "134217728", 1048576,
     1LL << 40, "Storage",
     "Size at which the WAL starts a new segment file. Retention deletes whole segments.", NULL, false},
    {"wal.cache.bytes", SK_PROP_LONG, OFF(wal_cache_bytes), "268435456", 0, I64MAX, "Storage",
     "Memory for recently written batches, which serve fetches without reading storage and "
     "uploads without reading the WAL back (an upload starts once a quarter of it is not "
     "uploaded yet: see s3.wal.upload.threshold). Batches an upload still uses when they leave the "
     "cache stay in memory until their objects are written.", NULL, false},
    {"wal.max.pending.bytes", SK_PROP_LONG, OFF(wal_max_pending_bytes), "67108864", 1048576,
     I64MAX, "Storage",
     "Bytes accepted but not yet durable beyond which the node stops reading new requests "
     "until the WAL catches up (back-pressure on a slow volume). The group-commit buffers "
     "that held them are kept for reuse, up to this many bytes of them.",
     NULL, false},
    {"wal.max.retained.bytes", SK_PROP_LONG, OFF(wal_max_retained_bytes), "2147483648",
     1048576, I64MAX, "Storage",
     "Most WAL bytes kept on the volume. Past half of it (uploads slower than produce), "
     "what producers send is metered to the upload rate, so that intake settles below it; "
     "past it (uploads failing), produce is refused with NOT_ENOUGH_REPLICAS (retriable) "
     "until uploads catch up.",
     NULL, false},
    {"wal.direct.io", SK_PROP_BOOL, OFF(wal_direct_io), "true", 0, 0, "Storage",
     "Write a WAL on a local file system with O_DIRECT: no copy into the page cache, a "
     "fraction of the WAL's CPU and a faster produce path. Uploads take their batches from "
     "the WAL cache; what they still read from the WAL (batches evicted before their upload) "
     "then comes from the disk instead of the page cache (docs/wal.md, \"Direct I/O\"). "
     "Never used for NFS or where the file system cannot (tmpfs).",
     NULL, false},
    {"view.commit.interval.ms", SK_PROP_LONG, OFF(view_commit_interval_ms), "100", 1, 60000,
     "Storage",
     "Most often the SQLite view of the WAL commits a transaction of what became durable "
     "(fewer, larger transactions write fewer pages). The view trails the WAL by up to this "
     "long; nothing waits for it but restarts, handoffs and uploads.",
     NULL, false},
    {"wal.lease.ms", SK_PROP_LONG, OFF(wal_lease_ms), "10000", 100, 3600000, "Storage",
     "Lease by which this node owns its WAL, renewed every quarter of it. A node that cannot "
     "renew it stops acknowledging; another node takes a WAL over only after its owner's lease "
     "has run out, and waits 1.2 times the lease before reading it (a restart on the same "
     "data.dir after a crash needs no wait).",
     NULL, false},
    {"wal.io.timeout.ms", SK_PROP_LONG, OFF(wal_io_timeout_ms), "30000", 100, I64MAX, "Storage",
     "How long the WAL's volume may fail to complete writes or lease renewals before the WAL "
     "reports itself unavailable (log, metrics). Records keep waiting and are retried "
     "meanwhile; a shutdown gives up on records still not durable after this long.",
     NULL, false},

    /* Objects */
    {"objects.url", SK_PROP_STRING, OFF(objects_url), "", 0, 0, "Objects",
     "Where data lives long-term: s3://bucket/prefix?region=R (with &endpoint=URL and "
     "&path-style=true for S3-compatible stores) or file:///path. Default: "
     "file://<data.dir>/objects. S3 credentials come from AWS_ACCESS_KEY_ID / "
     "AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else from EC2 instance metadata.",
     check_objects_url, false},
    {"s3.wal.upload.interval.ms", SK_PROP_LONG, OFF(s3_upload_interval_ms), "30000", 100, I64MAX,
     "Objects", "How often the WAL's new data is uploaded to objects.", NULL, false},
    {"s3.wal.upload.threshold", SK_PROP_LONG, OFF(s3_upload_threshold), "524288000", 4096,
     I64MAX, "Objects",
     "Most bytes of WAL one upload takes, and how many not in objects yet start one; a quarter "
     "of wal.cache.bytes instead when that is less, but at least 64 MiB. An upload's batches "
     "are then still in the WAL cache and go into objects from memory, by reference; only the "
     "others (evicted, linked, adopted) are read from the WAL and copied, into a buffer "
     "reused from one upload to the next. An upload in flight holds at most this many bytes "
     "beyond the cache, even when uploads have fallen behind.",
     NULL, false},
    {"s3.stream.object.split.size", SK_PROP_LONG, OFF(s3_split_size), "8388608", 1, I64MAX,
     "Objects",
     "A partition with at least this many bytes in an upload gets an object of its own "
     "(StreamObject); the others share one (StreamSetObject).",
     NULL, false},
    {"s3.object.block.bytes", SK_PROP_INT, OFF(s3_block_bytes), "1048576", 4096, 1 << 30,
     "Objects", "Size of the data blocks of an object: the unit of ranged reads and caching.",
     NULL, false},
    {"s3.block.cache.bytes", SK_PROP_LONG, OFF(s3_block_cache_bytes), "268435456", 0, I64MAX,
     "Objects",
     "Memory for blocks read from objects. Blocks that one consumer has read once (a "
     "catch-up) keep to a quarter of it and are evicted first, so the rest holds the blocks "
     "that several readers share.",
     NULL, false},
    {"s3.block.readahead.bytes", SK_PROP_LONG, OFF(s3_readahead_bytes), "8388608", 0, I64MAX,
     "Objects",
     "How far a read from objects reads ahead in its partition (whole blocks of "
     "s3.object.block.bytes, in GETs of at most 8 MiB), refilled once less than half of it "
     "is cached. Each partition catching up takes up to this much of s3.block.cache.bytes; "
     "read-ahead that does not fit is skipped. When skiff_s3_block_wait_seconds_total grows "
     "during catch-ups and the object store has bandwidth to spare, a deeper read-ahead keeps "
     "more GETs under way.",
     NULL, false},
    {"s3.object.delete.delay.ms", SK_PROP_LONG, OFF(s3_delete_delay_ms), "300000", 0, I64MAX,
     "Objects",
     "How long an object replaced by compaction or emptied by retention stays readable before "
     "it is deleted, so that reads in flight never miss it.",
     NULL, false},
    {"s3.compaction.interval.ms", SK_PROP_LONG, OFF(s3_compaction_interval_ms), "300000", 100,
     I64MAX, "Objects", "How often objects are compacted and retired ones deleted.", NULL,
     false},
    {"s3.compaction.small.object.bytes", SK_PROP_LONG, OFF(s3_compaction_small_bytes),
     "33554432", 1, I64MAX, "Objects",
     "Objects smaller than this are merged by compaction (StreamSetObjects together, "
     "StreamObjects of one partition together).",
     NULL, false},
    {"s3.compaction.max.bytes", SK_PROP_LONG, OFF(s3_compaction_max_bytes), "268435456", 4096,
     I64MAX, "Objects",
     "Most bytes one compaction reads and writes (it holds them in memory).", NULL, false},
    {"s3.stream.set.object.force.split.ms", SK_PROP_LONG, OFF(s3_force_split_ms), "3600000", 0,
     I64MAX, "Objects",
     "StreamSetObjects older than this are split into one StreamObject per partition, so that "
     "reading a partition's history costs few requests.",
     NULL, false},
    {"s3.view.snapshot.interval.ms", SK_PROP_LONG, OFF(s3_snapshot_interval_ms), "60000", 0,
     I64MAX, "Objects",
     "Least time between two snapshots of the SQLite view into the object store. The WAL is "
     "trimmed only below the newest snapshot, so this also bounds how long uploaded data stays "
     "on the volume.",
     NULL, false},
    {"s3.orphan.gc.interval.ms", SK_PROP_LONG, OFF(s3_orphan_interval_ms), "900000", 100, I64MAX,
     "Objects", "How often objects unknown to the registry are looked for.", NULL, false},
    {"s3.orphan.min.age.ms", SK_PROP_LONG, OFF(s3_orphan_min_age_ms), "3600000", 0, I64MAX,
     "Objects",
     "An unregistered object is deleted only when older than this, and only when found "
     "unregistered twice in a row (an upload in flight is never an orphan).",
     NULL, false},
    {"s3.max.inflight", SK_PROP_INT, OFF(s3_max_inflight), "16", 1, 1024, "Objects",
     "Object store requests in flight at once.", NULL, false},
    {"s3.part.size", SK_PROP_LONG, OFF(s3_part_size), "536870912", 5242880, 5368709120LL,
     "Objects", "Objects larger than this are uploaded in parts of this size.", NULL, false},
    {"s3.request.timeout.ms", SK_PROP_INT, OFF(s3_request_timeout_ms), "30000", 100, I32MAX,
     "Objects", "Timeout of one object store request attempt.", NULL, false},
    {"s3.max.attempts", SK_PROP_INT, OFF(s3_max_attempts), "5", 1, 100, "Objects",
     "Attempts per object store request (with exponential backoff and jitter on 5xx, "
     "throttling and timeouts).",
     NULL, false},

    /* Topics */
    {"num.partitions", SK_PROP_INT, OFF(num_partitions), "1", 1, 100000, "Topics",
     "Partitions of an automatically created topic, and of CreateTopics asking for -1.", NULL, true},
    {"default.replication.factor", SK_PROP_SHORT, OFF(default_replication_factor), "1", 1, 3,
     "Topics",
     "Replication factor reported for topics created without one. Durability comes from the "
     "shared volume and S3, so any factor from 1 to 3 is accepted and the node is the only "
     "replica.",
     NULL, false},
    {"auto.create.topics.enable", SK_PROP_BOOL, OFF(auto_create_topics_enable), "true", 0, 0,
     "Topics", "Create a topic when a client asks Metadata for it and allows auto-creation.",
     NULL, true},
    {"delete.topic.enable", SK_PROP_BOOL, OFF(delete_topic_enable), "true", 0, 0, "Topics",
     "Allow DeleteTopics.", NULL, false},
    {"log.retention.ms", SK_PROP_LONG, OFF(log_retention_ms), "604800000", -1, I64MAX, "Topics",
     "Default retention.ms of topics: batches older than this are deleted (-1: keep forever).",
     NULL, true},
    {"log.retention.bytes", SK_PROP_LONG, OFF(log_retention_bytes), "-1", -1, I64MAX, "Topics",
     "Default retention.bytes of topics: per-partition size beyond which the oldest batches "
     "are deleted (-1: no limit).",
     NULL, true},
    {"log.retention.check.interval.ms", SK_PROP_LONG, OFF(log_retention_check_interval_ms),
     "300000", 100, I64MAX, "Topics", "How often retention runs.", NULL, false},
    {"message.max.bytes", SK_PROP_INT, OFF(message_max_bytes), "1048588", 64, I32MAX, "Topics",
     "Default max.message.bytes of topics: the largest record batch accepted.", NULL, true},
    {"log.message.timestamp.type", SK_PROP_STRING, OFF(log_message_timestamp_type), "CreateTime",
     0, 0, "Topics",
     "Default message.timestamp.type of topics: CreateTime keeps the producer's timestamps, "
     "LogAppendTime stamps batches with the node's clock.",
     check_ts_type, true},
    {"compression.type", SK_PROP_STRING, OFF(compression_type), "producer", 0, 0, "Topics",
     "Default compression.type of topics: the codec batches are stored in (a batch produced "
     "with another is recompressed), or producer to keep the producer's.",
     check_compression, true},
    {"compression.gzip.level", SK_PROP_INT, OFF(compression_gzip_level), "-1", -1, 9, "Topics",
     "Default compression.gzip.level of topics: the level of gzip recompression.", NULL, true},
    {"compression.lz4.level", SK_PROP_INT, OFF(compression_lz4_level), "9", 1, 17, "Topics",
     "Default compression.lz4.level of topics: the level of lz4 recompression.", NULL, true},
    {"log.cleaner.enable", SK_PROP_BOOL, OFF(log_cleaner_enable), "true", 0, 0, "Topics",
     "Compact the partitions of topics with cleanup.policy=compact (docs/objects.md).", NULL,
     false},
    {"log.cleaner.dedupe.buffer.size", SK_PROP_LONG, OFF(log_cleaner_dedupe_buffer_size),
     "134217728", 4096, I64MAX, "Topics",
     "Memory of the offset map of one compaction pass (24 bytes a key): a partition whose "
     "dirty keys do not fit is compacted in several passes.",
     NULL, false},
    {"log.cleaner.backoff.ms", SK_PROP_LONG, OFF(log_cleaner_backoff_ms), "15000", 0, I64MAX,
     "Topics",
     "Least time between two compaction passes of keyed topics (they run with object "
     "compaction, every s3.compaction.interval.ms at most).",
     NULL, false},
    {"log.cleaner.min.cleanable.ratio", SK_PROP_STRING, OFF(log_cleaner_min_cleanable_ratio),
     "0.5", 0, 0, "Topics",
     "Default min.cleanable.dirty.ratio of topics: the share of a partition's bytes not yet "
     "compacted above which it is compacted.",
     check_ratio, false},
    {"log.cleaner.delete.retention.ms", SK_PROP_LONG, OFF(log_cleaner_delete_retention_ms),
     "86400000", 0, I64MAX, "Topics",
     "Default delete.retention.ms of topics: how long a tombstone stays after the compaction "
     "that first kept it.",
     NULL, false},
    {"log.cleaner.min.compaction.lag.ms", SK_PROP_LONG, OFF(log_cleaner_min_compaction_lag_ms),
     "0", 0, I64MAX, "Topics",
     "Default min.compaction.lag.ms of topics: records younger than this are not compacted.",
     NULL, false},
    {"log.cleaner.max.compaction.lag.ms", SK_PROP_LONG, OFF(log_cleaner_max_compaction_lag_ms),
     "9223372036854775807", 1, I64MAX, "Topics",
     "Default max.compaction.lag.ms of topics: records older than this are compacted whatever "
     "the dirty ratio.",
     NULL, false},
    {"compression.zstd.level", SK_PROP_INT, OFF(compression_zstd_level), "3", -131072, 22,
     "Topics", "Default compression.zstd.level of topics: the level of zstd recompression.", NULL,
     true},
    {"log.message.timestamp.before.max.ms", SK_PROP_LONG,
     OFF(log_message_timestamp_before_max_ms), "9223372036854775807", 0, I64MAX, "Topics",
     "Largest accepted distance of a CreateTime timestamp into the past.", NULL, true},
    {"log.message.timestamp.after.max.ms", SK_PROP_LONG, OFF(log_message_timestamp_after_max_ms),
     "3600000", 0, I64MAX, "Topics",
     "Largest accepted distance of a CreateTime timestamp into the future.", NULL, true},

    /* Network */
    {"socket.request.max.bytes", SK_PROP_INT, OFF(socket_request_max_bytes), "104857600", 1024,
     I32MAX, "Network",
     "Largest request frame accepted; a larger size prefix closes the connection before "
     "anything is allocated.",
     NULL, false},
    {"socket.max.inflight.requests", SK_PROP_INT, OFF(max_inflight_requests_per_connection),
     "1000", 1, 1000000, "Network",
     "Requests of one connection being processed or waiting to be answered; past it the node "
     "stops reading that connection.",
     NULL, false},
    {"socket.max.output.bytes", SK_PROP_LONG, OFF(max_output_bytes_per_connection), "16777216",
     65536, I64MAX, "Network",
     "Response bytes of one connection not yet taken by the client; past it the node stops "
     "reading that connection.",
     NULL, false},
    {"connections.max.idle.ms", SK_PROP_INT, OFF(connections_max_idle_ms), "600000", 0, I32MAX,
     "Network", "Close connections idle this long (0: never).", NULL, false},
    {"max.incremental.fetch.session.cache.slots", SK_PROP_INT,
     OFF(max_incremental_fetch_session_cache_slots), "1000", 0, I32MAX, "Network",
     "Fetch sessions (KIP-227) the node keeps, over all connections. When all are taken, a "
     "new session replaces one idle for more than 2 minutes, else the smallest session used "
     "more than 2 minutes after its creation if the new one is bigger; otherwise the client "
     "fetches without a session. 0: no sessions.",
     NULL, false},

    /* Cluster */
    {"etcd.endpoints", SK_PROP_STRING, OFF(etcd_endpoints), "", 0, 0, "Cluster",
     "Comma-separated http://host:port endpoints of etcd. Set, it makes this node a member "
     "of the cluster whose metadata etcd holds (docs/cluster.md); every node then needs the "
     "same wal.url (the shared volume's root) and objects.url. Empty: a single node.",
     check_etcd_endpoints, false},
    {"etcd.prefix", SK_PROP_STRING, OFF(etcd_prefix), "/skiff/", 0, 0, "Cluster",
     "Prefix of this cluster's keys in etcd (several clusters may share one etcd).",
     check_etcd_prefix, false},
    {"broker.session.timeout.ms", SK_PROP_INT, OFF(broker_session_timeout_ms), "2000", 1000,
     300000, "Cluster",
     "A node whose lease was not renewed for this long is dead: it acknowledges nothing more "
     "and its partitions move to other nodes (rounded up to whole seconds for etcd).",
     NULL, false},
    {"broker.heartbeat.interval.ms", SK_PROP_INT, OFF(broker_heartbeat_interval_ms), "500", 50,
     60000, "Cluster", "How often a node renews its lease.", NULL, false},
    {"offsets.topic.num.partitions", SK_PROP_INT, OFF(offsets_topic_num_partitions), "50", 1,
     1000, "Cluster",
     "Partitions of the internal topic __consumer_offsets, over which group coordination is "
     "spread; fixed when the cluster is created.",
     NULL, false},
    {"inter.broker.listener.name", SK_PROP_STRING, OFF(inter_broker_listener_name), "", 0, 0,
     "Cluster", "The listener other nodes connect to (empty: the first one).", NULL, false},
    {"auto.leader.rebalance.enable", SK_PROP_BOOL, OFF(auto_leader_rebalance_enable), "true", 0,
     0, "Cluster", "Move partitions to nodes that join, so that every node serves its share.",
     NULL, false},
    {"leader.imbalance.per.broker.percentage", SK_PROP_INT,
     OFF(leader_imbalance_per_broker_percentage), "10", 0, 1000, "Cluster",
     "Rebalancing starts when a node serves more than this percentage above the mean.", NULL,
     false},
    {"leader.imbalance.check.interval.seconds", SK_PROP_LONG,
     OFF(leader_imbalance_check_interval_seconds), "30", 1, 86400, "Cluster",
     "How long the controller waits after the set of nodes changed before it rebalances.",
     NULL, false},
    {"cluster.max.partition.moves", SK_PROP_INT, OFF(cluster_max_moves), "16", 1, 100000,
     "Cluster", "Planned partition moves (rebalancing, draining) in flight at once.", NULL,
     false},
    {"controlled.shutdown.timeout.ms", SK_PROP_LONG, OFF(controlled_shutdown_timeout_ms), "30000",
     0, 3600000, "Cluster",
     "On SIGTERM, how long a node waits for other nodes to adopt its partitions before it "
     "stops anyway (their data is safe either way; they then move as after a crash).",
     NULL, false},
    {"zone.routing.enable", SK_PROP_BOOL, OFF(zone_routing_enable), "true", 0, 0, "Cluster",
     "Serve each client of known zone from nodes of its own zone: Metadata names such a node "
     "as every partition's leader, which proxies produce and fetch for partitions whose main "
     "is elsewhere (docs/zones.md). Clients of unknown zone, and every client when off, go "
     "to each partition's main.",
     NULL, false},
    {"proxy.confirm.linger.us", SK_PROP_INT, OFF(confirm_linger_us), "100", 0, 100000, "Cluster",
     "How long a proxy gathers batches for one main before it sends them in one confirm.",
     NULL, false},
    {"proxy.fetch.min.wait.ms", SK_PROP_INT, OFF(proxy_fetch_min_wait_ms), "5", 0, 1000, "Cluster",
     "A proxy following a main's partitions for its consumers: how long the main gathers news "
     "for one answer once news came (0: answer at once). More saves cross-zone bytes on busy "
     "partitions; it adds as much to their end-to-end latency through the proxy.",
     NULL, false},

    /* Groups */
    {"group.min.session.timeout.ms", SK_PROP_INT, OFF(group_min_session_timeout_ms), "6000", 1,
     I32MAX, "Groups", "Smallest session timeout a group member may ask for.", NULL, false},
    {"group.max.session.timeout.ms", SK_PROP_INT, OFF(group_max_session_timeout_ms), "1800000",
     1, I32MAX, "Groups", "Largest session timeout a group member may ask for.", NULL, false},
    {"group.initial.rebalance.delay.ms", SK_PROP_INT, OFF(group_initial_rebalance_delay_ms),
     "3000", 0, I32MAX, "Groups",
     "How long the first rebalance of an empty group waits for more members.", NULL, false},
    {"transaction.max.timeout.ms", SK_PROP_INT, OFF(transaction_max_timeout_ms), "900000", 1,
     I32MAX, "Transactions",
     "Largest transaction timeout a transactional producer may ask for (InitProducerId); "
     "larger ones get INVALID_TRANSACTION_TIMEOUT.", NULL, false},
    {"transactional.id.expiration.ms", SK_PROP_INT, OFF(transactional_id_expiration_ms),
     "604800000", 1, I32MAX, "Transactions",
     "A transactional id whose last transaction ended (or that never began one) this long "
     "ago is forgotten, durably: its next InitProducerId gets a new producer id.", NULL, false},
    {"transaction.remove.expired.transaction.cleanup.interval.ms", SK_PROP_INT,
     OFF(transaction_cleanup_interval_ms), "3600000", 1, I32MAX, "Transactions",
     "How often the coordinator looks for transactional ids past "
     "transactional.id.expiration.ms.", NULL, false},
    {"offsets.retention.minutes", SK_PROP_INT, OFF(offsets_retention_minutes), "10080", 1,
     I32MAX, "Groups",
     "Committed offsets of a group that has been empty this long are deleted.", NULL, true},
    {"offsets.retention.check.interval.ms", SK_PROP_LONG,
     OFF(offsets_retention_check_interval_ms), "600000", 100, I64MAX, "Groups",
     "How often expired committed offsets are looked for.", NULL, false},
    {"group.consumer.session.timeout.ms", SK_PROP_INT, OFF(group_consumer_session_timeout_ms),
     "45000", 1, I32MAX, "Groups",
     "Consumer groups (KIP-848 protocol, group.protocol=consumer): how long a member may go "
     "without a heartbeat before it is removed (a group's consumer.session.timeout.ms "
     "overrides it).",
     NULL, false},
    {"group.consumer.heartbeat.interval.ms", SK_PROP_INT,
     OFF(group_consumer_heartbeat_interval_ms), "5000", 1, I32MAX, "Groups",
     "Consumer groups: the heartbeat interval given to members (a group's "
     "consumer.heartbeat.interval.ms overrides it).",
     NULL, false},
    {"group.consumer.max.size", SK_PROP_INT, OFF(group_consumer_max_size), "2147483647", 1,
     I32MAX, "Groups",
     "Consumer groups: most members of one group; a member past it gets "
     "GROUP_MAX_SIZE_REACHED.",
     NULL, false},
    {"group.consumer.assignors", SK_PROP_STRING, OFF(group_consumer_assignors), "uniform,range",
     0, 0, "Groups",
     "Consumer groups: the server-side assignors members may ask for, the first being the "
     "default. Known: uniform (as even as subscriptions allow, keeping partitions where they "
     "are) and range (contiguous ranges of each topic, in member id order).",
     check_assignors, false},
    {"group.consumer.migration.policy", SK_PROP_STRING, OFF(group_consumer_migration_policy),
     "bidirectional", 0, 0, "Groups",
     "Whether a group converts between the classic and the consumer protocol while it has "
     "members: upgrade (a consumer-protocol member joining a classic group of protocol type "
     "consumer), downgrade (the last consumer-protocol member leaving a group whose other "
     "members are classic), bidirectional (both) or disabled (neither).",
     check_migration_policy, false},
};
const size_t sk_nprops = sizeof sk_props / sizeof sk_props[0];

_Static_assert(sizeof sk_props / sizeof sk_props[0] <= 128, "explicit_mask holds 128 bits");

const sk_prop *sk_config_find(const char *name)
{
    for (size_t i = 0; i < sk_nprops; i++)
        if (strcmp(sk_props[i].name, name) == 0)
            return &sk_props[i];
    return NULL;
}

static int set_prop(sk_config *c, const sk_prop *p, const char *value, char *why, size_t whylen)
{
    char *base = (char *)c;
    switch (p->type) {
    case SK_PROP_INT:
    case SK_PROP_SHORT:
    case SK_PROP_LONG: {
        errno = 0;
        char *end;
        long long v = strtoll(value, &end, 10);
        if (!*value || *end || errno) {
            snprintf(why, whylen, "property %s: '%s' is not an integer", p->name, value);
            return SK_ERR_INVAL;
        }
        if (v < p->min || v > p->max) {
            snprintf(why, whylen, "property %s: %lld is outside [%" PRId64 ", %" PRId64 "]",
                     p->name, v, p->min, p->max);
            return SK_ERR_INVAL;
        }
        if (p->type == SK_PROP_INT)
            *(int32_t *)(base + p->offset) = (int32_t)v;
        else if (p->type == SK_PROP_SHORT)
            *(int16_t *)(base + p->offset) = (int16_t)v;
        else
            *(int64_t *)(base + p->offset) = (int64_t)v;
        return 0;
    }
    case SK_PROP_BOOL:
        if (strcmp(value, "true") == 0)
            *(bool *)(base + p->offset) = true;
        else if (strcmp(value, "false") == 0)
            *(bool *)(base + p->offset) = false;
        else {
            snprintf(why, whylen, "property %s: '%s' is not true or false", p->name, value);
            return SK_ERR_INVAL;
        }
        return 0;
    case SK_PROP_STRING:
    case SK_PROP_PASSWORD: {
        if (p->check) {
            const char *reason = p->check(value);
            if (reason) {
                snprintf(why, whylen, "property %s: '%s' %s", p->name, value, reason);
                return SK_ERR_INVAL;
            }
        }
        char **slot = (char **)(base + p->offset);
        char *dup = strdup(value);
        if (!dup) {
            snprintf(why, whylen, "out of memory");
            return SK_ERR_NOMEM;
        }
        free(*slot);
        *slot = dup;
        return 0;
    }
    }
    return SK_ERR_INVAL;
}

void sk_config_init(sk_config *c)
{
    memset(c, 0, sizeof *c);
    char why[256];
    for (size_t i = 0; i < sk_nprops; i++) {
        int rc = set_prop(c, &sk_props[i], sk_props[i].def ? sk_props[i].def : "", why, sizeof why);
        if (rc != 0) {
            SK_ERROR("config", "bad built-in default: %s", why);
            abort();
        }
    }
}

void sk_config_free(sk_config *c)
{
    for (size_t i = 0; i < sk_nprops; i++)
        if (sk_props[i].type == SK_PROP_STRING || sk_props[i].type == SK_PROP_PASSWORD) {
            char **slot = (char **)((char *)c + sk_props[i].offset);
            free(*slot);
            *slot = NULL;
        }
    for (int i = 0; i < c->nplain_jaas; i++) {
        free(c->plain_jaas[i].value);
        c->plain_jaas[i].value = NULL;
    }
    c->nplain_jaas = 0;
}

int sk_config_check(const char *name, const char *value, char *why, size_t whylen)
{
    sk_config scratch;
    sk_config_init(&scratch);
    int rc = sk_config_set(&scratch, name, value, why, whylen);
    sk_config_free(&scratch);
    return rc;
}

#define JAAS_PRE "listener.name."
#define JAAS_SUF ".plain.sasl.jaas.config"

/* listener.name.<listener>.plain.sasl.jaas.config: PLAIN users of a
 * listener, one property per listener name (checked in sk_config_finish). */
static int set_plain_jaas(sk_config *c, const char *name, const char *value, char *why,
                          size_t whylen)
{
    size_t nl = strlen(name), pl = strlen(JAAS_PRE), sl = strlen(JAAS_SUF);
    size_t ll = nl - pl - sl;
    int i = 0;
    while (i < c->nplain_jaas && (strlen(c->plain_jaas[i].listener) != ll ||
                                  strncasecmp(c->plain_jaas[i].listener, name + pl, ll) != 0))
        i++;
    if (i == SK_MAX_LISTENERS || ll == 0 || ll >= sizeof c->plain_jaas[0].listener) {
        snprintf(why, whylen, "property %s: no such listener name", name);
        return SK_ERR_INVAL;
    }
    char *dup = strdup(value);
    if (!dup) {
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    if (i == c->nplain_jaas) {
        c->nplain_jaas++;
        for (size_t k = 0; k < ll; k++)
            c->plain_jaas[i].listener[k] = (char)tolower((unsigned char)name[pl + k]);
        c->plain_jaas[i].listener[ll] = 0;
    }
    free(c->plain_jaas[i].value);
    c->plain_jaas[i].value = dup;
    return 0;
}

static bool is_plain_jaas(const char *name)
{
    size_t nl = strlen(name), pl = strlen(JAAS_PRE), sl = strlen(JAAS_SUF);
    return nl > pl + sl && strncmp(name, JAAS_PRE, pl) == 0 &&
           strcmp(name + nl - sl, JAAS_SUF) == 0;
}

int sk_config_set(sk_config *c, const char *name, const char *value, char *why, size_t whylen)
{
    if (is_plain_jaas(name))
        return set_plain_jaas(c, name, value, why, whylen);
    const sk_prop *p = sk_config_find(name);
    if (!p) {
        snprintf(why, whylen, "unknown property '%s' (skiffd --help lists them)", name);
        return SK_ERR_INVAL;
    }
    int rc = set_prop(c, p, value, why, whylen);
    if (rc == 0) {
        size_t i = (size_t)(p - sk_props);
        c->explicit_mask[i / 64] |= 1ull << (i % 64);
    }
    return rc;
}

bool sk_config_is_explicit(const sk_config *c, const sk_prop *p)
{
    size_t i = (size_t)(p - sk_props);
    return (c->explicit_mask[i / 64] >> (i % 64)) & 1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int sk_config_load_file(sk_config *c, const char *path, char *why, size_t whylen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, whylen, "cannot read config file %s: %s", path, strerror(errno));
        return SK_ERR_INVAL;
    }
    char line[8192];
    char logical[16384];
    size_t llen = 0;
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line;
        size_t n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
            s[--n] = 0;
        /* Java properties: a trailing backslash continues the line. */
        bool cont = n && s[n - 1] == '\\';
        if (cont)
            s[--n] = 0;
        char *t = llen ? trim(s) : s;
        size_t tl = strlen(t);
        if (llen + tl + 1 > sizeof logical) {
            snprintf(why, whylen, "%s:%d: line too long", path, lineno);
            rc = SK_ERR_INVAL;
            break;
        }
        memcpy(logical + llen, t, tl + 1);
        llen += tl;
        if (cont)
            continue;
        llen = 0;
        char *l = trim(logical);
        if (!*l || *l == '#' || *l == '!')
            continue;
        char *sep = l + strcspn(l, "=:");
        if (!*sep) {
            snprintf(why, whylen, "%s:%d: expected name=value", path, lineno);
            rc = SK_ERR_INVAL;
            break;
        }
        *sep = 0;
        char *name = trim(l), *value = trim(sep + 1);
        char inner[512];
        if (sk_config_set(c, name, value, inner, sizeof inner) != 0) {
            snprintf(why, whylen, "%s:%d: %s", path, lineno, inner);
            rc = SK_ERR_INVAL;
            break;
        }
    }
    fclose(f);
    return rc;
}

int sk_parse_listeners(const char *s, sk_listener *out, int *n, char *why, size_t whylen)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[400];
        if (len >= sizeof item) {
            snprintf(why, whylen, "listener too long");
            return SK_ERR_INVAL;
        }
        memcpy(item, p, len);
        item[len] = 0;
        char *it = trim(item);
        if (*it) {
            if (*n == SK_MAX_LISTENERS) {
                snprintf(why, whylen, "more than %d listeners", SK_MAX_LISTENERS);
                return SK_ERR_INVAL;
            }
            char *sep = strstr(it, "://");
            if (!sep || sep == it) {
                snprintf(why, whylen, "listener '%s' is not NAME://host:port", it);
                return SK_ERR_INVAL;
            }
            sk_listener *l = &out[*n];
            memset(l, 0, sizeof *l);
            size_t nl = (size_t)(sep - it);
            if (nl >= sizeof l->name) {
                snprintf(why, whylen, "listener name too long in '%s'", it);
                return SK_ERR_INVAL;
            }
            memcpy(l->name, it, nl);
            for (char *q = l->name; *q; q++)
                if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-') {
                    snprintf(why, whylen, "listener name '%s' has invalid characters", l->name);
                    return SK_ERR_INVAL;
                }
            char *hp = sep + 3;
            char *colon = strrchr(hp, ':');
            if (!colon) {
                snprintf(why, whylen, "listener '%s' has no port", it);
                return SK_ERR_INVAL;
            }
            char *hs = hp, *he = colon;
            if (*hs == '[' && he > hs && he[-1] == ']') {
                hs++;
                he--;
            }
            if ((size_t)(he - hs) >= sizeof l->host) {
                snprintf(why, whylen, "host too long in '%s'", it);
                return SK_ERR_INVAL;
            }
            memcpy(l->host, hs, (size_t)(he - hs));
            char *pe;
            errno = 0;
            long port = strtol(colon + 1, &pe, 10);
            if (!colon[1] || *pe || errno || port < 0 || port > 65535) {
                snprintf(why, whylen, "listener '%s' has an invalid port", it);
                return SK_ERR_INVAL;
            }
            l->port = (int)port;
            for (int i = 0; i < *n; i++)
                if (strcmp(out[i].name, l->name) == 0) {
                    snprintf(why, whylen, "listener name %s appears twice", l->name);
                    return SK_ERR_INVAL;
                }
            (*n)++;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

/* Node-to-node traffic: a PLAINTEXT listener, or an SSL one on which the
 * node's own certificate authenticates it (rpc/peer.h). SASL is not spoken
 * by the node's client side. */
static int check_inter_listener(const sk_config *c, char *why, size_t whylen)
{
    if (*c->inter_broker_listener_name && *c->security_inter_broker_protocol) {
        snprintf(why, whylen, "property security.inter.broker.protocol: only one of "
                 "inter.broker.listener.name and security.inter.broker.protocol may be set");
        return SK_ERR_INVAL;
    }
    const sk_listener *inter = sk_config_inter_listener(c);
    if (!inter && (*c->inter_broker_listener_name || *c->security_inter_broker_protocol)) {
        bool by_name = *c->inter_broker_listener_name;
        snprintf(why, whylen, "property %s: %s is not a listener name",
                 by_name ? "inter.broker.listener.name" : "security.inter.broker.protocol",
                 by_name ? c->inter_broker_listener_name : c->security_inter_broker_protocol);
        return SK_ERR_INVAL;
    }
    if (inter && SK_SEC_IS_SASL(inter->protocol)) {
        snprintf(why, whylen,
                 "property inter.broker.listener.name: node-to-node traffic is served on "
                 "PLAINTEXT or SSL listeners; %s is %s (name an SSL listener: nodes "
                 "authenticate with their certificates)",
                 inter->name, sk_secproto_name(inter->protocol));
        return SK_ERR_INVAL;
    }
    return 0;
}

/* A cluster shares its volume and its object store: nodes must be told
 * where, never fall back on a local default that only one node sees. */
static int finish_cluster(const sk_config *c, char *why, size_t whylen)
{
    if (!*c->wal_url || !*c->objects_url) {
        snprintf(why, whylen,
                 "property %s: with etcd.endpoints every node needs the shared %s, the same "
                 "on all nodes",
                 *c->wal_url ? "objects.url" : "wal.url",
                 *c->wal_url ? "object store" : "volume's root");
        return SK_ERR_INVAL;
    }
    int rc = check_inter_listener(c, why, whylen);
    if (rc != 0)
        return rc;
    if (c->broker_heartbeat_interval_ms * 2 > c->broker_session_timeout_ms) {
        snprintf(why, whylen,
                 "property broker.heartbeat.interval.ms must be at most half of "
                 "broker.session.timeout.ms");
        return SK_ERR_INVAL;
    }
    return 0;
}

bool sk_config_cluster(const sk_config *c)
{
    return c->etcd_endpoints && *c->etcd_endpoints;
}

const char *sk_config_inter_listener_name(const sk_config *c)
{
    if (*c->inter_broker_listener_name)
        return c->inter_broker_listener_name;
    if (*c->security_inter_broker_protocol)
        return c->security_inter_broker_protocol;
    return c->nadvertised ? c->advertised[0].name : NULL;
}

const sk_listener *sk_config_inter_listener(const sk_config *c)
{
    const char *name = sk_config_inter_listener_name(c);
    for (int i = 0; name && i < c->nadvertised; i++)
        if (strcmp(c->advertised[i].name, name) == 0)
            return &c->advertised[i];
    return NULL;
}

sk_listener *sk_config_listener(sk_config *c, const char *name, size_t len)
{
    for (int i = 0; i < c->nlisteners; i++)
        if (strlen(c->listeners[i].name) == len && strncasecmp(c->listeners[i].name, name, len) == 0)
            return &c->listeners[i];
    return NULL;
}

static bool any_listener(const sk_config *c, bool (*pred)(sk_secproto))
{
    for (int i = 0; i < c->nlisteners; i++)
        if (pred(c->listeners[i].protocol))
            return true;
    return false;
}

static bool is_tls(sk_secproto p)
{
    return SK_SEC_IS_TLS(p);
}

/* Each listener's security protocol, its PLAIN users, and what TLS needs. */
static int finish_security(sk_config *c, char *why, size_t whylen)
{
    for (int i = 0; i < c->nlisteners; i++) {
        sk_listener *l = &c->listeners[i];
        char inner[256];
        int rc = parse_protocol_map(c->listener_security_protocol_map, l->name, &l->protocol,
                                    inner, sizeof inner);
        if (rc != 0) {
            snprintf(why, whylen,
                     "property listener.security.protocol.map: listener %s has no security "
                     "protocol in it",
                     l->name);
            return SK_ERR_INVAL;
        }
        for (int k = 0; k < c->nadvertised; k++)
            if (strcmp(c->advertised[k].name, l->name) == 0)
                c->advertised[k].protocol = l->protocol;
    }
    for (int i = 0; i < c->nplain_jaas; i++) {
        sk_listener *l = sk_config_listener(c, c->plain_jaas[i].listener,
                                            strlen(c->plain_jaas[i].listener));
        if (!l) {
            snprintf(why, whylen,
                     "property listener.name.%s.plain.sasl.jaas.config: %s is not a listener "
                     "name",
                     c->plain_jaas[i].listener, c->plain_jaas[i].listener);
            return SK_ERR_INVAL;
        }
        l->plain_jaas = c->plain_jaas[i].value;
    }
    if (any_listener(c, is_tls) && !*c->ssl_keystore_location) {
        snprintf(why, whylen, "property ssl.keystore.location: an SSL or SASL_SSL listener "
                 "needs the node's key and certificate");
        return SK_ERR_INVAL;
    }
    if (strcmp(c->ssl_client_auth, "none") != 0 && !*c->ssl_truststore_location) {
        snprintf(why, whylen, "property ssl.truststore.location: ssl.client.auth=%s needs the "
                 "certificate authorities of clients", c->ssl_client_auth);
        return SK_ERR_INVAL;
    }
    return 0;
}

int sk_config_finish(sk_config *c, char *why, size_t whylen)
{
    char inner[256];
    if (sk_parse_listeners(c->listeners_str, c->listeners, &c->nlisteners, inner, sizeof inner)) {
        snprintf(why, whylen, "property listeners: %s", inner);
        return SK_ERR_INVAL;
    }
    if (c->nlisteners == 0) {
        snprintf(why, whylen, "property listeners: no listener given");
        return SK_ERR_INVAL;
    }
    if (*c->advertised_listeners_str) {
        if (sk_parse_listeners(c->advertised_listeners_str, c->advertised, &c->nadvertised, inner,
                               sizeof inner)) {
            snprintf(why, whylen, "property advertised.listeners: %s", inner);
            return SK_ERR_INVAL;
        }
        for (int i = 0; i < c->nadvertised; i++) {
            bool found = false;
            for (int j = 0; j < c->nlisteners; j++)
                found |= strcmp(c->advertised[i].name, c->listeners[j].name) == 0;
            if (!found) {
                snprintf(why, whylen,
                         "property advertised.listeners: %s is not a listener name in listeners",
                         c->advertised[i].name);
                return SK_ERR_INVAL;
            }
        }
    }
    int src = finish_security(c, why, whylen);
    if (src)
        return src;
    /* Every listener needs an advertised address. */
    for (int j = 0; j < c->nlisteners; j++) {
        bool found = false;
        for (int i = 0; i < c->nadvertised; i++)
            found |= strcmp(c->advertised[i].name, c->listeners[j].name) == 0;
        if (found)
            continue;
        sk_listener *a = &c->advertised[c->nadvertised++];
        *a = c->listeners[j];
        if (!a->host[0] || strcmp(a->host, "0.0.0.0") == 0 || strcmp(a->host, "::") == 0) {
            if (gethostname(a->host, sizeof a->host) != 0)
                snprintf(a->host, sizeof a->host, "localhost");
        }
    }
    if (c->group_min_session_timeout_ms > c->group_max_session_timeout_ms) {
        snprintf(why, whylen,
                 "property group.min.session.timeout.ms is above group.max.session.timeout.ms");
        return SK_ERR_INVAL;
    }
    if (!*c->data_dir) {
        snprintf(why, whylen, "property data.dir: must not be empty");
        return SK_ERR_INVAL;
    }
    if (sk_config_cluster(c)) {
        int rc = finish_cluster(c, why, whylen);
        if (rc)
            return rc;
    }
    if (!*c->objects_url) {
        char *u = malloc(strlen(c->data_dir) + 20);
        if (!u)
            return SK_ERR_NOMEM;
        sprintf(u, "file://%s/objects", c->data_dir);
        free(c->objects_url);
        c->objects_url = u;
    }
    if (!*c->wal_url) {
        char *u = malloc(strlen(c->data_dir) + 16);
        if (!u)
            return SK_ERR_NOMEM;
        sprintf(u, "file://%s/wal", c->data_dir);
        free(c->wal_url);
        c->wal_url = u;
    }
    return 0;
}

const char *sk_config_get_text(const sk_config *c, const sk_prop *p, char *buf, size_t len)
{
    const char *base = (const char *)c;
    switch (p->type) {
    case SK_PROP_INT:
        snprintf(buf, len, "%" PRId32, *(const int32_t *)(base + p->offset));
        break;
    case SK_PROP_SHORT:
        snprintf(buf, len, "%d", *(const int16_t *)(base + p->offset));
        break;
    case SK_PROP_LONG:
        snprintf(buf, len, "%" PRId64, *(const int64_t *)(base + p->offset));
        break;
    case SK_PROP_BOOL:
        snprintf(buf, len, "%s", *(const bool *)(base + p->offset) ? "true" : "false");
        break;
    case SK_PROP_STRING: {
        const char *s = *(char *const *)(base + p->offset);
        snprintf(buf, len, "%s", s ? s : "");
        break;
    }
    case SK_PROP_PASSWORD: {
        const char *s = *(char *const *)(base + p->offset);
        snprintf(buf, len, "%s", s && *s ? "[hidden]" : "");
        break;
    }
    }
    return buf;
}

static const char *type_name(sk_prop_type t)
{
    switch (t) {
    case SK_PROP_INT:
        return "int";
    case SK_PROP_SHORT:
        return "short";
    case SK_PROP_LONG:
        return "long";
    case SK_PROP_BOOL:
        return "boolean";
    case SK_PROP_STRING:
        return "string";
    case SK_PROP_PASSWORD:
        return "password";
    }
    return "?";
}

void sk_config_print_help(const char *argv0)
{
    printf("usage: %s [-c FILE] [--override name=value]... [--check-config] [--help] "
           "[--version]\n\n"
           "Skiff: a Kafka-compatible broker on a shared-volume WAL and S3.\n"
           "Properties come from built-in defaults, then FILE (Java properties syntax),\n"
           "then each --override, in that order. --check-config validates them and\n"
           "exits (0: valid) without starting anything.\n\n"
           "       %s status --bootstrap host:port [--zones] [--timeout-ms N]\n"
           "prints a running cluster's nodes, their health, partitions, WAL backlog,\n"
           "objects and cross-zone traffic (docs/operations.md).\n",
           argv0, argv0);
    const char *group = "";
    for (size_t i = 0; i < sk_nprops; i++) {
        const sk_prop *p = &sk_props[i];
        if (strcmp(group, p->group) != 0) {
            group = p->group;
            printf("\n%s:\n", group);
        }
        printf("  %-38s %s (default: %s)%s\n", p->name, type_name(p->type),
               p->def && *p->def ? p->def : "empty", p->dynamic ? " [dynamic]" : "");
        /* Wrap the description at ~76 columns, indented. */
        const char *d = p->doc;
        while (*d) {
            size_t take = strlen(d);
            if (take > 72) {
                take = 72;
                while (take > 0 && d[take] != ' ')
                    take--;
                if (take == 0)
                    take = 72;
            }
            printf("      %.*s\n", (int)take, d);
            d += take;
            while (*d == ' ')
                d++;
        }
    }
}

void sk_config_print_markdown(void)
{
    printf("# Configuration\n\n"
           "This page is generated from the property table in `broker/config.c` by\n"
           "`skiffd --gen-config-doc` (`make docs`); do not edit it by hand.\n\n"
           "Properties are read from built-in defaults, then from the file given with\n"
           "`skiffd -c FILE` (Java properties syntax: `name=value`, `#` comments, `\\`\n"
           "continuation), then from each `--override name=value`, in that order.\n"
           "Unknown properties and invalid values stop start-up with a message naming\n"
           "the property. Names follow Apache Kafka's wherever Kafka has the property.\n\n"
           "Properties marked *dynamic* can also be changed while the node runs, with\n"
           "`kafka-configs.sh --alter --entity-type brokers` (AlterConfigs or\n"
           "IncrementalAlterConfigs); such changes are kept in the WAL and survive\n"
           "restarts, and deleting one restores the value configured here.\n");
    const char *group = "";
    for (size_t i = 0; i < sk_nprops; i++) {
        const sk_prop *p = &sk_props[i];
        if (strcmp(group, p->group) != 0) {
            group = p->group;
            printf("\n## %s\n\n| Property | Type | Default | Range | Description |\n"
                   "|---|---|---|---|---|\n",
                   group);
        }
        char range[96] = "";
        if (p->type == SK_PROP_INT || p->type == SK_PROP_SHORT || p->type == SK_PROP_LONG)
            snprintf(range, sizeof range, "[%" PRId64 ", %" PRId64 "]", p->min, p->max);
        printf("| `%s`%s | %s | %s%s%s | %s | %s |\n", p->name, p->dynamic ? " (dynamic)" : "",
               type_name(p->type), p->def && *p->def ? "`" : "",
               p->def && *p->def ? p->def : "(empty)", p->def && *p->def ? "`" : "", range, p->doc);
    }
}
