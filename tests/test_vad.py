"""Paper A's VAD extension: speech-active duration, the silence-padded workload, the study."""

import numpy as np
import pandas as pd
import pytest

from schedlab.data.vad import FRAME_MS, speech_frames, speech_sample, speech_seconds
from schedlab.errors import SchedlabError
from schedlab.estimate import job_sizes, size_estimate, size_hints
from schedlab.engine import Arena, EngineConfig, engine_config
from schedlab.simulate import run_summary
from schedlab.engine.steptime import StepTimeModel
from schedlab.extensions.vad import vad_accuracy, vad_study
from schedlab.workload.padded import SCENARIOS, synth_clip, vad_clips, vad_trace

#: A Whisper-like step model saturating near 18 req/s (as in tests/test_engine.py).
STEP = StepTimeModel(intercept=0.006, n_encoder=0.031, n_prefill_tokens=0.0009, n_decode=0.00066, ctx_tokens=4e-7)
ENGINE = EngineConfig(max_num_batched_tokens=2048, encoder_frames=1500)
KAPPA = {"en": 3.0}
#: Columns of a run summary that measure this machine, not the simulation.
TIMING = ("wall_s", "sched_overhead_us_per_req")


def utterances(n: int, seed: int) -> pd.DataFrame:
    """Lognormal durations with LibriSpeech test-clean's mean (7.4 s) and sd (5.15 s)."""
    rng = np.random.default_rng(seed)
    s2 = np.log(1 + (5.15 / 7.4) ** 2)
    dur = np.clip(rng.lognormal(np.log(7.4) - s2 / 2, np.sqrt(s2), n), 1.285, 34.955)
    tokens = np.maximum(1, np.round(3.0 * dur * rng.uniform(0.8, 1.2, n))).astype(np.int64)
    return pd.DataFrame({"duration_s": dur, "output_tokens": tokens})


@pytest.fixture(scope="module")
def sample():
    return speech_sample()


@pytest.fixture(scope="module")
def clips():
    return vad_clips(utterances(80, seed=1), seed=1, pad_fraction=0.5, max_pad_s=10.0)


# -- the detector ----------------------------------------------------------------------------
def test_vad_finds_no_speech_in_silence_or_low_noise():
    assert speech_seconds(np.zeros(5 * 16000, np.int16)) == 0.0
    noise = np.rint(np.random.default_rng(0).standard_normal(10 * 16000) * 33).astype(np.int16)  # -60 dBFS
    assert speech_seconds(noise) <= 0.1  # at most the detector's first few frames


def test_vad_finds_most_of_the_real_speech_sample(sample):
    wave, rate = sample
    assert rate == 16000 and wave.dtype == np.int16 and 9.9 < len(wave) / rate < 10.0
    frames = speech_frames(wave, rate)
    assert len(frames) == len(wave) // (rate * FRAME_MS // 1000)
    found = [speech_seconds(wave, rate, aggressiveness=a) for a in range(4)]
    assert 0.5 * 9.96 < found[2] < 0.9 * 9.96  # speech, with the pauses between phrases left out
    assert found == sorted(found, reverse=True)  # more aggressive: less speech
    assert speech_seconds(wave / 32767.0, rate) == found[2]  # float input, same decisions


@pytest.mark.parametrize(
    "wave, rate, match",
    [
        (np.zeros(16000, np.int16), 22050, "sample rate"),
        (np.zeros(0, np.int16), 16000, "empty"),
        (np.zeros((2, 16000), np.int16), 16000, "mono"),
        (np.zeros(16000, np.int32), 16000, "int16 or float"),
    ],
)
def test_bad_waveforms_raise_one_line_errors(wave, rate, match):
    with pytest.raises(SchedlabError, match=match) as err:
        speech_seconds(wave, rate)
    assert "\n" not in str(err.value)


def test_bad_study_parameters_raise_one_line_errors(clips):
    with pytest.raises(SchedlabError, match="aggressiveness"):
        speech_seconds(np.zeros(16000, np.int16), aggressiveness=4)
    with pytest.raises(SchedlabError, match="pad_fraction"):
        vad_clips(utterances(3, 0), pad_fraction=1.5)
    with pytest.raises(SchedlabError, match="output_tokens"):
        vad_clips(utterances(3, 0).drop(columns="output_tokens"))
    with pytest.raises(SchedlabError, match="scenario"):
        vad_trace(clips, "silent", 5.0, seed=0, duration_s=10.0)


# -- the padded workload ---------------------------------------------------------------------
def test_synth_clip_places_speech_between_the_silences(sample):
    wave, rate = sample
    clip = synth_clip(wave, rate, 1000, 12.0, 0.5, 2.0, rng=np.random.default_rng(0), noise_dbfs=-60.0)
    assert len(clip) == round(14.5 * rate)
    body = clip[8000 : 8000 + 12 * rate]
    np.testing.assert_array_equal(body[: len(wave) - 1000], wave[1000:])  # cut from the offset ...
    np.testing.assert_array_equal(body[len(wave) - 1000 :][:1000], wave[:1000])  # ... then tiled
    silence = np.concatenate([clip[:8000], clip[-2 * rate :]])
    assert 20 < np.sqrt(np.mean(silence.astype(float) ** 2)) < 45  # about -60 dBFS of 32767


def test_padding_raises_raw_duration_not_vad_time(clips):
    plain, padded = (clips[clips["scenario"] == s].reset_index(drop=True) for s in SCENARIOS)
    assert (plain["pad_s"] == 0).all() and (plain["audio_duration_s"] == plain["true_speech_s"]).all()
    np.testing.assert_allclose(padded["audio_duration_s"], padded["true_speech_s"] + padded["pad_s"])
    is_padded = padded["pad_s"] > 0
    assert 0.3 < is_padded.mean() < 0.7 and padded["pad_s"].max() <= 10.0
    pd.testing.assert_series_equal(plain["output_tokens"], padded["output_tokens"])
    # An unpadded clip is the same waveform in both scenarios.
    np.testing.assert_array_equal(padded["speech_duration_s"][~is_padded], plain["speech_duration_s"][~is_padded])
    # Silence barely moves the detector (an edge effect), whatever its length.
    gained = (padded["speech_duration_s"] - plain["speech_duration_s"])[is_padded]
    assert gained.abs().max() < 1.5 and gained.mean() < 0.2 * padded["pad_s"][is_padded].mean()
    assert (plain["speech_duration_s"] <= plain["true_speech_s"] + 0.1).all()


def test_vad_restores_the_rank_of_durations_against_tokens(clips):
    acc = vad_accuracy(clips).set_index(["scenario", "estimate"])["spearman_tokens"]
    assert acc["padded", "vad"] > acc["padded", "raw"] + 0.1
    assert acc["librispeech", "vad"] == pytest.approx(acc["librispeech", "raw"], abs=0.05)


def test_vad_clips_are_deterministic_and_seeded():
    u = utterances(12, seed=2)
    a, b = vad_clips(u, seed=3), vad_clips(u, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert not vad_clips(u, seed=4)["speech_duration_s"].equals(a["speech_duration_s"])


# -- job sizes from the speech-active time ----------------------------------------------------
def test_job_sizes_from_vad_vs_raw():
    trace = pd.DataFrame(
        {"audio_duration_s": [10.0, 4.0, 6.0], "speech_duration_s": [2.0, 3.5, np.nan], "output_tokens": [9, 9, 9]}
    )
    np.testing.assert_array_equal(job_sizes(trace, KAPPA), [30, 12, 18])
    np.testing.assert_array_equal(job_sizes(trace, KAPPA, "vad"), [6, 10, 18])  # NaN: the raw duration
    hints = size_hints(trace, "vad")
    assert hints[0] == {"language": "en", "audio_duration_s": 10.0, "speech_duration_s": 2.0}
    assert "speech_duration_s" not in size_hints(trace)[0]
    assert size_estimate({"speech_duration_s": 0.0, "audio_duration_s": 5.0}, KAPPA, 99) == 1
    with pytest.raises(SchedlabError, match="speech_duration_s"):
        job_sizes(trace.drop(columns="speech_duration_s"), KAPPA, "vad")
    with pytest.raises(SchedlabError, match="duration source"):
        job_sizes(trace, KAPPA, "energy")


def test_scenarios_share_arrivals_and_utterances(clips):
    plain, padded = (vad_trace(clips, s, 8.0, seed=5, duration_s=30.0) for s in SCENARIOS)
    for col in ("request_id", "arrival_s", "prompt_tokens", "output_tokens"):
        pd.testing.assert_series_equal(plain[col], padded[col])
    assert (padded["audio_duration_s"] >= plain["audio_duration_s"]).all()
    assert (padded["audio_duration_s"] > plain["audio_duration_s"]).any()
    assert 150 < len(plain) < 330


# -- the study -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def study():
    """Overload (25 req/s against ~18), half the clips padded with 0-20 s of silence."""
    return vad_study(
        utterances(200, seed=0), Arena(STEP, ENGINE, KAPPA), rates=[25.0], seed=0, duration_s=60.0,
        pad_fraction=0.5, max_pad_s=20.0,
    )


def test_study_rows_and_shared_arrivals(study):
    assert len(study) == len(SCENARIOS) * 2 * 3
    assert set(study["scenario"]) == set(SCENARIOS) and set(study["estimate"]) == {"raw", "vad"}
    assert study["arrived"].nunique() == 1 and (study["completed"] == study["arrived"]).all()
    assert (study["workload"] == study["scenario"]).all()
    # FCFS ignores the estimate: one run per scenario, its row repeated.
    fcfs = study[study["policy"] == "fcfs"].drop(columns=["estimate", "size_spearman"])
    assert len(fcfs.drop_duplicates(subset=[c for c in fcfs.columns if c not in TIMING])) == len(SCENARIOS)


def test_study_is_deterministic(study):
    again = vad_study(
        utterances(200, seed=0), Arena(STEP, ENGINE, KAPPA), rates=[25.0], seed=0, duration_s=60.0,
        pad_fraction=0.5, max_pad_s=20.0,
    )
    pd.testing.assert_frame_equal(study.drop(columns=list(TIMING)), again.drop(columns=list(TIMING)))


def test_sjf_by_vad_beats_sjf_by_raw_only_when_clips_are_padded(study):
    p50 = study[study["policy"] == "sjf"].set_index(["scenario", "estimate"])["p50_e2el_ms"]
    assert p50["padded", "vad"] < 0.9 * p50["padded", "raw"]
    assert p50["padded", "vad"] == pytest.approx(p50["librispeech", "raw"], rel=0.05)  # padding undone
    # Without padding the detector has nothing to remove: no gain.
    assert p50["librispeech", "vad"] == pytest.approx(p50["librispeech", "raw"], rel=0.05)


def test_vllm_sim_orders_by_the_speech_time_a_client_sends(clips):
    """vLLM's real scheduler sees ``speech_duration_s`` in the hints: same times as ``sim``."""
    pytest.importorskip("vllm")
    trace = vad_trace(clips, "padded", 25.0, seed=0, duration_s=8.0)
    engine = engine_config("A100-40GB", "whisper-large-v3", max_num_batched_tokens=2048)
    arena = Arena(STEP, engine, KAPPA, "vad")
    sim = run_summary(trace, "sjf", arena, identity={})[0].requests
    vs = run_summary(trace, "sjf", arena, identity={}, backend="vllm-sim", model="whisper-large-v3")[0].requests
    raw = run_summary(trace, "sjf", Arena(STEP, engine, KAPPA), identity={})[0].requests
    np.testing.assert_allclose(vs["finish_s"], sim["finish_s"], rtol=1e-9, atol=1e-9)
    assert not np.allclose(raw["finish_s"], sim["finish_s"])
