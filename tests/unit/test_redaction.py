"""Command lines in process resources are redacted: the values of
arguments and NAME=value pairs whose name says key, token, secret,
password or auth become ***, and the names stay."""
import pytest

from graphsignal.sources.host import redact_command_line


@pytest.mark.parametrize("args,want", [
    (["vllm", "serve", "m", "--api-key", "sk-live-123", "--port", "8000"],
     ["vllm", "serve", "m", "--api-key", "***", "--port", "8000"]),
    (["python", "serve.py", "--hf-token=hf_abc"], ["python", "serve.py", "--hf-token=***"]),
    (["env", "HF_TOKEN=hf_x", "OPENAI_API_KEY=sk-1", "AWS_SECRET_ACCESS_KEY=a/b", "python", "a.py"],
     ["env", "HF_TOKEN=***", "OPENAI_API_KEY=***", "AWS_SECRET_ACCESS_KEY=***", "python", "a.py"]),
    (["app", "--password", "hunter2", "--db-password=x", "-token", "t", "--apiKey", "k", "--authToken=z"],
     ["app", "--password", "***", "--db-password=***", "-token", "***", "--apiKey", "***", "--authToken=***"]),
    (["app", "--auth", "--port", "1"], ["app", "--auth", "--port", "1"]),  # a flag without a value
    (["app", "model.secret_key=abc", "trainer.max_steps=10"], ["app", "model.secret_key=***", "trainer.max_steps=10"]),
    (["curl", "-H", "Authorization: Bearer abc", "-H", "Accept: text/plain"],
     ["curl", "-H", "Authorization: ***", "-H", "Accept: text/plain"]),
    (["app", "--database-url", "postgres://me:pw@db:5432/x"], ["app", "--database-url", "postgres://me:***@db:5432/x"]),
])
def test_secret_values_are_redacted_and_names_kept(args, want):
    assert redact_command_line(args) == want


@pytest.mark.parametrize("args", [
    ["vllm", "serve", "meta-llama/Llama-3-8B", "--tokenizer", "meta-llama/tok", "--max-tokens", "128"],
    ["python", "-m", "sglang.launch_server", "--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8"],
    ["llama-server", "-m", "model.gguf", "--keep", "64", "--author", "me", "monkey=1"],
    ["sh", "-c", "echo a=b"],
    [],
])
def test_ordinary_arguments_pass_unchanged(args):
    assert redact_command_line(args) == args
