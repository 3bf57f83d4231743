"""Early warning from trends (gpuboot.trends): a counter growing faster than the SKU's rate
over the node's own scans is WARN naming the counter, the rate and the window; a reboot (a new
boot id) or a counter that went down (a driver reload) restarts the window; what was not read
is unknown, never zero; a bandwidth drifting down inside its band is WARN."""

from __future__ import annotations

import copy

import pytest

from gpuboot import trends
from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import NVLINK_ERRORS_FILE, SMI_Q_FILE
from gpuboot.errors import ConfigError
from gpuboot.profiles import load_profile, validate
from gpuboot.verdict import Status
from tests.paths import FIXTURES

H100 = load_profile("hgx-h100-sxm-8gpu")


def nvlink_e(crc: dict[tuple[int, int], int] | None = None, gpus: int = 2, links: int = 18) -> str:
    """`nvidia-smi nvlink -e` as the real tool prints it (the capture's layout, every link)."""
    crc = crc or {}
    out = []
    for g in range(gpus):
        out.append(
            f"GPU {g}: NVIDIA H100 80GB HBM3 (UUID: GPU-{g:08d}-0000-0000-0000-000000000000)"
        )
        blocks = [
            f"\t Link {i}: Replay Errors: 0\n\t Link {i}: Recovery Errors: 0\n"
            f"\t Link {i}: CRC Errors: {crc.get((g, i), 0)}"
            for i in range(links)
        ]
        out.append("\n\n".join(blocks))
    return "\n".join(out) + "\n"


def sample(time: str, boot: str | None, text: str) -> trends.Sample:
    s = trends.observe({NVLINK_ERRORS_FILE: ProbeOutput(text, "", 0)})
    s.time, s.boot_id = time, boot
    return s


def window(*samples: trends.Sample) -> trends.Window:
    w = trends.Window()
    for s in samples:
        w.add(copy.deepcopy(s))
    return w


def by_rule(findings, rule):
    return next(f for f in findings if f.rule == rule)


def test_a_crc_counter_growing_over_three_scans_of_one_boot_is_warn_naming_rate_and_window():
    w = window(
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 100})),
        sample("2026-11-27T09:00:00Z", "b1", nvlink_e({(1, 5): 1340})),
        sample("2026-11-27T10:00:00Z", "b1", nvlink_e({(1, 5): 2580})),
    )
    f = by_rule(trends.judge(w, H100), "TRD-001")
    assert f.status == Status.WARN
    assert f.reason == (
        "NVLink CRC errors on GPU1 link 5 grew 1,240/h over 3 scans (2 h), threshold 100/h"
    )
    assert f.severity == Status.WARN  # a trend never fails a node


def test_growth_below_the_rate_passes():
    w = window(
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(0, 0): 10})),
        sample("2026-11-27T09:00:00Z", "b1", nvlink_e({(0, 0): 50})),
        sample("2026-11-27T10:00:00Z", "b1", nvlink_e({(0, 0): 90})),
    )
    assert by_rule(trends.judge(w, H100), "TRD-001").status == Status.PASS


def test_a_reboot_between_scans_is_not_growth_the_window_restarts():
    w = window(
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 5000})),
        sample("2026-11-27T09:00:00Z", "b1", nvlink_e({(1, 5): 6000})),
        # rebooted: the counter restarts at 0 and grows a little; the old boot says nothing
        sample("2026-11-27T10:00:00Z", "b2", nvlink_e({(1, 5): 7000})),
    )
    f = by_rule(trends.judge(w, H100), "TRD-001")
    assert f.status == Status.SKIPPED and "1 of 3 scans" in f.reason
    assert len(w.samples) == 1


def test_a_counter_that_went_down_in_the_same_boot_restarts_its_window():
    # a driver reload (or a GPU reset) zeroes the counter without a reboot
    w = window(
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 9000})),
        sample("2026-11-27T09:00:00Z", "b1", nvlink_e({(1, 5): 10})),
        sample("2026-11-27T10:00:00Z", "b1", nvlink_e({(1, 5): 40})),
    )
    g = trends.growth(w.samples, "nvlink_crc_errors@GPU1 link 5", 24)
    assert (g.grew, g.scans) == (30, 2)  # from the reading after the drop, not before it
    assert by_rule(trends.judge(w, H100), "TRD-001").status == Status.PASS


def test_a_scan_that_could_not_read_the_counters_is_unknown_not_zero():
    unread = trends.Sample("2026-11-27T09:00:00Z", "b1")  # nvlink -e failed that scan
    w = window(
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 700})),
        unread,
        sample("2026-11-27T10:00:00Z", "b1", nvlink_e({(1, 5): 700})),
    )
    assert unread.value("nvlink_crc_errors@GPU1 link 5") is None
    g = trends.growth(w.samples, "nvlink_crc_errors@GPU1 link 5", 24)
    assert g.grew == 0  # 700 -> 700 across the gap, never 0 -> 700


def test_an_elided_capture_reads_no_nvlink_group():
    text = (FIXTURES / "captures/nvlink_e/h100-hbm3-gpu0-all-zero-errors-elided.txt").read_text()
    s = trends.observe({NVLINK_ERRORS_FILE: ProbeOutput(text, "", 0)})
    assert s.read == frozenset() and s.values == {}  # links 2-16 unknown, not 0


def test_a_full_real_layout_reads_every_gpu_with_zero_counters_kept_as_read_groups():
    s = trends.observe({NVLINK_ERRORS_FILE: ProbeOutput(nvlink_e({(1, 3): 7}), "", 0)})
    assert s.read == {"nvlink@GPU0", "nvlink@GPU1"}
    assert s.values == {"nvlink_crc_errors@GPU1 link 3": 7}
    assert s.value("nvlink_crc_errors@GPU0 link 17") == 0


def test_a_gpu_block_with_an_unreadable_count_is_not_read_as_zeros():
    text = nvlink_e().replace("Link 4: Replay Errors: 0", "Link 4: Replay Errors: N/A", 1)
    s = trends.observe({NVLINK_ERRORS_FILE: ProbeOutput(text, "", 0)})
    assert s.read == {"nvlink@GPU1"}
    assert s.value("nvlink_crc_errors@GPU0 link 4") is None


def test_real_nvidia_smi_q_captures_give_pcie_replays_and_aggregate_corrected_ecc():
    q = FIXTURES / "captures/nvidia_smi_q"
    h100 = trends.observe(
        {SMI_Q_FILE: ProbeOutput((q / "h100-hbm3-8gpu-q-535.161.08.txt").read_text(), "", 0)}
    )
    assert h100.values["pcie_replays@GPU0"] == 67 and h100.values["pcie_replays@GPU6"] == 82
    assert h100.value("ecc_corrected@GPU3") == 0  # read, and none corrected
    a100 = q / "a100-sxm4-80gb-xid63-dram-correctable-177-remap-pending-excerpt.txt"
    s = trends.observe({SMI_Q_FILE: ProbeOutput(a100.read_text(), "", 0)})
    assert s.values == {"ecc_corrected@GPU0": 177}  # Aggregate DRAM Correctable 177


def test_a_node_reporting_more_counters_than_any_real_one_is_not_kept():
    many = nvlink_e({(g, i): 1 for g in range(40) for i in range(60)}, gpus=40, links=60)
    s = trends.observe({NVLINK_ERRORS_FILE: ProbeOutput(many, "", 0)})
    assert (s.read, s.values) == (frozenset(), {})
    s.time, s.boot_id = "2026-11-27T08:00:00Z", "b1"
    assert trends.Window.from_json(window(s).to_json())  # its state still reads back


def test_fewer_scans_than_min_scans_is_not_judged():
    w = window(
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 100})),
        sample("2026-11-27T09:00:00Z", "b1", nvlink_e({(1, 5): 100000})),
    )
    f = by_rule(trends.judge(w, H100), "TRD-001")
    assert f.status == Status.SKIPPED and f.reason.startswith("not judged yet: 2 of 3 scans")


def test_growth_older_than_the_window_no_longer_counts():
    w = window(
        sample("2026-11-25T08:00:00Z", "b1", nvlink_e({(1, 5): 0})),
        sample("2026-11-27T07:00:00Z", "b1", nvlink_e({(1, 5): 50000})),
        sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 50000})),
        sample("2026-11-27T09:00:00Z", "b1", nvlink_e({(1, 5): 50010})),
    )
    assert by_rule(trends.judge(w, H100), "TRD-001").status == Status.PASS


def test_roce_counters_come_from_the_reports_counter_measurements():
    m = [
        {
            "kind": "counter",
            "device": "eth2",
            "counter": "rx_out_of_buffer",
            "value": v,
            "unit": "packets",
        }
        for v in (0, 10000, 20000)
    ]
    w = trends.Window()
    for hour, one in zip((8, 9, 10), m, strict=True):
        s = trends.observe({}, [one])
        s.time, s.boot_id = f"2026-11-27T{hour:02d}:00:00Z", "b1"
        w.add(s)
    f = by_rule(trends.judge(w, H100), "TRD-004")
    assert f.status == Status.WARN
    assert "RoCE out-of-buffer drops on eth2 grew 10,000/h over 3 scans (2 h)" in f.reason


def test_thinning_keeps_the_oldest_sample_and_counts_every_scan():
    w = trends.Window()
    for minute in range(40):
        s = sample(f"2026-11-27T08:{minute:02d}:00Z", "b1", nvlink_e({(0, 0): 600 * minute}))
        w.add(s)
    assert len(w.samples) <= trends.MAX_SAMPLES
    assert w.samples[0].time == "2026-11-27T08:00:00Z"
    g = trends.growth(w.samples, "nvlink_crc_errors@GPU0 link 0", 24)
    assert g.scans == 40 and g.per_hour == pytest.approx(36000)


def test_the_window_state_round_trips_and_a_bad_one_is_refused():
    w = window(sample("2026-11-27T08:00:00Z", "b1", nvlink_e({(1, 5): 3})))
    w.add_figures("2026-11-27T08:00:00Z", {"nvbandwidth_h2d": [54.0, "GB/s", 44.0]})
    assert trends.Window.from_json(w.to_json()).to_json() == w.to_json()
    bad = w.to_json()
    bad["samples"][0][3] = {"nvlink_crc_errors@GPU1 link 5": -1}
    with pytest.raises(ValueError, match="trend sample"):
        trends.Window.from_json(bad)


def _figures(w: trends.Window, *values: float) -> dict:
    for day, v in enumerate(values, start=20):
        figs = {"nvbandwidth_h2d": [v, "GB/s", 44.0]}
        w.add_figures(f"2026-11-{day}T08:00:00Z", figs)
    return figs


def test_bandwidth_drifting_down_inside_its_band_is_warn():
    w = trends.Window()
    figs = _figures(w, 55.0, 54.6, 55.2, 50.0)  # 50.0 passes the band (fail below 44)
    f = by_rule(trends.judge(w, H100, figs), "TRD-005")
    assert f.status == Status.WARN
    assert f.reason.startswith(
        "nvbandwidth_h2d 50 GB/s is 9% below this node's median 55 GB/s over its 3 earlier "
        "measured scans (since 2026-11-20T08:00:00Z), threshold 5%"
    )


def test_bandwidth_below_its_fail_band_is_left_to_the_bandwidth_rule():
    w = trends.Window()
    figs = _figures(w, 55.0, 54.6, 55.2, 40.0)
    assert by_rule(trends.judge(w, H100, figs), "TRD-005").status == Status.PASS


def test_steady_bandwidth_passes_and_a_scan_without_probes_judges_no_bandwidth():
    w = trends.Window()
    figs = _figures(w, 55.0, 54.6, 55.2, 54.9)
    assert by_rule(trends.judge(w, H100, figs), "TRD-005").status == Status.PASS
    assert not [f for f in trends.judge(w, H100, {}) if f.rule == "TRD-005"]


# ---------------------------------------------------------------- the profile's thresholds
def _with_trends(**change) -> dict:
    prof = copy.deepcopy(H100)
    prof["trends"].update(change)
    return prof


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"window_hours": 0}, "trends.window_hours"),
        ({"window_hours": 1000}, "trends.window_hours"),
        ({"min_scans": 1}, "trends.min_scans"),
        ({"min_scans": True}, "trends.min_scans"),
        ({"rates": {"nvlink_crc_errors": {"per_hour": -1, "source": "x"}}},
         "trends.rates.nvlink_crc_errors.per_hour"),
        ({"rates": {"nvlink_crc_errors": {"per_hour": "100/h", "source": "x"}}},
         "trends.rates.nvlink_crc_errors.per_hour"),
        ({"rates": {"nvlink_crc_errors": {"per_hour": 100}}},
         "trends.rates.nvlink_crc_errors.source"),
        ({"rates": {"nvlink_crc": {"per_hour": 100, "source": "x"}}}, "trends.rates.nvlink_crc"),
        ({"bandwidth_drop": {"fraction": 5, "min_scans": 3, "source": "x"}},
         "trends.bandwidth_drop.fraction"),
        ({"bandwidth_drop": {"fraction": 0.05, "min_scans": 3}}, "trends.bandwidth_drop.source"),
    ],
)  # fmt: skip
def test_a_bad_threshold_is_a_config_error_naming_file_and_key(change, key):
    with pytest.raises(ConfigError) as err:
        validate(_with_trends(**change), "my-sku.yaml")
    assert err.value.where == f"my-sku.yaml: {key}"
    assert err.value.hint


def test_every_shipped_threshold_has_its_source():
    from gpuboot.profiles import list_profiles

    for name in list_profiles():
        conf = load_profile(name)["trends"]
        assert all(r["source"].strip() for r in conf["rates"].values()), name
        assert conf["bandwidth_drop"]["source"].strip(), name
