/*
 * Replays the fuzz corpus (every file in tests/fuzz/corpus) through the
 * function the libFuzzer target runs, so that every input that ever
 * mattered (seeds, captured client frames, past crashes) is checked by
 * `make test`, with or without sanitizers, and without clang.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../fuzz/fuzz_request.c"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static void test_replay_corpus(void **state)
{
    (void)state;
    const char *src = getenv("SKIFF_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus", src && *src ? src : ".");
    DIR *d = opendir(dir);
    if (!d) {
        print_message("no fuzz corpus at %s: nothing to replay\n", dir);
        return;
    }
    size_t n = 0, cap = 64;
    char **names = malloc(cap * sizeof *names);
    assert_non_null(names);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            names = realloc(names, (cap *= 2) * sizeof *names);
            assert_non_null(names);
        }
        names[n] = strdup(e->d_name);
        assert_non_null(names[n]);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);

    size_t failed = 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        uint8_t *buf = read_file(path, &len);
        assert_non_null(buf);
        /* An exact-size copy, so sanitizers see any overread. */
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        if (skiff_fuzz_request(exact, len) != 0) {
            print_error("corpus input %s breaks an invariant\n", names[i]);
            failed++;
        }
        bytes += len;
        free(exact);
        free(buf);
        free(names[i]);
    }
    free(names);
    if (n == 0)
        print_message("fuzz corpus %s is empty: nothing to replay\n", dir);
    else
        print_message("replayed %zu corpus inputs (%zu bytes)\n", n, bytes);
    assert_int_equal(failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
