#include "sk_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int sk_log_level = SK_LOG_INFO;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void sk_log_set_level(int level)
{
    sk_log_level = level;
}

int sk_log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return SK_LOG_WARN;
    return -1;
}

void sk_log_write(int level, const char *module, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000,
                     level_names[level < 0 ? 0 : level > 3 ? 3 : level], module);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
