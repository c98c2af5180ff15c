"""A server no request can crash: `vllm serve` with schedlab's scheduler classes, started as the
documentation starts the decoder model (no tokenizer: `--skip-tokenizer-init`), answers a prompt
of token ids outside the model's vocabulary with a 400 (it ended the engine core, and with it the
server, in the embedding), and serves the next plain request."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from schedlab.backends.served.server import serve_command, server_env, start_server  # noqa: E402
from schedlab.backends.vllm.engine import LaunchSpec  # noqa: E402

from test_vllm_server import SLAI_SPEC, serve_line  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serving]

ROOT = Path(__file__).resolve().parents[1]
TINY = "src/schedlab/assets/models/tiny-llama"
#: The documentation's decoder line (the step-plan class), and the policy class as the
#: pipeline's `schedlab vllm-serve` starts it on the same model.
LINES = {
    "the documented decoder line": (lambda: shlex.split(serve_line("tiny-llama")), SLAI_SPEC),
    "the policy scheduler class": (lambda: serve_command(TINY, LaunchSpec(model="tiny-llama", max_num_seqs=8,
                                                                          max_num_batched_tokens=512), policy="sjf"),
                                   LaunchSpec(model="tiny-llama", max_num_seqs=8, max_num_batched_tokens=512)),
}


@pytest.mark.parametrize("line", LINES, ids=LINES.keys())
def test_token_ids_outside_the_vocabulary_are_a_400_and_the_server_stays_up(tmp_path, line):
    import httpx

    command, spec = LINES[line]
    cmd = command()
    assert "--skip-tokenizer-init" in cmd
    with start_server(cmd, log=tmp_path / "server.log", env=server_env(spec), cwd=ROOT) as server:
        def complete(prompt):
            return httpx.post(f"{server.url}/v1/completions", timeout=120,
                              json={"model": "tiny-llama", "prompt": prompt, "max_tokens": 2, "ignore_eos": True})

        for prompt in ([1_000_000_000, 5], [32000, 5], [-1, 5]):  # (vLLM's request model refuses the last)
            answer = complete(prompt)
            assert answer.status_code == 400, (prompt, answer.status_code, answer.text[:500])
            assert "out of vocabulary" in answer.text or prompt[0] < 0, answer.text[:500]
        answer = complete([1, 2, 3])
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["usage"]["completion_tokens"] == 2
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        assert server.proc.poll() is None
