/*
 * relayfloor: the CPU a process spends per GB it passes between TCP sockets
 * on this machine, the floor under a broker's CPU per GB read.
 *
 * A catch-up from objects makes the broker receive every byte from the
 * object store and send it to the consumer; Kafka's catch-up sends its page
 * cache with sendfile and receives nothing. Each mode times one process, the
 * middle of a chain of three on loopback TCP (the source and the sink are
 * child processes, not counted), and reports its user + system CPU per GB:
 *
 *   relay     recv from the source into a buffer, send that buffer to the
 *             sink: the least a broker that reads from an object store does;
 *   sendfile  sendfile from a file in the page cache to the sink: Kafka's
 *             catch-up;
 *   recv      recv from the source and drop it: the receiving half alone;
 *   send      send one buffer to the sink again and again: the sending half
 *             alone.
 *
 * On loopback the kernel delivers a segment to the receiving socket in the
 * sender's context, so the middle process pays for delivering what it sends
 * (as the broker and Kafka do for their consumers) and the source pays for
 * delivering to it (as the object store does).
 *
 *   relayfloor [--mode relay|sendfile|recv|send|all] [--bytes N] [--buffer N]
 *              [--file PATH]
 *
 * --bytes: per mode (default 2 GiB); --buffer: the size of each recv, send
 * and sendfile (default 256 KiB); --file: the file sendfile sends (default a
 * 64 MiB file it writes in /dev/shm and reads once, so that it is cached),
 * sent from its start again whenever it ends. Prints one JSON object.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t g_buf = 256u << 10;

static void die(const char *what)
{
    fprintf(stderr, "relayfloor: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* A listening socket on 127.0.0.1, an ephemeral port. */
static int listen_any(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        die("listen");
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a))
        die("connect");
    return fd;
}

static int accept_one(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        die("accept");
    close(lfd);
    return fd;
}

/* Child: sends `bytes` from one buffer to port, then exits. */
static pid_t spawn_source(uint16_t port, uint64_t bytes)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = connect_to(port);
    char *b = malloc(g_buf);
    if (!b)
        die("malloc");
    memset(b, 'x', g_buf);
    for (uint64_t left = bytes; left;) {
        ssize_t n = send(fd, b, left < g_buf ? left : g_buf, 0);
        if (n <= 0)
            die("source send");
        left -= (uint64_t)n;
    }
    _exit(0);
}

/* Child: accepts one connection and reads it to its end. */
static pid_t spawn_sink(int lfd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = accept_one(lfd);
    char *b = malloc(g_buf);
    if (!b)
        die("malloc");
    while (recv(fd, b, g_buf, 0) > 0)
        ;
    _exit(0);
}

static void send_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = send(fd, b, n, 0);
        if (w <= 0)
            die("send");
        b += w;
        n -= (size_t)w;
    }
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The middle process's part of one mode; returns the bytes it passed. */
static uint64_t middle(const char *mode, int in, int out, int file, off_t fsize, uint64_t bytes,
                       char *b)
{
    uint64_t done = 0;
    off_t off = 0;
    while (done < bytes) {
        size_t want = bytes - done < g_buf ? (size_t)(bytes - done) : g_buf;
        ssize_t n;
        if (!strcmp(mode, "sendfile")) {
            if (off >= fsize)
                off = 0;
            n = sendfile(out, file, &off, want);
        } else if (!strcmp(mode, "send")) {
            send_all(out, b, want);
            n = (ssize_t)want;
        } else {
            n = recv(in, b, want, 0);
            if (n > 0 && out >= 0)
                send_all(out, b, (size_t)n);
        }
        if (n <= 0)
            die(mode);
        done += (uint64_t)n;
    }
    return done;
}

static int cached_file(const char *path, off_t *size)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    *size = lseek(fd, 0, SEEK_END);
    char *b = malloc(1u << 20);
    if (!b)
        die("malloc");
    for (off_t o = 0; o < *size;) { /* read once: in the page cache from now on */
        ssize_t n = pread(fd, b, 1u << 20, o);
        if (n <= 0)
            die("read");
        o += n;
    }
    free(b);
    return fd;
}

static const char *make_file(void)
{
    static char path[] = "/dev/shm/relayfloor.XXXXXX";
    int fd = mkstemp(path);
    char *b = malloc(1u << 20);
    if (fd < 0 || !b)
        die("mkstemp");
    memset(b, 'y', 1u << 20);
    for (int i = 0; i < 64; i++)
        if (write(fd, b, 1u << 20) != 1 << 20)
            die("write");
    free(b);
    close(fd);
    return path;
}

static void run_mode(const char *mode, uint64_t bytes, const char *file, bool first)
{
    bool has_in = strcmp(mode, "sendfile") && strcmp(mode, "send");
    bool has_out = strcmp(mode, "recv") != 0;
    int in = -1, out = -1, fd = -1;
    off_t fsize = 0;
    pid_t src = 0, snk = 0;
    if (has_out) {
        uint16_t port;
        int lfd = listen_any(&port);
        snk = spawn_sink(lfd);
        close(lfd);
        out = connect_to(port);
    }
    if (has_in) {
        uint16_t port;
        int lfd = listen_any(&port);
        src = spawn_source(port, bytes);
        in = accept_one(lfd);
    }
    if (!strcmp(mode, "sendfile"))
        fd = cached_file(file, &fsize);
    char *b = malloc(g_buf);
    if (!b)
        die("malloc");
    memset(b, 'z', g_buf);
    double c0 = cpu_seconds(), t0 = now();
    uint64_t done = middle(mode, in, out, fd, fsize, bytes, b);
    double cpu = cpu_seconds() - c0, wall = now() - t0;
    if (out >= 0)
        close(out);
    if (in >= 0)
        close(in);
    if (fd >= 0)
        close(fd);
    free(b);
    if (snk)
        waitpid(snk, NULL, 0);
    if (src)
        waitpid(src, NULL, 0);
    printf("%s\"%s\": {\"bytes\": %llu, \"cpu_s_per_gb\": %.4f, \"mb_s\": %.1f}", first ? "" : ", ",
           mode, (unsigned long long)done, cpu / (done / 1e9), done / 1e6 / wall);
}

int main(int argc, char **argv)
{
    const char *mode = "all", *file = NULL;
    uint64_t bytes = 2ull << 30;
    static const struct option opts[] = {{"mode", required_argument, 0, 'm'},
                                         {"bytes", required_argument, 0, 'n'},
                                         {"buffer", required_argument, 0, 'b'},
                                         {"file", required_argument, 0, 'f'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'm')
            mode = optarg;
        else if (c == 'n')
            bytes = strtoull(optarg, NULL, 0);
        else if (c == 'b')
            g_buf = strtoull(optarg, NULL, 0);
        else if (c == 'f')
            file = optarg;
        else
            return 2;
    }
    if (!bytes || !g_buf || g_buf > (64u << 20)) {
        fprintf(stderr, "relayfloor: --bytes and --buffer must be positive, --buffer <= 64 MiB\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    static const char *const all[] = {"relay", "sendfile", "recv", "send"};
    bool made = false;
    if (!file) {
        file = make_file();
        made = true;
    }
    printf("{\"buffer\": %zu, ", g_buf);
    bool first = true;
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(mode, "all") || !strcmp(mode, all[i])) {
            run_mode(all[i], bytes, file, first);
            first = false;
        }
    printf("}\n");
    if (made)
        unlink(file);
    if (first) {
        fprintf(stderr, "relayfloor: unknown --mode %s\n", mode);
        return 2;
    }
    return 0;
}
