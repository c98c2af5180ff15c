"""The pipeline's configuration (``config.yaml``), checked in one place for the Snakefile (before
any job) and for ``schedlab check-config`` (before a long run): the same input gives the same
one-line :class:`~schedlab.errors.SchedlabError`.

First its shape, against the JSON schema shipped with the package (:data:`SCHEMA`: types,
required keys, bounds, fixed choices, names that become paths), its first problem naming the key
(``config key asr.experiments.burst.rates[0]: ...``); and the results folder. Then what the
schema cannot express (:func:`reference_problems`): names against the registries (schedulers,
routers, workload kinds and their parameters, so a plug-in's need no schema edit) and the
catalogue (models, hardware, GPUs with shipped profiles), and the references between sections;
every problem of every section in one line (``config: ...``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import jsonschema
import yaml

from schedlab import registry
from schedlab.errors import SchedlabError
from schedlab.io import read_text
from schedlab.latency.catalogue import (
    hardware, hardware_names, model_arch, model_names, shipped_hardware, shipped_models,
)
from schedlab.validation.documents import check_parameter_values, check_workload_spec

#: The configuration's JSON schema.
SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"


def read_config(path: str | os.PathLike) -> dict:
    """A configuration file (YAML, or JSON); its shape is checked by :func:`check_config`."""
    text = read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        raise SchedlabError(f"{path}: not valid YAML: {getattr(e, 'problem', None) or e}{at}") from None
    except (ValueError, RecursionError) as e:  # absurd nesting
        raise SchedlabError(f"{path}: not valid YAML: {e}") from None


def check_config(config) -> None:
    """``config``'s shape (:data:`SCHEMA`), its results folder, then its names and references
    (:func:`reference_problems`); the first failing step raises one line."""
    check_shape(config)
    check_parameter_shapes(config)
    check_results(config["results"])
    problems = reference_problems(config)
    if problems:
        raise SchedlabError("config: " + "; ".join(problems))


# -- shape ------------------------------------------------------------------------------------
def _key(path) -> str:
    """``asr.experiments.burst.rates[0]`` from a JSON path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error) -> str:
    value = error.instance
    if isinstance(value, float) and math.isnan(value):
        return "must be a number, not NaN"
    return error.message


def check_shape(config) -> None:
    """``config`` against :data:`SCHEMA`: its first problem (jsonschema's best match) as one
    line naming its key."""
    schema = yaml.safe_load(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        where = f"config key {_key(error.absolute_path)}" if error.absolute_path else "config"
        raise SchedlabError(f"{where}: {_problem(error)}")


def check_parameter_shapes(config) -> None:
    """The values of each tournament workload's kind parameters (the registered kind's
    annotations, which the schema cannot hold), the first problem as one line naming its key;
    an unknown kind or parameter name is a reference problem (:func:`reference_problems`)."""
    for name, spec in config["tournament"]["workloads"].items():
        try:
            entry = registry.workload_entry(spec["kind"])
        except SchedlabError:
            continue
        check_parameter_values(entry, spec, f"tournament.workloads.{name}")


def check_results(results: str) -> None:
    """The results folder, where every output goes (relative to where the pipeline runs): a
    folder or a new path, under folders (a file in its place gave a Snakemake traceback of some
    40 lines)."""
    path = Path(results)
    for where in (path, *path.parents):
        if where.exists() and not where.is_dir():
            raise SchedlabError(f"config key results: {results} "
                                f"{'is' if where == path else f'lies under {where}, which is'} a file, not a folder")
        if where.exists():
            return


# -- names and references ---------------------------------------------------------------------
def scheduler_problems(key: str, names, kind: str | None = None, modality: str | None = None) -> list[str]:
    """One line for each of ``names`` that is not a registered scheduler of ``kind`` with a
    meaning on ``modality`` workloads."""
    problems = []
    for name in names:
        try:
            entry = registry.entry(name, kind)
        except SchedlabError as e:
            problems.append(f"{key}: {e}")
            continue
        if modality is not None and modality not in entry.modalities:
            problems.append(f"{key}: scheduler {name!r} has no meaning on {modality} workloads "
                            f"(registered for {', '.join(entry.modalities)})")
    return problems


def backend_problems(key: str, name: str) -> list[str]:
    """One line if ``name`` is not a registered backend the pipeline runs its studies on (one
    that runs batch builders as well as queue policies)."""
    try:
        registry.backend_entry(name, kind=registry.BATCH)
    except SchedlabError as e:
        return [f"{key}: {e}"]
    return []


def router_problems(key: str, names) -> list[str]:
    """One line for each of ``names`` that is not a registered router."""
    problems = []
    for name in names:
        try:
            registry.router_entry(name)
        except SchedlabError as e:
            problems.append(f"{key}: {e}")
    return problems


def workload_kind_problems(key: str, kind: str, modality: str) -> list[str]:
    """One line if ``kind`` is not a registered workload kind of ``modality``."""
    try:
        entry = registry.workload_entry(kind)
    except SchedlabError as e:
        return [f"{key}: {e}"]
    if entry.modality != modality:
        return [f"{key}: workload kind {kind!r} makes {entry.modality} requests, not {modality}"]
    return []


def _model_problems(key: str, model: str) -> list[str]:
    if model not in model_names():
        return [f"{key} {model!r} is not a known model ({', '.join(model_names())})"]
    return []


def _hardware_problems(key: str, name: str) -> list[str]:
    if name not in hardware_names():
        return [f"{key} {name!r} is not in the catalogue ({', '.join(hardware_names())})"]
    return []


def _section(name: str, problems: list[str]) -> list[str]:
    """A section's problems as one item, under its name."""
    return [f"{name}: " + "; ".join(problems)] if problems else []


def _paper_a(config) -> list[str]:
    """Paper A's sections (`asr`, the engine's reduced sweep in `vllm`, `fidelity`) and the
    GPU profiles (`profile.gpu`)."""
    asr, vllm, fidelity = config["asr"], config["vllm"], config["fidelity"]
    problems = _hardware_problems("asr.hardware", asr["hardware"])
    for name, workload in asr["workloads"].items():
        problems += workload_kind_problems(f"asr.workloads.{name}", workload["kind"], registry.ASR)
    for name, exp in asr["experiments"].items():
        if exp["workload"] not in asr["workloads"]:
            problems.append(f"experiment {name!r}: unknown workload {exp['workload']!r}")
        if exp["model"] not in model_names():
            problems.append(f"experiment {name!r}: unknown model {exp['model']!r} ({', '.join(model_names())})")
    # The served experiments: Whisper's reduced sweep and the decoder fidelity study, their
    # traces drawn from paper A's workloads.
    for name, exp in vllm["reduced_experiments"].items():
        if exp["workload"] not in asr["workloads"]:
            problems.append(f"vllm.reduced_experiments.{name}: unknown workload {exp['workload']!r}")
    if fidelity["engine"]["workload"] not in asr["workloads"]:
        problems.append(f"fidelity.engine: unknown workload {fidelity['engine']['workload']!r}")
    problems += _model_problems("vllm.asr.model", vllm["asr"]["model"])
    problems += _model_problems("vllm.model", vllm["model"])
    problems += scheduler_problems("asr.policies", asr["policies"], modality=registry.ASR)
    for key, policies in (("fidelity.policies", fidelity["policies"]), ("vllm.asr.policies", vllm["asr"]["policies"])):
        problems += scheduler_problems(key, policies, kind=registry.QUEUE, modality=registry.ASR)
    problems += _model_problems("asr.calibration.model", asr["calibration"]["model"])
    if fidelity["asr"]["experiment"] not in asr["experiments"]:
        problems.append(f"fidelity.asr.experiment {fidelity['asr']['experiment']!r} is not in asr.experiments")
    for gpu in config["profile"]["gpu"]:
        if gpu not in shipped_hardware():
            problems.append(f"profile.gpu: no shipped profiles for {gpu!r} (shipped: {', '.join(shipped_hardware())})")
    cost = config["profile"]["scheduler_cost"]
    problems += workload_kind_problems("profile.scheduler_cost.kind", cost["kind"], registry.LLM)
    if cost["model"] not in shipped_models(cost["hardware"]):
        problems.append(f"profile.scheduler_cost: no shipped profile of {cost['model']!r} on {cost['hardware']!r}")
    return problems


def _ewsjf(ewsjf) -> list[str]:
    problems = _model_problems("ewsjf.model", ewsjf["model"])
    try:  # paper B's hardware is several GPUs (4xA100-80GB)
        hardware(ewsjf["hardware"])
    except SchedlabError as e:
        problems.append(f"ewsjf.hardware: {e}")
    policies = ewsjf["engine"]["policies"]
    problems += scheduler_problems("ewsjf.engine.policies", policies, kind=registry.QUEUE)
    if policies[0] != "fcfs":
        problems.append("ewsjf.engine.policies: FCFS comes first (sim's step-time model is fitted on its steps)")
    return problems


def _slai(slai) -> list[str]:
    routing = slai["routing"]
    schedulers = slai["schedulers"] + slai["throughput_schedulers"] + slai["fidelity"]["schedulers"]
    problems = scheduler_problems("schedulers", schedulers + routing["schedulers"])
    problems += router_problems("routing.routers", routing["routers"])
    problems += scheduler_problems("engine.schedulers", slai["engine"]["schedulers"], kind=registry.BATCH)
    problems += _hardware_problems("slai.hardware", slai["hardware"])
    problems += _model_problems("slai.model", slai["model"])
    return problems


def _extensions(extensions) -> list[str]:
    """Each switching phase's pool is a registered ASR workload kind."""
    problems = []
    for i, phase in enumerate(extensions["switching"].get("phases") or []):
        problems += workload_kind_problems(f"switching.phases[{i}].pool", phase["pool"], registry.ASR)
    return problems


def _tournament(tournament) -> list[str]:
    """Each workload's kind and its parameters (the registry's), the entrants, the cluster
    study's routers and workloads."""
    workloads, cluster = tournament["workloads"], tournament["cluster"]
    problems, modality = [], {}
    for name, spec in workloads.items():
        try:
            check_workload_spec(name, spec)
        except SchedlabError as e:
            problems.append(str(e))
            continue
        modality[name] = registry.workload_entry(spec["kind"]).modality
    problems += scheduler_problems("entrants", tournament["entrants"])
    problems += scheduler_problems("cluster.entrants", cluster["entrants"], modality=registry.LLM)
    problems += router_problems("cluster.routers", cluster["routers"])
    for name in cluster["workloads"]:
        if name not in workloads:
            problems.append(f"cluster.workloads: {name!r} is not in tournament.workloads")
        elif modality.get(name, registry.LLM) != registry.LLM:
            problems.append(f"cluster.workloads: {name!r} is not an LLM workload")
    return problems


def _transformers(transformers) -> list[str]:
    held_out = transformers["held_out"]
    problems = scheduler_problems("held_out", held_out, kind=registry.QUEUE, modality=registry.LLM)
    # as the engine refuses them (its check_policy), without importing the engine
    planners = [name for name in held_out
                if name in registry.names(registry.QUEUE) and "arena" in registry.entry(name).needs]
    problems += [f"held_out: {name!r} plans with a step-time model, which transformers' real engine does not have"
                 for name in planners]
    model = transformers["model"]
    if model not in model_names():
        problems.append(f"model {model!r} is not a known model ({', '.join(model_names())})")
    elif model_arch(model).encoder_frames:
        problems.append(f"model {model!r} is an encoder-decoder model; transformers' engine serves decoder models")
    return problems


def _slosa(slosa) -> list[str]:
    """Paper D's predictor: the paper's reference values or a registered step-time source."""
    predictors = ["reference", *registry.source_names()]
    if slosa["predictor"] not in predictors:
        return [f"slosa.predictor {slosa['predictor']!r} is neither the paper's reference nor a registered step-time "
                f"source ({', '.join(predictors)})"]
    return []


def reference_problems(config: dict) -> list[str]:
    """What the schema cannot express in ``config`` (a shape the schema accepts), one line per
    problem, each section's under its name."""
    return [
        *backend_problems("backend", config["backend"]),
        *_paper_a(config),
        *_ewsjf(config["ewsjf"]),
        *_section("slai", _slai(config["slai"])),
        *_section("extensions", _extensions(config["extensions"])),
        *_section("tournament", _tournament(config["tournament"])),
        *_model_problems("tournament.engines.llm.model", config["tournament"]["engines"]["llm"]["model"]),
        *_section("transformers", _transformers(config["transformers"])),
        *_slosa(config["slosa"]),
    ]
