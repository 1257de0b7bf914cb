"""`validate --against` with broken user code, and a real model built from a config on a budget.

The user's error is exit 2 naming the target, the exception's type and message and where it was
raised; no exit from user code (a SystemExit, the target `builtins:exit`) ends a run without a
comparison; a config that asks for too many layers, modules or too much memory is refused before
the model is built on the device, unless --force.
"""
from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest

from costspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = """\
costspec: 1
name: tiny
dims: {B: 2, C: 4}
input: [B, C]
layers:
  - linear: {out: C}
    name: fc
    source: fc
"""
_count = itertools.count()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with the spec; `module(code)` writes a uniquely named module there and returns its name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(SPEC)

    def module(code: str) -> str:
        name = f"usermod_{next(_count)}"
        (tmp_path / f"{name}.py").write_text("import torch\n\n" + textwrap.dedent(code))
        return name

    return module


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


GOOD = """
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)
"""


@pytest.mark.parametrize("code, call, says", [
    ("def make():\n    raise ValueError('user boom')\n", "make", "calling make() raised ValueError: user boom (at "),
    ("def make():\n    return 42\n", "make", "expected an nn.Module (or (module, example inputs)), got int"),
    (GOOD + "\nclass Bad(Tiny):\n    def forward(self, x):\n        raise RuntimeError('forward boom')\n\n"
             "def make():\n    return Bad()\n", "make", "the real model's forward raised RuntimeError: forward boom (at "),
    ("def make():\n    raise SystemExit(0)\n", "make", "calling make() raised SystemExit(0) (at "),
    ("raise SystemExit(0)\n", "anything", "raised SystemExit(0) (at "),  # at import
    ("raise KeyError('at import')\n", "anything", "raised KeyError: 'at import' (at "),
    (GOOD + "\nclass Eval(Tiny):\n    def eval(self):\n        raise SystemExit(3)\n\n"
             "def make():\n    return Eval()\n", "make", "the real model's eval() raised SystemExit(3)"),
    (GOOD + "\nclass Attr:\n    @property\n    def make(self):\n        raise SystemExit(0)\n\nobj = Attr()\n",
     "obj.make", "looking up obj.make in"),
])
def test_broken_user_code_is_the_users_error(code, call, says, project, capsys):
    name = project(code)
    exit_code, out, err = _run(["validate", "tiny.yaml", "--against", f"{name}:{call}"], capsys)
    assert exit_code == 2 and out == "", err
    assert err.startswith(f"costspec: error: --against {name}:{call}: ")
    assert says in err and "internal error" not in err and err.count("\n") == 1
    if "(at " in says:
        assert f"{name}.py:" in err  # where the user's code raised it


def test_builtins_exit_is_an_error_not_a_green_run(project, capsys):
    code, out, err = _run(["validate", "tiny.yaml", "--against", "builtins:exit"], capsys)
    assert code == 2 and out == ""
    assert "--against builtins:exit: calling exit() raised SystemExit(None)" in err
    assert "nothing was compared" in err


def test_an_exit_from_a_custom_backward_is_an_error(project, capsys):
    name = project(GOOD + """
class Quit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise SystemExit(0)


class Model(Tiny):
    def forward(self, x):
        return Quit.apply(self.fc(x))


def make():
    return Model()
""")
    code, out, err = _run(["validate", "tiny.yaml", "--against", f"{name}:make", "--pass", "train"], capsys)
    assert code == 2 and out == ""
    assert "the real model raised SystemExit(0)" in err and "while it was run" in err


def test_working_user_code_still_compares(project, capsys):
    name = project(GOOD + "\ndef make():\n    return Tiny()\n")
    code, out, err = _run(["validate", "tiny.yaml", "--against", f"{name}:make", "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["ok"] is True


# ----------------------------------------------------------------------------------------------
# hf: a model built from a config, budgeted first
# ----------------------------------------------------------------------------------------------
LLAMA = ["validate", str(ROOT / "specs/toy_mlp.yaml"), "--against", "hf:LlamaModel"]
SMALL = ["--config-set", "hidden_size=16", "--config-set", "intermediate_size=32", "--config-set",
         "num_attention_heads=2", "--config-set", "num_key_value_heads=2", "--config-set", "vocab_size=64"]


def test_a_config_asking_for_too_many_layers_is_refused_before_torch(capsys):
    code, out, err = _run([*LLAMA, "--config-set", "num_hidden_layers=1000000"], capsys)
    assert code == 2 and out == ""
    assert "the config asks for 1,000,000 layers (its layer-count keys summed); the limit for a model built from a " \
           "config is 512: check the config, or --force to build it anyway" in err


def test_force_builds_beyond_the_layer_budget(monkeypatch, capsys):
    import costspec.core.budget as budget

    monkeypatch.setattr(budget, "MAX_REAL_LAYERS", 2)
    args = ["validate", "llama_1b", "--set", "L=3", "--set", "S=8", "--against", "hf:LlamaForCausalLM", *SMALL,
            "--config-set", "num_hidden_layers=3"]
    code, _, err = _run(args, capsys)
    assert code == 2 and "the config asks for 3 layers" in err
    code, out, err = _run([*args, "--force"], capsys)  # built and compared (toy_mlp is not a Llama: a mismatch)
    assert code in (0, 1) and "budget: 3 layers in the config" in out, err


def test_a_config_whose_weights_exceed_memory_is_refused_on_cpu(capsys):
    code, out, err = _run([*LLAMA, *SMALL, "--config-set", "vocab_size=100000000000", "--config-set",
                           "num_hidden_layers=1", "--device", "cpu"], capsys)
    assert code == 2 and out == ""
    assert "parameters, about" in err and "GiB of fp32 weights on cpu, more than the" in err and "--force" in err


@pytest.mark.parametrize("setting, says", [
    ("hidden_size=abc", "LlamaConfig(...) from the config raised StrictDataclassFieldValidationError"),
    ("num_attention_heads=3", "LlamaConfig(...) from the config raised StrictDataclassClassValidationError"),
])
def test_a_config_transformers_refuses_is_the_users_error(setting, says, capsys):
    code, out, err = _run([*LLAMA, *SMALL, "--config-set", "num_hidden_layers=1", "--config-set", setting], capsys)
    assert code == 2 and out == "", err
    assert err.startswith("costspec: error: --against hf:LlamaModel: ") and says in err
