/*
 * skiffd: command line, configuration, and the node's life.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "node.h"
#include "objstore.h"
#include "status.h"
#include "wal_storage.h"
#include "sk_log.h"

#define SKIFF_VERSION "0.1.0"

/* The cluster counted this incarnation dead: start again as a new one, with
 * the same arguments and process id, once everything of the old one is
 * closed (descriptors a library left open are closed by the exec). */
static void rejoin(char **argv)
{
    SK_INFO("main", "starting again as a new incarnation");
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int dfd = dirfd(d);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            int fd = atoi(e->d_name);
            if (fd > 2 && fd != dfd)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        closedir(d);
    }
    execv("/proc/self/exe", argv);
    SK_ERROR("main", "cannot start again: %s", strerror(errno));
}

static int usage_error(const char *argv0, const char *msg)
{
    fprintf(stderr,
            "skiffd: %s\nusage: %s [-c FILE] [--override name=value]... [--check-config] "
            "(--help lists properties)\n       skiffd status --bootstrap host:port\n",
            msg, argv0);
    return 2;
}

/* --check-config: what start-up would refuse before touching anything, said
 * without starting: the properties were parsed and cross-checked already,
 * the URLs are parsed here as the stores would parse them. */
static int check_config(const sk_config *cfg)
{
    char why[1024];
    if (objstore_check_url(cfg->objects_url, why, sizeof why) != 0) {
        fprintf(stderr, "skiffd: property objects.url: %s\n", why);
        return 2;
    }
    if (wal_storage_check_url(cfg->wal_url, why, sizeof why) != 0) {
        fprintf(stderr, "skiffd: property wal.url: %s\n", why);
        return 2;
    }
    const sk_listener *inter = sk_config_inter_listener(cfg);
    printf("configuration OK: node.id=%d broker.rack=%s %s\n  wal.url=%s\n  objects.url=%s\n",
           cfg->node_id, *cfg->broker_rack ? cfg->broker_rack : "(none)",
           sk_config_cluster(cfg) ? "cluster member" : "single node", cfg->wal_url,
           cfg->objects_url);
    for (int i = 0; i < cfg->nadvertised; i++)
        printf("  advertised %s://%s:%d (%s)%s\n", cfg->advertised[i].name,
               cfg->advertised[i].host, cfg->advertised[i].port,
               sk_secproto_name(cfg->advertised[i].protocol),
               &cfg->advertised[i] == inter ? " (inter-broker)" : "");
    return 0;
}

int main(int argc, char **argv)
{
    sk_config cfg;
    sk_config_init(&cfg);
    const char *file = NULL;
    bool check_only = false;
    char why[1024];
    if (argc > 1 && strcmp(argv[1], "status") == 0)
        return sk_status_main(argc - 1, argv + 1);

    /* The file first, then overrides in order, whatever their position. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            sk_config_print_help(argv[0]);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("skiffd %s\n", SKIFF_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--gen-config-doc") == 0) {
            sk_config_print_markdown();
            return 0;
        }
        if (strcmp(argv[i], "--check-config") == 0) {
            check_only = true;
        } else if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) {
            if (++i == argc)
                return usage_error(argv[0], "-c needs a file");
            file = argv[i];
        } else if (strcmp(argv[i], "--override") == 0) {
            if (++i == argc)
                return usage_error(argv[0], "--override needs name=value");
        } else if (strncmp(argv[i], "--override=", 11) != 0) {
            snprintf(why, sizeof why, "unknown argument '%s'", argv[i]);
            return usage_error(argv[0], why);
        }
    }
    if (file && sk_config_load_file(&cfg, file, why, sizeof why) != 0) {
        fprintf(stderr, "skiffd: %s\n", why);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *kv = NULL;
        if (strcmp(argv[i], "--override") == 0)
            kv = argv[++i];
        else if (strncmp(argv[i], "--override=", 11) == 0)
            kv = argv[i] + 11;
        else if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0)
            i++;
        if (!kv)
            continue;
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv) {
            snprintf(why, sizeof why, "--override '%s' is not name=value", kv);
            return usage_error(argv[0], why);
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
        if (sk_config_set(&cfg, name, eq + 1, why, sizeof why) != 0) {
            fprintf(stderr, "skiffd: %s\n", why);
            return 2;
        }
    }
    if (sk_config_finish(&cfg, why, sizeof why) != 0) {
        fprintf(stderr, "skiffd: %s\n", why);
        return 2;
    }
    if (check_only) {
        int rc = check_config(&cfg);
        sk_config_free(&cfg);
        return rc;
    }
    sk_log_set_level(sk_log_parse_level(cfg.log_level));
    SK_INFO("main", "skiffd %s starting (node.id=%d, data.dir=%s)", SKIFF_VERSION, cfg.node_id,
            cfg.data_dir);

    sk_node *n = sk_node_new(&cfg, why, sizeof why);
    if (!n) {
        SK_ERROR("main", "cannot start: %s", why);
        fprintf(stderr, "skiffd: cannot start: %s\n", why);
        sk_config_free(&cfg);
        return 1;
    }
    int rc = sk_node_run(n);
    sk_node_destroy(n);
    sk_config_free(&cfg);
    if (rc == SK_EXIT_REJOIN)
        rejoin(argv);
    return rc;
}
