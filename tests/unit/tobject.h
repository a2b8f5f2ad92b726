/*
 * tobject: an object in memory for the read path's tests (blockcache,
 * objindex, responses that point into blocks).
 *
 * What: tobject_finish finishes a writer into one buffer, as the object
 * store would hold it, and opens a reader over its index. Thread: any.
 * Ownership: *bytes (malloc'd) and *r go to the caller; the writer is
 * destroyed. Errors: a failed step fails the test.
 */
#ifndef TOBJECT_H
#define TOBJECT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "objfmt.h"

static inline void tobject_finish(objfmt_writer *w, uint8_t **bytes, uint64_t *size,
                                  objfmt_reader **r)
{
    const struct iovec *iov;
    int cnt;
    assert_int_equal(objfmt_writer_finish(w, &iov, &cnt, size), 0);
    *bytes = malloc(*size);
    assert_non_null(*bytes);
    uint64_t at = 0;
    for (int i = 0; i < cnt; i++) {
        memcpy(*bytes + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    objfmt_writer_destroy(w);
    uint64_t no;
    size_t nl;
    assert_int_equal(objfmt_reader_from_tail(*bytes, (size_t)*size, *size, r, &no, &nl), 0);
}

#endif
