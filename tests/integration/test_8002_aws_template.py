"""deploy/aws/skiff.yaml: cfn-lint finds nothing in it, and the node's user data, rendered
for each of the three zones, writes properties that `skiffd --check-config` accepts
(the template is checked offline: nothing here reaches AWS).

The user data is the template's own text: its Fn::Sub variables are replaced with test
values (every one must be known, as CloudFormation would refuse an unknown one), then
bash runs its functions and calls write_properties, the function an instance calls."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

import harness

TEMPLATE = os.path.join(harness.ROOT, "deploy", "aws", "skiff.yaml")
UNIT = os.path.join(harness.ROOT, "deploy", "skiffd.service")
VENV_BIN = os.path.join(harness.ROOT, "tests", ".venv", "bin")

ZONES = {"us-east-1a": "10.0.1.0/24", "us-east-1b": "10.0.2.0/24", "us-east-1c": "10.0.3.0/24"}
ETCD = ["10.0.1.10", "10.0.2.10", "10.0.3.10"]
VALUES = {
    "AWS::Region": "us-east-1", "AWS::StackName": "skiff-test",
    "Bucket": "skiff-test-bucket", "Svm": "svm-0123456789abcdef0",
    "FileSystem": "fs-0123456789abcdef0",
    "SkiffSource": "s3://skiff-test-bucket/releases/skiffd", "SkiffSha256": "",
    "EtcdEniA.PrimaryPrivateIpAddress": ETCD[0], "EtcdEniB.PrimaryPrivateIpAddress": ETCD[1],
    "EtcdEniC.PrimaryPrivateIpAddress": ETCD[2],
    "ZoneA": "us-east-1a", "ZoneB": "us-east-1b", "ZoneC": "us-east-1c",
    "SubnetACidr": ZONES["us-east-1a"], "SubnetBCidr": ZONES["us-east-1b"],
    "SubnetCCidr": ZONES["us-east-1c"], "ExtraClientZoneCidrs": "",
    "TlsCaSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:skiff-ca-AbCdEf",
}


@pytest.fixture(scope="module")
def template():
    with open(TEMPLATE) as f:
        return yaml.safe_load(f)


def sub(text, values):
    """Fn::Sub as CloudFormation does it: ${Name} replaced, ${!Literal} kept as ${Literal}."""
    def one(m):
        name = m.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        assert name in values, "the user data names ${%s}, which the test does not know" % name
        return values[name]
    return re.sub(r"\$\{([^}]*)\}", one, text)


def user_data(template, resource):
    data = template["Resources"][resource]["Properties"]["LaunchTemplateData"]["UserData"]
    return data["Fn::Base64"]["Fn::Sub"]


def node_script(template, tmp_path, **values):
    text = sub(user_data(template, "NodeLaunchTemplate"), dict(VALUES, **values))
    lines = text.rstrip("\n").split("\n")
    assert lines[-1] == "main", "the user data must end by calling main"
    path = tmp_path / "functions.sh"
    path.write_text("\n".join(lines[:-1]) + "\n")
    return str(path)


def render(script, zone, ip, out):
    subprocess.run(["bash", "-c", 'source "$0"; write_properties "$1" "$2" "$3"', script,
                    zone, ip, str(out)], check=True, timeout=30)
    props = {}
    for line in out.read_text().splitlines():
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            props[k] = v
    return props


def check_config(path):
    return subprocess.run([harness.SKIFFD, "--check-config", "-c", str(path)],
                          capture_output=True, text=True, timeout=30)


def test_cfn_lint_finds_nothing():
    exe = os.path.join(VENV_BIN, "cfn-lint")
    if not os.access(exe, os.X_OK):
        exe = shutil.which("cfn-lint")
    if not exe:
        pytest.skip("cfn-lint is missing (tools/install-deps.sh test puts it in tests/.venv)")
    r = subprocess.run([exe, TEMPLATE], capture_output=True, text=True, timeout=300)
    print(subprocess.run([exe, "--version"], capture_output=True, text=True).stdout)
    assert r.returncode == 0 and not r.stdout.strip(), (r.returncode, r.stdout, r.stderr)


def test_user_data_is_valid_bash(template, tmp_path):
    for res in ("NodeLaunchTemplate", "EtcdLaunchTemplate"):
        path = tmp_path / (res + ".sh")
        path.write_text(sub(user_data(template, res), VALUES))
        r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, (res, r.stderr)


def test_user_data_passes_shellcheck(template, tmp_path):
    exe = shutil.which("shellcheck")
    if not exe:
        pytest.skip("shellcheck is missing (Debian's shellcheck)")
    for values in (VALUES, dict(VALUES, SkiffSha256="0" * 64, ExtraClientZoneCidrs="a=b")):
        for res in ("NodeLaunchTemplate", "EtcdLaunchTemplate"):
            path = tmp_path / (res + ".sh")
            path.write_text(sub(user_data(template, res), values))
            r = subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (res, r.stdout)


def test_properties_of_each_zone_pass_check_config(template, tmp_path):
    script = node_script(template, tmp_path)
    ids = set()
    for n, zone in enumerate(sorted(ZONES)):
        ip = ZONES[zone].replace("0/24", str(20 + n))
        out = tmp_path / ("%s.properties" % zone)
        props = render(script, zone, ip, out)
        assert props["broker.rack"] == zone
        assert props["advertised.listeners"] == "CLIENTS://%s:9092,INTERNAL://%s:9093" % (ip, ip)
        assert props["listeners"] == "CLIENTS://0.0.0.0:9092,INTERNAL://0.0.0.0:9093"
        # Clients on SASL_SSL; nodes on mutual TLS, their certificate's principal a super
        # user, every other principal held to the ACLs.
        assert props["listener.security.protocol.map"] == "CLIENTS:SASL_SSL,INTERNAL:SSL"
        assert props["inter.broker.listener.name"] == "INTERNAL"
        assert props["ssl.client.auth"] == "required"
        assert "User:CN=skiff-node" in props["super.users"].split(";")
        assert props["authorizer.class.name"].endswith("StandardAuthorizer")
        assert props["wal.url"] == "file:///mnt/fsx/skiff"
        assert props["objects.url"] == "s3://skiff-test-bucket/skiff?region=us-east-1"
        assert props["etcd.endpoints"] == ",".join("http://%s:2379" % a for a in ETCD)
        assert props["client.zone.cidrs"] == ",".join("%s=%s" % (c, z)
                                                      for z, c in sorted(ZONES.items()))
        ids.add(int(props["node.id"]))
        r = check_config(out)
        print(r.stdout)
        assert r.returncode == 0, (zone, r.stdout, r.stderr)
        assert "broker.rack=%s cluster member" % zone in r.stdout, r.stdout
        assert "advertised CLIENTS://%s:9092 (SASL_SSL)" % ip in r.stdout, r.stdout
        assert "advertised INTERNAL://%s:9093 (SSL) (inter-broker)" % ip in r.stdout, r.stdout
    assert len(ids) == 3 and all(0 <= i < 2 ** 31 for i in ids), ids


def test_node_id_from_any_private_address(template, tmp_path):
    script = node_script(template, tmp_path)
    for ip, want in (("10.0.1.20", 10 << 24 | 1 << 8 | 20),
                     ("192.168.7.9", (192 << 24 | 168 << 16 | 7 << 8 | 9) & 0x7fffffff),
                     ("172.31.255.254", (172 << 24 | 31 << 16 | 255 << 8 | 254) & 0x7fffffff)):
        props = render(script, "us-east-1a", ip, tmp_path / "id.properties")
        assert int(props["node.id"]) == want
        assert check_config(tmp_path / "id.properties").returncode == 0


def test_extra_client_zone_cidrs(template, tmp_path):
    extra = "10.0.11.0/24=us-east-1a,10.0.12.0/24=us-east-1b"
    script = node_script(template, tmp_path, ExtraClientZoneCidrs=extra)
    out = tmp_path / "extra.properties"
    props = render(script, "us-east-1b", "10.0.2.30", out)
    assert props["client.zone.cidrs"].endswith("us-east-1c," + extra)
    assert check_config(out).returncode == 0


def test_check_config_refuses_what_start_up_would(tmp_path):
    path = tmp_path / "bad.properties"
    base = ("node.id=3\nbroker.rack=us-east-1a\nwal.url=file:///mnt/fsx/skiff\n"
            "etcd.endpoints=http://10.0.1.10:2379\n")
    for extra, names in (("objects.url=s3://bucket/skiff\n", "objects.url"),  # no region
                         ("objects.url=s3://bucket/skiff?region=x&colour=red\n", "objects.url"),
                         ("", "objects.url"),  # a cluster needs a shared object store
                         ("objects.url=s3://b/p?region=r\nbroker.rack=a b\n", "broker.rack"),
                         ("objects.url=s3://b/p?region=r\nlisteners=PLAINTEXT://:x\n",
                          "listeners"),
                         ("objects.url=s3://b/p?region=r\nlog.retention.ms=soon\n",
                          "log.retention.ms"),
                         ("objects.url=s3://b/p?region=r\nwal.url=nfs://svm/skiff?version=4\n",
                          "wal.url"),
                         ("objects.url=s3://b/p?region=r\nwal.url=nfs://svm\n", "wal.url")):
        path.write_text(base + extra)
        r = check_config(path)
        assert r.returncode == 2, (extra, r.stdout, r.stderr)
        assert names in r.stderr and not r.stdout, (extra, r.stderr)
    assert not os.path.exists(os.path.join(str(tmp_path), "skiff-data"))
    path.write_text(base.replace("file:///mnt/fsx/skiff", "nfs://svm-1.fs-1/skiff?version=3")
                    + "objects.url=s3://b/p?region=r\n")
    r = check_config(path)
    assert r.returncode == 0 and "wal.url=nfs://svm-1.fs-1/skiff?version=3" in r.stdout, r


def test_unit_in_user_data_is_deploy_skiffd_service(template):
    text = user_data(template, "NodeLaunchTemplate")
    m = re.search(r"cat > /etc/systemd/system/skiffd.service <<'EOF'\n(.*?\n)EOF\n", text, re.S)
    assert m, "the user data writes no skiffd.service"
    with open(UNIT) as f:
        assert m.group(1) == f.read()


def test_only_needed_ports_are_open(template):
    res = template["Resources"]
    open_to_cidr = []
    for name, r in res.items():
        rules = []
        if r["Type"] == "AWS::EC2::SecurityGroup":
            rules = r["Properties"].get("SecurityGroupIngress", [])
        elif r["Type"] == "AWS::EC2::SecurityGroupIngress":
            rules = [r["Properties"]]
        for rule in rules:
            assert rule.get("CidrIp") != "0.0.0.0/0", (name, rule)
            if "CidrIp" in rule:
                open_to_cidr.append((rule["CidrIp"]["Ref"], rule["FromPort"], rule["ToPort"]))
    # 9093 is the nodes' SSL listener: only certificates of the cluster's authority pass.
    assert sorted(open_to_cidr) == [("AdminCidr", 22, 22), ("AdminCidr", 22, 22),
                                    ("AdminCidr", 9093, 9093), ("AdminCidr", 9644, 9644),
                                    ("ClientCidr", 9092, 9092)]


def test_node_role_reaches_only_the_bucket_and_the_ca(template):
    role = template["Resources"]["NodeRole"]["Properties"]
    assert "ManagedPolicyArns" not in role
    for pol in role["Policies"]:
        for st in pol["PolicyDocument"]["Statement"]:
            assert st["Effect"] == "Allow"
            res = st["Resource"]
            if st["Action"] == "secretsmanager:GetSecretValue":
                assert res == {"Ref": "TlsCaSecretArn"}, st
                continue
            assert all(a.startswith("s3:") for a in st["Action"]), st
            assert res in ({"Fn::GetAtt": ["Bucket", "Arn"]}, {"Fn::Sub": "${Bucket.Arn}/*"}), st


def test_node_signs_its_certificate_with_the_ca(template, tmp_path):
    """make_tls, run with a fake `aws` that answers a CA made here: the node's keystore
    holds a key and a certificate for its IP address that the CA verifies, and the CA's
    key is not left on disk."""
    script = node_script(template, tmp_path)
    ca = tmp_path / "ca"
    ca.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(ca / "ca.key"), "-subj", "/CN=test-ca", "-days", "2", "-out",
                    str(ca / "ca.pem")], check=True, capture_output=True)
    import json
    secret = json.dumps({"certificate": (ca / "ca.pem").read_text(),
                         "private_key": (ca / "ca.key").read_text()})
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "aws").write_text("#!/bin/sh\ncat %s\n" % (tmp_path / "secret.json"))
    (bindir / "aws").chmod(0o755)
    (bindir / "install").write_text('#!/bin/sh\nfor last; do :; done\nexec mkdir -p "$last"\n')
    (bindir / "install").chmod(0o755)
    (bindir / "chown").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "chown").chmod(0o755)
    (tmp_path / "secret.json").write_text(secret)
    tls = tmp_path / "tls"
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]))
    subprocess.run(["bash", "-c", 'source "$0"; make_tls "$1" "$2"', script, "10.0.2.21",
                    str(tls)], check=True, timeout=60, env=env)
    assert sorted(os.listdir(tls)) == ["ca.pem", "node.crt", "node.pem"]
    assert "PRIVATE KEY" in (tls / "node.pem").read_text()
    r = subprocess.run(["openssl", "verify", "-CAfile", str(tls / "ca.pem"), "-verify_ip",
                        "10.0.2.21", str(tls / "node.crt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    subj = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253",
                           "-in", str(tls / "node.crt")], capture_output=True, text=True).stdout
    assert subj.strip() == "subject=CN=skiff-node"


def test_bucket_aborts_incomplete_multipart_uploads(template):
    rules = template["Resources"]["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    abort = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    assert abort and abort[0]["Status"] == "Enabled" and "Prefix" not in abort[0]
    assert abort[0]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1


def test_alert_rules_pass_promtool():
    exe = shutil.which("promtool")
    if not exe:
        pytest.skip("promtool is missing (Debian's prometheus)")
    rules = os.path.join(harness.ROOT, "deploy", "prometheus", "skiff-alerts.yml")
    with open(rules) as f:
        n = sum(1 for ln in f if ln.strip().startswith(("- alert:", "- record:")))
    assert n >= 15, n
    r = subprocess.run([exe, "check", "rules", rules], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS: %d rules found" % n in r.stdout, (r.stdout, r.stderr)
