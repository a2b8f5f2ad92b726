/*
 * sk_log: leveled logging to stderr, one line per call.
 *
 * Contract: any thread may log; each line is written with a single write(2)
 * so lines from different threads never interleave. The level is global and
 * set once at start-up (sk_log_set_level). Owns nothing.
 */
#ifndef SK_LOG_H
#define SK_LOG_H

enum { SK_LOG_ERROR = 0, SK_LOG_WARN = 1, SK_LOG_INFO = 2, SK_LOG_DEBUG = 3 };

extern int sk_log_level;

void sk_log_set_level(int level);
/* Parses "error", "warn", "info", "debug"; returns -1 when unknown. */
int sk_log_parse_level(const char *s);
void sk_log_write(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sk_log(level, module, ...)                                  \
    do {                                                            \
        if ((level) <= sk_log_level)                                \
            sk_log_write((level), (module), __VA_ARGS__);           \
    } while (0)
#define SK_ERROR(mod, ...) sk_log(SK_LOG_ERROR, mod, __VA_ARGS__)
#define SK_WARN(mod, ...)  sk_log(SK_LOG_WARN, mod, __VA_ARGS__)
#define SK_INFO(mod, ...)  sk_log(SK_LOG_INFO, mod, __VA_ARGS__)
#define SK_DEBUG(mod, ...) sk_log(SK_LOG_DEBUG, mod, __VA_ARGS__)

#endif
