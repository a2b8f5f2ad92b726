#include "tier.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blockcache.h"
#include "cleaner.h"
#include "cluster.h"
#include "config.h"
#include "kbatch.h"
#include "meta.h"
#include "node.h"
#include "objcompact.h"
#include "objfmt.h"
#include "objgc.h"
#include "objindex.h"
#include "objreg.h"
#include "objstore.h"
#include "objupload.h"
#include "plog.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "sk_workq.h"
#include "tier_logs.h"
#include "upcache.h"

#define SNAP_KEEP 2
#define FOREIGN_UPLOAD_MS 1000
#define UPLOAD_RETRY_MIN_MS 200
#define UPLOAD_RETRY_MAX_MS 5000

/* A pause after a failure that doubles, from UPLOAD_RETRY_MIN_MS up to
 * UPLOAD_RETRY_MAX_MS, until a success: nothing is tried before at_ms. */
struct retry {
    int64_t ms, at_ms;
};

static void retry_failed(struct retry *r)
{
    r->ms = r->ms ? r->ms * 2 : UPLOAD_RETRY_MIN_MS;
    if (r->ms > UPLOAD_RETRY_MAX_MS)
        r->ms = UPLOAD_RETRY_MAX_MS;
    r->at_ms = sk_mono_ms() + r->ms;
}

static bool retry_waiting(const struct retry *r)
{
    return sk_mono_ms() < r->at_ms;
}

struct sk_tier {
    sk_node *n;
    objstore *os;
    objindex *ix;
    blockcache *bc;
    sk_workq *q; /* the tier thread: uploads, snapshots, compaction, GC */
    objup_set *set; /* the uploads' batches: the tier thread's, reused (its arena) */
    wal_scan scan;  /* the tier thread's window over the WAL, reused */
    size_t readahead; /* blocks, s3.block.readahead.bytes */
    struct event *upload_ev, *bg_ev, *orphan_ev;
    bool busy;     /* a job runs on the tier thread */
    bool stopping;
    bool snapshot_due;
    bool list_due;     /* the compaction timer fired while a job ran */
    bool orphans_due;  /* ... and the orphan GC's */
    int64_t last_snapshot_ms;
    wal_lsn snap_after;   /* the next snapshot must reflect the view past this */
    wal_lsn reg_hi;       /* where the newest registration ends */
    wal_lsn foreign_reg;  /* the newest registration of adopted batches: uploads wait for
                           * the view to apply it (upload_wanted; why: upload_end) */
    wal_lsn uploaded;     /* every batch below is in registered objects */
    wal_lsn snapshot_lsn; /* the newest view snapshot in the store reflects this */
    int64_t last_upload_ms;
    struct retry up_retry;  /* after a failed upload */
    double upload_bps;    /* WAL bytes per second of recent uploads, start to registration */
    struct retry snap_retry; /* after a failed snapshot */
    bool upload_last;     /* the last job started was an upload */
    bool foreign;         /* adopted batches may wait for an upload */
    bool foreign_kicked;  /* ... more came while an upload ran */
    /* orphan GC: candidates of the previous pass */
    objreg_keys orphans;
    /* keyed topics: stream -> struct clean_state, what the passes here left */
    sk_map *cleaned;
    int64_t last_clean_ms;
    sk_tier_stats st;
};

struct clean_state {
    int64_t clean_end, horizon_ms;
};

static void start_next_job(sk_tier *t);

static void opts_from_config(const sk_config *cfg, objstore_opts *o)
{
    objstore_opts_default(o);
    o->max_inflight = cfg->s3_max_inflight;
    o->part_size = (size_t)cfg->s3_part_size;
    o->request_timeout_ms = cfg->s3_request_timeout_ms;
    o->max_attempts = cfg->s3_max_attempts;
}

/* Objects and snapshots of a cluster log are named by the log, a single
 * node's by the node. */
static int64_t owner_log(const sk_node *n)
{
    return n->cluster ? sk_cluster_log_id(n->cluster) : 0;
}

static uint32_t owner_id(const sk_node *n)
{
    return n->cluster ? (uint32_t)sk_cluster_log_id(n->cluster) : (uint32_t)n->cfg->node_id;
}

static void snapshot_prefix(const sk_node *n, char *buf, size_t len)
{
    sk_tier_snapshot_prefix(n->cfg, owner_log(n), buf, len);
}

/* ---- start-up: restoring a wiped data.dir ---- */

int sk_tier_restore_view(const sk_config *cfg, const char *dbpath, char *why, size_t whylen)
{
    char prefix[64];
    sk_tier_snapshot_prefix(cfg, 0, prefix, sizeof prefix);
    return sk_tier_restore_from(cfg, prefix, dbpath, why, whylen);
}

/* ---- the tier thread's jobs ---- */

enum job_kind { JOB_UPLOAD, JOB_SNAPSHOT, JOB_COMPACT, JOB_LIST, JOB_ORPHANS };

/* One partition's stream, known when the job started. */
struct smap {
    kc_uuid id;
    int32_t part;
    uint64_t stream;
};

struct job {
    sk_tier *t;
    enum job_kind kind;
    int err;
    /* upload */
    wal_lsn from, to, end;
    int64_t started_ms; /* monotonic: when the upload began */
    wal_lsn *segs;
    size_t nsegs;
    struct smap *map;
    size_t nmap;
    uint64_t limit;
    sk_upcache cached;     /* the WAL cache's batches in from..to, held until done */
    uint64_t cached_bytes; /* bytes taken from them rather than read from the WAL */
    bool foreign_more; /* adopted batches left for a later upload */
    size_t nforeign;   /* adopted batches taken */
    bool pieced;       /* its first piece was PUT while it read the rest */
    /* objects put (upload, compaction), to register */
    objreg_objects objs;
    /* compaction: sources retired */
    objreg_keys retired;
    uint64_t bytes_in;
    /* snapshot */
    wal_lsn snap_lsn;
    /* registration: where its record ends */
    wal_lsn reg_end;
    /* registry listing (GC, compaction); ranges[i] owns infos[i].ranges */
    objreg_info *infos;
    objreg_range **ranges;
    size_t ninfos, capinfos;
    /* orphan GC */
    objreg_keys cands;
    size_t deleted;
    /* compaction of keyed topics */
    sk_clean_cand *clean;
    size_t nclean;
    sk_clean_result cres;
};

/* Loop thread: job_free and upload_done, on every path (error, shutdown). */
static void job_free(struct job *j)
{
    sk_upcache_release(&j->cached);
    free(j->segs);
    free(j->map);
    objreg_objects_free(&j->objs);
    objreg_keys_free(&j->retired);
    for (size_t i = 0; i < j->ninfos; i++)
        free(j->ranges[i]);
    free(j->ranges);
    free(j->infos);
    objreg_keys_free(&j->cands);
    for (size_t i = 0; i < j->nclean; i++)
        free(j->clean[i].aborted);
    free(j->clean);
    free(j);
}

static objup_params upload_params(const sk_tier *t)
{
    const sk_config *cfg = t->n->cfg;
    return (objup_params){(uint64_t)cfg->s3_split_size, (uint32_t)cfg->s3_block_bytes,
                          owner_id(t->n)};
}

/* The registry's ranges (meta.h) and s3sink's: the same fields, copied one
 * by one; a field added to one must be added to the other. */
_Static_assert(sizeof(sk_orange) == sizeof(objreg_range), "sk_orange and objreg_range differ");
static objreg_range range_from_meta(const sk_orange *r)
{
    return (objreg_range){r->stream, r->start, r->end, r->size, r->max_ts, r->records};
}

static sk_orange range_to_meta(const objreg_range *r)
{
    return (sk_orange){r->stream, r->start, r->end, r->size, r->max_ts, r->records};
}

/* The live ranges the view holds for an object (malloc'd, *n of them). */
static int live_ranges(sk_store *s, const char *key, objreg_range **out, size_t *n)
{
    sk_orange *or;
    int rc = sk_store_object_ranges(s, key, &or, n);
    *out = rc == 0 ? calloc(*n ? *n : 1, sizeof **out) : NULL;
    if (rc == 0 && !*out)
        rc = SK_ERR_NOMEM;
    for (size_t i = 0; rc == 0 && i < *n; i++)
        (*out)[i] = range_from_meta(&or[i]);
    free(or);
    if (rc != 0)
        *n = 0;
    return rc;
}

static void count_puts(sk_tier *t, const objreg_objects *objs)
{
    for (size_t i = 0; i < objs->n; i++) {
        t->st.objects_put++;
        if (objs->v[i].kind == OBJFMT_SO)
            t->st.so_put++;
        else
            t->st.sso_put++;
    }
}

/* ---- upload (tier thread) ---- */

static int smap_cmp(const void *a, const void *b)
{
    const struct smap *x = a, *y = b;
    int c = memcmp(x->id.b, y->id.b, 16);
    if (c)
        return c;
    return (x->part > y->part) - (x->part < y->part);
}

static bool is_segment_start(const struct job *j, wal_lsn lsn)
{
    for (size_t i = 0; i < j->nsegs; i++)
        if (j->segs[i] == lsn)
            return true;
    return false;
}

static const struct smap *find_stream(const struct job *j, const kc_uuid *id, int32_t part)
{
    struct smap key = {*id, part, 0};
    return bsearch(&key, j->map, j->nmap, sizeof key, smap_cmp);
}

/* Adds a partition's batch to the set: copied, or by reference when its
 * bytes outlive the set's use (the WAL cache's, held by the job). Batches of
 * topics deleted since the job started, and batches that do not parse, are
 * not uploaded. crc_checked: the batch was validated on its way in, so its
 * CRC field is right and the object's block CRC is combined from it
 * instead of reading the batch again. */
static int add_batch(const struct job *j, objup_set *set, const kc_uuid *id, int32_t part,
                     const uint8_t *batch, size_t blen, bool by_ref, bool crc_checked)
{
    kb_header h;
    const struct smap *m = find_stream(j, id, part);
    if (!m || kb_parse_header(batch, blen, &h) != 0)
        return 0;
    objup_batch b = {m->stream,
                     h.base_offset,
                     h.base_offset + h.last_offset_delta,
                     h.max_timestamp,
                     (uint32_t)h.records_count,
                     (uint32_t)blen,
                     batch,
                     crc_checked,
                     crc_checked ? kb_whole_crc32c(batch, blen) : 0};
    return by_ref ? objup_set_add_ref(set, &b) : objup_set_add(set, &b, batch);
}

/* Adds a DATA record's batch to the set (a copy: rec is reused). */
static int add_data(const struct job *j, objup_set *set, const uint8_t *rec, uint32_t len)
{
    kc_uuid id;
    int32_t part;
    const uint8_t *batch;
    size_t blen;
    if (sk_data_decode(rec, len, &id, &part, &batch, &blen) != 0)
        return 0;
    return add_batch(j, set, &id, part, batch, blen, false, false);
}

/* A LINK record's batch (docs/zones.md): read where the link says, then
 * added like a DATA record. */
static int add_link(const struct job *j, objup_set *set, wal_lsn lsn, const uint8_t *rec,
                    uint32_t len)
{
    sk_link l;
    if (sk_link_decode(rec, len, &l) != 0)
        return 0;
    if (!find_stream(j, &l.id, l.part))
        return 0; /* its topic was deleted */
    uint32_t cap = l.len + SK_DATA_HEADER, blen;
    uint8_t *buf = malloc(cap), type;
    if (!buf)
        return SK_ERR_NOMEM;
    sk_batch_loc loc = {.log = 0, .lsn = lsn, .len = l.len};
    int rc = sk_node_read_batch(j->t->n, &loc, &type, buf, cap, &blen);
    if (rc == 0 && (type != SK_WAL_DATA || blen != cap))
        rc = SK_ERR_CORRUPT;
    if (rc == 0)
        rc = add_data(j, set, buf, blen);
    else
        SK_ERROR("tier", "cannot read the batch linked at LSN %llu (payload log %lld, LSN %llu): %s",
                 (unsigned long long)lsn, (long long)l.plog, (unsigned long long)l.plsn,
                 sk_err_name(rc));
    free(buf);
    return rc;
}

/* The record at lsn from the WAL cache when the job holds its batch (the
 * same bytes, by reference: upcache.h); else read from the WAL, through the
 * tier thread's window (wal_scan: one read per window, not two per record). */
static int next_record(struct job *j, objup_set *set, wal_lsn lsn, uint32_t *len)
{
    const sk_upbatch *c = sk_upcache_at(&j->cached, lsn);
    if (c) {
        *len = sk_upcache_record_len(c);
        j->cached_bytes += c->len;
        return add_batch(j, set, &c->id, c->part, c->data, c->len, true, c->crc_checked);
    }
    uint8_t type;
    const uint8_t *rec;
    int rc = wal_scan_record(j->t->n->wal, &j->t->scan, lsn, &type, &rec, len);
    if (rc == 0 && type == SK_WAL_DATA)
        rc = add_data(j, set, rec, *len);
    else if (rc == 0 && type == SK_WAL_LINK)
        rc = add_link(j, set, lsn, rec, *len);
    return rc;
}

/* Reads the WAL from j->end until j->to, a full set, or a set of at least
 * `mark` bytes; j->end is where it stopped. */
static int read_wal(struct job *j, objup_set *set, uint64_t mark)
{
    int rc = 0;
    wal_lsn lsn = j->end;
    while (rc == 0 && lsn < j->to && !objup_set_full(set) && objup_set_bytes(set) < mark) {
        if (is_segment_start(j, lsn)) {
            lsn += WAL_SEGMENT_HEADER;
            continue;
        }
        uint32_t len;
        rc = next_record(j, set, lsn, &len);
        if (rc == 0)
            lsn += WAL_RECORD_HEADER + len;
    }
    j->end = lsn < j->to ? lsn : j->to;
    return rc;
}

/* Adopted batches (in other logs' WALs, or in this one under its id for a
 * partition that came back) go into objects before anything newer of
 * theirs: an object's range of a stream must have no hole. */
struct foreign {
    struct job *j;
    objup_set *set;
    uint8_t *rec;
    uint32_t cap;
    int err;
};

static void add_foreign(void *arg, const kc_uuid *id, int32_t part, const sk_batch_loc *loc)
{
    struct foreign *f = arg;
    if (!find_stream(f->j, id, part) || f->err)
        return;
    uint32_t need = loc->len + SK_DATA_HEADER;
    if (need > f->cap) {
        uint8_t *nr = realloc(f->rec, need);
        if (!nr) {
            f->err = SK_ERR_NOMEM;
            return;
        }
        f->rec = nr;
        f->cap = need;
    }
    uint8_t type;
    uint32_t len;
    int rc = sk_node_read_batch(f->j->t->n, loc, &type, f->rec, f->cap, &len);
    if (rc == 0 && (type != SK_WAL_DATA || len != need))
        rc = SK_ERR_CORRUPT;
    if (rc) {
        SK_ERROR("tier", "cannot read an adopted batch (log %lld, LSN %llu): %s", (long long)loc->log,
                 (unsigned long long)loc->lsn, sk_err_name(rc));
        f->err = rc;
        return;
    }
    f->err = add_data(f->j, f->set, f->rec, len);
    if (!f->err)
        f->j->nforeign++;
}

static int read_foreign(struct job *j, objup_set *set)
{
    struct foreign f = {j, set, NULL, 0, 0};
    bool more = false;
    int rc = sk_store_foreign_batches(j->t->n->store, (int64_t)j->limit, add_foreign, &f, &more);
    free(f.rec);
    j->foreign_more = more;
    return rc ? rc : f.err;
}

/* A stream with a hole would be registered as one range over it, hiding
 * the batches of the hole in other objects: refused, the WAL keeps them and
 * a later upload, with the view caught up, tries again. The set's batches
 * from the first-th on, and where they meet those before (a piece). */
static int check_holes(struct job *j, objup_set *set, size_t first)
{
    uint64_t stream;
    int64_t before, after;
    if (!objup_set_hole_from(set, first, &stream, &before, &after))
        return 0;
    if (after <= before)
        SK_ERROR("tier", "upload of WAL %" PRIu64 "..%" PRIu64 " refused: stream %" PRIu64
                 " would repeat offsets %" PRId64 "..%" PRId64,
                 (uint64_t)j->from, (uint64_t)j->end, stream, after, before);
    else
        SK_ERROR("tier", "upload of WAL %" PRIu64 "..%" PRIu64 " refused: stream %" PRIu64
                 " would skip offsets %" PRId64 "..%" PRId64,
                 (uint64_t)j->from, (uint64_t)j->end, stream, before + 1, after - 1);
    return SK_ERR_CORRUPT;
}

/* An upload reads its batches, then PUTs their objects. When it reads
 * them back from the WAL (an upload behind, the WAL cache no longer holding
 * them), the object store would wait while it reads: the first piece, a
 * quarter of the upload, is then PUT while the rest is read. Its objects
 * are smaller, so only an upload that reads from the disk pieces
 * (piece_now). */
#define UPLOAD_FIRST_PIECE_DIV 4

/* The first piece is read, mostly from the WAL, and more is left. Not with
 * adopted batches: the upload may then be refused for a hole until the view
 * catches up (check_holes), and would be refused after its first piece was
 * put, again at every retry. cached_bytes may exceed what the set took
 * (batches of deleted topics are counted, not added). */
static bool piece_now(const struct job *j, objup_set *set)
{
    uint64_t bytes = objup_set_bytes(set);
    uint64_t cached = j->cached_bytes < bytes ? j->cached_bytes : bytes;
    return j->end < j->to && !objup_set_full(set) && bytes > 0 && j->nforeign == 0 &&
           (bytes - cached) * 2 > bytes;
}

/* An upload that failed after its first piece was put: its objects would
 * wait an hour for the orphan GC (s3.orphan.min.age.ms), and each retry
 * would leave more. Deleted now, as far as the store lets. */
static void drop_put(struct job *j)
{
    for (size_t i = 0; i < j->objs.n; i++)
        if (objstore_delete_sync(j->t->os, j->objs.v[i].key) != 0)
            SK_WARN("tier", "cannot delete %s, put by a failed upload: the orphan GC will",
                    j->objs.v[i].key);
    objreg_objects_free(&j->objs);
}

/* Reads the set and PUTs its objects: the first piece's PUTs under way
 * while the rest is read when piece_now says so. The first piece is
 * finished (waited for) on every path before the set can be reset. */
static int read_and_put(struct job *j, objup_set *set)
{
    const objup_params p = upload_params(j->t);
    objup_flight *head = NULL, *rest = NULL;
    size_t first = 0;
    int rc = read_foreign(j, set);
    /* This node's own WAL only once no adopted batch waits (see above). */
    bool own = rc == 0 && !j->foreign_more;
    j->end = j->from;
    wal_scan_reset(&j->t->scan); /* what it held may have been trimmed and rewritten */
    if (own)
        rc = read_wal(j, set, j->limit / UPLOAD_FIRST_PIECE_DIV);
    if (rc == 0 && own && piece_now(j, set)) {
        rc = check_holes(j, set, 0);
        if (rc == 0)
            rc = objup_put_start(set, 0, j->t->os, &p, &head);
        first = objup_set_count(set);
        j->pieced = head != NULL;
    }
    if (rc == 0 && own)
        rc = read_wal(j, set, UINT64_MAX);
    if (rc == 0)
        rc = check_holes(j, set, first);
    if (rc == 0)
        rc = objup_put_start(set, first, j->t->os, &p, &rest);
    int hrc = objup_put_finish(head, &j->objs);
    int rrc = objup_put_finish(rest, &j->objs);
    rc = rc ? rc : hrc ? hrc : rrc;
    if (rc != 0 && j->pieced)
        drop_put(j);
    return rc;
}

static void upload_work(void *arg)
{
    struct job *j = arg;
    sk_tier *t = j->t;
    if (!t->set)
        t->set = objup_set_new(j->limit);
    else
        objup_set_reset(t->set, j->limit);
    objup_set *set = t->set;
    j->err = set ? read_and_put(j, set) : SK_ERR_NOMEM;
    j->bytes_in = set ? objup_set_bytes(set) : 0;
    /* Nothing may point at the held batches past the job (upload_done
     * releases them): forget the references, keep the arena. */
    if (set)
        objup_set_reset(set, j->limit);
}

/* ---- view snapshot (tier thread) ---- */

static void snapshot_work(void *arg)
{
    struct job *j = arg;
    sk_tier *t = j->t;
    const sk_config *cfg = t->n->cfg;
    char path[4200];
    snprintf(path, sizeof path, "%s/skiff.db.snapshot", cfg->data_dir);
    wal_lsn applied = 0;
    int rc = sk_store_backup(t->n->store, path, &applied);
    uint8_t *data = NULL;
    size_t len = 0;
    if (rc == 0) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            rc = SK_ERR_IO;
        } else {
            fseek(f, 0, SEEK_END);
            long sz = ftell(f);
            fseek(f, 0, SEEK_SET);
            data = sz > 0 ? malloc((size_t)sz) : NULL;
            if (data && fread(data, 1, (size_t)sz, f) == (size_t)sz)
                len = (size_t)sz;
            else
                rc = SK_ERR_IO;
            fclose(f);
        }
    }
    unlink(path);
    char prefix[64], key[128];
    snapshot_prefix(t->n, prefix, sizeof prefix);
    snprintf(key, sizeof key, "%s%020" PRIu64 ".db", prefix, (uint64_t)applied);
    if (rc == 0) {
        struct iovec iov = {data, len};
        rc = objstore_put_sync(t->os, key, &iov, 1);
    }
    free(data);
    if (rc == 0) {
        /* Keep the newest few; older ones are never needed again. */
        objstore_list_page page;
        if (objstore_list_sync(t->os, prefix, NULL, 1000, &page) == 0) {
            for (size_t i = 0; i + SNAP_KEEP < page.n; i++)
                objstore_delete_sync(t->os, page.entries[i].key);
            objstore_list_page_free(&page);
        }
        j->snap_lsn = applied;
    }
    j->err = rc;
}

/* ---- registry listing, compaction, orphans (tier thread) ---- */

static void list_cb(void *arg, const sk_obj_info *o)
{
    struct job *j = arg;
    if (j->ninfos == j->capinfos) {
        size_t nc = j->capinfos ? j->capinfos * 2 : 64;
        objreg_info *ni = realloc(j->infos, nc * sizeof *ni);
        if (!ni)
            return;
        j->infos = ni;
        objreg_range **nr = realloc(j->ranges, nc * sizeof *nr);
        if (!nr)
            return;
        j->ranges = nr;
        j->capinfos = nc;
    }
    objreg_info *i = &j->infos[j->ninfos];
    *i = (objreg_info){.kind = (objfmt_kind)o->kind,
                       .size = o->size,
                       .created_ms = o->created_ms,
                       .delete_after_ms = o->delete_after_ms,
                       .nranges = o->nranges};
    snprintf(i->key, sizeof i->key, "%s", o->key);
    j->ranges[j->ninfos++] = NULL;
}

static void list_work(void *arg)
{
    struct job *j = arg;
    j->err = sk_store_list_objects(j->t->n->store, list_cb, j);
}

static objcompact_params compact_params(const sk_config *cfg)
{
    return (objcompact_params){(uint64_t)cfg->s3_compaction_small_bytes,
                               (uint64_t)cfg->s3_compaction_max_bytes, cfg->s3_force_split_ms};
}

/* Loads the ranges the plan reads. An object whose ranges cannot be read,
 * or are gone by now, is left without: the plan skips it. */
static void load_plan_ranges(struct job *j, const objcompact_params *p)
{
    for (size_t i = 0; i < j->ninfos; i++) {
        objreg_info *o = &j->infos[i];
        size_t n;
        if (!objcompact_wants_ranges(o, p) ||
            live_ranges(j->t->n->store, o->key, &j->ranges[i], &n) != 0 || n == 0)
            continue;
        o->ranges = j->ranges[i];
        o->nranges = (uint32_t)n;
    }
}

static int64_t batch_max_ts(const void *payload, uint32_t size)
{
    kb_header h;
    return kb_parse_header(payload, size, &h) == 0 ? h.max_timestamp : -1;
}

static int source_live(void *arg, const char *key, objreg_range **ranges, size_t *n)
{
    return live_ranges(arg, key, ranges, n);
}

/* Rewrites the plan's sources, which the registration retires. */
static int compact_sources(struct job *j, const objcompact_plan *plan)
{
    sk_tier *t = j->t;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < plan->nsrc; i++)
        rc = objreg_keys_push(&j->retired, j->infos[plan->src[i]].key);
    objcompact_env env = {t->os, source_live, t->n->store, batch_max_ts, upload_params(t),
                          NULL, NULL};
    if (rc == 0)
        rc = objcompact_run(&env, plan, (const char *const *)j->retired.v, &j->objs);
    return rc;
}

/* Compaction of keyed topics, when object compaction had nothing to do. */
static int clean_work(struct job *j)
{
    sk_tier *t = j->t;
    const sk_config *cfg = t->n->cfg;
    objcompact_env env = {t->os, source_live, t->n->store, batch_max_ts, upload_params(t),
                          NULL, NULL};
    sk_clean_params p = {(uint64_t)cfg->log_cleaner_dedupe_buffer_size,
                         (uint64_t)cfg->s3_compaction_max_bytes, sk_now_ms()};
    int rc = sk_cleaner_run(&env, j->infos, j->ninfos, j->clean, j->nclean, &p, &j->retired,
                            &j->objs, &j->cres);
    if (rc != 0) {
        objreg_keys_free(&j->retired);
        j->retired = (objreg_keys){0};
    }
    return rc;
}

/* The plan is made from the registry listing the loop took just before. */
static void compact_work(void *arg)
{
    struct job *j = arg;
    objcompact_params p = compact_params(j->t->n->cfg);
    load_plan_ranges(j, &p);
    objcompact_plan plan;
    int rc = objcompact_plan_make(j->infos, j->ninfos, &p, sk_now_ms(), &plan);
    if (rc == 0 && plan.nsrc > 0) {
        j->bytes_in = plan.bytes;
        rc = compact_sources(j, &plan);
    }
    objcompact_plan_free(&plan);
    if (rc == 0 && j->retired.n == 0 && j->nclean > 0)
        rc = clean_work(j);
    j->err = rc;
}

static int object_known(void *arg, const char *key)
{
    return sk_store_object_known(arg, key);
}

static void orphans_work(void *arg)
{
    struct job *j = arg;
    sk_tier *t = j->t;
    objgc_orphan_params p = {owner_id(t->n), t->n->cfg->s3_orphan_min_age_ms};
    j->err = objgc_orphans_pass(t->os, &p, sk_now_ms(), object_known, t->n->store, &t->orphans,
                                &j->cands, &j->deleted);
}

/* ---- completions on the loop ---- */

static sk_map *live_streams(sk_node *n);

/* The cache keeps what a pass over a keyed topic just rewrote: reads of it
 * go to the new objects from now on. */
static void drop_cleaned(struct job *j)
{
    sk_map *live = live_streams(j->t->n);
    sk_part *p = live ? sk_map_get(live, &j->cres.stream, sizeof j->cres.stream) : NULL;
    if (p)
        sk_cache_drop_below(j->t->n, p, j->cres.clean_end);
    sk_map_destroy(live);
}

/* An upload's rate, from its start to its registration, averaged over the
 * last few (what producers are paced to: pace.h). Uploads of less than a
 * MiB say more about latency than about bandwidth, and are left out. */
static void note_upload_rate(sk_tier *t, const struct job *j)
{
    uint64_t bytes = j->end - j->from;
    int64_t ms = sk_mono_ms() - j->started_ms;
    if (bytes < (1u << 20))
        return;
    double bps = (double)bytes * 1000.0 / (double)(ms > 0 ? ms : 1);
    t->upload_bps = t->upload_bps > 0 ? 0.7 * t->upload_bps + 0.3 * bps : bps;
}

static void registered(void *arg, int err)
{
    struct job *j = arg;
    sk_tier *t = j->t;
    if (err == 0 && j->cres.ran)
        drop_cleaned(j);
    if (err == 0) {
        if (j->kind == JOB_UPLOAD && j->end > t->uploaded)
            t->uploaded = j->end;
        if (j->kind == JOB_UPLOAD) {
            t->st.last_upload_ms = sk_now_ms();
            note_upload_rate(t, j);
        }
        /* The registration record lies past the upload's end: a snapshot
         * taken before the view applied it would not hold it, and the
         * retention pass that follows the snapshot would still see the
         * uploaded batches indexed and leave their segments untrimmed. What
         * a snapshot waits for is fixed when it falls due (this
         * registration, or the newest when the last snapshot was taken),
         * never moved to a newer one: uploads that follow each other at
         * once register again before the view applies the last, and a
         * snapshot that chased the newest would never come (nor the WAL's
         * trim). */
        if (j->reg_end > t->reg_hi)
            t->reg_hi = j->reg_end;
        if (!t->snapshot_due)
            t->snap_after = j->reg_end;
        if (j->nforeign > 0 && j->reg_end > t->foreign_reg)
            t->foreign_reg = j->reg_end;
        t->snapshot_due = true;
    } else {
        if (j->kind == JOB_UPLOAD)
            t->st.upload_failures++;
        SK_WARN("tier", "registration of %zu objects failed (%s); they will be collected as "
                "orphans",
                j->objs.n, sk_err_name(err));
    }
    job_free(j);
    t->busy = false;
    start_next_job(t);
}

/* stream -> partition, of the partitions held here now (one handed over
 * meanwhile left its batches to its adopter, which registers them). */
static sk_map *live_streams(sk_node *n)
{
    sk_map *live = sk_map_new();
    size_t it = 0;
    void *v;
    while (live && sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *tp = v;
        for (int32_t i = 0; i < tp->nparts; i++)
            if (tp->parts[i]->own != SK_OWN_NONE)
                sk_map_put(live, &tp->parts[i]->stream, sizeof(uint64_t), tp->parts[i]);
    }
    return live;
}

/* One new object in an OBJECTS record, without the ranges of streams gone
 * meanwhile or below their partition's log start now. */
static void encode_object(sk_buf *b, objreg_object *o, sk_map *live)
{
    uint32_t nr = 0;
    for (uint32_t k = 0; k < o->nranges; k++) {
        sk_part *p = live ? sk_map_get(live, &o->ranges[k].stream, sizeof(uint64_t)) : NULL;
        if (p && (int64_t)o->ranges[k].end >= p->log_start)
            o->ranges[nr++] = o->ranges[k];
    }
    o->nranges = nr;
    sk_oobj oo = {o->key, strlen(o->key), (uint8_t)o->kind, o->size, o->created_ms, nr};
    sk_meta_objects_obj(b, &oo);
    for (uint32_t k = 0; k < nr; k++) {
        sk_orange r = range_to_meta(&o->ranges[k]);
        sk_meta_objects_range(b, &r);
    }
}

static void encode_retired(sk_buf *b, const objreg_keys *keys, int64_t after)
{
    sk_meta_objects_retired(b, (uint32_t)keys->n);
    for (size_t i = 0; i < keys->n; i++)
        sk_meta_objects_retire(b, keys->v[i], strlen(keys->v[i]), after);
}

/* Appends the OBJECTS record for a finished upload or compaction. */
static void register_objects(struct job *j)
{
    sk_tier *t = j->t;
    sk_node *n = t->n;
    sk_map *live = live_streams(n);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_objects_begin(&b, j->kind == JOB_UPLOAD ? j->end : 0, (uint32_t)j->objs.n);
    for (size_t i = 0; i < j->objs.n; i++)
        encode_object(&b, &j->objs.v[i], live);
    encode_retired(&b, &j->retired, sk_now_ms() + n->cfg->s3_delete_delay_ms);
    sk_map_destroy(live);
    int rc = SK_ERR_NOMEM;
    if (!sk_buf_failed(&b)) {
        struct iovec iov = {b.data, b.len};
        rc = sk_node_append(n, SK_WAL_META, &iov, 1, registered, j, &j->reg_end);
    }
    sk_buf_free(&b);
    if (rc != 0)
        registered(j, rc);
}

struct delctx {
    sk_tier *t;
    char key[SK_OBJ_KEY_MAX];
};

static void deleted_cb(void *arg, int err)
{
    struct delctx *d = arg;
    sk_tier *t = d->t;
    if (err == 0) {
        sk_buf b;
        sk_buf_init(&b, 0);
        sk_meta_object_gone(&b, d->key, strlen(d->key));
        struct iovec iov = {b.data, b.len};
        if (!sk_buf_failed(&b))
            sk_node_append(t->n, SK_WAL_META, &iov, 1, NULL, NULL, NULL);
        sk_buf_free(&b);
        objindex_forget(t->ix, d->key);
        blockcache_forget(t->bc, d->key);
        t->st.objects_deleted++;
    }
    free(d);
}

static void delete_object(sk_tier *t, const char *key)
{
    struct delctx *d = calloc(1, sizeof *d);
    if (!d)
        return;
    d->t = t;
    snprintf(d->key, sizeof d->key, "%s", key);
    objstore_delete(t->os, key, deleted_cb, d);
}

/* Retires objects with one OBJECTS record that registers nothing. */
static void retire_objects(sk_tier *t, const objreg_keys *keys, int64_t after)
{
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_objects_begin(&b, 0, 0);
    encode_retired(&b, keys, after);
    struct iovec iov = {b.data, b.len};
    if (!sk_buf_failed(&b))
        sk_node_append(t->n, SK_WAL_META, &iov, 1, NULL, NULL, NULL);
    sk_buf_free(&b);
}

/* After a registry listing: delete retired objects whose time has come,
 * retire live ones left without any range. */
/* What the registry holds, for the metrics: objects neither retired nor empty. */
static void count_objects(sk_tier *t, const struct job *j)
{
    memset(t->st.objects, 0, sizeof t->st.objects);
    memset(t->st.object_bytes, 0, sizeof t->st.object_bytes);
    for (size_t i = 0; i < j->ninfos; i++) {
        const objreg_info *o = &j->infos[i];
        if (o->delete_after_ms >= 0 || !o->nranges ||
            (o->kind != OBJFMT_SO && o->kind != OBJFMT_SSO))
            continue;
        t->st.objects[o->kind]++;
        t->st.object_bytes[o->kind] += o->size;
    }
    t->st.listed_ms = sk_now_ms();
}

static void listed(struct job *j)
{
    sk_tier *t = j->t;
    int64_t now = sk_now_ms();
    objreg_keys retire = {0};
    count_objects(t, j);
    for (size_t i = 0; i < j->ninfos; i++) {
        const objreg_info *o = &j->infos[i];
        objgc_action a = objgc_decide(o, now);
        if (a == OBJGC_DELETE && !t->stopping)
            delete_object(t, o->key);
        else if (a == OBJGC_RETIRE && objreg_keys_push(&retire, o->key) != 0)
            SK_WARN("tier", "no memory to retire %s; next time", o->key);
    }
    if (retire.n > 0)
        retire_objects(t, &retire, now + t->n->cfg->s3_delete_delay_ms);
    objreg_keys_free(&retire);
}

static void upload_done(struct job *j)
{
    sk_tier *t = j->t;
    /* The objects are written: the cached batches may go now, not only
     * once registered. */
    sk_upcache_release(&j->cached);
    t->last_upload_ms = sk_mono_ms();
    /* Every adopted batch is in objects once an upload found none left, if
     * the view it read had applied every ADOPT (upload_end). */
    if (j->err == 0 && !j->foreign_more && !t->foreign_kicked && j->to >= t->n->adopt_hi)
        t->foreign = false;
    t->foreign_kicked = false;
    if (j->err == 0)
        t->up_retry = (struct retry){0};
    if (j->err != 0) {
        t->st.upload_failures++;
        /* The store retries each request itself; a whole upload that failed
         * is tried again after a pause that doubles up to a few seconds, not
         * at the next tick (a full disk fails at once, again and again). */
        retry_failed(&t->up_retry);
        SK_WARN("tier", "upload of WAL %" PRIu64 "..%" PRIu64 " failed: %s; retrying in %" PRId64
                " ms", (uint64_t)j->from, (uint64_t)j->to, sk_err_name(j->err), t->up_retry.ms);
    } else if (j->objs.n == 0) {
        t->st.last_upload_ms = sk_now_ms();
        /* Nothing but metadata: no object to register (registering would
         * itself append a record, and the next upload find it). The range
         * needs no upload, so the WAL may be trimmed past it. */
        if (j->end > t->uploaded)
            t->uploaded = j->end;
    } else {
        t->st.uploads++;
        t->st.upload_bytes += j->bytes_in;
        t->st.upload_pieced += j->pieced;
        SK_INFO("tier", "uploaded WAL %" PRIu64 "..%" PRIu64 ": %zu objects, %" PRIu64
                " bytes (%" PRIu64 " from the WAL cache)",
                (uint64_t)j->from, (uint64_t)j->end, j->objs.n, j->bytes_in, j->cached_bytes);
        register_objects(j);
        return;
    }
    job_free(j);
    t->busy = false;
    start_next_job(t);
}

/* What a pass over a keyed topic's stream leaves for the next. */
static void cleaned(struct job *j)
{
    sk_tier *t = j->t;
    const sk_clean_result *r = &j->cres;
    t->last_clean_ms = sk_mono_ms();
    if (j->err != 0 || !r->ran)
        return;
    struct clean_state *cs = sk_map_get(t->cleaned, &r->stream, sizeof r->stream);
    if (!cs && (cs = malloc(sizeof *cs)) != NULL &&
        sk_map_put(t->cleaned, &r->stream, sizeof r->stream, cs) != 0) {
        free(cs);
        cs = NULL;
    }
    if (cs)
        *cs = (struct clean_state){r->clean_end, r->horizon_ms};
    j->bytes_in = r->bytes_in;
    t->st.cleaner_passes++;
    t->st.cleaner_bytes_in += r->bytes_in;
    t->st.cleaner_records_removed += r->records_removed;
    SK_INFO("tier", "compacted stream %" PRIu64 " below offset %" PRId64 ": %" PRIu64
            " records removed, %zu objects into %zu",
            r->stream, r->clean_end, r->records_removed, j->retired.n, j->objs.n);
}

static void compact_done(struct job *j)
{
    sk_tier *t = j->t;
    if (j->nclean > 0)
        cleaned(j);
    if (j->err != 0)
        SK_WARN("tier", "compaction failed: %s", sk_err_name(j->err));
    if (j->err == 0 && j->retired.n > 0) {
        t->st.compactions++;
        t->st.compacted_in += j->retired.n;
        t->st.compacted_out += j->objs.n;
        SK_INFO("tier", "compacted %zu objects (%" PRIu64 " bytes) into %zu", j->retired.n,
                j->bytes_in, j->objs.n);
        register_objects(j);
        return;
    }
    job_free(j);
    t->busy = false;
    start_next_job(t);
}

static void job_done(void *arg)
{
    struct job *j = arg;
    sk_tier *t = j->t;
    count_puts(t, &j->objs);
    if (t->stopping) {
        /* Objects put meanwhile stay unregistered: the data is still in the
         * WAL, the next start uploads it again and the GC takes these. */
        job_free(j);
        t->busy = false;
        return;
    }
    switch (j->kind) {
    case JOB_UPLOAD:
        upload_done(j);
        return;
    case JOB_COMPACT:
        compact_done(j);
        return;
    case JOB_SNAPSHOT:
        if (j->err == 0 && j->snap_lsn > t->snapshot_lsn) {
            t->snapshot_lsn = j->snap_lsn;
            t->st.snapshots++;
            /* The WAL may shrink now. */
            sk_node_retention(t->n);
        }
        /* Registrations the view had not applied yet want the next. */
        if (j->err == 0 && t->reg_hi > t->snapshot_lsn) {
            t->snapshot_due = true;
            t->snap_after = t->reg_hi;
        } else if (j->err != 0) {
            retry_failed(&t->snap_retry);
            SK_WARN("tier", "view snapshot failed: %s; retrying in %" PRId64 " ms",
                    sk_err_name(j->err), t->snap_retry.ms);
            t->snapshot_due = true;
        }
        if (j->err == 0)
            t->snap_retry = (struct retry){0};
        break;
    case JOB_LIST:
        if (j->err == 0) {
            listed(j);
            /* Compaction works on the same listing. */
            j->kind = JOB_COMPACT;
            if (sk_workq_submit(t->q, compact_work, job_done, j) == 0)
                return;
        }
        break;
    case JOB_ORPHANS:
        t->st.orphans_deleted += j->deleted;
        objreg_keys_free(&t->orphans);
        t->orphans = j->cands;
        j->cands = (objreg_keys){0};
        break;
    }
    job_free(j);
    t->busy = false;
    start_next_job(t);
}

/* ---- scheduling ---- */

/* Where an upload of this node's WAL stops: what is durable and what the
 * view has applied. Adopted batches are read from the view: an ADOPT record
 * below this end has put its partition's batches there, so they go into
 * objects before (or with) the partition's newer batches, never after.
 * (upload_wanted also waits for the view to apply the last registration
 * of adopted batches, which takes them out of the view: read again, they
 * would go up a second time with newer batches, over a hole. A registration
 * of none needs no wait: the next upload starts while the view applies it,
 * and the object store is not left idle meanwhile.) */
static wal_lsn upload_end(const sk_tier *t)
{
    wal_lsn durable = wal_durable_lsn(t->n->wal);
    return t->n->store_applied < durable ? t->n->store_applied : durable;
}

static bool upload_wanted(sk_tier *t, bool by_time)
{
    if (t->n->store_applied < t->foreign_reg || retry_waiting(&t->up_retry))
        return false;
    /* Adopted batches keep another log's WAL alive: upload them soon. */
    if (t->foreign && sk_mono_ms() - t->last_upload_ms >= FOREIGN_UPLOAD_MS)
        return true;
    wal_lsn end = upload_end(t);
    if (end <= t->uploaded)
        return false;
    if (end - t->uploaded >= sk_tier_upload_trigger(t->n->cfg))
        return true;
    return by_time &&
           sk_mono_ms() - t->last_upload_ms >= t->n->cfg->s3_upload_interval_ms;
}

uint64_t sk_tier_upload_trigger(const sk_config *cfg)
{
    uint64_t max = (uint64_t)cfg->s3_upload_threshold, v = (uint64_t)cfg->wal_cache_bytes / 4;
    if (v < SK_UPLOAD_TRIGGER_MIN)
        v = SK_UPLOAD_TRIGGER_MIN;
    return v < max ? v : max;
}

static struct job *upload_job(sk_tier *t)
{
    sk_node *n = t->n;
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->t = t;
    j->kind = JOB_UPLOAD;
    j->started_ms = sk_mono_ms();
    j->from = t->uploaded;
    j->to = upload_end(t);
    /* No more than the size that starts an upload: an upload that fell
     * behind then still takes its batches in pieces the cache can hold,
     * and its memory (held batches, copies) stays bounded by that size. */
    j->limit = sk_tier_upload_trigger(n->cfg);
    if (wal_segments_snapshot(n->wal, &j->segs, &j->nsegs) != 0) {
        free(j);
        return NULL;
    }
    /* The first retained segment may start above what was uploaded when
     * there was nothing to upload in between. */
    if (j->nsegs && j->from < j->segs[0])
        j->from = j->segs[0];
    size_t cap = 0;
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *tp = v;
        for (int32_t i = 0; i < tp->nparts; i++) {
            /* A partition handed over leaves its batches to its adopter,
             * which uploads them; one not adopted yet has none here. */
            if (tp->parts[i]->own == SK_OWN_NONE)
                continue;
            if (j->nmap == cap) {
                cap = cap ? cap * 2 : 64;
                struct smap *nm = realloc(j->map, cap * sizeof *nm);
                if (!nm) {
                    job_free(j);
                    return NULL;
                }
                j->map = nm;
            }
            j->map[j->nmap++] = (struct smap){tp->id, i, tp->parts[i]->stream};
        }
    }
    if (j->nmap > 1) /* no partitions: j->map is NULL, which qsort may not get */
        qsort(j->map, j->nmap, sizeof *j->map, smap_cmp);
    if (sk_upcache_collect(n, j->from, j->to, j->limit, &j->cached) != 0)
        j->cached = (sk_upcache){0}; /* then everything comes from the WAL */
    return j;
}

/* A view snapshot is taken after registrations, once the view has applied
 * them, and at most every s3.view.snapshot.interval.ms: each is a PUT, and
 * the WAL only needs one from time to time to be trimmed. */
static bool snapshot_ready(const sk_tier *t)
{
    const sk_node *n = t->n;
    if (!t->snapshot_due || n->store_applied < t->snap_after ||
        retry_waiting(&t->snap_retry))
        return false;
    /* A WAL filling up needs the trim that only a snapshot allows: no
     * waiting for the interval then. */
    uint64_t retained = wal_end_lsn(n->wal) - wal_start_lsn(n->wal);
    return retained > (uint64_t)n->cfg->wal_max_retained_bytes / 4 ||
           sk_mono_ms() - t->last_snapshot_ms >= n->cfg->s3_snapshot_interval_ms;
}

static void clean_candidates(sk_tier *t, struct job *j);

static struct job *new_job(sk_tier *t, enum job_kind kind)
{
    struct job *j = calloc(1, sizeof *j);
    if (j) {
        j->t = t;
        j->kind = kind;
    }
    return j;
}

/* Runs j on the tier thread; false (j freed) when it cannot. */
static bool submit_job(sk_tier *t, struct job *j, void (*work)(void *))
{
    t->busy = true;
    if (sk_workq_submit(t->q, work, job_done, j) == 0)
        return true;
    t->busy = false;
    job_free(j);
    return false;
}

/* A compaction pass (the registry listing it and the GC work on) or an
 * orphan GC whose timer fired: false when none was due or it could not
 * start. */
static bool start_due_pass(sk_tier *t)
{
    struct job *j = NULL;
    if (t->list_due) {
        t->list_due = false;
        if ((j = new_job(t, JOB_LIST)) != NULL) {
            clean_candidates(t, j);
            return submit_job(t, j, list_work);
        }
    }
    if (t->orphans_due) {
        t->orphans_due = false;
        if ((j = new_job(t, JOB_ORPHANS)) != NULL)
            return submit_job(t, j, orphans_work);
    }
    return false;
}

/* The next job when the last is done. A compaction pass or an orphan GC
 * whose timer fired meanwhile goes first: uploads and snapshots that
 * follow each other at once under a backlog would otherwise keep them
 * waiting as long as the backlog lasts. */
static void start_next_job(sk_tier *t)
{
    if (t->busy || t->stopping || start_due_pass(t) || !t->n->wal)
        return;
    struct job *j = NULL;
    void (*work)(void *) = NULL;
    /* Uploads and ready snapshots take turns: behind uploads that never
     * catch up (the WAL filling), a snapshot would wait for ever, and the
     * WAL, trimmed only below a snapshot, would fill up to its limit; a
     * snapshot failing again and again must not keep uploads waiting. */
    bool up = upload_wanted(t, true);
    if (snapshot_ready(t) && (!up || t->upload_last)) {
        t->upload_last = false;
        t->snapshot_due = false;
        t->last_snapshot_ms = sk_mono_ms();
        j = new_job(t, JOB_SNAPSHOT);
        work = snapshot_work;
    } else if (up) {
        t->upload_last = true;
        j = upload_job(t);
        work = upload_work;
    }
    if (j)
        submit_job(t, j, work);
}

void sk_tier_kick(sk_tier *t)
{
    if (t && !t->busy && (upload_wanted(t, false) ||
                          snapshot_ready(t)))
        start_next_job(t);
}

double sk_tier_upload_rate(const sk_tier *t)
{
    return t->up_retry.ms != 0 ? 0.0 : t->upload_bps;
}

void sk_tier_adopted(sk_tier *t)
{
    t->foreign = true;
    t->foreign_kicked = true;
    sk_tier_kick(t);
}

void sk_tier_upload_now(sk_tier *t)
{
    t->last_upload_ms = 0;
    start_next_job(t);
}

static void upload_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_next_job(arg);
}

static void add_candidate(sk_tier *t, struct job *j, const sk_topic *tp, const sk_part *p)
{
    int na = sk_txidx_aborted(&p->txidx, 0, INT64_MAX, NULL, 0);
    sk_txidx_ent *ab = na > 0 ? calloc((size_t)na, sizeof *ab) : NULL;
    if (na > 0 && !ab)
        return; /* not this time */
    if (ab)
        na = sk_txidx_aborted(&p->txidx, 0, INT64_MAX, ab, na);
    sk_clean_cand *c = &j->clean[j->nclean++];
    const struct clean_state *cs = sk_map_get(t->cleaned, &p->stream, sizeof p->stream);
    *c = (sk_clean_cand){p->stream,
                         sk_txidx_lso(&p->txidx, p->hw),
                         ab,
                         ab ? na : 0,
                         cs ? cs->clean_end : 0,
                         cs ? cs->horizon_ms : -1,
                         tp->conf.delete_retention_ms,
                         tp->conf.min_compaction_lag_ms,
                         tp->conf.max_compaction_lag_ms,
                         tp->conf.min_dirty_ratio};
}

/* The partitions of keyed topics this node is main of, at most every
 * log.cleaner.backoff.ms. */
static void clean_candidates(sk_tier *t, struct job *j)
{
    const sk_config *cfg = t->n->cfg;
    if (!cfg->log_cleaner_enable || !t->cleaned ||
        sk_mono_ms() - t->last_clean_ms < cfg->log_cleaner_backoff_ms)
        return;
    size_t it = 0, cap = 0;
    void *v;
    while (sk_map_next(t->n->topics_by_id, &it, NULL, NULL, &v)) {
        const sk_topic *tp = v;
        if (!(tp->conf.policy & SK_POLICY_COMPACT))
            continue;
        for (int32_t i = 0; i < tp->nparts; i++) {
            if (tp->parts[i]->own != SK_OWN_ACTIVE)
                continue;
            if (j->nclean == cap) {
                cap = cap ? cap * 2 : 16;
                sk_clean_cand *nc = realloc(j->clean, cap * sizeof *nc);
                if (!nc)
                    return;
                j->clean = nc;
            }
            add_candidate(t, j, tp, tp->parts[i]);
        }
    }
}

/* The timers' passes wait for the job running, if any (start_next_job). */
static void bg_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_tier *t = arg;
    t->list_due = true;
    start_next_job(t);
}

static void orphan_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_tier *t = arg;
    t->orphans_due = true;
    start_next_job(t);
}

/* ---- reads ---- */

struct rd {
    sk_tier *t;
    char key[SK_OBJ_KEY_MAX];
    uint64_t obj_size;
    uint64_t stream;
    int64_t offset;
    size_t max_bytes;
    sk_tier_ref_cb cb;
    void *arg;
    objindex_ref *ref;
    blockcache_block **blocks;
    size_t nblocks;
    bool near_end; /* the read-ahead window reaches the stream's last block */
    bool prefetch; /* sk_tier_prefetch: counted apart from reads */
};

void sk_tier_result_free(sk_tier_result *res)
{
    if (!res)
        return;
    for (int i = 0; i < res->nheld; i++)
        sk_ref_put(res->held[i]);
    free(res);
}

/* Room for nseg pieces and nheld blocks, in one allocation. */
static sk_tier_result *result_new(size_t nseg, size_t nheld)
{
    sk_tier_result *res = calloc(1, sizeof *res + nseg * (sizeof(kc_bytes) + sizeof(sk_ref *)) +
                                        nheld * sizeof(sk_ref *));
    if (!res)
        return NULL;
    res->seg = (kc_bytes *)(res + 1);
    res->ref = (sk_ref **)(res->seg + nseg);
    res->held = res->ref + nseg;
    res->first = res->end = -1;
    return res;
}

/* The pins go here: what the caller keeps of the blocks, res holds. */
static void rd_finish(struct rd *r, int err, sk_tier_result *res)
{
    sk_tier *t = r->t;
    for (size_t i = 0; i < r->nblocks; i++)
        if (r->blocks[i])
            blockcache_release(t->bc, r->blocks[i]);
    free(r->blocks);
    if (r->ref)
        objindex_release(t->ix, r->ref);
    if (err == 0 && !r->prefetch)
        t->st.read_bytes += res->len;
    if (err == 0)
        res->near_end = r->near_end;
    r->cb(r->arg, err, res);
    free(r);
}

/* Adds block b's batches from r->offset on to res, within r->max_bytes;
 * false once the limit is reached. */
static bool rd_take(struct rd *r, blockcache_block *b, sk_tier_result *res)
{
    size_t l;
    const uint8_t *d = blockcache_data(b, &l);
    sk_ref *hold = NULL;
    objfmt_iter it;
    objfmt_iter_init_verified(&it, d, l);
    objfmt_batch bt;
    const uint8_t *payload;
    while (objfmt_iter_next(&it, &bt, &payload) == 1) {
        if ((int64_t)bt.last_offset < r->offset)
            continue;
        if (res->len > 0 && res->len + bt.size > r->max_bytes)
            return false;
        if (!hold)
            hold = res->held[res->nheld++] = blockcache_hold(b);
        res->seg[res->n] = (kc_bytes){payload, (int32_t)bt.size};
        res->ref[res->n++] = bt.size >= SK_TIER_REF_MIN ? hold : NULL;
        res->len += bt.size;
        if (res->first < 0)
            res->first = (int64_t)bt.base_offset;
        res->end = (int64_t)bt.last_offset + 1;
        r->t->st.read_batches += !r->prefetch;
    }
    return true;
}

/* Whole batches from the one holding `offset` on, pointing into the blocks. */
static void rd_blocks(void *arg, int err)
{
    struct rd *r = arg;
    if (err != 0) {
        free(r->blocks);
        r->blocks = NULL;
        r->nblocks = 0;
        rd_finish(r, err, NULL);
        return;
    }
    size_t nbatches = 0;
    for (size_t i = 0; i < r->nblocks; i++)
        nbatches += blockcache_entry(r->blocks[i])->batch_count;
    sk_tier_result *res = result_new(nbatches, r->nblocks);
    if (!res) {
        rd_finish(r, SK_ERR_NOMEM, NULL);
        return;
    }
    for (size_t i = 0; i < r->nblocks && rd_take(r, r->blocks[i], res); i++)
        ;
    rd_finish(r, 0, res);
}

static void rd_index(void *arg, int err, objindex_ref *ref)
{
    struct rd *r = arg;
    sk_tier *t = r->t;
    if (err != 0) {
        rd_finish(r, err, NULL);
        return;
    }
    r->ref = ref;
    const objfmt_reader *rdr = objindex_reader(ref);
    size_t block;
    if (objfmt_reader_find(rdr, r->stream, (uint64_t)r->offset, &block) != 0) {
        rd_finish(r, SK_ERR_NOENT, NULL);
        return;
    }
    size_t nb;
    const objfmt_entry *bl = objfmt_reader_blocks(rdr, &nb);
    size_t want = 0;
    uint64_t bytes = 0;
    for (size_t i = block; i < nb && bl[i].stream_id == r->stream; i++) {
        want++;
        bytes += bl[i].size;
        if (bytes >= r->max_bytes)
            break;
    }
    size_t left = 0;
    for (size_t i = block + want; i < nb && bl[i].stream_id == r->stream && left <= t->readahead;
         i++)
        left++;
    r->near_end = left <= t->readahead;
    r->blocks = calloc(want ? want : 1, sizeof *r->blocks);
    r->nblocks = want;
    if (!r->blocks) {
        r->nblocks = 0;
        rd_finish(r, SK_ERR_NOMEM, NULL);
        return;
    }
    int rc = blockcache_read(t->bc, r->key, bl, nb, block, want, t->readahead, r->blocks,
                             rd_blocks, r);
    if (rc == BLOCKCACHE_HIT)
        rd_blocks(r, 0);
    else if (rc < 0)
        rd_blocks(r, rc);
}

static void read_ref(sk_tier *t, const sk_obj_loc *loc, uint64_t stream, int64_t offset,
                     size_t max_bytes, bool prefetch, sk_tier_ref_cb cb, void *arg)
{
    struct rd *r = calloc(1, sizeof *r);
    if (!r) {
        cb(arg, SK_ERR_NOMEM, NULL);
        return;
    }
    r->prefetch = prefetch;
    r->t = t;
    snprintf(r->key, sizeof r->key, "%s", loc->key);
    r->obj_size = loc->obj_size;
    r->stream = stream;
    r->offset = offset;
    r->max_bytes = max_bytes ? max_bytes : 1;
    r->cb = cb;
    r->arg = arg;
    objindex_ref *ref;
    int rc = objindex_get(t->ix, r->key, r->obj_size, &ref, rd_index, r);
    if (rc == OBJINDEX_HIT)
        rd_index(r, 0, ref);
    else if (rc < 0)
        rd_index(r, rc, NULL);
}

void sk_tier_read_ref(sk_tier *t, const sk_obj_loc *loc, uint64_t stream, int64_t offset,
                      size_t max_bytes, sk_tier_ref_cb cb, void *arg)
{
    read_ref(t, loc, stream, offset, max_bytes, false, cb, arg);
}

/* The first batch is let go at once: what stays is the cached index and
 * blocks, and the GETs of the read-ahead window. */
static void prefetched(void *arg, int err, sk_tier_result *res)
{
    sk_tier *t = arg;
    t->st.prefetch_errors += err != 0;
    sk_tier_result_free(res);
}

void sk_tier_prefetch(sk_tier *t, const sk_obj_loc *loc, uint64_t stream)
{
    t->st.prefetches++;
    read_ref(t, loc, stream, loc->start, 1, true, prefetched, t);
}

/* ---- life ---- */

sk_tier *sk_tier_new(sk_node *n, char *why, size_t whylen)
{
    sk_tier *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    t->n = n;
    objstore_opts o;
    opts_from_config(n->cfg, &o);
    char inner[256] = "";
    t->os = objstore_open(n->base, n->cfg->objects_url, &o, inner, sizeof inner);
    if (!t->os) {
        snprintf(why, whylen, "property objects.url: %s", inner);
        free(t);
        return NULL;
    }
    objindex_opts io = {0};
    t->ix = objindex_new(t->os, &io);
    blockcache_opts bo = {0};
    bo.capacity = (size_t)n->cfg->s3_block_cache_bytes;
    t->readahead = (size_t)(n->cfg->s3_readahead_bytes / n->cfg->s3_block_bytes);
    t->bc = blockcache_new(t->os, &bo);
    t->q = sk_workq_new(n->base, "skiff-tier", 1);
    t->upload_ev = event_new(n->base, -1, EV_PERSIST, upload_cb, t);
    t->bg_ev = event_new(n->base, -1, EV_PERSIST, bg_cb, t);
    t->orphan_ev = event_new(n->base, -1, EV_PERSIST, orphan_cb, t);
    t->cleaned = sk_map_new();
    if (!t->ix || !t->bc || !t->q || !t->upload_ev || !t->bg_ev || !t->orphan_ev || !t->cleaned) {
        snprintf(why, whylen, "out of memory");
        sk_tier_destroy(t);
        return NULL;
    }
    t->uploaded = sk_store_uploaded(n->store);
    /* The newest snapshot in the store, to know how far the WAL may be
     * trimmed; without one, take one as soon as there is something in
     * objects. */
    char prefix[64];
    snapshot_prefix(n, prefix, sizeof prefix);
    objstore_list_page page;
    if (objstore_list_sync(t->os, prefix, NULL, 1000, &page) == 0) {
        for (size_t i = 0; i < page.n; i++) {
            const char *base = strrchr(page.entries[i].key, '/');
            uint64_t lsn = base ? strtoull(base + 1, NULL, 10) : 0;
            if (lsn > t->snapshot_lsn)
                t->snapshot_lsn = lsn;
        }
        objstore_list_page_free(&page);
    }
    t->snapshot_due = t->uploaded > t->snapshot_lsn;
    t->snap_after = t->uploaded;
    t->last_upload_ms = sk_mono_ms();
    return t;
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

void sk_tier_start(sk_tier *t)
{
    const sk_config *cfg = t->n->cfg;
    /* The upload timer ticks faster than the interval so that a threshold
     * crossed between appends is noticed soon. */
    int64_t up = cfg->s3_upload_interval_ms < 1000 ? cfg->s3_upload_interval_ms : 1000;
    struct timeval tv = ms_tv(up);
    event_add(t->upload_ev, &tv);
    tv = ms_tv(cfg->s3_compaction_interval_ms);
    event_add(t->bg_ev, &tv);
    tv = ms_tv(cfg->s3_orphan_interval_ms);
    event_add(t->orphan_ev, &tv);
}

void sk_tier_stop(sk_tier *t)
{
    if (!t)
        return;
    t->stopping = true;
    event_del(t->upload_ev);
    event_del(t->bg_ev);
    event_del(t->orphan_ev);
}

void sk_tier_drain(sk_tier *t)
{
    if (!t)
        return;
    t->stopping = true;
    /* Jobs read the WAL and the view: they finish before those close. */
    if (t->q)
        sk_workq_destroy(t->q);
    t->q = NULL;
}

void sk_tier_destroy(sk_tier *t)
{
    if (!t)
        return;
    sk_tier_drain(t);
    if (t->upload_ev)
        event_free(t->upload_ev);
    if (t->bg_ev)
        event_free(t->bg_ev);
    if (t->orphan_ev)
        event_free(t->orphan_ev);
    if (t->bc)
        blockcache_destroy(t->bc);
    if (t->ix)
        objindex_destroy(t->ix);
    if (t->os)
        objstore_destroy(t->os);
    objup_set_destroy(t->set);
    wal_scan_free(&t->scan);
    objreg_keys_free(&t->orphans);
    if (t->cleaned) {
        size_t it = 0;
        void *v;
        while (sk_map_next(t->cleaned, &it, NULL, NULL, &v))
            free(v);
        sk_map_destroy(t->cleaned);
    }
    free(t);
}

wal_lsn sk_tier_trim_bound(const sk_tier *t)
{
    return t->uploaded < t->snapshot_lsn ? t->uploaded : t->snapshot_lsn;
}

void sk_tier_stats_get(const sk_tier *t, sk_tier_stats *out)
{
    *out = t->st;
    out->uploaded = t->uploaded;
    out->snapshot_lsn = t->snapshot_lsn;
}

void sk_tier_objstore_stats(const sk_tier *t, objstore_stats *out)
{
    objstore_stats_get(t->os, out);
}

void sk_tier_blockcache_stats(const sk_tier *t, blockcache_stats *out)
{
    blockcache_stats_get(t->bc, out);
}
