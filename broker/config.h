/*
 * config: every property of skiffd, declared once in one table.
 *
 * The table (config.c) drives parsing of `-c FILE` (Java properties syntax)
 * and `--override name=value`, validation, `skiffd --help` and the generated
 * docs/CONFIGURATION.md. Names are Kafka's wherever Kafka has one.
 *
 * Contract: sk_config_* run at start-up on the main thread; afterwards the
 * parsed sk_config is read-only and may be read from any thread. Errors are
 * returned as SK_ERR_INVAL with a message naming the property and the reason.
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SK_MAX_LISTENERS 8
#define SK_AUTHORIZER_CLASS "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

/* Security protocols of listeners (listener.security.protocol.map). */
typedef enum sk_secproto {
    SK_SEC_PLAINTEXT,
    SK_SEC_SSL,
    SK_SEC_SASL_PLAINTEXT,
    SK_SEC_SASL_SSL,
} sk_secproto;

#define SK_SEC_IS_TLS(p) ((p) == SK_SEC_SSL || (p) == SK_SEC_SASL_SSL)
#define SK_SEC_IS_SASL(p) ((p) == SK_SEC_SASL_PLAINTEXT || (p) == SK_SEC_SASL_SSL)

typedef struct sk_listener {
    char name[32]; /* PLAINTEXT, or a custom listener name */
    char host[256];
    int port;
    sk_secproto protocol; /* set by sk_config_finish from the map */
    /* listener.name.<name>.plain.sasl.jaas.config (in cfg->plain_jaas;
     * NULL: none); only in cfg->listeners. */
    const char *plain_jaas;
} sk_listener;

/* The name of a security protocol, as Kafka spells it. */
const char *sk_secproto_name(sk_secproto p);

typedef struct sk_config {
    /* node */
    int32_t node_id;
    char *broker_rack;
    char *listeners_str;
    char *advertised_listeners_str;
    sk_listener listeners[SK_MAX_LISTENERS];
    int nlisteners;
    sk_listener advertised[SK_MAX_LISTENERS];
    int nadvertised;
    char *data_dir;
    char *log_level;
    char *metrics_listener;
    char *client_zone_cidrs;
    char *listener_zones;
    char *zone_transfer_price_per_gib; /* dollars, checked to parse */

    /* security (docs/security.md) */
    char *listener_security_protocol_map;
    char *ssl_keystore_type;
    char *ssl_keystore_location;
    char *ssl_key_password; /* SK_PROP_PASSWORD: never shown */
    char *ssl_truststore_type;
    char *ssl_truststore_location;
    char *ssl_enabled_protocols;
    char *ssl_client_auth;
    char *ssl_principal_mapping_rules;
    char *ssl_endpoint_identification_algorithm; /* "https" or "" */
    char *security_inter_broker_protocol;        /* "" unless set */
    char *sasl_enabled_mechanisms;
    int64_t connections_max_reauth_ms;
    int32_t connection_failed_authentication_delay_ms;
    char *authorizer_class_name; /* "" or SK_AUTHORIZER_CLASS: the ACL authorizer is on */
    char *super_users;
    bool allow_everyone_if_no_acl_found;
    /* listener.name.<listener>.plain.sasl.jaas.config, by lower-case name */
    struct {
        char listener[32];
        char *value; /* malloc'd; a secret */
    } plain_jaas[SK_MAX_LISTENERS];
    int nplain_jaas;

    /* storage */
    char *objects_url;
    int64_t s3_upload_interval_ms;
    int64_t s3_upload_threshold;
    int64_t s3_split_size;
    int32_t s3_block_bytes;
    int64_t s3_block_cache_bytes;
    int64_t s3_readahead_bytes;
    int64_t s3_delete_delay_ms;
    int64_t s3_compaction_interval_ms;
    int64_t s3_compaction_small_bytes;
    int64_t s3_compaction_max_bytes;
    int64_t s3_force_split_ms;
    int64_t s3_orphan_interval_ms;
    int64_t s3_snapshot_interval_ms;
    int64_t s3_orphan_min_age_ms;
    int32_t s3_max_inflight;
    int64_t s3_part_size;
    int32_t s3_request_timeout_ms;
    int32_t s3_max_attempts;
    int64_t wal_max_retained_bytes;
    char *wal_url;
    int64_t wal_segment_bytes;
    int64_t wal_cache_bytes;
    int64_t wal_max_pending_bytes;
    int64_t wal_lease_ms;
    int64_t view_commit_interval_ms;
    int64_t wal_io_timeout_ms;
    bool wal_direct_io;

    /* topics */
    int32_t num_partitions;
    int16_t default_replication_factor;
    bool auto_create_topics_enable;
    bool delete_topic_enable;
    int64_t log_retention_ms;
    int64_t log_retention_bytes;
    int64_t log_retention_check_interval_ms;
    int32_t message_max_bytes;
    char *log_message_timestamp_type;
    int64_t log_message_timestamp_before_max_ms;
    int64_t log_message_timestamp_after_max_ms;
    char *compression_type;
    int32_t compression_gzip_level;
    int32_t compression_lz4_level;
    int32_t compression_zstd_level;
    bool log_cleaner_enable;
    int64_t log_cleaner_dedupe_buffer_size;
    int64_t log_cleaner_backoff_ms;
    char *log_cleaner_min_cleanable_ratio;
    int64_t log_cleaner_delete_retention_ms;
    int64_t log_cleaner_min_compaction_lag_ms;
    int64_t log_cleaner_max_compaction_lag_ms;

    /* network */
    int32_t socket_request_max_bytes;
    int32_t max_inflight_requests_per_connection;
    int64_t max_output_bytes_per_connection;
    int32_t connections_max_idle_ms;
    int32_t max_incremental_fetch_session_cache_slots;

    /* groups */
    int32_t group_min_session_timeout_ms;
    int32_t group_max_session_timeout_ms;
    int32_t transaction_max_timeout_ms;
    int32_t transactional_id_expiration_ms;
    int32_t transaction_cleanup_interval_ms;
    int32_t group_initial_rebalance_delay_ms;
    int32_t offsets_retention_minutes;
    int64_t offsets_retention_check_interval_ms;
    int32_t group_consumer_session_timeout_ms;
    int32_t group_consumer_heartbeat_interval_ms;
    int32_t group_consumer_max_size;
    char *group_consumer_assignors;
    char *group_consumer_migration_policy; /* bidirectional, upgrade, downgrade, disabled */

    /* cluster */
    char *etcd_endpoints;
    char *etcd_prefix;
    int32_t broker_session_timeout_ms;
    int32_t broker_heartbeat_interval_ms;
    int32_t offsets_topic_num_partitions;
    char *inter_broker_listener_name;
    bool auto_leader_rebalance_enable;
    int32_t leader_imbalance_per_broker_percentage;
    int64_t leader_imbalance_check_interval_seconds;
    int32_t cluster_max_moves;
    int64_t controlled_shutdown_timeout_ms;
    bool zone_routing_enable;
    int32_t confirm_linger_us;
    int32_t proxy_fetch_min_wait_ms;

    /* set when the user gave the property (file or override) */
    uint64_t explicit_mask[2];
} sk_config;

typedef enum sk_prop_type {
    SK_PROP_INT,    /* int32_t */
    SK_PROP_SHORT,  /* int16_t */
    SK_PROP_LONG,   /* int64_t */
    SK_PROP_BOOL,
    SK_PROP_STRING, /* char *, malloc'd */
    SK_PROP_PASSWORD, /* char *, malloc'd; a secret: its value is never shown */
} sk_prop_type;

typedef struct sk_prop {
    const char *name;
    sk_prop_type type;
    size_t offset;
    const char *def;   /* default, as text; NULL = no default (empty) */
    int64_t min, max;  /* numeric bounds */
    const char *group; /* section in the docs */
    const char *doc;
    /* extra validation of a string value; returns NULL or a reason */
    const char *(*check)(const char *value);
    bool dynamic; /* may be changed at runtime with AlterConfigs */
} sk_prop;

extern const sk_prop sk_props[];
extern const size_t sk_nprops;

/* Sets every default. */
void sk_config_init(sk_config *c);
void sk_config_free(sk_config *c);
/* Validates a value for a property without setting it. */
int sk_config_check(const char *name, const char *value, char *why, size_t whylen);
/* Sets one property from text; on error writes why (naming the property). */
int sk_config_set(sk_config *c, const char *name, const char *value, char *why, size_t whylen);
/* Reads a Java-properties file. */
int sk_config_load_file(sk_config *c, const char *path, char *why, size_t whylen);
/* Cross-property checks and derived values (listeners parsing, wal.url
 * default from data.dir). Call after all sets. */
int sk_config_finish(sk_config *c, char *why, size_t whylen);

/* True when etcd.endpoints makes this node a cluster member. */
bool sk_config_cluster(const sk_config *c);
/* The advertised address other nodes use (inter.broker.listener.name, else
 * the listener named after security.inter.broker.protocol, else the first). */
const sk_listener *sk_config_inter_listener(const sk_config *c);
/* That listener's name (NULL: no listener at all). */
const char *sk_config_inter_listener_name(const sk_config *c);

const sk_prop *sk_config_find(const char *name);
/* Current value of a property as text (into buf); "[hidden]" for a
 * password that is set. */
const char *sk_config_get_text(const sk_config *c, const sk_prop *p, char *buf, size_t len);
bool sk_config_is_explicit(const sk_config *c, const sk_prop *p);

void sk_config_print_help(const char *argv0);
void sk_config_print_markdown(void);

/* The listener with this name (case-insensitive), NULL if none. */
sk_listener *sk_config_listener(sk_config *c, const char *name, size_t len);

/* Parses "NAME://host:port,..." into out (max SK_MAX_LISTENERS). */
int sk_parse_listeners(const char *s, sk_listener *out, int *n, char *why, size_t whylen);

#endif
