/*
 * sk_err: the one error enum of Skiff.
 *
 * Contract: values >= 0 are Kafka wire error codes and may be written into a
 * response as they are; values < 0 are internal conditions that never reach
 * the wire as such (a handler maps them to a Kafka code first, usually with
 * sk_err_to_kafka()). Any thread may use these functions; they own nothing.
 */
#ifndef SK_ERR_H
#define SK_ERR_H

#include <stdint.h>

typedef enum sk_err {
    /* Internal conditions (< 0). */
    SK_ERR_PARSE          = -1,  /* malformed input: bounds, lengths, varints */
    SK_ERR_NOMEM          = -2,  /* an allocation or a configured cap refused */
    SK_ERR_IO             = -3,  /* storage failed (errno logged where it happened) */
    SK_ERR_CORRUPT        = -4,  /* stored data failed its checksum or format */
    SK_ERR_AGAIN          = -5,  /* try later: back-pressure, queue full */
    SK_ERR_INVAL          = -6,  /* invalid argument or configuration */
    SK_ERR_NOENT          = -7,  /* no such object (file, topic, group) */
    SK_ERR_EXIST          = -8,  /* already exists */
    SK_ERR_CLOSED         = -9,  /* the object was shut down */
    SK_ERR_TIMEOUT        = -10, /* an operation did not finish in time */
    SK_ERR_FENCED         = -11, /* a newer owner holds the resource */
    SK_ERR_UNSUPPORTED    = -12, /* a feature the caller asked for is absent */
    SK_ERR_COMPACTED      = -13, /* etcd compacted the revision a watch needed */

    /* Kafka wire codes (>= 0), the subset Skiff produces. */
    SK_KAFKA_NONE                              = 0,
    SK_KAFKA_UNKNOWN_SERVER_ERROR              = -1000, /* wire value is -1; see sk_err_to_kafka */
    SK_KAFKA_OFFSET_OUT_OF_RANGE               = 1,
    SK_KAFKA_CORRUPT_MESSAGE                   = 2,
    SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION        = 3,
    SK_KAFKA_INVALID_FETCH_SIZE                = 4,
    SK_KAFKA_LEADER_NOT_AVAILABLE              = 5,
    SK_KAFKA_NOT_LEADER_OR_FOLLOWER            = 6,
    SK_KAFKA_REQUEST_TIMED_OUT                 = 7,
    SK_KAFKA_REPLICA_NOT_AVAILABLE             = 9,
    SK_KAFKA_MESSAGE_TOO_LARGE                 = 10,
    SK_KAFKA_OFFSET_METADATA_TOO_LARGE         = 12,
    SK_KAFKA_NETWORK_EXCEPTION                 = 13,
    SK_KAFKA_COORDINATOR_LOAD_IN_PROGRESS      = 14,
    SK_KAFKA_COORDINATOR_NOT_AVAILABLE         = 15,
    SK_KAFKA_NOT_COORDINATOR                   = 16,
    SK_KAFKA_INVALID_TOPIC_EXCEPTION           = 17,
    SK_KAFKA_RECORD_LIST_TOO_LARGE             = 18,
    SK_KAFKA_NOT_ENOUGH_REPLICAS               = 19,
    SK_KAFKA_NOT_ENOUGH_REPLICAS_AFTER_APPEND  = 20,
    SK_KAFKA_INVALID_REQUIRED_ACKS             = 21,
    SK_KAFKA_ILLEGAL_GENERATION                = 22,
    SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL       = 23,
    SK_KAFKA_INVALID_GROUP_ID                  = 24,
    SK_KAFKA_UNKNOWN_MEMBER_ID                 = 25,
    SK_KAFKA_INVALID_SESSION_TIMEOUT           = 26,
    SK_KAFKA_REBALANCE_IN_PROGRESS             = 27,
    SK_KAFKA_INVALID_COMMIT_OFFSET_SIZE        = 28,
    SK_KAFKA_TOPIC_AUTHORIZATION_FAILED        = 29,
    SK_KAFKA_GROUP_AUTHORIZATION_FAILED        = 30,
    SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED      = 31,
    SK_KAFKA_INVALID_TIMESTAMP                 = 32,
    SK_KAFKA_UNSUPPORTED_SASL_MECHANISM        = 33,
    SK_KAFKA_ILLEGAL_SASL_STATE                = 34,
    SK_KAFKA_UNSUPPORTED_VERSION               = 35,
    SK_KAFKA_TOPIC_ALREADY_EXISTS              = 36,
    SK_KAFKA_INVALID_PARTITIONS                = 37,
    SK_KAFKA_INVALID_REPLICATION_FACTOR        = 38,
    SK_KAFKA_INVALID_REPLICA_ASSIGNMENT        = 39,
    SK_KAFKA_INVALID_CONFIG                    = 40,
    SK_KAFKA_NOT_CONTROLLER                    = 41,
    SK_KAFKA_INVALID_REQUEST                   = 42,
    SK_KAFKA_UNSUPPORTED_FOR_MESSAGE_FORMAT    = 43,
    SK_KAFKA_POLICY_VIOLATION                  = 44,
    SK_KAFKA_OUT_OF_ORDER_SEQUENCE_NUMBER      = 45,
    SK_KAFKA_DUPLICATE_SEQUENCE_NUMBER         = 46,
    SK_KAFKA_INVALID_PRODUCER_EPOCH            = 47,
    SK_KAFKA_INVALID_TXN_STATE                 = 48,
    SK_KAFKA_INVALID_PRODUCER_ID_MAPPING       = 49,
    SK_KAFKA_INVALID_TRANSACTION_TIMEOUT       = 50,
    SK_KAFKA_CONCURRENT_TRANSACTIONS           = 51,
    SK_KAFKA_TRANSACTION_COORDINATOR_FENCED    = 52,
    SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53,
    SK_KAFKA_SECURITY_DISABLED                 = 54,
    SK_KAFKA_OPERATION_NOT_ATTEMPTED           = 55,
    SK_KAFKA_KAFKA_STORAGE_ERROR               = 56,
    SK_KAFKA_LOG_DIR_NOT_FOUND                 = 57,
    SK_KAFKA_SASL_AUTHENTICATION_FAILED        = 58,
    SK_KAFKA_UNKNOWN_PRODUCER_ID               = 59,
    SK_KAFKA_REASSIGNMENT_IN_PROGRESS          = 60,
    SK_KAFKA_DELEGATION_TOKEN_AUTH_DISABLED    = 61,
    SK_KAFKA_INVALID_PRINCIPAL_TYPE            = 67,
    SK_KAFKA_NON_EMPTY_GROUP                   = 68,
    SK_KAFKA_GROUP_ID_NOT_FOUND                = 69,
    SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND        = 70,
    SK_KAFKA_INVALID_FETCH_SESSION_EPOCH       = 71,
    SK_KAFKA_LISTENER_NOT_FOUND                = 72,
    SK_KAFKA_TOPIC_DELETION_DISABLED           = 73,
    SK_KAFKA_FENCED_LEADER_EPOCH               = 74,
    SK_KAFKA_UNKNOWN_LEADER_EPOCH              = 75,
    SK_KAFKA_UNSUPPORTED_COMPRESSION_TYPE      = 76,
    SK_KAFKA_STALE_BROKER_EPOCH                = 77,
    SK_KAFKA_OFFSET_NOT_AVAILABLE              = 78,
    SK_KAFKA_MEMBER_ID_REQUIRED                = 79,
    SK_KAFKA_PREFERRED_LEADER_NOT_AVAILABLE    = 80,
    SK_KAFKA_GROUP_MAX_SIZE_REACHED            = 81,
    SK_KAFKA_FENCED_INSTANCE_ID                = 82,
    SK_KAFKA_ELIGIBLE_LEADERS_NOT_AVAILABLE    = 83,
    SK_KAFKA_ELECTION_NOT_NEEDED               = 84,
    SK_KAFKA_NO_REASSIGNMENT_IN_PROGRESS       = 85,
    SK_KAFKA_GROUP_SUBSCRIBED_TO_TOPIC         = 86,
    SK_KAFKA_INVALID_RECORD                    = 87,
    SK_KAFKA_UNSTABLE_OFFSET_COMMIT            = 88,
    SK_KAFKA_THROTTLING_QUOTA_EXCEEDED         = 89,
    SK_KAFKA_PRODUCER_FENCED                   = 90,
    SK_KAFKA_RESOURCE_NOT_FOUND                = 91,
    SK_KAFKA_DUPLICATE_RESOURCE                = 92,
    SK_KAFKA_UNACCEPTABLE_CREDENTIAL           = 93,
    SK_KAFKA_INCONSISTENT_VOTER_SET            = 94,
    SK_KAFKA_INVALID_UPDATE_VERSION            = 95,
    SK_KAFKA_FEATURE_UPDATE_FAILED             = 96,
    SK_KAFKA_PRINCIPAL_DESERIALIZATION_FAILURE = 97,
    SK_KAFKA_SNAPSHOT_NOT_FOUND                = 98,
    SK_KAFKA_POSITION_OUT_OF_RANGE             = 99,
    SK_KAFKA_UNKNOWN_TOPIC_ID                  = 100,
    SK_KAFKA_DUPLICATE_BROKER_REGISTRATION     = 101,
    SK_KAFKA_BROKER_ID_NOT_REGISTERED          = 102,
    SK_KAFKA_INCONSISTENT_TOPIC_ID             = 103,
    SK_KAFKA_INCONSISTENT_CLUSTER_ID           = 104,
    SK_KAFKA_TRANSACTIONAL_ID_NOT_FOUND        = 105,
    SK_KAFKA_FETCH_SESSION_TOPIC_ID_ERROR      = 106,
    SK_KAFKA_INELIGIBLE_REPLICA                = 107,
    SK_KAFKA_NEW_LEADER_ELECTED                = 108,
    SK_KAFKA_OFFSET_MOVED_TO_TIERED_STORAGE    = 109,
    SK_KAFKA_FENCED_MEMBER_EPOCH               = 110,
    SK_KAFKA_UNRELEASED_INSTANCE_ID            = 111,
    SK_KAFKA_UNSUPPORTED_ASSIGNOR              = 112,
    SK_KAFKA_STALE_MEMBER_EPOCH                = 113,
    SK_KAFKA_MISMATCHED_ENDPOINT_TYPE          = 114,
    SK_KAFKA_UNSUPPORTED_ENDPOINT_TYPE         = 115,
    SK_KAFKA_UNKNOWN_CONTROLLER_ID             = 116,
    SK_KAFKA_UNKNOWN_SUBSCRIPTION_ID           = 117,
    SK_KAFKA_TELEMETRY_TOO_LARGE               = 118,
    SK_KAFKA_INVALID_REGISTRATION              = 119,
    SK_KAFKA_TRANSACTION_ABORTABLE             = 120,
    SK_KAFKA_INVALID_REGULAR_EXPRESSION        = 128,
} sk_err;

/* Short stable name ("CORRUPT_MESSAGE", "SK_ERR_IO", ...) for logs and tests. */
const char *sk_err_name(int err);

/* The int16 that goes on the wire for err: itself when it is a Kafka code,
 * UNKNOWN_SERVER_ERROR (-1) for SK_KAFKA_UNKNOWN_SERVER_ERROR, and a fitting
 * retriable or fatal Kafka code for internal errors. */
int16_t sk_err_to_kafka(int err);

#endif
