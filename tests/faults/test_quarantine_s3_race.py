"""Two workers on one S3 data dir: one quarantines a corrupt object while the other's stage
mirrors the day and drops the local copy the first was about to move. The file must still be
listed as quarantined (so files_follow_contract fails): the quarantined object is fetched back."""

from __future__ import annotations

from collectors.storage import DataRoot
from pipeline import file_quarantine, remote

DAY = "2026-12-01"
KEY = f"power/date={DAY}/host=h0/zz-corrupt.parquet"


def test_the_quarantined_object_is_listed_when_a_concurrent_stage_dropped_its_local_copy(s3, tmp_path, monkeypatch):
    root = DataRoot.open(s3.url("data"))
    monkeypatch.setenv("WATTLINE_WORK_DIR", str(tmp_path / "work"))
    work = remote.work_dir(root)
    root.write_bytes(KEY, b"PAR1 this is not a parquet file PAR1")
    root.stage([KEY], work)
    move = type(root).move

    def move_then_other_worker_mirrors(self, src, dest):
        out = move(self, src, dest)
        (work / src).unlink()  # the other worker's mirror: the object is gone from power/
        return out

    monkeypatch.setattr(type(root), "move", move_then_other_worker_mirrors)
    assert file_quarantine.usable_files(work, "power", DAY) == []
    assert not root.exists(KEY) and root.exists(f"quarantine/files/{KEY}")
    (entry,) = file_quarantine.entries(work, DAY, "power")
    assert entry["path"] == root.location(KEY) and entry["kind"] == "unreadable"
    assert (work / "quarantine" / "files" / KEY).is_file()
