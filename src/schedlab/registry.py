"""One registry of schedulers: waiting-queue policies and batch builders alike.

A **queue policy** (:class:`schedlab.policies.base.Policy`) orders the waiting requests;
the engine runs it inside vLLM-style continuous batching, and vLLM's own scheduler takes it
as its waiting queue. A **batch builder** (:class:`schedlab.engine.scheduler.Scheduler`)
composes each step's plan itself. Each registers once, with a decorator on its class (one
decorator per named variant) or on a factory function::

    @register("edf", kind=QUEUE, summary="earliest deadline first")
    class EDF(Policy): ...

    @register("sarathi-fcfs", kind=BATCH, paper="C", params={"order": "fcfs"})
    @register("sarathi-spf", kind=BATCH, paper="C", params={"order": "spf"})
    class Sarathi(Builder): ...

A class is called with ``params``; a factory function with the run's :class:`Context` and
``params`` (for a scheduler that needs the whole trace in advance, or the engine's limits).

schedlab's generic schedulers (:mod:`schedlab.policies`, :mod:`schedlab.builders`) register
when the registry is first read; every other package, the four papers' included, registers
through the entry-point group ``schedlab.schedulers``: each entry names a module whose import
registers its schedulers, as pytest and vLLM load their plug-ins::

    [project.entry-points."schedlab.schedulers"]
    edf = "schedlab_edf"

A plug-in that fails to load (an import error, a name already taken, a class that does not
meet its kind's protocol) is set aside with a one-line reason; everything else keeps working,
and asking for one of its names (the one it tried to take from another scheduler too), or
listing the registry, reports that reason.

At run time a plug-in's scheduler is held to its protocol: an exception raised inside it, or an
answer that breaks the protocol (:mod:`schedlab.policies.contract`), ends the run with a
:class:`PluginError`, one line naming the scheduler, its distribution and module, the method
and what was wrong; the exception it stands for is its ``__cause__`` (the command line's
``--debug`` shows the traceback).

**Routers** (a cluster's choice of replica for each request, :mod:`schedlab.routers`) have a
table of their own beside the schedulers', filled the same way: schedlab's generic routers
register when the registry is first read, a paper's (or a plug-in's) from a module of the
same entry-point group, with :func:`register_router`::

    @register_router("round-robin", summary="each request to the next replica in turn")
    class RoundRobin(Router): ...

**Workload kinds** (what ``schedlab workload`` makes, the tournament plays and the pipeline's
config names) and the **pools** of requests they draw from have tables of their own, filled the
same way: a kind is a function of a :class:`schedlab.workload.kinds.Draw` (the rate, the size,
the seed, the pools) and of keyword parameters with defaults, registered where it is defined,
with :func:`register_workload`; a pool is a loader of a table, with :func:`register_pool`.
schedlab's generic kinds and pools (:data:`WORKLOAD_PACKAGES`) register when the workload table is
first read, a paper's or a plug-in's from a module of the same entry-point group::

    @register_workload("openchat", pools=("openchat",), paper="C")
    def openchat(draw, share: Share = 0.5) -> pd.DataFrame: ...

**Step-time sources** (where ``schedlab profile`` and ``schedlab steptime`` get a latency profile
table, which ``schedlab fit steptime`` fits) have a table of their own too: a function of keyword
options (``hardware``, ``model``; a source that times this machine also ``device``, ``repeats``
and ``engine``, a function that returns the vLLM engine's limits from the command's options)
returning the table, registered with
:func:`register_source`; schedlab's (:data:`SOURCE_PACKAGES`) when the table is first read, a
plug-in's from a module of the same entry-point group::

    @register_source("roofline", summary="predicted from the GPU's peaks and the model's shapes")
    def roofline(*, hardware, model, **_) -> pd.DataFrame: ...

**Backends** (where a scheduler runs: schedlab's engine, vLLM's or transformers' scheduler on a
virtual clock, a real engine on the wall clock) have a table of their own: each is registered
where it is defined, with :func:`register_backend`, by the scheduler kinds it runs and, for one on
a virtual clock, the function that serves a trace on it (what ``schedlab simulate`` calls); a
real engine is run by its own commands. schedlab's (:data:`BACKEND_PACKAGES`, listed in that
order) register when the table is first read, a plug-in's from a module of the same entry-point
group::

    register_backend("vllm-sim", run=run, summary="vLLM's real v1 scheduler on a virtual clock")
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import pkgutil
import re
import sys
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

from schedlab.contracts import NAME_PATTERN
from schedlab.errors import SchedlabError

#: Kinds of scheduler: a waiting-queue policy, or a batch builder that plans every step.
QUEUE, BATCH = "queue", "batch"
KINDS = (QUEUE, BATCH)
#: Workload modalities: speech recognition (encoder-decoder, 4-token prompts), LLM text.
ASR, LLM = "asr", "llm"
#: The entry-point group plug-in packages register through.
GROUP = "schedlab.schedulers"
#: schedlab's own generic packages, registered first (imported by name: the registry sits
#: below them and imports none of them).
BUILTIN_PACKAGES = ("schedlab.policies", "schedlab.builders", "schedlab.routers")
#: What each kind must offer (the engine and vLLM call these).
PROTOCOL = {
    QUEUE: ("push", "peek", "pop", "remove", "__iter__", "__len__", "victim"),
    BATCH: ("bind", "arrive", "requeue", "n_waiting", "schedule", "drop"),
}
#: What a router must offer (the cluster calls these), and the attributes the cluster reads.
ROUTER_PROTOCOL = ("bind", "route")
ROUTER_ATTRIBUTES = ("reads_state", "reads_kv")
#: schedlab's own packages whose modules register workload kinds and pools (each one imported
#: when the workload table is first read).
WORKLOAD_PACKAGES = ("schedlab.workload", "schedlab.data")
#: Where schedlab's own step-time sources are registered.
SOURCE_PACKAGES = ("schedlab.fit.sources",)
#: Where schedlab's own backends are registered, in the order they are listed (the command line's
#: choices, the pipeline's sweeps): schedlab's engine, vLLM's scheduler on a virtual clock, a real
#: vLLM engine, transformers' scheduler and engine. Each module registers without importing its
#: engine's library (vLLM, transformers): listing the backends imports neither.
BACKEND_PACKAGES = ("schedlab.simulate", "schedlab.backends.vllm_sim", "schedlab.backends.vllm",
                    "schedlab.backends.transformers")
#: How a workload kind times its requests: at the arrival process the caller draws (gamma gaps
#: at the rate, Poisson at burstiness 1; sized by a count of requests or a duration), or by its
#: own timing (a trace's timestamps, a conversation's think times; sized by a count).
GAMMA, OWN = "gamma", "own"
#: The distribution of schedlab's own schedulers (any other is a plug-in's).
SCHEDLAB = "schedlab"


class PluginError(SchedlabError):
    """A scheduler raised an exception, or broke its protocol, while a run called it."""


@dataclass(frozen=True)
class Context:
    """What a run offers a factory: the whole ``trace`` (for a scheduler that maps the
    requests in advance) and the ``arena`` (engine limits, step-time model). A backend that
    sees requests one at a time (a served engine) has no trace."""

    trace: Any = None
    arena: Any = None


class _Registered:
    """What every registered thing has: a name, the module that defines it and the distribution
    that registered it (schedlab, or a plug-in's)."""

    #: What it is, as errors name it ("scheduler", "router", ...).
    WHAT: ClassVar[str]

    @property
    def plugin(self) -> bool:
        """Whether a distribution other than schedlab registered it."""
        return self.distribution != SCHEDLAB

    def describe(self) -> str:
        """It as errors name it: what it is, its name, distribution and module."""
        return f"{self.WHAT} {self.name!r} ({self.distribution}, {self.module})"


@dataclass(frozen=True)
class Entry(_Registered):
    """One registered scheduler."""

    name: str
    kind: str
    factory: Callable[[Context], Any] = field(repr=False)
    #: Workload modalities it has a meaning on (a duration-ordered policy on speech, ...).
    modalities: tuple[str, ...]
    #: The paper it reproduces ("A".."D"; "A+" for schedlab's extension of paper A), or None.
    paper: str | None
    #: The parameters this name fixes (a variant of a parameterised class).
    params: dict
    #: What the factory needs from the run's :class:`Context` ("trace", "arena").
    needs: tuple[str, ...]
    summary: str
    #: Where it is defined: the module, and the distribution that registered it.
    module: str
    distribution: str
    #: The registered class or factory function.
    target: Any = field(default=None, repr=False)
    WHAT: ClassVar[str] = "scheduler"

    def make(self, context: Context = Context()) -> Any:
        """A fresh instance for one run; checks what the factory needs and what it returns."""
        missing = [n for n in self.needs if getattr(context, n) is None]
        if missing:
            raise SchedlabError(f"scheduler {self.name!r} needs the run's {' and '.join(missing)}, "
                                "which this backend does not give it")
        try:
            made = self.factory(context)
        except Exception as e:
            raise failure(self, "__init__" if inspect.isclass(self.target) else self.target.__name__, e)
        lacking = [m for m in PROTOCOL[self.kind] if not callable(getattr(made, m, None))]
        if lacking:
            raise SchedlabError(f"{self.describe()}: a {self.kind} scheduler needs {', '.join(lacking)}")
        if not inspect.isclass(self.target):
            _made_by.setdefault(type(made), self)
        return made


@dataclass(frozen=True)
class RouterEntry(_Registered):
    """One registered router."""

    name: str
    cls: type = field(repr=False)
    #: The paper it reproduces, or None.
    paper: str | None
    #: The parameters this name fixes (a variant of a parameterised class).
    params: dict
    summary: str
    module: str
    distribution: str
    WHAT: ClassVar[str] = "router"

    def make(self, **options) -> Any:
        """A fresh instance for one run, with the run's ``options`` (a seed) over ``params``; a
        plug-in's is guarded (:class:`_GuardedRouter`)."""
        if self.distribution == SCHEDLAB:
            return self.cls(**{**self.params, **options})
        return _GuardedRouter(self, {**self.params, **options})


class _GuardedRouter:
    """A plug-in's router, each call to it guarded: an exception it raises, or an attribute of the
    router protocol it lacks, ends the run in one line naming the plug-in, its method and what
    was wrong (a :class:`SchedlabError` it raises passes as it is)."""

    def __init__(self, entry: RouterEntry, options: dict) -> None:
        self._entry = entry
        self._router = self._call("__init__", lambda: entry.cls(**options))
        for name in ROUTER_ATTRIBUTES:
            setattr(self, name, self._call(name, lambda: getattr(self._router, name)))

    def _call(self, method: str, call):
        try:
            return call()
        except SchedlabError:
            raise
        except Exception as e:
            what = str(e).splitlines()[0] if str(e) else ""
            raise PluginError(f"{self._entry.describe()}: {method} raised {type(e).__name__}: {what}") from e

    def bind(self, cluster) -> None:
        self._call("bind", lambda: self._router.bind(cluster))

    def route(self, i: int, candidates):
        return self._call("route", lambda: self._router.route(i, candidates))


@dataclass(frozen=True)
class WorkloadEntry(_Registered):
    """One registered workload kind."""

    name: str
    #: Its requests' modality (:data:`ASR` or :data:`LLM`).
    modality: str
    #: The pools it draws from, by name (:func:`pool_entry`).
    pools: tuple[str, ...]
    #: How it times its requests (:data:`GAMMA` or :data:`OWN`).
    arrivals: str
    #: The registered function: ``function(draw, **parameters) -> trace``.
    function: Callable = field(repr=False)
    paper: str | None
    summary: str
    module: str
    distribution: str
    WHAT: ClassVar[str] = "workload kind"

    def parameters(self) -> dict[str, tuple[Any, Any]]:
        """Its parameters, in order: name -> (annotation, default), the function's keyword
        arguments after the draw."""
        hints = typing.get_type_hints(self.function, include_extras=True)
        params = list(inspect.signature(self.function).parameters.values())[1:]
        return {p.name: (hints.get(p.name, Any), p.default) for p in params}

    def make(self, draw, parameters: dict):
        """Its trace for ``draw``; a plug-in's exception names the plug-in (:func:`failure`)."""
        try:
            return self.function(draw, **parameters)
        except Exception as e:
            raise failure(self, self.function.__name__, e)


@dataclass(frozen=True)
class PoolEntry(_Registered):
    """One registered pool: a table of requests (or utterances) a workload kind draws from."""

    name: str
    #: The loader (no arguments): from the data mirror, the download cache or a download.
    loader: Callable[[], Any] = field(repr=False)
    #: The columns every table of it holds (a file given in its place is held to them).
    columns: tuple[str, ...]
    summary: str
    module: str
    distribution: str
    WHAT: ClassVar[str] = "pool"

    def load(self):
        """The pool's table, from its data sources."""
        try:
            return self.loader()
        except Exception as e:
            raise failure(self, self.loader.__name__, e)


@dataclass(frozen=True)
class SourceEntry(_Registered):
    """One registered step-time source: a latency profile table (one row per step composition,
    timed or priced) for a model on a catalogue GPU or on this machine."""

    name: str
    #: The registered function: ``function(hardware=..., model=..., **options) -> table``.
    function: Callable = field(repr=False)
    #: Whether it times this machine (``device``, ``repeats``, ``engine``) rather than pricing a
    #: catalogue GPU (``hardware``) without one.
    machine: bool
    summary: str
    module: str
    distribution: str
    WHAT: ClassVar[str] = "step-time source"

    def profile(self, **options):
        """Its profile table; a plug-in's exception names the plug-in (:func:`failure`)."""
        try:
            return self.function(**options)
        except Exception as e:
            raise failure(self, self.function.__name__, e)


@dataclass(frozen=True)
class BackendEntry(_Registered):
    """One registered backend: where a run of a scheduler on a trace happens."""

    name: str
    #: The scheduler kinds it runs (:data:`QUEUE`, :data:`BATCH`).
    kinds: tuple[str, ...]
    #: On a virtual clock, the function that serves a trace:
    #: ``run(trace, scheduler, arena, *, model, warmup_s, sample_s, batching, max_in_flight) -> RunResult``;
    #: None for a real engine on the wall clock (its own commands run it).
    run: Callable | None = field(repr=False)
    summary: str
    module: str
    distribution: str
    WHAT: ClassVar[str] = "backend"

    @property
    def simulated(self) -> bool:
        """Whether it runs on a virtual clock (``schedlab simulate`` runs it)."""
        return self.run is not None


_entries: dict[str, Entry] = {}
_routers: dict[str, RouterEntry] = {}
_workloads: dict[str, WorkloadEntry] = {}
_pools: dict[str, PoolEntry] = {}
_sources: dict[str, SourceEntry] = {}
_backends: dict[str, BackendEntry] = {}
#: Plug-ins set aside: entry-point name -> one-line reason.
_broken: dict[str, str] = {}
#: Names a broken plug-in tried to register, for the error when one is asked for (a name it
#: tried to take from another scheduler included).
_broken_names: dict[str, str] = {}
#: The classes of what factory functions made, and their entries (:func:`origin`).
_made_by: dict[type, Entry] = {}
_loaded = False
#: Whether the built-ins are registered, and their names (a built-in's name is answered
#: without loading the plug-ins).
_builtins_loaded = False
_builtin_names: set[str] = set()
#: Whether schedlab's own workload kinds and pools are registered, and their names.
_workloads_loaded = False
_builtin_workloads: set[str] = set()
#: The distribution whose module is being imported (set while loading entry points), and
#: the names its registrations were refused.
_current: dict[str, Any] = {"distribution": None, "plugin": None, "refused": []}


class _Rejected(Exception):
    """A registration that cannot be accepted (reported against its plug-in)."""


def register(name: str, *, kind: str, modalities: tuple[str, ...] = (LLM,), paper: str | None = None,
             params: dict | None = None, needs: tuple[str, ...] = (), summary: str | None = None):
    """Register the decorated class or factory function under ``name`` (see the module
    docstring); returns it unchanged."""

    def add(target):
        params_ = dict(params or {})
        if inspect.isclass(target):
            lacking = [m for m in PROTOCOL.get(kind, ()) if not callable(getattr(target, m, None))]
            if lacking:
                _reject(name, f"{target.__module__}.{target.__qualname__} is registered as a {kind} scheduler "
                              f"but lacks {', '.join(lacking)}")
            factory = lambda context: target(**params_)
        else:
            factory = lambda context: target(context, **params_)
        entry = Entry(name, kind, factory, tuple(modalities), paper, params_, tuple(needs),
                      summary or _first_sentence(target), target.__module__,
                      _current["distribution"] or SCHEDLAB, target)
        # Stacked decorators run bottom-up: each goes before the names already registered for
        # the same target, so the registry keeps the order they are written in.
        own = vars(target).get("_schedlab_names", ()) if inspect.isclass(target) else getattr(target, "_schedlab_names", ())
        _add(entry, before=own)
        try:
            target._schedlab_names = (name, *own)
        except (AttributeError, TypeError):
            pass
        return target

    _check_name(name, "scheduler")
    if kind not in KINDS:
        raise SchedlabError(f"scheduler {name!r}: kind must be {' or '.join(KINDS)}, got {kind!r}")
    bad = [m for m in modalities if m not in (ASR, LLM)]
    if bad:
        raise SchedlabError(f"scheduler {name!r}: unknown modalities {bad}; choose from {ASR}, {LLM}")
    return add


def register_router(name: str, *, paper: str | None = None, params: dict | None = None,
                    summary: str | None = None):
    """Register the decorated router class under ``name`` (see the module docstring);
    returns it unchanged. The class is called with ``params`` and the run's options."""

    _check_name(name, "router")

    def add(cls):
        lacking = [m for m in ROUTER_PROTOCOL if not callable(getattr(cls, m, None))]
        lacking += [a for a in ROUTER_ATTRIBUTES if not hasattr(cls, a)]
        if lacking:
            _reject(name, f"{cls.__module__}.{cls.__qualname__} is registered as a router but lacks {', '.join(lacking)}",
                    what="router")
        entry = RouterEntry(name, cls, paper, dict(params or {}), summary or _first_sentence(cls), cls.__module__,
                            _current["distribution"] or SCHEDLAB)
        old = _routers.get(name)
        if old is not None and (old.module, old.params) != (entry.module, entry.params):
            _reject(name, f"the name {name!r} is taken by {old.module} ({old.distribution})", what="router")
        _routers[name] = entry
        return cls

    return add


def register_workload(name: str, *, modality: str = LLM, pools: tuple[str, ...] = (), arrivals: str = GAMMA,
                      paper: str | None = None, summary: str | None = None):
    """Register the decorated function as the workload kind ``name`` (see the module docstring);
    returns it unchanged. ``pools`` names the pools it draws from (each passed in
    ``draw.pools``), ``arrivals`` how it times its requests."""

    def add(function):
        _check_name(name, "workload kind")
        entry = WorkloadEntry(name, modality, tuple(pools), arrivals, function, paper,
                              summary or _first_sentence(function), function.__module__,
                              _current["distribution"] or SCHEDLAB)
        _store(_workloads, entry)
        return function

    if modality not in (ASR, LLM):
        raise SchedlabError(f"workload kind {name!r}: modality must be {ASR} or {LLM}, got {modality!r}")
    if arrivals not in (GAMMA, OWN):
        raise SchedlabError(f"workload kind {name!r}: arrivals must be {GAMMA} or {OWN}, got {arrivals!r}")
    return add


def register_pool(name: str, *, columns: tuple[str, ...], summary: str | None = None):
    """Register the decorated loader (no arguments, returns a table holding ``columns``) as the
    pool ``name``; returns it unchanged."""

    def add(loader):
        _check_name(name, "pool")
        entry = PoolEntry(name, loader, tuple(columns), summary or _first_sentence(loader), loader.__module__,
                          _current["distribution"] or SCHEDLAB)
        _store(_pools, entry)
        return loader

    return add


def register_source(name: str, *, machine: bool = False, summary: str | None = None):
    """Register the decorated function as the step-time source ``name`` (see the module
    docstring); returns it unchanged. ``machine``: it times this machine rather than pricing a
    catalogue GPU."""

    def add(function):
        _check_name(name, "step-time source")
        entry = SourceEntry(name, function, machine, summary or _first_sentence(function), function.__module__,
                            _current["distribution"] or SCHEDLAB)
        _store(_sources, entry)
        return function

    return add


def register_backend(name: str, *, kinds: tuple[str, ...] = KINDS, run: Callable | None = None,
                     summary: str | None = None) -> BackendEntry:
    """Register the backend ``name`` (see the module docstring), which runs schedulers of
    ``kinds``: with ``run``, one on a virtual clock that serves a trace through that function;
    without, a real engine on the wall clock. Called where the backend is defined; returns its
    entry."""
    _check_name(name, "backend")
    bad = [k for k in kinds if k not in KINDS]
    if not kinds or bad:
        raise SchedlabError(f"backend {name!r}: kinds must be some of {', '.join(KINDS)}, got {list(kinds)}")
    module = sys._getframe(1).f_globals["__name__"]  # the module that registers it, where it is defined
    entry = BackendEntry(name, tuple(kinds), run, summary or _first_sentence(run if run is not None else sys.modules[module]),
                         module, _current["distribution"] or SCHEDLAB)
    _store(_backends, entry)
    return entry


def _store(table: dict, entry) -> None:
    """``entry`` into ``table`` under its name, unless another module holds that name (a
    registration is then rejected); the same module registering it again replaces it."""
    old = table.get(entry.name)
    if old is not None and old.module != entry.module:
        _reject(entry.name, f"the name {entry.name!r} is taken by {old.module} ({old.distribution})", what=entry.WHAT)
    table[entry.name] = entry


def _check_name(name, what: str) -> None:
    """A registered name becomes a path component and a command word: it must match
    :data:`schedlab.contracts.NAME_PATTERN` (a plug-in's registration is then rejected)."""
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        _reject(name, f"the name {name!r} is not a {what} name (letters, digits, '_', '.' and '-'; not '.' or '..')",
                what=what)


def _first_sentence(target) -> str:
    """The first sentence of the target's own docstring, or else of its module's."""
    doc = target.__doc__ or getattr(inspect.getmodule(target), "__doc__", None) or ""
    text = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    return text.split(". ")[0].rstrip(".")


def _reject(name: str, reason: str, what: str = "scheduler"):
    if _current["plugin"] is None:
        raise SchedlabError(f"{what} {name!r}: {reason}")
    if isinstance(name, str):  # (a name that is not one cannot be asked for)
        _current["refused"].append(name)
    raise _Rejected(reason)


def _add(entry: Entry, before=()) -> None:
    old = _entries.get(entry.name)
    if old is not None and (old.module, old.params) != (entry.module, entry.params):
        _reject(entry.name, f"the name {entry.name!r} is taken by {old.module} ({old.distribution})")
    if old is not None or not any(n in _entries for n in before):
        _entries[entry.name] = entry
        return
    items = list(_entries.items())
    at = min(k for k, (n, _) in enumerate(items) if n in before)
    items.insert(at, (entry.name, entry))
    _entries.clear()
    _entries.update(items)


def _load_builtins() -> None:
    """Register schedlab's generic schedulers (once)."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for package in BUILTIN_PACKAGES:
        pkg = importlib.import_module(package)  # its __init__ imports the usual ones in order
        for info in pkgutil.iter_modules(pkg.__path__, package + "."):
            importlib.import_module(info.name)
    _builtin_names.update(_entries)


def _load() -> None:
    """Register the built-ins, then every plug-in of the entry-point group (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    _load_builtins()
    for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: (e.dist is None, e.name)):
        dist = ep.dist.name if ep.dist is not None else "?"
        before, routers_before = dict(_entries), dict(_routers)
        kinds_before, pools_before, sources_before = dict(_workloads), dict(_pools), dict(_sources)
        backends_before = dict(_backends)
        _current.update(distribution=dist, plugin=ep.name, refused=[])
        try:
            ep.load()
        except (Exception, SystemExit) as e:  # a plug-in's own failure (sys.exit too): set it aside, keep the rest
            reason = str(e).splitlines()[0] if str(e) else ""
            _broken[ep.name] = (f"plug-in {ep.name!r} ({dist}, {ep.value}) failed to load: "
                                f"{type(e).__name__ if not isinstance(e, _Rejected) else 'rejected'}: {reason}")
            added = [n for n in _entries if n not in before or _entries[n] is not before[n]]
            for n in added:  # a plug-in is accepted whole or not at all
                if n in before:
                    _entries[n] = before[n]
                else:
                    del _entries[n]
                _broken_names[n] = ep.name
            for table, earlier in ((_routers, routers_before), (_workloads, kinds_before), (_pools, pools_before),
                                   (_sources, sources_before), (_backends, backends_before)):
                for n in [n for n in table if n not in earlier]:
                    del table[n]
                    _broken_names[n] = ep.name
            for n in _current["refused"]:  # a name it tried to take: asking for it says so
                _broken_names[n] = ep.name
        finally:
            _current.update(distribution=None, plugin=None, refused=[])


def entries() -> list[Entry]:
    """Every registered scheduler: schedlab's generic ones, then the plug-ins', in the order
    they registered (the order of tables and figure legends)."""
    _load()
    return list(_entries.values())


def names(kind: str | None = None) -> list[str]:
    return [e.name for e in entries() if kind is None or e.kind == kind]


def broken() -> dict[str, str]:
    """Plug-ins set aside: entry-point name -> one-line reason."""
    _load()
    return dict(_broken)


def entry(name: str, kind: str | None = None) -> Entry:
    """The scheduler registered as ``name`` (of ``kind``, when given). No plug-in can take a
    name a built-in holds (it is rejected), so a built-in's name is answered without importing
    every paper's package (start-up time) when no other distribution's plug-in is installed;
    with one, the plug-ins load first, and a name one of them tried to take fails with its
    reason."""
    _load_builtins()
    if not _loaded and (name not in _builtin_names or _foreign_plugins()):
        _load()
    found = _entries.get(name)
    plugin = _broken_names.get(name)
    if plugin is not None and found is not None:
        raise SchedlabError(f"scheduler {name!r} is claimed by a rejected plug-in: {_broken[plugin]}; uninstall "
                            f"or fix it to run {found.distribution}'s")
    if found is None:
        plugin = plugin or next((p for p in _broken if p == name), None)
        if plugin is not None:
            raise SchedlabError(_broken[plugin])
        known = ", ".join(names(kind))
        raise SchedlabError(f"unknown {'scheduler' if kind is None else kind + ' scheduler'} {name!r}; known: {known}")
    if kind is not None and found.kind != kind:
        other = "a waiting-queue policy" if found.kind == QUEUE else "a batch builder"
        raise SchedlabError(f"scheduler {name!r} is {other}, not a {kind} scheduler")
    return found


@functools.cache
def _foreign_plugins() -> bool:
    """Whether a distribution other than schedlab names a module in the entry-point group
    (asked once: a process's installed distributions do not change under it)."""
    eps = importlib.metadata.entry_points(group=GROUP)
    return any(ep.dist is None or ep.dist.name != SCHEDLAB for ep in eps)


def origin(obj) -> Entry | None:
    """The entry that makes objects like ``obj``: of its most derived registered class (of
    that class's names, ``obj.name`` when it is one), or of the factory that made it; None for
    a class nothing registered."""
    for cls in type(obj).__mro__:
        found = [e for e in _entries.values() if e.target is cls]
        if found:
            return next((e for e in found if e.name == getattr(obj, "name", None)), found[0])
        if cls in _made_by:
            return _made_by[cls]
    return None


def describe(obj) -> str:
    """``obj`` as errors name it: its registered scheduler, or else its class and module."""
    found = origin(obj)
    if found is not None:
        return found.describe()
    return f"scheduler {type(obj).__name__} ({type(obj).__module__})"


def failure(culprit, method: str, e: BaseException) -> Exception:
    """What a run raises for the exception ``e`` that ``method`` of ``culprit`` (an entry of
    any table, or a scheduler object) raised: ``e`` itself when schedlab's own code raised it (a
    built-in's exception is schedlab's bug, and keeps its traceback), else a
    :class:`PluginError` naming the scheduler (or kind, or pool), the method, the exception and
    the plug-in's line it came from, caused by ``e``."""
    found = culprit if isinstance(culprit, (Entry, WorkloadEntry, PoolEntry, SourceEntry)) else origin(culprit)
    ours = not found.plugin if found is not None else type(culprit).__module__.split(".")[0] == SCHEDLAB
    if ours or isinstance(e, PluginError):
        return e
    who = found.describe() if found is not None else describe(culprit)
    module = found.module if found is not None else type(culprit).__module__
    package = module.split(".")[0]
    frames, tb = [], e.__traceback__
    while tb is not None:  # the plug-in's own frames (its package's, schedlab's excepted)
        name = tb.tb_frame.f_globals.get("__name__", "")
        if name == module or (package != SCHEDLAB and name.split(".")[0] == package):
            frames.append(tb)
        tb = tb.tb_next
    where = ""
    if frames:
        code = frames[-1].tb_frame.f_code
        where = f" (in {code.co_name}, {code.co_filename.rsplit('/', 1)[-1]} line {frames[-1].tb_lineno})"
    text = " ".join(str(e).split())
    error = PluginError(f"{who} failed in {method}: {type(e).__name__}{': ' + text if text else ''}{where}")
    error.__cause__ = e
    return error


def from_plugin(e: BaseException) -> BaseException:
    """:func:`failure` of the plug-in whose code the exception ``e`` passed through (its method:
    the outermost of its frames, the one schedlab called), or ``e`` itself when it passed
    through none."""
    plugins = {entry.module: entry for entry in _entries.values() if entry.plugin}
    tb = e.__traceback__
    while tb is not None:
        found = plugins.get(tb.tb_frame.f_globals.get("__name__", ""))
        if found is not None:
            return failure(found, tb.tb_frame.f_code.co_name, e)
        tb = tb.tb_next
    return e


def violation(culprit, method: str, what: str) -> PluginError:
    """The error of a scheduler (an entry, or a scheduler object) whose ``method`` broke its
    protocol: ``what`` says how."""
    who = culprit.describe() if isinstance(culprit, Entry) else describe(culprit)
    return PluginError(f"{who} broke the scheduler protocol in {method}: {what}")


def make(name: str, context: Context = Context(), kind: str | None = None):
    """A fresh instance of the scheduler ``name`` for one run (a policy or a builder)."""
    return entry(name, kind).make(context)


def router_entries() -> list[RouterEntry]:
    """Every registered router: schedlab's generic ones, then the plug-ins', in the order they
    registered."""
    _load()
    return list(_routers.values())


def router_names() -> list[str]:
    return [e.name for e in router_entries()]


def _registered(table: dict, name: str, what: str, known: Callable[[], Iterable[str]]):
    """``table[name]``, or the one-line reason it is not there: the rejected plug-in that tried to
    register ``name`` and why, or the ``known`` names."""
    found = table.get(name)
    if found is None:
        plugin = _broken_names.get(name) or next((p for p in _broken if p == name), None)
        if plugin is not None:
            raise SchedlabError(_broken[plugin])
        raise SchedlabError(f"unknown {what} {name!r}; known: {', '.join(known())}")
    return found


def router_entry(name: str) -> RouterEntry:
    """The router registered as ``name``."""
    _load()
    return _registered(_routers, name, "router", router_names)


def make_router(name: str, **options):
    """A fresh instance of the router ``name`` for one run (``options``: the run's seed)."""
    return router_entry(name).make(**options)


# -- workload kinds and pools -------------------------------------------------------------------
def _load_workloads(name: str | None = None) -> None:
    """Register schedlab's own workload kinds and pools (once), then, unless ``name`` is one of
    them and no other distribution's plug-in is installed, every plug-in (as :func:`entry`)."""
    global _workloads_loaded
    if not _workloads_loaded:
        _workloads_loaded = True
        for package in WORKLOAD_PACKAGES:
            pkg = importlib.import_module(package)
            for info in pkgutil.iter_modules(pkg.__path__, package + "."):
                importlib.import_module(info.name)
        _builtin_workloads.update(_workloads, _pools)
    if name is None or name not in _builtin_workloads or _foreign_plugins():
        _load()


def workload_entries() -> list[WorkloadEntry]:
    """Every registered workload kind: schedlab's, the papers' and the plug-ins', by name (the
    order they register in depends on what was imported first)."""
    _load_workloads()
    return sorted(_workloads.values(), key=lambda e: e.name)


def workload_names(modality: str | None = None) -> list[str]:
    return [e.name for e in workload_entries() if modality is None or e.modality == modality]


def workload_entry(name: str) -> WorkloadEntry:
    """The workload kind registered as ``name``."""
    _load_workloads(name)
    return _registered(_workloads, name, "workload kind", workload_names)


def pool_entries() -> list[PoolEntry]:
    """Every registered pool, by name."""
    _load_workloads()
    return sorted(_pools.values(), key=lambda e: e.name)


def pool_entry(name: str) -> PoolEntry:
    """The pool registered as ``name``."""
    _load_workloads(name)
    return _registered(_pools, name, "pool", lambda: [e.name for e in pool_entries()])


# -- step-time sources ------------------------------------------------------------------------------
_sources_loaded = False


def _load_sources() -> None:
    """Register schedlab's own step-time sources (once), then every plug-in."""
    global _sources_loaded
    if not _sources_loaded:
        _sources_loaded = True
        for package in SOURCE_PACKAGES:
            importlib.import_module(package)
    _load()


def source_entries(machine: bool | None = None) -> list[SourceEntry]:
    """Every registered step-time source (``machine``: only those that time this machine, or
    only those that price a catalogue GPU), in the order they registered."""
    _load_sources()
    return [e for e in _sources.values() if machine is None or e.machine == machine]


def source_names(machine: bool | None = None) -> list[str]:
    return [e.name for e in source_entries(machine)]


def source_entry(name: str) -> SourceEntry:
    """The step-time source registered as ``name``."""
    _load_sources()
    return _registered(_sources, name, "step-time source", source_names)


# -- backends -----------------------------------------------------------------------------------------
_backends_loaded = False
_builtin_backends: set[str] = set()


def _load_backends(name: str | None = None) -> None:
    """Register schedlab's own backends (once), then, unless ``name`` is one of them and no
    other distribution's plug-in is installed, every plug-in (as :func:`entry`)."""
    global _backends_loaded
    if not _backends_loaded:
        _backends_loaded = True
        for package in BACKEND_PACKAGES:
            importlib.import_module(package)
        _builtin_backends.update(_backends)
    if name is None or name not in _builtin_backends or _foreign_plugins():
        _load()


def _backend_rank(entry: BackendEntry) -> int:
    """Where ``entry`` is listed: schedlab's in :data:`BACKEND_PACKAGES`' order, whichever module
    a process imported first; a plug-in's after them."""
    for k, package in enumerate(BACKEND_PACKAGES):
        if entry.distribution == SCHEDLAB and (entry.module == package or entry.module.startswith(package + ".")):
            return k
    return len(BACKEND_PACKAGES)


def backend_entries(kind: str | None = None, simulated: bool | None = None) -> list[BackendEntry]:
    """Every registered backend (``kind``: only those that run schedulers of that kind;
    ``simulated``: only those on a virtual clock, or only the real engines), schedlab's first."""
    _load_backends()
    return [e for e in sorted(_backends.values(), key=_backend_rank)
            if (kind is None or kind in e.kinds) and (simulated is None or e.simulated == simulated)]


def backend_names(kind: str | None = None, simulated: bool | None = None) -> list[str]:
    return [e.name for e in backend_entries(kind, simulated)]


def backend_entry(name: str, *, kind: str | None = None, simulated: bool | None = None) -> BackendEntry:
    """The backend registered as ``name`` (``kind``: one that runs schedulers of that kind;
    ``simulated``: one on a virtual clock, or a real engine)."""
    _load_backends(name)
    known = lambda: backend_names(kind, simulated)  # noqa: E731
    found = _registered(_backends, name, "backend", known)
    if simulated is not None and found.simulated != simulated:
        what = "runs on a virtual clock" if found.simulated else "is a real engine on the wall clock"
        raise SchedlabError(f"backend {name!r} {what}; choose {', '.join(known())}")
    if kind is not None and kind not in found.kinds:
        raise SchedlabError(f"backend {name!r} runs no {kind} scheduler; choose {', '.join(known())}")
    return found
