"""Where a CPU engine's processes run: the model's compute and the front end on separate cores."""

import os


def test_a_cpu_engines_front_end_keeps_off_the_models_cores(monkeypatch):
    """On CPU the worker is bound to every start-up core but the last, and the front end (this
    process, and the server it starts) runs on the last one only while it drives the engine."""
    from schedlab.backends import vllm_engine
    from schedlab.backends.vllm_engine import EngineSpec, cpu_env, cpu_placement, on_front_end_cores

    spec = EngineSpec()
    monkeypatch.setattr(vllm_engine, "START_CPUS", (0, 1, 2, 3))
    assert cpu_placement(spec) == ((0, 1, 2), (3,))
    assert cpu_env(spec, {"OMP_NUM_THREADS": "2", "PATH": "/bin"}) == {"PATH": "/bin", "VLLM_CPU_OMP_THREADS_BIND": "0,1,2"}
    assert cpu_placement(EngineSpec(device="cuda")) is None
    monkeypatch.setattr(vllm_engine, "START_BIND", "0-1")  # the user's own binding is kept
    assert cpu_placement(spec) is None and cpu_env(spec, {})["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    monkeypatch.setattr(vllm_engine, "START_BIND", "auto")
    monkeypatch.setattr(vllm_engine, "START_CPUS", (5,))
    assert cpu_placement(spec) is None and cpu_env(spec, {})["VLLM_CPU_OMP_THREADS_BIND"] == "auto"

    cpus = tuple(sorted(os.sched_getaffinity(0)))
    monkeypatch.setattr(vllm_engine, "START_CPUS", cpus)
    with on_front_end_cores(spec):
        assert os.sched_getaffinity(0) == ({cpus[-1]} if len(cpus) > 1 else set(cpus))
    assert tuple(sorted(os.sched_getaffinity(0))) == cpus
