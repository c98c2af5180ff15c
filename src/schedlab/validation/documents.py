"""JSON inputs and numeric settings checked with pydantic models: step-time models, kappa
fits, engine limits, run lengths, tournament workload specs and workload kinds' parameters,
engine specs and the extension studies' specs. :func:`parse` turns the first problem into one line naming the source and key.
The files an engine is built from are read into its objects by
:mod:`schedlab.validation.engine_files`."""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import MISSING, fields
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, create_model, model_validator

from schedlab.engine.steptime import StepTimeModel
from schedlab.contracts import MAX_KAPPA, MAX_NUMBER, MAX_RATE_RPS, MAX_REQUESTS, MAX_RUN_S, MAX_STEP_S
from schedlab.errors import SchedlabError
from schedlab.io import read_json

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
#: The share of device memory an engine may use.
MemoryShare = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1, le=MAX_NUMBER)]
NonNegativeInt = Annotated[int, Field(ge=0, le=2**63 - 1)]
#: Requests per second, seconds of a run, requests of a trace, tokens per second of audio.
Rate = Annotated[float, Field(gt=0, le=MAX_RATE_RPS, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, le=MAX_RUN_S, allow_inf_nan=False)]
Requests = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]
Kappa = Annotated[float, Field(gt=0, le=MAX_KAPPA, allow_inf_nan=False)]
Rates = Annotated[list[Rate], Field(min_length=1)]
#: Engine limits (sequences, tokens per step, KV block size and blocks): vLLM's ``int`` fields,
#: bounded so that every count the engines make of them stays a machine integer.
Limit = Annotated[int, Field(ge=1, le=2**31 - 1)]


class Strict(BaseModel):
    """No type coercion (``"5"`` is not 5) and no unknown keys."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def parse(model: type[BaseModel], data, source: str | os.PathLike, config_key: str | None = None):
    """``data`` as ``model``, or a one-line :class:`SchedlabError` naming ``source``, the key
    and the offending value of the first problem (with ``config_key``, the key's whole path in
    the pipeline's config instead: ``config key <config_key>.<key>: ...``)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        key = ".".join(str(k) for k in first["loc"] if k != "root" and not str(k).startswith("function-"))
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "value_error" and not key:  # a rule across keys says what it got
            raise SchedlabError(f"{source}: {message}") from None
        value = repr(first.get("input"))
        value = value if len(value) <= 40 else value[:37] + "..."
        if config_key is not None and key:
            raise SchedlabError(f"config key {config_key}.{key}: {message} (got {value})") from None
        where = f" key {key!r}:" if key else ""
        raise SchedlabError(f"{source}:{where} {message} (got {value})") from None


# -- step-time model ----------------------------------------------------------------------
#: Seconds a step-time term costs per unit of its feature (or per request, the front end's).
Cost = Annotated[float, Field(ge=0, le=MAX_STEP_S, allow_inf_nan=False)]
#: A width in tokens (a GEMM tile, a batch size).
Width = Annotated[int, Field(ge=0, le=2**20)]


#: A step-time model file (:class:`schedlab.engine.steptime.StepTimeModel`, whose fields it
#: checks, so a new term is declared once): every term is a cost, so finite, non-negative and at
#: most :data:`~schedlab.contracts.MAX_STEP_S` seconds per unit (a step that lasts longer has no
#: meaning); an integer field is a width in tokens (``tile``, 0: no staircase; ``knee``, 0: no knee).
StepTimeTerms = create_model(
    "StepTimeTerms", __base__=Strict,
    **{f.name: ((dict, {}) if f.name == "meta" else
                (Width if f.type == "int" else Cost, ... if f.default is MISSING else f.default))
       for f in fields(StepTimeModel)},
)


def check_steptime(terms, source: str | os.PathLike) -> dict:
    """The checked fields of a step-time model (:class:`StepTimeTerms`) from ``source``."""
    return parse(StepTimeTerms, terms, source).model_dump()


# -- paper D's latency predictor ----------------------------------------------------------------
Coefficient = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_NUMBER, le=MAX_NUMBER)]


class PredictorPhase(Strict):
    """One phase's ``a*b*l + beta*b + g*l + d`` seconds: finite numbers (a fitted term may be
    negative; what the predictions mean is checked against a workload,
    :meth:`schedlab.fit.latency_predictor.LatencyPredictor.check_positive`)."""

    a: Coefficient
    beta: Coefficient
    g: Coefficient
    d: Coefficient


class PredictorFile(Strict):
    """A latency predictor file (`schedlab slosa fit`)."""

    prefill: PredictorPhase
    decode: PredictorPhase
    meta: dict = {}


def read_predictor(path: str | os.PathLike) -> dict:
    """The checked phases and meta of a latency predictor file."""
    return parse(PredictorFile, read_json(path), path).model_dump()


# -- kappa ------------------------------------------------------------------------------------
class KappaFit(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    status: Literal["fitted"]
    kappa: Kappa


class KappaMissing(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    status: Literal["not reproduced"]
    reason: str = ""


class KappaFile(RootModel):
    """``schedlab fit kappa``'s output: language -> a fit (tokens per second of audio) or the
    reason it was not reproduced."""

    root: dict[str, Annotated[Union[KappaFit, KappaMissing], Field(discriminator="status")]]


def read_kappa(path: str | os.PathLike) -> dict[str, float]:
    """Language -> kappa of the fitted languages of a kappa file."""
    fits = parse(KappaFile, read_json(path), path).root
    return {lang: fit.kappa for lang, fit in fits.items() if isinstance(fit, KappaFit)}


# -- engine limits and run lengths ------------------------------------------------------------
class RunLength(Strict):
    """Seconds of arrivals and the warm-up at their start that is not measured."""

    duration_s: Seconds
    warmup_s: NonNegative

    @model_validator(mode="after")
    def _warmup_within(self):
        if not self.warmup_s < self.duration_s:
            raise ValueError(f"the warm-up ({self.warmup_s:g} s) must be shorter than the run ({self.duration_s:g} s)")
        return self


def check_run_length(duration_s: float, warmup_s: float, source: str = "run length") -> None:
    parse(RunLength, {"duration_s": duration_s, "warmup_s": warmup_s}, source)


# -- specs ------------------------------------------------------------------------------------
class SloTargets(Strict):
    ttft_s: Seconds | None = None
    tpot_s: Seconds | None = None
    e2e_s: Seconds | None = None


class WorkloadSpec(Strict):
    """A tournament workload (``config.yaml``'s ``tournament.workloads``): a registered kind, its
    size, seed, SLO targets and prefix cache; every other key is one of the kind's parameters
    (:func:`kind_parameters`)."""

    kind: Annotated[str, Field(min_length=1)]
    n_requests: Annotated[int, Field(ge=2, le=MAX_REQUESTS)]
    seed: NonNegativeInt = 0
    slo: SloTargets = SloTargets()
    prefix_caching: bool = False


def check_workload_spec(name: str, spec) -> tuple[WorkloadSpec, dict]:
    """A tournament workload's spec and its kind's parameters (defaults filled), its requests
    within this machine's memory."""
    from schedlab import registry
    from schedlab.limits import check_fits_in_memory

    source = f"tournament workload {name!r}"
    common = {k: v for k, v in spec.items() if k in WorkloadSpec.model_fields} if isinstance(spec, dict) else spec
    checked = parse(WorkloadSpec, common, source)
    try:
        entry = registry.workload_entry(checked.kind)
    except SchedlabError as e:
        raise SchedlabError(f"{source}: {e}") from None
    parameters = kind_parameters(entry, {k: v for k, v in spec.items() if k not in common}, source)
    check_fits_in_memory(checked.n_requests, source)
    return checked, parameters


@functools.cache
def _parameters_model(entry) -> type[BaseModel]:
    """The pydantic model of a workload kind's parameters: each one's annotation and default."""
    fields = {name: (annotation, ... if default is inspect.Parameter.empty else default)
              for name, (annotation, default) in entry.parameters().items()}
    return create_model(f"{entry.name} parameters", __config__=Strict.model_config, **fields)


def check_parameter_values(entry, parameters: dict, config_key: str) -> None:
    """The values of the parameters of ``entry`` (a workload kind) that ``parameters`` holds,
    checked against their annotations, the first problem named by its key in the config
    (``config key <config_key>.<parameter>: ...``); names the kind does not take are left to
    :func:`kind_parameters`."""
    known = entry.parameters()
    parse(_parameters_model(entry), {k: v for k, v in parameters.items() if k in known}, config_key, config_key)


def kind_parameters(entry, parameters: dict, source: str) -> dict:
    """``parameters`` of the workload kind ``entry`` checked against its annotations (one line
    naming ``source`` and the key: an unknown one says which the kind takes), defaults filled."""
    known = list(entry.parameters())
    unknown = [k for k in parameters if k not in known]
    if unknown:
        takes = f"its parameters: {', '.join(known)}" if known else "it takes none"
        raise SchedlabError(f"{source}: workload kind {entry.name!r} has no parameter {unknown[0]!r} ({takes})")
    return dict(parse(_parameters_model(entry), parameters, source))


class ArenaSpec(Strict):
    """An engine as the tournament and extension commands read it: files of its step-time
    model (and, for ASR, kappa), the hardware and model, and engine limits."""

    steptime: Annotated[str, Field(min_length=1)]
    hardware: Annotated[str, Field(min_length=1)]
    model: Annotated[str, Field(min_length=1)]
    kappa: Annotated[str, Field(min_length=1)] | None = None
    max_num_seqs: Limit | None = None
    max_num_batched_tokens: Limit | None = None
    block_size: Limit | None = None
    gpu_memory_utilization: MemoryShare | None = None


#: The longest silence the VAD study pads a clip with: a minute, past Whisper's 30 s window
#: (longer padding makes clips no ASR request holds, and a study the detector takes hours over).
MAX_PAD_S = 60.0


class VadSpec(Strict):
    rates: Rates | None = None
    duration_s: Seconds = 300.0
    pad_fraction: Share = 0.5
    max_pad_s: Annotated[float, Field(ge=0, le=MAX_PAD_S, allow_inf_nan=False)] = 10.0
    seed: NonNegativeInt = 0


class KappaStudySpec(Strict):
    shares: Annotated[dict[str, Share], Field(min_length=1)] | None = None
    ratios: Annotated[list[Annotated[float, Field(gt=0, le=MAX_NUMBER, allow_inf_nan=False)]], Field(min_length=1)] | None = None
    rates: Rates | None = None
    duration_s: Seconds = 300.0
    seed: NonNegativeInt = 0


class Phase(Strict):
    name: Annotated[str, Field(min_length=1)]
    duration_s: Seconds
    rate: Rate
    #: A registered ASR workload kind (checked against the registry where the phases are read,
    #: :func:`schedlab.workload.drift.parse_phases`).
    pool: Annotated[str, Field(min_length=1)]


class SwitchingSpec(Strict):
    phases: Annotated[list[Phase], Field(min_length=1)] | None = None
    seed: NonNegativeInt = 0


#: The extension studies' ``--spec`` models, by command.
EXTENSION_SPECS = {"vad": VadSpec, "kappa": KappaStudySpec, "switching": SwitchingSpec}


# -- run summaries ----------------------------------------------------------------------------
def _json_kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def check_summaries(summaries: list, sources: list) -> None:
    """Run summaries (JSON) to gather into one table: each a non-empty object of flat keys, and
    each key of one kind (number, string, boolean; null where a value is missing) in every
    summary, as a table's column is; one line naming the summary and the key otherwise."""
    kinds: dict[str, tuple[str, str]] = {}
    for summary, source in zip(summaries, sources):
        if not isinstance(summary, dict) or not summary:
            raise SchedlabError(f"{source}: not a run summary (a JSON object of flat keys)")
        for key, value in summary.items():
            kind = _json_kind(value)
            if kind in ("list", "object"):
                raise SchedlabError(f"{source}: not a run summary: key {key!r} holds a {kind} (summaries have flat keys)")
            if kind == "null":
                continue
            first = kinds.setdefault(key, (kind, source))
            if first[0] != kind:
                raise SchedlabError(f"{source}: key {key!r} is a {kind}, where {first[1]} has a {first[0]}: "
                                    "not summaries of one table")


def check_measured(summary: dict, what: str) -> dict:
    """A run's summary that measured something: at least one request completed, and a median
    end-to-end latency that is a number; otherwise one line saying why the run measured
    nothing (``what`` names the run), and no output is written."""
    import math

    if not summary.get("completed"):
        raise SchedlabError(f"{what}: no request completed ({summary.get('arrived', 0)} arrived): the run measured "
                            "nothing, and no summary is written")
    median = summary.get("p50_e2el_ms")
    if not isinstance(median, (int, float)) or not math.isfinite(median) or median < 0:
        raise SchedlabError(f"{what}: the median end-to-end latency is {median} ms: the run measured nothing a "
                            "summary can hold, and none is written")
    return summary
