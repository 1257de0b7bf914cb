"""costspec.ncu.parse: both ncu CSV pages, old and new column sets, NVTX, units, malformed input."""
from __future__ import annotations

import pytest

from costspec.core.errors import CostspecError
from costspec.ncu.parse import (
    KernelRecord,
    NcuFormatError,
    normalize_unit,
    parse_csv,
    parse_nvtx_cell,
    parse_value,
)
from tests.common import DATA

DATA = DATA / "ncu"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
READ, WRITE, TIME = "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"
PIPE = "sm__inst_executed_pipe_tensor.sum"


def test_raw_page_new_format_with_nvtx():
    records = parse_csv(DATA / "raw_new_nvtx.csv")
    assert [r.id for r in records] == [0, 1, 2]
    assert [r.line for r in records] == [3, 4, 5]
    gemm = records[0]
    h100 = {"Process ID": "4242", "Process Name": "python3", "Host Name": "127.0.0.1", "Context": "1",
            "Stream": "7", "Device": "0", "device__attribute_display_name": "NVIDIA H100 80GB HBM3",
            "launch__func_cache_config": "CachePreferNone"}
    assert gemm == KernelRecord(
        id=0,
        kernel_name="nvjet_tst_128x64_64x4_1x2_h_bz_bias_TNT",
        nvtx_stack=("model", "blocks.0.mlp.fc1"),
        metrics={READ: 8_921_088.0, WRITE: 2_097_152.0, TIME: 14_592e-9, PIPE: 16_384.0,
                 "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 2_147_483_648.0,
                 FADD: 1_048_576.0, FFMA: 0.0, FMUL: 0.0},
        units={READ: "byte", WRITE: "byte", TIME: "second", PIPE: "inst",
               "sm__ops_path_tensor_src_bf16_dst_fp32.sum": "", FADD: "inst", FFMA: "inst", FMUL: "inst"},
        cc="9.0",
        device_name="NVIDIA H100 80GB HBM3",
        nvtx_start_end=("step",),
        missing=(),
        attributes={**h100, "Block Size": "(384, 1, 1)", "Grid Size": "(64, 2, 1)"},
    )
    assert records[1].nvtx_stack == ("model", "blocks.0.mlp.act")
    assert records[1].nvtx_start_end == ("step",)  # unquoted start/end entry
    assert records[1].metrics[FFMA] == 7_340_032.0
    # a range name with "::" in it, innermost last
    assert records[2].nvtx_stack == ("model", "blocks.0.norm1", "aten::native_layer_norm")
    assert records[2].nvtx_start_end == ()
    assert records[2].metrics[TIME] == pytest.approx(3.104e-6, rel=1e-15)


def test_raw_page_old_format_kernel_time_without_nvtx():
    records = parse_csv(DATA / "raw_old_kernel_time.csv")
    assert len(records) == 2
    gemm = records[0]
    assert gemm == KernelRecord(
        id=0,
        kernel_name="volta_h884gemm_64x64_ldg8_nn",
        metrics={"device__attribute_compute_capability_major": 7.0,
                 "device__attribute_compute_capability_minor": 0.0,
                 READ: 8_390_000.0, WRITE: 524_290.0, TIME: 2.17e-05, PIPE: 32_768.0, FFMA: 131_072.0},
        units={"device__attribute_compute_capability_major": "", "device__attribute_compute_capability_minor": "",
               READ: "byte", WRITE: "byte", TIME: "second", PIPE: "inst", FFMA: "inst"},
        cc="7.0",  # from the device attributes: old CSVs have no CC column
        attributes={"Process ID": "31337", "Process Name": "python3.8", "Host Name": "node7",
                    "Kernel Time": "2020-Apr-07 17:01:05", "Context": "1", "Stream": "7"},
    )
    assert records[1].metrics[WRITE] == 1_050.0  # 1.05 Kbyte, decimal prefix
    assert records[1].metrics[TIME] == 3.42e-06


def test_details_page_new_format():
    records = parse_csv(DATA / "details_new.csv")
    assert [r.id for r in records] == [0, 1]
    assert [r.line for r in records] == [2, 9]
    common = {"Process ID": "9001", "Process Name": "python3.11", "Host Name": "gpu-node-3", "Context": "1",
              "Stream": "7", "Device": "0"}
    tensor = "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum"
    hmma = "sm__inst_executed_pipe_tensor_op_hmma.sum"
    assert records[0] == KernelRecord(
        id=0,
        kernel_name="ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        # the duration appears in two sections with the same value; the rule row is skipped
        metrics={TIME: 1.229e-05, READ: 16_896.0, WRITE: 8_192.0, hmma: 16_384.0, tensor: 67_108_864.0},
        units={TIME: "second", READ: "byte", WRITE: "byte", hmma: "inst", tensor: ""},
        cc="8.6",
        attributes={**common, "Block Size": "(256, 1, 1)", "Grid Size": "(8, 4, 1)"},
    )
    softmax = records[1]
    assert softmax.metrics == {"launch__registers_per_thread": 32.0, FADD: 158.0}  # "158 (0: 158)"
    assert softmax.units == {"launch__registers_per_thread": "register/thread", FADD: "inst"}
    assert softmax.missing == (FFMA,)  # n/a is missing, not 0


def test_details_page_old_format():
    records = parse_csv(DATA / "details_old.csv")
    assert records == [
        KernelRecord(
            id=0,
            kernel_name="turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn",
            metrics={READ: 1.07e9, TIME: 1.02e-3, PIPE: 524_288.0,
                     "sm__ops_path_tensor_src_fp16_dst_fp16.sum": 2_147_483_648.0},
            units={READ: "byte", TIME: "second", PIPE: "inst", "sm__ops_path_tensor_src_fp16_dst_fp16.sum": ""},
            cc=None,
            attributes={"Process ID": "2718", "Process Name": "python3.7", "Host Name": "dgx-01",
                        "Kernel Time": "2021-Mar-02 09:15:44", "Context": "1", "Stream": "7"},
        ),
        KernelRecord(
            id=1,
            kernel_name=(
                "void at::native::unrolled_elementwise_kernel<at::native::AddFunctor<float>, "
                "at::detail::Array<char *, 3>, OffsetCalculator<2, unsigned int>, OffsetCalculator<1, unsigned int>, "
                "at::native::memory::LoadWithoutCast, at::native::memory::StoreWithoutCast>"
                "(int, T1, T2, T3, T4, T5, T6)"
            ),
            metrics={READ: 2.1e6, TIME: 4.35e-06, FADD: 262_144.0},
            units={READ: "byte", TIME: "second", FADD: "inst"},
            attributes={"Process ID": "2718", "Process Name": "python3.7", "Host Name": "dgx-01",
                        "Kernel Time": "2021-Mar-02 09:15:45", "Context": "1", "Stream": "7"},
        ),
    ]


def test_thousands_separators_na_and_empty_cells():
    first, second = parse_csv(DATA / "thousands_na.csv")
    assert first.metrics == {READ: 1_215_000_000.0, TIME: 28_448e-9, FADD: 1_234_567.0}
    assert first.missing == (WRITE, FFMA, FMUL)  # "n/a", "" and "(!) n/a"
    assert second.metrics == {READ: 10_240_000.0, WRITE: 2_048.0, TIME: 4.0e-05, FADD: 1_000.0, FFMA: 0.0,
                              FMUL: 12.0}
    assert second.units[FMUL] == ""  # the unit cell was "(!) n/a"
    assert second.missing == ()


def test_prof_preamble_and_trailer_are_skipped():
    (record,) = parse_csv(DATA / "prof_preamble.csv")
    assert record.line == 7
    assert record.kernel_name == "ampere_sgemm_128x64_tn"
    assert record.metrics == {READ: 1_114_112.0, FFMA: 16_777_216.0}
    assert record.cc == "8.0"


def test_text_input_and_source_name():
    text = (DATA / "prof_preamble.csv").read_text()
    assert parse_csv(text) == parse_csv(DATA / "prof_preamble.csv")
    with pytest.raises(NcuFormatError) as info:
        parse_csv(text.replace('"16,777,216"', '"x"'), source_name="capture.csv")
    assert str(info.value).startswith("capture.csv:7: ")


@pytest.mark.parametrize(
    ("name", "line", "words"),
    [
        ("bad_no_header.csv", 1, "no ncu CSV header"),
        ("bad_ragged.csv", 4, "row has 4 cells, the header has 5"),
        ("bad_value_locale.csv", 5, "'27.595.520' is not a number"),
        ("bad_value_details.csv", 3, "'lots' is not a number"),
        ("bad_duplicate_metric.csv", 4, "appears again with a different value (line 2: 100 inst; here: 101 inst)"),
        ("bad_duplicate_id.csv", 4, "ID 0 appears twice"),
        ("bad_nvtx.csv", 4, "NVTX entry '<default domain>:layers.0.fc:none' has 3"),
    ],
)
def test_malformed_fixtures_name_file_and_line(name, line, words):
    path = DATA / name
    with pytest.raises(NcuFormatError) as info:
        parse_csv(path)
    error = info.value
    assert (error.file, error.line) == (str(path), line)
    assert str(error) == f"{path}:{line}: {error.message}"
    assert words in error.message
    assert isinstance(error, CostspecError) and error.exit_code == 2


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('"ID","Kernel Name","x"\n"a","k","1"\n', 2, "ID 'a' is not a non-negative integer"),
        ('"ID","Kernel Name","Kernel Name"\n', 1, "appears twice in the header"),
        ('"ID","Kernel Name","Metric Name","Metric Value"\n"0","k","m","1"\n"0","other","m","1"\n', 3,
         "different kernel"),
        ('"ID","Kernel Name","x"\n"","","byte"\n"0","k","1"\nsome program output\n', 4, "row has 1 cells"),
        ('"ID","Kernel Name","x"\n"0","k","1"\n"1","k,"1"\n', 3, "not a CSV row"),
    ],
)
def test_malformed_text(text, line, words):
    with pytest.raises(NcuFormatError) as info:
        parse_csv(text)
    assert info.value.line == line and info.value.file == "<text>"
    assert words in info.value.message


def test_unreadable_file_is_a_costspec_error(tmp_path):
    with pytest.raises(CostspecError, match="cannot read ncu CSV"):
        parse_csv(tmp_path / "nope.csv")


def test_text_valued_metric_without_unit_is_an_attribute():
    text = '"ID","Kernel Name","device__attribute_confidential_computing_mode","c2clink__enabled_mask"\n' \
           '"","","",""\n"0","k","No-CC","0x3"\n'
    (record,) = parse_csv(text)
    assert record.metrics == {}
    assert record.attributes == {"device__attribute_confidential_computing_mode": "No-CC",
                                 "c2clink__enabled_mask": "0x3"}


def test_raw_page_without_units_row():
    (record,) = parse_csv('"ID","Kernel Name","dram__bytes_read.sum"\n"0","k","1,024"\n')
    assert record.metrics == {READ: 1024.0} and record.units == {READ: ""}


@pytest.mark.parametrize(
    ("cell", "expected"),
    [("1,234,567", "1234567"), ("1,215,000,000.00", "1215000000.00"), ("158 (0: 158)", "158"),
     ("4.0e-05", "0.000040"), ("-3", "-3"), (" 12 ", "12"), ("(!) 7", "7")],
)
def test_parse_value(cell, expected):
    from decimal import Decimal

    assert parse_value(cell) == Decimal(expected)


@pytest.mark.parametrize("cell", ["n/a", "", "(!) n/a", "  "])
def test_parse_value_missing(cell):
    assert parse_value(cell) is None


@pytest.mark.parametrize("cell", ["27.595.520", "1,23", "1234,5", "abc", "0x3"])
def test_parse_value_rejects(cell):
    with pytest.raises(ValueError):
        parse_value(cell)


@pytest.mark.parametrize(
    ("unit", "base", "factor"),
    [("byte", "byte", "1"), ("Kbyte", "byte", "1e3"), ("Mbyte", "byte", "1e6"), ("Gbyte", "byte", "1e9"),
     ("nsecond", "second", "1e-9"), ("usecond", "second", "1e-6"), ("msecond", "second", "1e-3"),
     ("second", "second", "1"), ("ns", "second", "1e-9"), ("us", "second", "1e-6"), ("ms", "second", "1e-3"),
     ("s", "second", "1"), ("cycle", "cycle", "1"), ("inst", "inst", "1"), ("Kinst", "inst", "1e3"),
     ("(!) n/a", "", "1"), ("", "", "1"), ("Gbyte/second", "byte/second", "1e9"),
     ("cycle/nsecond", "cycle/second", "1e9"), ("Ghz", "hz", "1e9"), ("%", "%", "1"), ("furlong", "furlong", "1")],
)
def test_normalize_unit(unit, base, factor):
    from decimal import Decimal

    assert normalize_unit(unit) == (base, Decimal(factor))


def test_nvtx_cell_format():
    cell = ('4242  "<default domain>:toy:none:none:none:none:none:none"  '
            '"<default domain>:layers.0.fc:none:none:none:none:none:none" ')
    assert parse_nvtx_cell(cell) == ("toy", "layers.0.fc")
    assert parse_nvtx_cell("") == ()
    assert parse_nvtx_cell("4242") == ()  # thread id only: empty stack
    assert parse_nvtx_cell('7  "CCCL:cub::DeviceReduce::Reduce:none:none:none:none:none:none"') == (
        "cub::DeviceReduce::Reduce",
    )
    assert parse_nvtx_cell('"3:<default domain>:step:none:none:none:none:none:none"') == ("step",)
    with pytest.raises(ValueError, match="unexpected text"):
        parse_nvtx_cell('7  "<default domain>:a:none:none:none:none:none:none" junk')


def test_records_are_hashable_and_frozen():
    (record,) = parse_csv(DATA / "prof_preamble.csv")
    assert hash(record) == hash(record)
    with pytest.raises(AttributeError):
        record.id = 3  # type: ignore[misc]


def test_nvtx_cell_without_inner_quotes():
    # the same stacks as above with the inner quotes gone (a CSV tool that unquoted twice)
    plain = ("4242 <default domain>:toy:none:none:none:none:none:none  "
             "<default domain>:layers.0.fc:none:none:none:none:none:none")
    assert parse_nvtx_cell(plain) == ("toy", "layers.0.fc")
    # single spaces, a name with a space and one with ':' (entries end with their 6 payload fields)
    assert parse_nvtx_cell("<default domain>:my block:none:none:none:none:none:none "
                           "<default domain>:gemma_module:model.layers.0:none:none:none:none:none:none") == (
        "my block", "gemma_module:model.layers.0")
    assert parse_nvtx_cell("3:<default domain>:step:none:none:none:none:none:none") == ("step",)
    with pytest.raises(ValueError, match="has 3 ':'-separated fields"):
        parse_nvtx_cell("4242 <default domain>:a:none")


def test_nvtx_domains_in_printed_order_and_the_innermost_layer():
    # ncu keeps one push/pop stack per domain (NVTX: "a stack of nested ranges per thread per domain";
    # ncu_report INvtxDomainInfo.push_pop_ranges(): "the sorted list of stacked push/pop range names in this
    # domain") and prints the domains one after the other; costspec's layer ranges are in the default domain,
    # a library's (CUB's "CCCL") follow it. The innermost *layer* is found by name, not by position.
    from costspec.ncu.kernels import inner_range

    cell = ('1  "<default domain>:toy:none:none:none:none:none:none"  '
            '"<default domain>:layers.3.fc:none:none:none:none:none:none"  '
            '"CCCL:cub::DeviceReduce::Reduce:none:none:none:none:none:none" ')
    stack = parse_nvtx_cell(cell)
    assert stack == ("toy", "layers.3.fc", "cub::DeviceReduce::Reduce")
    assert inner_range(stack, {"toy", "layers.3.fc"}) == "layers.3.fc"


def _raw(metric: str, unit: str, cell: str) -> str:
    return (f'"ID","Kernel Name","{metric}"\n"","","{unit}"\n"0","k","{cell}"\n')


@pytest.mark.parametrize(
    ("metric", "cell", "expected"),
    [("sm__warps_launched.sum", "32.00; 32.00; 4.00", 68.0),  # .sum: the sum of the instances
     ("sm__warps_active.avg.per_cycle_active", "32.00; 32.00; 4.00", 68.0 / 3),  # .avg: their mean
     ("sm__cycles_active.max", "1,000; 3; 20", 1000.0),
     ("sm__cycles_active.min", "1,000; 3; 20", 3.0),
     ("l1tex__t_bytes.sum.per_second", "1; 2", 3.0),  # a rate of a .sum roll-up is summed
     ("sm__warps_launched.sum", "158 (0: 100; 1: 58)", 158.0)],  # --print-metric-instances values: the aggregate
)
def test_instanced_values_use_the_metric_rollup(metric, cell, expected):
    (record,) = parse_csv(_raw(metric, "inst", cell))
    assert record.metrics[metric] == pytest.approx(expected)


def test_instanced_values_without_a_rollup_stay_text():
    (record,) = parse_csv(_raw("launch__grid_dim", "", "32.00; 32.00; 4.00"))
    assert "launch__grid_dim" not in record.metrics
    assert record.attributes["launch__grid_dim"] == "32.00; 32.00; 4.00"  # no made-up aggregate
    (record,) = parse_csv(_raw("sm__warps_launched.sum", "inst", "n/a; n/a"))
    assert record.missing == ("sm__warps_launched.sum",)
    with pytest.raises(NcuFormatError, match="is not a number"):
        parse_csv(_raw("sm__warps_launched.sum", "inst", "32; lots"))
