"""The benchmark's numbers are pinned: speed work on the bench or the controller must not move
them. `janus_bench_golden.json` holds the rows, curves, paired differences and calibration of
2 seeds x rho {0.2, 0.8} x 60 steps, as the straightforward one-strategy-at-a-time loop
produced them, with the hashing encoder and with WordLlama, before evaluations had a latent
threshold: at eval_redraw R = 1 (every evaluation and attempt an independent draw) the numbers
must be exactly those.

They pin the paper's method: the bench runs it with `--janus paper` (the authors' trigger, tie
rule and evaluation set, and the paper's study of strategies) on the calibrated stream. The
fields added since (the stream's name, evaluations counted, benign edits against the momentum,
the calibration's counts) are checked apart and left out of the comparison."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from planfence.demos.bench.janus import command as bench
from planfence.plugins.janus.encoders import wordllama_available

GOLDEN = json.loads((Path(__file__).parent / "janus_bench_golden.json").read_text())
ARGV = (
    *("--seeds", "2", "--rho", "0.2", "0.8", "--steps", "60", "--eval-redraw", "1"),
    *("--janus", "paper", "--stream", "calibrated"),
)
ADDED = ("evaluations", "benign_against", "labelled", "settle")


def without_added(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items as they were pinned: the stream's name and the newer fields taken out."""
    for x in items:
        assert x.pop("stream") == "calibrated"
        for name in ADDED:
            x.pop(name, None)
    return items


def without_redraw(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert all(x.pop("eval_redraw") == 1.0 for x in without_added(items))
    return items


def run_bench(tmp_path: Path, *argv: str) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    out = tmp_path / "janus.json"
    assert bench.run(parser.parse_args([*ARGV, *argv, "--out", str(out)])) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.mark.parametrize("encoder", ["hashing", "wordllama"])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_results_match_the_pinned_run(
    encoder: str, jobs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if encoder == "wordllama" and not wordllama_available():
        pytest.skip("needs the embeddings extra")
    doc = run_bench(tmp_path, "--encoder", encoder, "--jobs", jobs)
    capsys.readouterr()
    want = GOLDEN[encoder]
    assert doc["config"]["encoder"] == encoder
    assert without_redraw(doc["rows"]) == want["rows"]
    assert doc["curves"]["steps"] == want["curves"]["steps"]
    assert doc["curves"]["accuracy"] == {"calibrated": {"1.0": want["curves"]["accuracy"]}}
    assert without_redraw(doc["paired"]) == want["paired"]
    calibration = doc["calibration"].pop("calibrated")
    assert doc["calibration"] == {}
    assert calibration.pop("by_redraw") == {"1.0": want["calibration"]}
    assert calibration == want["calibration"]


PAIRED = json.loads((Path(__file__).parent / "janus_bench_golden_paired.json").read_text())
PAIRED_ARGV = ("--eval-redraw", "0", "0.3")


@pytest.mark.parametrize("encoder", ["hashing", "wordllama"])
def test_paired_evaluations_match_the_pinned_run(
    encoder: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`janus_bench_golden_paired.json`: the same slice at R = 0 and R = 0.3 (latent
    thresholds), as the bench produced it before any speed work on the R x rho sweep."""
    if encoder == "wordllama" and not wordllama_available():
        pytest.skip("needs the embeddings extra")
    doc = run_bench(tmp_path, "--encoder", encoder, "--jobs", "1", *PAIRED_ARGV)
    capsys.readouterr()
    want = PAIRED[encoder]
    assert doc["config"]["eval_redraws"] == [0.0, 0.3]
    without_added(doc["rows"])
    without_added(doc["paired"])
    doc["curves"]["accuracy"] = doc["curves"]["accuracy"]["calibrated"]
    doc["calibration"] = doc["calibration"]["calibrated"]
    assert {k: doc[k] for k in want} == want
