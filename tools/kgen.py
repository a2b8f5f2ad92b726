#!/usr/bin/env python3
"""kgen: generates Skiff's message declarations from JSON message specs.

Two inputs, one format (Apache Kafka's message specs):

  --specs DIR   Kafka's own request/response/data schemas (the directory
                clients/src/main/resources/common/message of a Kafka
                checkout) -> proto/kmsg.h and proto/kmsg.c: C structs, API key
                enum, kc_struct descriptors and the kc_api table (kc_api_get).
  --rpc DIR     Skiff's internal RPCs (proto/rpc, API keys from 10000) ->
                proto/krpc.h and proto/krpc.c, the same kind of declarations
                with the prefix kr_ and their own table (krpc_api_get).

Both feed the one codec in proto/kc.c.

    python3 tools/kgen.py --specs DIR --out proto [--spec-version X.Y.Z]
    python3 tools/kgen.py --rpc proto/rpc --out proto

The output depends only on the specs and on the lists below, so running it
twice gives identical files; a file whose content would not change is not
rewritten (so the build's dependency checks see no change). Python 3
standard library only.
"""

import argparse
import hashlib
import json
import os
import re
import sys

# The APIs Skiff's codec knows, by key. Keep this the only list.
API_KEYS = [
    0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
    24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 42, 43, 44, 45,
    46, 47, 48, 49, 50, 51, 55, 60, 61, 65, 66, 68, 69, 75,
]

# Internal RPCs take API keys from here up: Kafka's own keys stay far below,
# and the broker never advertises a key in this range to clients.
RPC_KEY_MIN = 10000
RPC_KEY_MAX = 0x7FFF

# "data" schemas generated as standalone descriptors (consumer group member
# metadata, decoded for DescribeGroups and lag reporting).
DATA_SCHEMAS = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

VMAX = 0x7FFF

C_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do",
    "double", "else", "enum", "extern", "float", "for", "goto", "if",
    "inline", "int", "long", "register", "restrict", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "typedef", "union",
    "unsigned", "void", "volatile", "while", "bool", "true", "false",
}

PRIMS = {
    # JSON type: (kc_type, C type)
    "bool": ("KC_BOOL", "bool"),
    "int8": ("KC_INT8", "int8_t"),
    "int16": ("KC_INT16", "int16_t"),
    "uint16": ("KC_UINT16", "uint16_t"),
    "int32": ("KC_INT32", "int32_t"),
    "uint32": ("KC_UINT32", "uint32_t"),
    "int64": ("KC_INT64", "int64_t"),
    "float64": ("KC_FLOAT64", "double"),
    "uuid": ("KC_UUID", "kc_uuid"),
    "string": ("KC_STRING", "kc_str"),
    "bytes": ("KC_BYTES", "kc_bytes"),
    "records": ("KC_RECORDS", "kc_records"),
}

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


class SpecError(Exception):
    pass


def strip_comments(text):
    """Removes // comments, leaving // inside JSON strings alone."""
    out = []
    for line in text.splitlines():
        in_str = False
        esc = False
        cut = len(line)
        for i, ch in enumerate(line):
            if esc:
                esc = False
            elif ch == "\\":
                esc = in_str
            elif ch == '"':
                in_str = not in_str
            elif not in_str and line.startswith("//", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def parse_versions(s, what):
    """'N', 'N-M', 'N+', 'none' -> (lo, hi); (-1, -1) for none."""
    if s is None or s == "none":
        return (-1, -1)
    m = re.fullmatch(r"(\d+)\+", s)
    if m:
        return (int(m.group(1)), VMAX)
    m = re.fullmatch(r"(\d+)-(\d+)", s)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if hi < lo:
            raise SpecError("bad version range %r in %s" % (s, what))
        return (lo, hi)
    m = re.fullmatch(r"\d+", s)
    if m:
        return (int(s), int(s))
    raise SpecError("bad version range %r in %s" % (s, what))


def snake(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    if s in C_KEYWORDS:
        s += "_"
    return s


def upper_snake(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.upper()


def vstr(lo, hi):
    if lo < 0:
        return "none"
    if hi == VMAX:
        return "%d+" % lo
    if lo == hi:
        return "%d" % lo
    return "%d-%d" % (lo, hi)


def cver(v):
    return "KC_VMAX" if v == VMAX else str(v)


def c_int64(v):
    if v == -(1 << 63):
        return "INT64_MIN"
    return "INT64_C(%d)" % v


def c_string(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        else:
            for b in ch.encode("utf-8"):
                out.append("\\%03o" % b)
    out.append('"')
    return "".join(out)


class Field:
    pass


class Struct:
    """One C struct: a message, a nested struct or a common struct."""

    def __init__(self, cname, json_name):
        self.cname = cname
        self.json_name = json_name
        self.fields = []
        self.sig = None


class Message:
    def __init__(self, spec, prefix="kp_"):
        self.spec = spec
        self.prefix = prefix
        self.name = spec["name"]
        self.structs = []  # in dependency order (children first)
        self.by_name = {}
        self.common = {c["name"]: c for c in spec.get("commonStructs", [])}
        where = self.name
        self.valid = parse_versions(spec.get("validVersions"), where)
        self.flex = parse_versions(spec.get("flexibleVersions"), where)
        if self.flex[0] >= 0 and self.flex[1] != VMAX:
            raise SpecError("%s: flexibleVersions must be open-ended" % where)
        self.top = self.build(prefix + self.name, self.name, spec["fields"])

    def struct_for(self, json_name, fields):
        cname = "%s%s_%s" % (self.prefix, self.name, json_name)
        sig = json.dumps(fields, sort_keys=True)
        old = self.by_name.get(json_name)
        if old is not None:
            if old.sig != sig:
                raise SpecError("%s: struct %s defined twice, differently"
                                % (self.name, json_name))
            return old
        st = self.build(cname, json_name, fields)
        st.sig = sig
        self.by_name[json_name] = st
        return st

    def build(self, cname, json_name, fields):
        st = Struct(cname, json_name)
        names = set()
        tags = {}
        last_tag = -1
        for fj in fields:
            f = self.field(fj, st)
            if f.cname in names:
                raise SpecError("%s: duplicate field %s" % (cname, f.cname))
            names.add(f.cname)
            if f.tag is not None:
                if f.tag in tags:
                    raise SpecError("%s: duplicate tag %d" % (cname, f.tag))
                if f.tag < last_tag:
                    raise SpecError("%s: tags must be declared in ascending order"
                                    % cname)
                tags[f.tag] = f
                last_tag = f.tag
            st.fields.append(f)
        self.structs.append(st)
        return st

    def field(self, fj, parent):
        where = "%s.%s" % (parent.cname, fj.get("name"))
        f = Field()
        f.json = fj
        f.name = fj["name"]
        f.cname = snake(f.name)
        f.versions = parse_versions(fj.get("versions"), where)
        f.nullable = parse_versions(fj.get("nullableVersions"), where)
        f.tagged = parse_versions(fj.get("taggedVersions"), where)
        f.tag = fj.get("tag")
        if (f.tag is None) != (f.tagged[0] < 0):
            raise SpecError("%s: tag and taggedVersions go together" % where)
        if f.tag is not None and (self.flex[0] < 0 or f.tagged[0] < self.flex[0]):
            raise SpecError("%s: tagged outside flexible versions" % where)
        if "flexibleVersions" in fj:
            raise SpecError("%s: per-field flexibleVersions is not supported" % where)
        t = fj["type"]
        f.array = t.startswith("[]")
        base = t[2:] if f.array else t
        f.sub = None
        if base in PRIMS:
            if "fields" in fj:
                raise SpecError("%s: primitive with fields" % where)
            f.base = base
        else:
            f.base = "struct"
            sub_fields = fj.get("fields")
            if sub_fields is None:
                if base not in self.common:
                    raise SpecError("%s: unknown type %s" % (where, base))
                sub_fields = self.common[base]["fields"]
            f.sub = self.struct_for(base, sub_fields)
        if f.nullable[0] >= 0 and f.base not in ("string", "bytes", "records", "struct") \
                and not f.array:
            raise SpecError("%s: type %s cannot be nullable" % (where, t))
        f.ptr = f.base == "struct" and not f.array and f.nullable[0] >= 0
        if f.ptr and f.nullable != f.versions:
            # The C side is a pointer (NULL = null) with a presence byte on
            # the wire; mixed versions would need a third representation.
            raise SpecError("%s: nullable struct must be nullable in all its versions"
                            % where)
        self.defaults(f, where)
        if f.ptr and not f.def_null:
            raise SpecError("%s: nullable struct must default to null" % where)
        return f

    def defaults(self, f, where):
        d = f.json.get("default")
        f.def_int = 0
        f.def_float = 0.0
        f.def_str = ""  # None = null
        f.def_null = False
        if isinstance(d, str):
            ds = d.strip()
        else:
            ds = None if d is None else str(d)
        if f.array or f.base == "struct":
            if ds is not None and ds != "":
                if ds != "null":
                    raise SpecError("%s: bad default %r" % (where, d))
                if f.nullable[0] < 0:
                    raise SpecError("%s: null default for non-nullable" % where)
                f.def_null = True
                f.def_int = -1
            return
        b = f.base
        if ds is None:
            if b in ("string", "bytes", "records"):
                f.def_str = ""
            return
        if b in INT_RANGES:
            try:
                v = int(ds, 0)
            except ValueError:
                raise SpecError("%s: bad integer default %r" % (where, d))
            lo, hi = INT_RANGES[b]
            if not lo <= v <= hi:
                raise SpecError("%s: default %r out of range" % (where, d))
            f.def_int = v
        elif b == "bool":
            if ds.lower() not in ("true", "false"):
                raise SpecError("%s: bad bool default %r" % (where, d))
            f.def_int = 1 if ds.lower() == "true" else 0
        elif b == "float64":
            f.def_float = float(ds)
        elif b == "string":
            if ds == "null":
                if f.nullable[0] < 0:
                    raise SpecError("%s: null default for non-nullable" % where)
                f.def_str = None
            else:
                f.def_str = d
        elif b in ("bytes", "records"):
            if ds == "null":
                if f.nullable[0] < 0:
                    raise SpecError("%s: null default for non-nullable" % where)
                f.def_str = None
            elif ds != "":
                raise SpecError("%s: bytes default must be null or empty" % where)
        elif b == "uuid":
            if ds not in ("", "AAAAAAAAAAAAAAAAAAAAAA"):
                raise SpecError("%s: only the zero uuid default is supported" % where)


def load_specs(spec_dir):
    specs = {}
    for fn in sorted(os.listdir(spec_dir)):
        if not fn.endswith(".json"):
            continue
        with open(os.path.join(spec_dir, fn), "rb") as fh:
            raw = fh.read()
        try:
            spec = json.loads(strip_comments(raw.decode("utf-8")))
        except ValueError as e:
            raise SpecError("%s: %s" % (fn, e))
        specs[spec["name"]] = (spec, fn, raw)
    return specs


def detect_version(spec_dir):
    d = os.path.abspath(spec_dir)
    for _ in range(8):
        p = os.path.join(d, "gradle.properties")
        if os.path.isfile(p):
            with open(p) as fh:
                for line in fh:
                    m = re.match(r"\s*version\s*=\s*(\S+)", line)
                    if m:
                        return m.group(1)
        d = os.path.dirname(d)
    return None


# ---------------------------------------------------------------- output


def c_field_type(f):
    if f.base == "struct":
        return f.sub.cname
    return PRIMS[f.base][1]


def kc_type(f):
    if f.array:
        return "KC_ARRAY"
    if f.base == "struct":
        return "KC_STRUCT"
    return PRIMS[f.base][0]


def elem_kc_type(f):
    if f.base == "struct":
        return "KC_STRUCT"
    return PRIMS[f.base][0]


def field_comment(f):
    parts = ["v" + vstr(*f.versions)]
    if f.nullable[0] >= 0:
        parts.append("nullable " + vstr(*f.nullable))
    if f.tag is not None:
        parts.append("tag %d in %s" % (f.tag, vstr(*f.tagged)))
    if f.array or f.base == "struct":
        if f.def_null:
            parts.append("default null")
    elif f.base in ("string", "bytes", "records"):
        if f.def_str is None:
            parts.append("default null")
        elif f.def_str != "":
            parts.append("default %s" % c_string(f.def_str))
    elif f.base == "float64":
        if f.def_float != 0.0:
            parts.append("default %r" % f.def_float)
    elif f.def_int != 0:
        if f.base == "bool":
            parts.append("default true")
        else:
            parts.append("default %d" % f.def_int)
    return ", ".join(parts)


def emit_struct_decl(st, out, about=False):
    out.append("typedef struct %s {" % st.cname)
    if not st.fields:
        # C11 forbids empty structs; the codec never touches this member.
        out.append("    uint8_t unused_;")
    for f in st.fields:
        if about:
            # The spec is the only description of an internal RPC, so its
            # texts travel with the declarations.
            emit_about(f.json.get("about", ""), out)
        ct = c_field_type(f)
        if f.array:
            decl = "struct { int32_t n; %s *v; } %s;" % (ct, f.cname)
        elif f.ptr:
            decl = "%s *%s;" % (ct, f.cname)
        else:
            decl = "%s %s;" % (ct, f.cname)
        out.append("    %-52s /* %s */" % (decl, field_comment(f)))
    out.append("} %s;" % st.cname)
    out.append("")


def emit_about(text, out):
    text = " ".join(text.replace("*/", "* /").replace("/*", "/ *").split())
    lines = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= 80:
            lines[-1] += " " + word
        else:
            lines.append(word)
    if not lines or lines == [""]:
        return
    if len(lines) == 1:
        out.append("    /* %s */" % lines[0])
        return
    out.append("    /* %s" % lines[0])
    for ln in lines[1:-1]:
        out.append("     * %s" % ln)
    out.append("     * %s */" % lines[-1])


def emit_struct_desc(st, out):
    fields_name = "%s_fields" % st.cname
    if st.fields:
        out.append("static const kc_field %s[] = {" % fields_name)
        for f in st.fields:
            items = [
                ".name = %s" % c_string(f.name),
                ".type = %s" % kc_type(f),
            ]
            if f.array:
                items.append(".elem_type = %s" % elem_kc_type(f))
            items += [
                ".ver_min = %s" % cver(f.versions[0]),
                ".ver_max = %s" % cver(f.versions[1]),
                ".null_min = %s" % cver(f.nullable[0]),
                ".null_max = %s" % cver(f.nullable[1]),
                ".tag_min = %s" % cver(f.tagged[0]),
                ".tag_max = %s" % cver(f.tagged[1]),
            ]
            if f.tag is not None:
                items.append(".tag = %d" % f.tag)
            items.append(".offset = offsetof(%s, %s)" % (st.cname, f.cname))
            if f.array:
                items.append(".elem_size = sizeof(%s)" % c_field_type(f))
            if f.base == "struct":
                items.append(".sub = &%s_desc" % f.sub.cname)
            if f.def_int != 0:
                items.append(".def_int = %s" % c_int64(f.def_int))
            if f.def_float != 0.0:
                items.append(".def_float = %r" % f.def_float)
            if not f.array and f.base in ("string", "bytes", "records"):
                items.append(".def_str = %s" % ("NULL" if f.def_str is None
                                                else c_string(f.def_str)))
            out.append("    {")
            line = "       "
            for it in items:
                piece = " " + it + ","
                if len(line) + len(piece) > 96:
                    out.append(line)
                    line = "       "
                line += piece
            out.append(line)
            out.append("    },")
        out.append("};")
    out.append("const kc_struct %s_desc = {" % st.cname)
    out.append("    .name = %s," % c_string(st.json_name))
    out.append("    .size = sizeof(%s)," % st.cname)
    out.append("    .nfields = %d," % len(st.fields))
    out.append("    .fields = %s," % (fields_name if st.fields else "NULL"))
    out.append("};")
    out.append("")


def build_api(key, pair, digest, prefix):
    """The (key, name, min, max, request, response) of one API from its pair
    of specs; the spec files go into the input fingerprint."""
    if "request" not in pair or "response" not in pair:
        raise SpecError("API key %d: request or response spec missing" % key)
    req_spec, req_fn, req_raw = pair["request"]
    resp_spec, resp_fn, resp_raw = pair["response"]
    for fn, raw in ((req_fn, req_raw), (resp_fn, resp_raw)):
        digest.update(fn.encode() + b"\0" + raw + b"\0")
    req = Message(req_spec, prefix)
    resp = Message(resp_spec, prefix)
    if req.valid != resp.valid:
        raise SpecError("API %d: request and response versions differ" % key)
    if req.flex != resp.flex:
        raise SpecError("API %d: request and response flexibility differ" % key)
    lo, hi = req.valid
    if req_spec.get("latestVersionUnstable") or resp_spec.get("latestVersionUnstable"):
        hi -= 1
    if hi < lo:
        raise SpecError("API %d: no stable version" % key)
    name = req.name[: -len("Request")]
    return (key, name, lo, hi, req, resp)


def emit_message(m, title, h, c, about=False):
    h.append("/* ---- %s ---- */" % title)
    h.append("")
    c.append("/* ---- %s ---- */" % title)
    c.append("")
    for st in m.structs:
        emit_struct_decl(st, h, about)
    for st in m.structs:
        h.append("extern const kc_struct %s_desc;" % st.cname)
    h.append("")
    for st in m.structs:
        emit_struct_desc(st, c)


def emit_api_messages(apis, h, c, about=False):
    for key, name, lo, hi, req, resp in apis:
        flex = "flexible %s" % vstr(*req.flex) if req.flex[0] >= 0 else "never flexible"
        unstable = ""
        if hi != req.valid[1]:
            unstable = ", v%d unstable" % req.valid[1]
        emit_message(req, "%s (key %d): versions %d-%d%s, %s"
                     % (req.name, key, lo, hi, unstable, flex), h, c, about)
        emit_message(resp, "%s (key %d)" % (resp.name, key), h, c, about)


def api_entry(index, api):
    key, name, lo, hi, req, resp = api
    return [
        "    [%s] = {.key = %d, .name = %s, .min_ver = %d, .max_ver = %d,"
        % (index, key, c_string(name), lo, hi),
        "            .flex_min = %s," % (cver(req.flex[0]) if req.flex[0] >= 0
                                         else "KC_VMAX"),
        "            .req = &%s_desc," % req.top.cname,
        "            .resp = &%s_desc}," % resp.top.cname,
    ]


def write_outputs(out_dir, files):
    os.makedirs(out_dir, exist_ok=True)
    for fn, lines in files:
        path = os.path.join(out_dir, fn)
        text = "\n".join(lines)
        try:
            with open(path, "r", encoding="utf-8", newline="") as fh:
                if fh.read() == text:
                    continue  # same content: keep the timestamp
        except (FileNotFoundError, UnicodeDecodeError):
            pass
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)


def gen_kafka(args):
    version = args.spec_version or detect_version(args.specs)
    if not version:
        sys.exit("kgen: cannot tell the Kafka version of %s; pass --spec-version"
                 % args.specs)
    try:
        specs = load_specs(args.specs)
        by_key = {}
        for name, (spec, fn, raw) in specs.items():
            if spec.get("type") in ("request", "response") and "apiKey" in spec:
                by_key.setdefault(spec["apiKey"], {})[spec["type"]] = (spec, fn, raw)

        digest = hashlib.sha256()
        apis = [build_api(key, by_key.get(key, {}), digest, "kp_") for key in API_KEYS]

        datas = []
        for dname in DATA_SCHEMAS:
            if dname not in specs:
                raise SpecError("data schema %s missing" % dname)
            spec, fn, raw = specs[dname]
            digest.update(fn.encode() + b"\0" + raw + b"\0")
            datas.append(Message(spec))
    except SpecError as e:
        sys.exit("kgen: %s" % e)

    cmd = ("python3 tools/kgen.py --specs <kafka>/clients/src/main/resources/"
           "common/message --spec-version %s --out proto" % version)
    banner = [
        "/*",
        " * Generated by tools/kgen.py from the Apache Kafka %s message specs." % version,
        " * Do not edit: change the generator or its API list and run",
        " *     %s" % cmd,
        " * Input fingerprint (sha256 over the spec files read): %s" % digest.hexdigest()[:32],
        " */",
    ]

    h = list(banner)
    h += [
        "/*",
        " * kmsg: one C struct and one kc_struct descriptor per Kafka message and",
        " * nested struct, for the codec in kc.h. Types are kp_<Message> and",
        " * kp_<Message>_<Struct>; fields are the JSON names in snake_case; each",
        " * field comment gives the versions it exists in, where it is nullable or",
        " * tagged, and its default when that is not zero/empty. Array fields are",
        " * `struct { int32_t n; T *v; }` (n = -1 for null); nullable struct fields",
        " * are pointers (NULL = null). Data only: no functions but kc_api_get and",
        " * kc_api_max_key (declared in kc.h). Thread: any (immutable tables).",
        " */",
        "#ifndef KMSG_H",
        "#define KMSG_H",
        "",
        "#include <stdbool.h>",
        "#include <stdint.h>",
        "",
        "#include \"kc.h\"",
        "",
        "/* API keys known to the codec. */",
        "enum kp_api_key {",
    ]
    for key, name, lo, hi, req, resp in apis:
        h.append("    KP_%s = %d," % (upper_snake(name), key))
    h += ["};", ""]
    h.append("/* Versions of the embedded data schemas (no flexible versions unless noted). */")
    for d in datas:
        u = upper_snake(d.name)
        h.append("#define KP_%s_MIN_VER %d" % (u, d.valid[0]))
        h.append("#define KP_%s_MAX_VER %d" % (u, d.valid[1]))
        if d.flex[0] >= 0:
            h.append("#define KP_%s_FLEX_MIN %d" % (u, d.flex[0]))
    h.append("")

    c = list(banner)
    c += [
        "#include \"kmsg.h\"",
        "",
        "#include <stddef.h>",
        "",
    ]

    emit_api_messages(apis, h, c)
    for d in datas:
        flex = "flexible %s" % vstr(*d.flex) if d.flex[0] >= 0 else "never flexible"
        emit_message(d, "%s (data): versions %s, %s" % (d.name, vstr(*d.valid), flex), h, c)

    h += ["#endif", ""]

    max_key = max(API_KEYS)
    c.append("/* ---- the API table ---- */")
    c.append("")
    c.append("static const kc_api kc_apis[%d] = {" % (max_key + 1))
    for api in apis:
        c += api_entry(api[0], api)
    c.append("};")
    c.append("")
    c.append("const kc_api *kc_api_get(int16_t key)")
    c.append("{")
    c.append("    if (key < 0 || key > %d || kc_apis[key].name == NULL)" % max_key)
    c.append("        return NULL;")
    c.append("    return &kc_apis[key];")
    c.append("}")
    c.append("")
    c.append("int kc_api_max_key(void)")
    c.append("{")
    c.append("    return %d;" % max_key)
    c.append("}")
    c.append("")

    write_outputs(args.out, (("kmsg.h", h), ("kmsg.c", c)))


def check_rpc_fields(fields, where):
    """Internal RPCs are documented only by their specs: every field says
    what it is for."""
    for fj in fields:
        about = fj.get("about")
        if not isinstance(about, str) or not about.strip():
            raise SpecError("%s: field %s has no \"about\"" % (where, fj.get("name")))
        check_rpc_fields(fj.get("fields", []), where)


def load_rpc_specs(spec_dir):
    """The internal RPC specs of spec_dir, by API key: request and response
    of each, nothing else."""
    files = sorted(fn for fn in os.listdir(spec_dir) if fn.endswith(".json"))
    specs = load_specs(spec_dir)
    if len(specs) != len(files):
        raise SpecError("%s: two spec files share a message name" % spec_dir)
    by_key = {}
    for name, (spec, fn, raw) in specs.items():
        kind = spec.get("type")
        if kind not in ("request", "response"):
            raise SpecError("%s: an internal RPC spec is a request or a response" % fn)
        key = spec.get("apiKey")
        if not isinstance(key, int) or not RPC_KEY_MIN <= key <= RPC_KEY_MAX:
            raise SpecError("%s: apiKey must be in %d-%d" % (fn, RPC_KEY_MIN, RPC_KEY_MAX))
        suffix = "Request" if kind == "request" else "Response"
        if not name.endswith(suffix) or name == suffix:
            raise SpecError("%s: the name of a %s ends in %s" % (fn, kind, suffix))
        check_rpc_fields(spec.get("fields", []), fn)
        pair = by_key.setdefault(key, {})
        if kind in pair:
            raise SpecError("API key %d: two %ss (%s, %s)" % (key, kind, pair[kind][1], fn))
        pair[kind] = (spec, fn, raw)
    for key, pair in by_key.items():
        if "request" in pair and "response" in pair:
            base = pair["request"][0]["name"][: -len("Request")]
            if pair["response"][0]["name"] != base + "Response":
                raise SpecError("API key %d: %s answers %s" % (
                    key, pair["response"][0]["name"], pair["request"][0]["name"]))
    if not by_key:
        raise SpecError("%s: no specs" % spec_dir)
    return by_key


def gen_rpc(args):
    try:
        by_key = load_rpc_specs(args.rpc)
        digest = hashlib.sha256()
        apis = [build_api(key, by_key[key], digest, "kr_") for key in sorted(by_key)]
    except SpecError as e:
        sys.exit("kgen: %s" % e)

    banner = [
        "/*",
        " * Generated by tools/kgen.py from Skiff's internal RPC specs (proto/rpc).",
        " * Do not edit: change the specs (or the generator) and run",
        " *     python3 tools/kgen.py --rpc proto/rpc --out proto",
        " * which the build does by itself when they change.",
        " * Input fingerprint (sha256 over the spec files read): %s" % digest.hexdigest()[:32],
        " */",
    ]

    h = list(banner)
    h += [
        "/*",
        " * krpc: Skiff's node-to-node RPCs, declared like the Kafka messages of",
        " * kmsg.h (same codec, same conventions) with the prefix kr_: types",
        " * kr_<Message> and kr_<Message>_<Struct>, descriptors <type>_desc, key",
        " * constants KR_<API>. Their keys start at KRPC_KEY_MIN, far above Kafka's,",
        " * and the broker serves them without ever advertising them to clients.",
        " * Data only, plus krpc_api_get/krpc_api_max_key. Thread: any (immutable",
        " * tables).",
        " */",
        "#ifndef KRPC_H",
        "#define KRPC_H",
        "",
        "#include <stdbool.h>",
        "#include <stdint.h>",
        "",
        "#include \"kc.h\"",
        "",
        "/* The first internal API key; every key below it is Kafka's. */",
        "#define KRPC_KEY_MIN %d" % RPC_KEY_MIN,
        "",
        "/* The internal APIs. */",
        "enum kr_api_key {",
    ]
    for key, name, lo, hi, req, resp in apis:
        h.append("    KR_%s = %d," % (upper_snake(name), key))
    h += ["};", ""]

    c = list(banner)
    c += [
        "#include \"krpc.h\"",
        "",
        "#include <stddef.h>",
        "",
    ]

    emit_api_messages(apis, h, c, about=True)

    max_key = apis[-1][0]
    h += [
        "/* The internal API `key` (KRPC_KEY_MIN..krpc_api_max_key()), NULL when",
        " * there is none; the kc_api feeds kc_decode/kc_size/kc_encode as Kafka's. */",
        "const kc_api *krpc_api_get(int16_t key);",
        "int krpc_api_max_key(void);",
        "",
        "#endif",
        "",
    ]

    c.append("/* ---- the API table, indexed by key - KRPC_KEY_MIN ---- */")
    c.append("")
    c.append("static const kc_api krpc_apis[%d] = {" % (max_key - RPC_KEY_MIN + 1))
    for api in apis:
        c += api_entry("%d - KRPC_KEY_MIN" % api[0], api)
    c.append("};")
    c.append("")
    c.append("const kc_api *krpc_api_get(int16_t key)")
    c.append("{")
    c.append("    if (key < KRPC_KEY_MIN || key > %d || krpc_apis[key - KRPC_KEY_MIN].name == NULL)"
             % max_key)
    c.append("        return NULL;")
    c.append("    return &krpc_apis[key - KRPC_KEY_MIN];")
    c.append("}")
    c.append("")
    c.append("int krpc_api_max_key(void)")
    c.append("{")
    c.append("    return %d;" % max_key)
    c.append("}")
    c.append("")

    write_outputs(args.out, (("krpc.h", h), ("krpc.c", c)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--specs", help="directory of Kafka's message JSON files (-> kmsg)")
    src.add_argument("--rpc", help="directory of Skiff's internal RPC specs (-> krpc)")
    ap.add_argument("--out", required=True, help="output directory (proto)")
    ap.add_argument("--spec-version",
                    help="Kafka version of the specs (default: read from the "
                         "gradle.properties of the Kafka checkout holding them)")
    args = ap.parse_args()
    if args.rpc:
        gen_rpc(args)
    else:
        gen_kafka(args)


if __name__ == "__main__":
    main()
