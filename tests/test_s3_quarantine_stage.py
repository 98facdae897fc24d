"""Two workers of one S3 run share a work dir: one quarantines a file of its cluster while the
other stages its own cluster-day. A stage mirrors the quarantine folders, and a mirror deletes the
local files the bucket lacks: run between the quarantine's local log row and its upload, it
deleted that row (the run's files_follow_contract check then passed, or the upload failed)."""

import threading

from collectors.storage import S3Root
from pipeline import file_quarantine, remote

DATE = "2026-11-30"
BAD_KEY = f"power/date={DATE}/host=h0/bad.parquet"


def test_a_stage_waits_for_another_workers_quarantine_to_be_uploaded(s3, monkeypatch):
    s3.put(f"fleet/{BAD_KEY}", b"PAR1 this is not a parquet file PAR1")
    root = remote.open_root(s3.url("fleet"))
    work = remote.work_dir(root)
    remote.stage(root, work, DATE)
    assert (work / BAD_KEY).exists()

    other: list[threading.Thread] = []
    errors: list[BaseException] = []

    def other_worker_stages() -> None:
        try:
            remote.stage(remote.open_root(s3.url("fleet")), work, DATE)
        except BaseException as exc:  # noqa: BLE001 (reported by the test below)
            errors.append(exc)

    real_upload = S3Root.upload

    def upload(self, local_file, key):
        if key.startswith("quarantine/file_log/") and not other:
            # the log row is written locally, not yet in the bucket: the other worker stages now
            other.append(threading.Thread(target=other_worker_stages))
            other[0].start()
            other[0].join(2)  # it finishes here unless it waits for this quarantine
        return real_upload(self, local_file, key)

    monkeypatch.setattr(S3Root, "upload", upload)
    assert file_quarantine.usable_files(work, "power", DATE) == []
    other[0].join(60)
    assert not other[0].is_alive() and not errors, errors
    logged = file_quarantine.entries(work, DATE, "power")
    assert [e["path"] for e in logged] == [root.location(BAD_KEY)], logged
    assert [k for k in s3.keys("fleet/quarantine/files/") if k.endswith("bad.parquet")]
