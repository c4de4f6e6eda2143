"""pymongo against the emulator (or a real MongoDB given MONGODB_URI).

The server comes from MONGOLOCK_TESTSRV_URI (CI starts the binary), or MONGODB_URI (a real
replica set with test commands enabled), or else this file starts `mongolock-testsrv` itself.
"""

import os
import re
import subprocess
import uuid

import pymongo
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


@pytest.fixture(scope="session")
def uri():
    for name in ("MONGOLOCK_TESTSRV_URI", "MONGODB_URI"):
        if os.environ.get(name):
            yield os.environ[name]
            return
    subprocess.run(
        ["cargo", "build", "--quiet", "-p", "mongolock-testkit", "--bin", "mongolock-testsrv"],
        cwd=REPO,
        check=True,
    )
    proc = subprocess.Popen(
        [os.path.join(REPO, "target", "debug", "mongolock-testsrv"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    match = re.match(r"listening on (\S+)", line)
    assert match, f"unexpected first line: {line!r}"
    yield f"mongodb://{match.group(1)}/?replicaSet=rs0"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def is_emulator():
    return not os.environ.get("MONGODB_URI")


@pytest.fixture(scope="session")
def client(uri):
    c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    yield c
    c.close()


@pytest.fixture
def db(client):
    name = "py_" + uuid.uuid4().hex[:12]
    yield client[name]
    client.drop_database(name)


@pytest.fixture
def fail_command(client):
    """Sets failCommand and turns it off after the test."""

    def configure(mode, **data):
        client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)

    yield configure
    client.admin.command("configureFailPoint", "failCommand", mode="off")
