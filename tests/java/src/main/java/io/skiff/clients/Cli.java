package io.skiff.clients;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * Command-line options shared by the test programs, a watchdog so that no
 * program outlives its --timeout, and a minimal JSON writer for the lines the
 * Python tests parse. Options: -b bootstrap, -t topic(s), --prop k=v (any
 * client property, repeatable), --timeout seconds; program-specific ones are
 * read through {@link #get}.
 */
final class Cli {
    final Map<String, String> opts = new LinkedHashMap<>();
    final Properties props = new Properties();
    final List<String> positional = new ArrayList<>();

    Cli(String[] args) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--prop")) {
                String kv = need(args, ++i, a);
                int eq = kv.indexOf('=');
                if (eq <= 0) throw new IllegalArgumentException("--prop wants key=value, got " + kv);
                props.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
            } else if (a.startsWith("-")) {
                String key = a.replaceFirst("^-+", "");
                opts.merge(key, need(args, ++i, a), (x, y) -> x + "," + y);
            } else {
                positional.add(a);
            }
        }
    }

    private static String need(String[] args, int i, String opt) {
        if (i >= args.length) throw new IllegalArgumentException(opt + " needs a value");
        return args[i];
    }

    String get(String key, String dflt) {
        return opts.getOrDefault(key, dflt);
    }

    String require(String key) {
        String v = opts.get(key);
        if (v == null) throw new IllegalArgumentException("missing -" + key);
        return v;
    }

    int getInt(String key, int dflt) {
        return Integer.parseInt(get(key, Integer.toString(dflt)));
    }

    /** Kills the JVM after --timeout seconds, whatever a client call is blocked in. */
    void startWatchdog(String program) {
        final long seconds = Long.parseLong(get("timeout", "120"));
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(seconds * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            System.out.println(new Json().put("op", program).put("error", "watchdog")
                    .put("message", program + " still running after " + seconds + "s"));
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        t.setDaemon(true);
        t.start();
    }

    /** Deterministic record content, so that a consumer can check what it reads. */
    static String value(long idx, int size) {
        StringBuilder sb = new StringBuilder(size + 24);
        sb.append("v-").append(idx).append('-');
        long x = idx * 2654435761L + 17;
        while (sb.length() < size) {
            sb.append((char) ('a' + (int) ((x >>> 7) % 26)));
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return sb.toString();
    }

    /** One JSON object on one line; values are strings, numbers, booleans, lists, maps or Json. */
    static final class Json {
        private final StringBuilder sb = new StringBuilder("{");

        Json put(String k, Object v) {
            if (sb.length() > 1) sb.append(',');
            str(sb, k);
            sb.append(':');
            val(sb, v);
            return this;
        }

        @Override
        public String toString() {
            return sb + "}";
        }

        private static void val(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else if (v instanceof Json) {
                sb.append(v);
            } else if (v instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                    if (!first) sb.append(',');
                    first = false;
                    str(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    val(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof Iterable) {
                sb.append('[');
                boolean first = true;
                for (Object o : (Iterable<?>) v) {
                    if (!first) sb.append(',');
                    first = false;
                    val(sb, o);
                }
                sb.append(']');
            } else {
                str(sb, v.toString());
            }
        }

        private static void str(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    sb.append('\\').append(c);
                } else if (c < 0x20) {
                    sb.append(String.format("\\u%04x", (int) c));
                } else {
                    sb.append(c);
                }
            }
            sb.append('"');
        }
    }

    static String describe(Throwable t) {
        Throwable c = t;
        while ((c instanceof java.util.concurrent.ExecutionException
                || c instanceof java.util.concurrent.CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        return c.getClass().getSimpleName() + ": " + c.getMessage();
    }

    static String errorClass(Throwable t) {
        Throwable c = t;
        while ((c instanceof java.util.concurrent.ExecutionException
                || c instanceof java.util.concurrent.CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        return c.getClass().getSimpleName();
    }
}
