"""gpu/ncu_source.py on a small source page written here (ncu's CSV: a kernel-name line, then the header)."""

import csv

import pytest

from tests.gpu_scripts import loaded


@pytest.fixture(scope="module")
def ncu_source():
    yield from loaded("ncu_source")


def _page(path, rows):
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_wait",
              "stall_long_sb", "stall_long_sb (Not Issued)"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "kernel"])
        w.writerow(header)
        w.writerows(rows)


def test_the_loop_and_the_stalls_are_read_from_the_page(tmp_path, ncu_source, capsys):
    rows = [["0x10", "LDC R1, c[0x0][0x28]", "1", "8", "1", "0", "0"]]
    rows += [[f"0x{0x100 + 16 * i:x}", "FMUL R2, R2, R3" if i % 2 else "@P0 MUFU.EX2 R4, R4", "2", "1,024", "1", "1",
              "1"] for i in range(20)]
    rows += [["0x400", "BAR.SYNC 0x0", "30", "1,000", "0", "30", "30"]]  # 98 % of the loop's count: in it
    _page(tmp_path / "p.csv", rows)
    assert ncu_source.main([str(tmp_path / "p.csv"), "--top", "1", "--loop"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "samples 71, instructions executed 21488, SASS lines 22"
    assert out[1] == "stalls: long_sb 70.4%, wait 29.6%"  # (issued or not; the "Not Issued" columns are a subset)
    assert "MUFU 47.7%" in out[2] and "FMUL 47.7%" in out[2]  # executed; the predicate is not the opcode
    assert "BAR.SYNC" in out[5]  # the instruction with the most samples
    assert out[6].startswith("loop: 21 instructions executed 1024 times") and "98.6% of the samples" in out[6]
    assert len(out) == 7 + 21
