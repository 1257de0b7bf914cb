"""Shared fixtures: a spec writer and a CLI runner (paths and helpers live in tests/common.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.common import invoke


@pytest.fixture(autouse=True)
def wide_columns(monkeypatch):
    """The tests read what a command prints, not how it is laid out: a wide COLUMNS keeps every printed
    line whole, in this process and the CLI subprocesses (the width tests set their own COLUMNS)."""
    monkeypatch.setenv("COLUMNS", "1000")


@pytest.fixture
def write_spec(tmp_path):
    """write_spec(text, name="spec.yaml") -> path of a spec file in a temp dir."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def cli():
    """cli(*args, cwd=ROOT): `costspec ARGS` in this process (tests.common.invoke): exit code, stdout, stderr.
    Tests about the process itself (imports, signals, the interpreter's exit) use tests.common.run_cli."""
    return invoke


from hypothesis import HealthCheck, settings  # noqa: E402

# CI runs on 2 shared cores: no per-example deadline; a bounded example count.
# derandomize: CI draws the same examples every run (a failure found once is a failure every time);
# the long profile (fuzz/run_fuzz.py, --hypothesis-profile=long) explores freely
settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, max_examples=2000)
settings.load_profile("ci")


# The fast profile (`-m "not slow"`) also leaves out these cases, each measured at 1.5-6 s on the 2-core
# machine (pytest --durations, 2026-11-23): subprocess CLI round trips and the largest specs' formulas.
# The full run (`python -m pytest`, what CI runs) keeps every one of them.
SLOW_CASES = (
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-deepencoder]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-deepencoder]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-deepencoder]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-sam_vit_b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-sam_vit_b]",
    "golden/test_golden.py::test_numbers_unchanged[validate:toy_mlp:train]",
    "golden/test_golden.py::test_numbers_unchanged[formula:llama_1b:train]",
    "ncu/test_real_exports.py::test_show_cli_on_every_real_export",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[vit_b]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[vit_h]",
    "export/test_latex.py::test_long_sums_break_over_lines_and_still_parse",
    "cli/test_options.py::test_dtype_on_eval_formula_and_sweep",
    "analysis/test_backend_note.py::test_train_note_names_flash_and_the_math_backend",
    "core/test_zoo.py::test_zoo_name_gives_the_same_table_as_the_path_from_any_directory",
    "cli/test_options.py::test_formula_set_substitutes_the_value",
    "core/test_dims.py::test_a_size_that_divides_by_zero_is_exit_2",
    "fuzz/test_specs.py::test_valid_specs_are_accepted_and_consistent",
    "runtime/test_validate.py::test_zoo_validates_exactly[deepencoder-train]",
    "runtime/test_validate.py::test_zoo_validates_exactly[vit_h-train]",
    "analysis/test_ladder.py::test_cli_ladder",
    "core/test_budget.py::test_per_layer_rows_beyond_the_budget_are_refused_and_totals_still_work",
    "analysis/test_sweep_time.py::test_grid_times_equal_eval_gpu_at_every_point[train-llama_1b-varies1]",
    "spec/test_load.py::test_check_reports_every_bad_spec_first_problem_first",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-bert_base]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-llama_1b]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[llama_1b]",
    "core/test_zoo.py::test_costspec_zoo_lists_every_spec_with_its_doc",
    "importer/test_starter.py::test_init_writes_a_spec_that_evaluates_and_never_overwrites",
    "runtime/test_validate.py::test_zoo_validates_exactly[deepencoder-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[clip_vit_l14-train]",
    "runtime/test_validate.py::test_zoo_validates_exactly[llama_1b-train]",
    "ncu/test_show.py::test_cli_formats_and_bad_input",
    "export/test_html_report.py::test_validation_and_compare_sections",
    "export/test_html_report.py::test_report_refuses_bad_inputs",
    "analysis/test_alignment.py::test_cli_strict_on_volta",
    "analysis/test_ragged.py::test_lengths_and_batch_conflict",
    "core/test_budget.py::test_sixty_derived_dims_and_500_layers_are_fast",
    "core/test_budget.py::test_formula_expand_of_a_degree_8_dim_squared_is_refused_fast",
    "zoo/test_totals.py::test_sam_eval_shows_windowed_and_global_blocks_with_counts",
    "cli/test_main.py::test_check_passes_the_zoo",
    # llama3_8b: 2-10 s each (its 32 layers built on meta; the formulas as llama_1b's)
    "runtime/test_validate.py::test_zoo_validates_exactly[llama3_8b-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[llama3_8b-train]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-llama3_8b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-llama3_8b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-llama3_8b]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[llama3_8b]",
    "analysis/test_compiled.py::test_compiled_equals_symbolic_for_every_zoo_spec[llama3_8b]",
    # mistral_7b / mixtral_8x7b: 1.7-22 s each
    "runtime/test_validate.py::test_zoo_validates_exactly[mistral_7b-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[mistral_7b-train]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-mistral_7b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-mistral_7b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-mistral_7b]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[mistral_7b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-mistral_7b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-mistral_7b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-mistral_7b]",
    "analysis/test_roofline.py::test_every_spec_has_bytes_and_times_that_add_up[train-mistral_7b]",
    "runtime/test_validate.py::test_zoo_validates_exactly[mixtral_8x7b-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[mixtral_8x7b-train]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-mixtral_8x7b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-mixtral_8x7b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-mixtral_8x7b]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[mixtral_8x7b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-mixtral_8x7b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-mixtral_8x7b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-mixtral_8x7b]",
    "analysis/test_roofline.py::test_every_spec_has_bytes_and_times_that_add_up[train-mixtral_8x7b]",
    # the vision zoo specs: Swin's window counts (ceiling(G/win)) and the stage grids make their
    # symbolic formulas the slowest to build and round-trip (swin_tiny's LaTeX: about a minute per pass)
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-swin_tiny]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-swin_tiny]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-swin_tiny]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-swin_tiny]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-swin_tiny]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-swin_tiny]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[swin_tiny]",
    "runtime/test_validate.py::test_zoo_validates_exactly[swin_tiny-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[swin_tiny-train]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-convnext_tiny]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-convnext_tiny]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-convnext_tiny]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-convnext_tiny]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-convnext_tiny]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-convnext_tiny]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[convnext_tiny]",
    "runtime/test_validate.py::test_zoo_validates_exactly[convnext_tiny-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[convnext_tiny-train]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-siglip_b16]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-siglip_b16]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-siglip_b16]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-siglip_b16]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-siglip_b16]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-siglip_b16]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[siglip_b16]",
    "runtime/test_validate.py::test_zoo_validates_exactly[siglip_b16-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[siglip_b16-train]",
    # mamba_130m: its module loops over the sequence (validated at S = 16: 6 s per pass); 1.5-3.3 s formulas
    "runtime/test_validate.py::test_zoo_validates_exactly[mamba_130m-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[mamba_130m-train]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-mamba_130m]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-mamba_130m]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-mamba_130m]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[mamba_130m]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[forward-mamba_130m]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-mamba_130m]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-mamba_130m]",
    # gemma2_2b: 3-13 s each (its 26 soft-capped layers at S = 8192 and a 256,000-word LM head)
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[forward-gemma2_2b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[backward-gemma2_2b]",
    "export/test_latex.py::test_every_spec_round_trips_through_parse_latex[train-gemma2_2b]",
    "export/test_latex.py::test_round_trip_with_substituted_and_expanded_dims[gemma2_2b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[train-gemma2_2b]",
    "analysis/test_formula.py::test_text_forms_are_exact_and_evaluate_to_eval_numbers[backward-gemma2_2b]",
    "runtime/test_validate.py::test_zoo_validates_exactly[gemma2_2b-forward]",
    "runtime/test_validate.py::test_zoo_validates_exactly[gemma2_2b-train]",
    "analysis/test_roofline.py::test_every_spec_has_bytes_and_times_that_add_up[train-gemma2_2b]",
    "analysis/test_roofline.py::test_every_spec_has_bytes_and_times_that_add_up[backward-gemma2_2b]",
)


def pytest_collection_modifyitems(config, items):
    slow = frozenset(SLOW_CASES)
    for item in items:
        if item.nodeid.partition("/")[2] in slow:  # tests/<case>: the node ids from the repository root
            item.add_marker(pytest.mark.slow)
