"""Column and key contracts shared by every stage (see the README's "Contracts")."""

from __future__ import annotations

#: Workload trace (parquet): required columns, then optional ones.
TRACE_COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens")
#: ``speech_duration_s`` is the speech-active part of ``audio_duration_s`` (a VAD's measure).
TRACE_OPTIONAL = (
    "audio_duration_s", "speech_duration_s", "language", "slo_class", "tbt_target_s", "task", "priority",
)

#: Per-request results (parquet). Token-gap statistics (max/mean gap and the count of gaps
#: above each class target) keep P99 TBT computable without storing every token time.
#: ``cached_tokens``: the prompt tokens its first admission found in the prefix cache (0
#: without one), what vLLM reports as ``prompt_tokens_details.cached_tokens``.
RESULT_COLUMNS = (
    "request_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "preemptions",
    "cached_tokens",
    "class",
    "max_gap_s",
    "mean_gap_s",
)

#: Run summary (JSON, flat keys).
SUMMARY_KEYS = (
    "policy",
    "backend",
    "workload",
    "rate",
    "model",
    "hardware",
    "seed",
    "arrived",
    "completed",
    *(f"p{q}_{m}" for m in ("ttft_ms", "e2el_ms", "tpot_ms", "itl_ms") for q in (50, 90, 99)),
    "throughput_rps",
    "throughput_tok_s",
    "sched_overhead_us_per_req",
    "wall_s",
)

#: Latency profile table (parquet): one row per timed or predicted batch composition.
#: ``n_encoder`` counts encoder inputs (audio clips) run in the step; ``ctx_tokens`` is the
#: summed decoder context of the decode rows; ``time_s`` is the step's wall time.
PROFILE_COLUMNS = (
    "source",
    "hardware",
    "model",
    "n_encoder",
    "n_prefill_tokens",
    "n_decode",
    "ctx_tokens",
    "time_s",
)

#: Optional profile column: attention (query, key) pairs of a step's prefill chunks.
PREFILL_PAIRS = "prefill_pairs"

#: Regressors of the step-time model, in the order of its coefficients (plus an intercept).
STEP_FEATURES = ("n_encoder", "n_prefill_tokens", "n_decode", "ctx_tokens")

#: The batching rules a queue policy runs inside on ``sim``: vLLM v1's, or transformers' (its
#: FIFO or prefill-first scheduler class).
BATCHINGS = ("vllm", "transformers", "transformers-prefill-first")
#: What a workload does with a request its model's context cannot hold: refuse the trace, clip
#: the request's prompt, or drop the request (:func:`schedlab.workload.kinds.fit_context`).
TOO_LONG = ("refuse", "clip", "drop")

#: A name that becomes a path component or a command word (a scheduler's, a router's, a
#: workload's): letters, digits, ``_``, ``.`` and ``-``, not ``.`` or ``..`` (the pipeline's
#: config schema holds the same pattern).
NAME_PATTERN = r"(?!\.\.?$)[A-Za-z0-9_.-]+"

# -- bounds of what is read from outside -------------------------------------------------------
# Values past these are refused where they are read (command line, files, config, client hints):
# every computation downstream stays finite and every array fits an index.
#: Requests per second (a burst is ``inf`` where a command says so).
MAX_RATE_RPS = 1e6
#: Seconds of a run, of arrivals, or at which a request arrives (about three years).
MAX_RUN_S = 1e8
#: Seconds of one audio clip (about 28 hours).
MAX_AUDIO_S = 1e5
#: Tokens of one prompt or one output.
MAX_TOKENS = 10**7
#: Seconds one engine step may last, and a step-time term may cost per unit of its feature (a
#: token, an encoder input, a step): past it a step outlasts any measured engine by orders of
#: magnitude, and a run's clock loses its meaning.
MAX_STEP_S = 1e3
#: Units of one step feature in one step (tokens, encoder inputs, context tokens, attention pairs).
MAX_STEP_WORK = 1e15
#: Tokens per second of audio (kappa; speech runs at about 3).
MAX_KAPPA = 1e3
#: Requests of one trace or pool, whatever the memory.
MAX_REQUESTS = 10**9
#: Requests one search (a root finder's or a capacity search's runs) or one study of many runs
#: may simulate in all (:func:`schedlab.limits.check_work`): hours of runs, far more than any search
#: or study of the shipped configuration simulates.
MAX_SIMULATED_REQUESTS = 10**8
#: Any other positive setting (a factor, a count of repeats or trials).
MAX_NUMBER = 1e9
#: The most replicas a cluster run takes (each holds per-request arrays of the whole trace).
MAX_REPLICAS = 1024
