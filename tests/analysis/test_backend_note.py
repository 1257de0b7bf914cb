"""The attention-backend note (costspec.analysis.backend_note): train names flash and the math backend."""
from __future__ import annotations

from tests.common import ROOT


def test_train_note_names_flash_and_the_math_backend(cli, write_spec):
    train = cli("eval", "specs/vit_b.yaml", "--pass", "train").stdout
    assert "backend: flash" in train and "backend: math" in train
    assert "backend: flash" not in cli("eval", "specs/vit_b.yaml").stdout
    math = (ROOT / "specs/vit_b.yaml").read_text().replace("attention: {heads: heads}",
                                                           "attention: {heads: heads, backend: math}")
    assert "backend: flash" not in cli("eval", write_spec(math), "--pass", "train").stdout
