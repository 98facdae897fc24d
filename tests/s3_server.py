"""A real S3-compatible server for tests: moto in server mode on 127.0.0.1, not a mock of the client.

``s3_server`` (session) starts ``moto.server.ThreadedMotoServer`` on a free port of 127.0.0.1 in
a child process: wattline's S3 client is Arrow's C++ one, and some Arrow calls hold the GIL
while they wait on the network (closing a stream from a destructor), which would deadlock a
server thread living in the test process. ``s3`` (per test) creates a fresh bucket and points
the standard AWS environment variables at the server with dummy credentials; the user's
``~/.aws`` files and the instance metadata service are kept out.

Use: ``def test_x(s3): root = DataRoot.open(s3.url("data"))``. Both fixtures are registered in
``tests/conftest.py``.
"""

from __future__ import annotations

import multiprocessing
import uuid
from dataclasses import dataclass

import pytest

REGION = "us-east-1"


def _serve(conn) -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log line per request
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    conn.send(server.get_host_and_port())
    try:
        conn.recv()  # until the parent says stop, or exits (EOFError)
    except EOFError:
        pass
    server.stop()


@pytest.fixture(scope="session")
def s3_server():
    """The endpoint URL (``http://127.0.0.1:PORT``) of a moto server that lives for the session."""
    pytest.importorskip("moto.server", reason="moto[server] is in the dev extra")
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="moto-s3")
    proc.start()
    if not parent.poll(60):
        proc.kill()
        raise RuntimeError("the moto S3 server did not start within 60 s")
    host, port = parent.recv()
    yield f"http://{host}:{port}"
    parent.send("stop")
    proc.join(10)
    if proc.is_alive():
        proc.kill()


@dataclass
class Bucket:
    name: str
    endpoint: str
    client: object  # boto3 S3 client: an independent view of what is really stored

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.name}/{prefix}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` (folder markers included), as S3 lists them."""
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(keys)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)


@pytest.fixture
def s3(s3_server, monkeypatch, tmp_path) -> Bucket:
    """A new empty bucket, and the AWS environment pointing at the test server."""
    import boto3

    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("WATTLINE_STATE_DIR", str(tmp_path / "s3-state"))
    client = boto3.client("s3", endpoint_url=s3_server, region_name=REGION,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    name = f"wattline-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name)
    return Bucket(name, s3_server, client)
