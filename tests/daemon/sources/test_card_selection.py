"""Which cards are read: the Ryzen iGPU is told apart from the 7900 XTXs by sysfs
facts, and `[gpu] cards` chooses discrete (the default), all, or PCI addresses."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs, CardReading
from exporter.sim.rig.sysfs_writer import FIXTURE_CARDS, RIG_CARDS, RYZEN_IGPU, write_rig
from tests.support.sysfs_tree import card_device


@pytest.fixture
def rig_with_igpu(tmp_path: Path) -> Path:
    write_rig(tmp_path, FIXTURE_CARDS)
    return tmp_path


def read(root: Path, cards: object = "discrete") -> dict[str, CardReading]:
    return {c.card: c for c in AmdgpuSysfs(root, cards=cards).read_cards()}


def test_the_default_reads_the_discrete_cards_only(rig_with_igpu: Path) -> None:
    assert sorted(read(rig_with_igpu)) == ["card1", "card2"]


def test_all_reads_the_igpu_too_and_says_what_it_is(rig_with_igpu: Path) -> None:
    cards = read(rig_with_igpu, "all")
    assert sorted(cards) == ["card1", "card2", "card3"]
    assert (cards["card3"].kind, cards["card3"].device_id) == ("integrated", "1002:13c0")
    assert (cards["card1"].kind, cards["card1"].device_id) == ("discrete", "1002:744c")
    assert cards["card3"].vram_total_bytes == 512 * 1024 * 1024


def test_a_list_of_pci_addresses_reads_exactly_those(rig_with_igpu: Path) -> None:
    assert sorted(read(rig_with_igpu, ("0000:0a:00.0", "0000:7c:00.0"))) == ["card2", "card3"]


def test_without_gpu_metrics_every_card_is_read(rig_with_igpu: Path) -> None:
    # VRAM alone never makes a card integrated: a garbled file must not lose a card.
    for spec in (RIG_CARDS[0], RYZEN_IGPU):
        (card_device(rig_with_igpu, spec.card) / "gpu_metrics").unlink()
    cards = read(rig_with_igpu)
    assert (cards["card1"].kind, cards["card3"].kind) == ("discrete", "discrete")


@pytest.mark.parametrize("vram", ["0", "5", "17180917760", "25753026560"])
def test_vram_that_is_no_carve_out_keeps_an_apu_header_discrete(
    rig_with_igpu: Path, vram: str
) -> None:
    (card_device(rig_with_igpu, "card3") / "mem_info_vram_total").write_text(vram + "\n")
    assert read(rig_with_igpu, "all")["card3"].kind == "discrete"


def test_a_16_gib_carve_out_is_still_integrated(rig_with_igpu: Path) -> None:
    # BIOSes offer UMA frame buffers up to 16 GB: the iGPU stays out of `discrete`.
    (card_device(rig_with_igpu, "card3") / "mem_info_vram_total").write_text(f"{16 * 1024**3}\n")
    assert read(rig_with_igpu, "all")["card3"].kind == "integrated"


def test_an_inconsistent_header_is_no_fact(rig_with_igpu: Path) -> None:
    path = card_device(rig_with_igpu, "card3") / "gpu_metrics"
    path.write_bytes(path.read_bytes()[:60])  # says 120 bytes, 60 read
    assert read(rig_with_igpu, "all")["card3"].kind == "discrete"


def test_the_device_id_alone_decides_nothing(tmp_path: Path) -> None:
    # A 7900 XTX's device id on a card whose facts say APU is still integrated.
    write_rig(tmp_path, (dataclasses.replace(RYZEN_IGPU, device_id="0x744c"),))
    assert read(tmp_path, "all")["card3"].kind == "integrated"


def test_facts_that_disagree_keep_the_card_discrete(tmp_path: Path) -> None:
    # An APU layout header on a card with 24 GiB of VRAM: never drop a real card.
    write_rig(tmp_path, (dataclasses.replace(RIG_CARDS[0], metrics_revision=(2, 1)),))
    assert read(tmp_path)["card1"].kind == "discrete"


def test_a_skipped_card_is_told_once_and_never_read_again(
    rig_with_igpu: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reader = AmdgpuSysfs(rig_with_igpu)
    with caplog.at_level(logging.INFO):
        reader.read_cards()
        (card_device(rig_with_igpu, "card3") / "gpu_metrics").write_bytes(b"")  # not read
        for _ in range(3):
            assert sorted(c.card for c in reader.read_cards()) == ["card1", "card2"]
    told = [r.getMessage() for r in caplog.records if "card3" in r.getMessage()]
    assert len(told) == 1 and "integrated" in told[0], told


def test_a_card_with_no_fact_yet_is_read_and_asked_again(rig_with_igpu: Path) -> None:
    device = card_device(rig_with_igpu, "card3")
    blob = (device / "gpu_metrics").read_bytes()
    for name in ("gpu_metrics", "mem_info_vram_total"):
        (device / name).unlink()
    reader = AmdgpuSysfs(rig_with_igpu)
    assert "card3" in {c.card for c in reader.read_cards()}  # nothing says APU: read it
    (device / "gpu_metrics").write_bytes(blob)  # the facts become readable
    assert "card3" not in {c.card for c in reader.read_cards()}


def test_a_card_read_once_then_found_integrated_is_not_reported_missing(
    rig_with_igpu: Path
) -> None:
    device = card_device(rig_with_igpu, "card3")
    blob = (device / "gpu_metrics").read_bytes()
    (device / "gpu_metrics").unlink()
    reader = AmdgpuSysfs(rig_with_igpu)
    reader.read_cards()
    (device / "gpu_metrics").write_bytes(blob)
    cards = {c.card: c for c in reader.read_cards()}
    assert "card3" not in cards and all(c.present for c in cards.values())
