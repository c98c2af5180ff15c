"""`schedlab steptime`: a catalogue GPU and model's step-time model in one command, the very model
that `schedlab profile` then `schedlab fit steptime` make, for the shipped profiles, the roofline
and the measured step costs alike; a GPU with no shipped profile is refused in one line."""

from __future__ import annotations

import pytest

from schedlab.cli import main


@pytest.mark.parametrize("source, hardware", [("shipped", "H100-SXM"), ("roofline", "A100-80GB"), ("measured", "A100-80GB")])
def test_one_command_is_the_profile_and_its_fit(tmp_path, source, hardware):
    model = ["--hardware", hardware, "--model", "mistral-7b"]
    assert main(["steptime", "--source", source, *model, "--out", str(tmp_path / "one.json")]) == 0
    assert main(["profile", "--source", source, *model, "--out", str(tmp_path / "profile.parquet")]) == 0
    assert main(["fit", "steptime", "--profile", str(tmp_path / "profile.parquet"), "--out", str(tmp_path / "two.json")]) == 0
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_a_gpu_without_a_shipped_profile_is_refused(tmp_path, capsys):
    assert main(["steptime", "--source", "shipped", "--hardware", "V100-32GB", "--model", "mistral-7b",
                 "--out", str(tmp_path / "s.json")]) == 2
    assert capsys.readouterr().err.strip() == ("schedlab: error: no shipped profiles for hardware 'V100-32GB'; "
                                               "shipped: H100-SXM, H200-SXM")
    assert not (tmp_path / "s.json").exists()
