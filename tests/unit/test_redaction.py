"""Command lines in process resources are redacted (SKILL.md lists what
is hidden and what is not): values of secret-named options, NAME=value
pairs, headers, user:password options, a few programs' password flags,
secrets inside scripts, URLs, query strings, JSON and key=value configs,
and tokens of well-known shapes become ***; names and everything else
stay. Both ways: secrets that must go, ordinary arguments that must stay."""
import pytest

from graphsignal.sources import host
from graphsignal.sources.host import redact_command_line

GHP = "ghp_" + "a1B2c3D4e5" * 4  # the shapes of real tokens, made up
HF = "hf_" + "QwErTyUiOp" * 3 + "AsDf"
OPENAI = "sk-proj-" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4" * 2
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

SECRETS = [
    # secret-named options and NAME=value pairs (env, Hydra, -D)
    (["vllm", "serve", "m", "--api-key", "sk-live-123", "--port", "8000"],
     ["vllm", "serve", "m", "--api-key", "***", "--port", "8000"]),
    (["python", "serve.py", "--hf-token=hf_abc"], ["python", "serve.py", "--hf-token=***"]),
    (["env", "HF_TOKEN=hf_x", "OPENAI_API_KEY=sk-1", "AWS_SECRET_ACCESS_KEY=a/b", "python", "a.py"],
     ["env", "HF_TOKEN=***", "OPENAI_API_KEY=***", "AWS_SECRET_ACCESS_KEY=***", "python", "a.py"]),
    (["env", "PGPASSWORD=pg1", "MYSQL_PWD=my1", "FOO_PASSWORD=f1", "DB_PASS=d1", "CLIENTSECRET=c1", "psql"],
     ["env", "PGPASSWORD=***", "MYSQL_PWD=***", "FOO_PASSWORD=***", "DB_PASS=***", "CLIENTSECRET=***", "psql"]),
    (["app", "--password", "hunter2", "--db-password=x", "-token", "t", "--apiKey", "k", "--authToken=z"],
     ["app", "--password", "***", "--db-password=***", "-token", "***", "--apiKey", "***", "--authToken=***"]),
    (["app", "--password", "-x1", "--private-key", "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----"],
     ["app", "--password", "-x1", "--private-key", "***"]),  # "-x1" looks like the next option
    (["app", "model.secret_key=abc", "trainer.max_steps=10"], ["app", "model.secret_key=***", "trainer.max_steps=10"]),
    (["java", "-Djavax.net.ssl.trustStorePassword=ts", "-Xmx4g"], ["java", "-Djavax.net.ssl.trustStorePassword=***",
                                                                   "-Xmx4g"]),
    (["docker", "run", "-e", "API_TOKEN=x", "--build-arg", "NPM_TOKEN=y", "img"],
     ["docker", "run", "-e", "API_TOKEN=***", "--build-arg", "NPM_TOKEN=***", "img"]),
    (["redis-cli", "--pass", "r1", "ping"], ["redis-cli", "--pass", "***", "ping"]),
    # programs whose short flag is a password
    (["mysql", "-uroot", "-pS3cr3t", "mydb"], ["mysql", "-uroot", "-p***", "mydb"]),
    (["/usr/bin/mysqldump", "-u", "root", "-phunter2", "db"], ["/usr/bin/mysqldump", "-u", "root", "-p***", "db"]),
    (["mariadb", "-psecret=x"], ["mariadb", "-p***"]),
    (["sshpass", "-p", "pw", "ssh", "-p", "22", "host"], ["sshpass", "-p", "***", "ssh", "-p", "22", "host"]),
    (["sshpass", "-ppw", "ssh", "-p22", "host"], ["sshpass", "-p***", "ssh", "-p22", "host"]),
    (["redis-cli", "-h", "r", "-a", "pw", "ping"], ["redis-cli", "-h", "r", "-a", "***", "ping"]),
    (["mongosh", "-u", "admin", "-p", "pw", "db"], ["mongosh", "-u", "admin", "-p", "***", "db"]),
    # user:password
    (["curl", "-u", "alice:pw1", "--user=bob:pw2", "-ucarol:pw3", "--proxy-user", "dave:pw4", "https://x"],
     ["curl", "-u", "alice:***", "--user=bob:***", "-ucarol:***", "--proxy-user", "dave:***", "https://x"]),
    (["smbclient", "-U", "alice%pw", "//h/s"], ["smbclient", "-U", "alice%***", "//h/s"]),
    # headers and cookies
    (["curl", "-H", "Authorization: Bearer abc", "-H", "Accept: text/plain"],
     ["curl", "-H", "Authorization: ***", "-H", "Accept: text/plain"]),
    (["curl", "--header=Authorization: Bearer abc", "-HAuthorization: Basic YTpi", "-H", "X-Api-Key: k1"],
     ["curl", "--header=Authorization: ***", "-HAuthorization: ***", "-H", "X-Api-Key: ***"]),
    (["wget", "--header", "Cookie: session=abc; csrftoken=def", "--header=Set-Cookie: id=1; Path=/"],
     ["wget", "--header", "Cookie: ***", "--header=Set-Cookie: ***"]),
    (["curl", "-b", "session=abc", "--cookie", "id=2", "-bname=v", "https://x"],
     ["curl", "-b", "***", "--cookie", "***", "-b***", "https://x"]),
    (["http", "POST", "api", "x-api-key:abc"], ["http", "POST", "api", "x-api-key:***"]),
    (["app", "--extra", "Bearer abc.def"], ["app", "--extra", "Bearer ***"]),
    # tokens by shape, anywhere in an argument
    (["python", "a.py", OPENAI, "--x=" + GHP, "--repo=" + HF + "/m", "AKIAIOSFODNN7EXAMPLE"],
     ["python", "a.py", "***", "--x=***", "--repo=***/m", "***"]),
    (["app", "xoxb-123456789012-abcdefABCDEF", JWT, "sk-ant-api03-" + "x" * 30, "github_pat_" + "A1" * 20],
     ["app", "***", "***", "***", "***"]),
    (["app", "--note", "use %s or %s" % (GHP, "glpat-" + "a" * 20)], ["app", "--note", "use *** or ***"]),
    # URLs: passwords, token user names, query strings
    (["app", "--database-url", "postgres://me:pw@db:5432/x"], ["app", "--database-url", "postgres://me:***@db:5432/x"]),
    (["app", "postgres://me:p@ss@db/x", "redis://:pw@h:6379", "https://tok123@github.com/o/r"],
     ["app", "postgres://me:***@db/x", "redis://:***@h:6379", "https://***@github.com/o/r"]),
    (["curl", "https://h/x?token=abc&x=1", "https://s3/o?X-Amz-Signature=ab&X-Amz-Credential=A%2Fb&X-Amz-Date=1",
      "https://b/c?sv=1&sig=abc%3D&se=2", "https://m/api?key=k1#top", "https://h/?password=p1"],
     ["curl", "https://h/x?token=***&x=1", "https://s3/o?X-Amz-Signature=***&X-Amz-Credential=***&X-Amz-Date=1",
      "https://b/c?sv=1&sig=***&se=2", "https://m/api?key=***#top", "https://h/?password=***"]),
    # JSON and key=value configs
    (["vllm", "serve", "m", "--hf-overrides", '{"token": "hf_x", "rope_scaling": {"type": "yarn", "factor": 4.0}}'],
     ["vllm", "serve", "m", "--hf-overrides", '{"token": "***", "rope_scaling": {"type": "yarn", "factor": 4.0}}']),
    (["app", "--config", '{"db": {"password": "x y", "port": 5432}, "apiKey": 123, "hf_token":"t"}'],
     ["app", "--config", '{"db": {"password": "***", "port": 5432}, "apiKey": ***, "hf_token":"***"}']),
    (["app", "--py", "{'api_key': 'x', 'n': 1}"], ["app", "--py", "{'api_key': '***', 'n': 1}"]),
    (["app", "--opts", "a=1,password=x,b=2", "--from-literal=password=x", "host=db password=x dbname=y"],
     ["app", "--opts", "a=1,password=***,b=2", "--from-literal=password=***", "host=db password=*** dbname=y"]),
    (["app", "--cfg", "user: me\npassword: hunter2\nport: 1"], ["app", "--cfg", "user: me\npassword: ***\nport: 1"]),
    (["openssl", "pkcs12", "-passin", "pass:hunter2", "-passout", "env:PW"],
     ["openssl", "pkcs12", "-passin", "pass:***", "-passout", "env:PW"]),
    # scripts: the same rules over the words of sh -c's argument, quoting kept
    (["sh", "-c", "exec python serve.py --api-key abc123 --port 8000"],
     ["sh", "-c", "exec python serve.py --api-key *** --port 8000"]),
    (["bash", "-c", "mysql -uroot -psecret db && curl -u a:b -H 'Authorization: Bearer x' https://h "
                    "&& curl --user \"al ice:p w\" y && HF_TOKEN=t2 python x.py"],
     ["bash", "-c", "mysql -uroot -p*** db && curl -u a:*** -H 'Authorization: ***' https://h "
                    "&& curl --user \"al ice:***\" y && HF_TOKEN=*** python x.py"]),
    # a script that starts with an assignment keeps its other commands and its separators
    (["sh", "-c", "PGPASSWORD=pw1; rm -rf x"], ["sh", "-c", "PGPASSWORD=***; rm -rf x"]),
    (["bash", "-lc", "export TOKEN=pw2; echo hi|cat"], ["bash", "-lc", "export TOKEN=***; echo hi|cat"]),
    # more names that say a secret
    (["gpg", "--passphrase", "pw3", "--batch"], ["gpg", "--passphrase", "***", "--batch"]),
    (["curl", "--oauth2-bearer", "pw4", "http://h"], ["curl", "--oauth2-bearer", "***", "http://h"]),
    (["app", "--dbpass=x1", "ROOTPASS=x2", "--password=x y"], ["app", "--dbpass=***", "ROOTPASS=***",
                                                              "--password=***"]),
]


@pytest.mark.parametrize("args,want", SECRETS)
def test_secret_values_are_redacted_and_names_kept(args, want):
    assert redact_command_line(args) == want


def test_no_secret_survives():
    # every value above that was hidden is gone from the whole line
    for args, want in SECRETS:
        line = " ".join(redact_command_line(args))
        for secret in ("hunter2", "S3cr3t", "abc123", "pw1", "pw2", "pw3", "pw4", OPENAI, GHP, HF, JWT,
                       "AKIAIOSFODNN7EXAMPLE", "session=abc", "x y", "p w"):
            assert secret not in line, (args, line)


ORDINARY = [
    ["vllm", "serve", "meta-llama/Llama-3-8B", "--tokenizer", "meta-llama/tok", "--max-tokens", "128"],
    ["python", "-m", "sglang.launch_server", "--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8"],
    ["vllm", "serve", "m", "--port", "8000", "--tokenizer-mode", "auto", "--skip-tokenizer-init",
     "--max-model-len", "4096"],
    ["llama-server", "-m", "model.gguf", "--keep", "64", "--author", "me", "monkey=1"],
    # -p and -u as ports and user ids, short flags run together
    ["docker", "run", "-p8080:80", "-p", "8000:8000", "-p127.0.0.1:9000:9000", "-u", "1000", "--user", "1000:1000",
     "img"],
    ["ssh", "-p2222", "host"], ["nc", "-l", "-p8080"], ["python", "-m", "http.server", "-p", "8000"],
    ["cp", "-pr", "a", "b"], ["netstat", "-plnt"], ["mkdir", "-p", "x"], ["perl", "-pe", "s/a/b/"],
    ["python", "-u", "train.py"], ["sudo", "-u", "svc", "run.sh"],
    ["mysql", "-u", "root", "-p", "mydb"],  # -p alone asks for the password; mydb is the database
    # where a secret is kept is not the secret
    ["app", "--key-file", "/etc/ssl/key.pem", "--ssl-keyfile", "k.pem", "--token-path", "/run/t",
     "HF_TOKEN_PATH=/x", "--password-file", "/run/pw", "--api-key-env", "OPENAI_API_KEY"],
    ["env", "PWD=/home/me", "OLDPWD=/", "python", "a.py"],
    ["app", "--pass-through", "in.txt", "--passes", "3"],
    ["curl", "-b", "cookies.txt", "http://127.0.0.1:8000/v1?model=x&max_tokens=5"],
    ["git", "clone", "git@github.com:o/r.git", "ssh://git@github.com/o/r.git", "http://h:8080/p?x=a@b"],
    ["torchrun", "--nproc-per-node=8", "--master-addr=10.0.0.1", "--master-port=29500", "train.py",
     "--config", '{"lr": 0.001, "batch_size": 32, "tokenizer": "gpt2"}'],
    ["python", "x.py", "--log-format", "%(asctime)s level:%(levelname)s", "12:30:00", "sk-learn", "hf_transfer",
     "--revision", "a3f9c2d1e4b5a6c7d8e9f0a1b2c3d4e5f6a7b8c9"],
    ["sh", "-c", "echo a=b"],
    ["app", "--bypass", "proxy", "--compass", "n", "--bypass-cache", "true"],
    ["sh", "-c", "python -c 'import time; time.sleep(2)' --port 8000 && curl -s http://127.0.0.1:18259/signals"],
    [],
]


@pytest.mark.parametrize("args", ORDINARY)
def test_ordinary_arguments_pass_unchanged(args):
    assert redact_command_line(args) == args


def test_long_command_lines_are_redacted_and_not_cached():
    args = ["python", "x.py"] + ["--flag%d=v" % i for i in range(2000)] + ["--api-key", "k"]
    host._redact_cached.cache_clear()
    assert redact_command_line(args)[-1] == "***"
    assert host._redact_cached.cache_info().currsize == 0
    assert redact_command_line(["a", "--api-key", "k"]) == ["a", "--api-key", "***"]
    assert host._redact_cached.cache_info().currsize == 1


def test_hostile_arguments_take_linear_time():
    # no regular expression backtracks: 100 KB of each shape finishes (a
    # quadratic one would take minutes here, not a timing threshold)
    for text in ("a=" * 50000, '"a":' * 25000, "a " * 50000, "--api-key " * 10000, "{'k': " * 10000,
                 '"key": "' * 10000, "x:" + "key='" * 20000, "Authorization:" + '"' * 10000):
        assert len(redact_command_line(["sh", "-c", text])) == 3
