"""pymongo and mongosh on a three-member emulated replica set (`mongolock-testsrv --members 3`):
they discover it with `replicaSet=`, write to the primary, and follow a `replSetStepDown`
(mongod's `src/mongo/db/repl/repl_set_commands.cpp`; election handoff, `src/mongo/db/repl/README.md`
"Step Up"). The set is started here, whatever server the rest of the suite uses; on a real
MongoDB (MONGODB_URI) these tests skip.
"""

import os
import re
import shutil
import subprocess

import pymongo
import pytest
from pymongo.errors import NotPrimaryError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


@pytest.fixture(scope="module")
def replica_set():
    if os.environ.get("MONGODB_URI"):
        pytest.skip("the emulated replica set is the emulator's own")
    subprocess.run(
        ["cargo", "build", "--quiet", "-p", "mongolock-testkit", "--bin", "mongolock-testsrv"],
        cwd=REPO,
        check=True,
    )
    proc = subprocess.Popen(
        [os.path.join(REPO, "target", "debug", "mongolock-testsrv"), "--members", "3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    hosts = []
    for _ in range(3):
        line = proc.stdout.readline()
        match = re.match(r"listening on (\S+)", line)
        assert match, f"unexpected line: {line!r}"
        hosts.append(match.group(1))
    uri = proc.stdout.readline().strip()
    assert uri == f"mongodb://{','.join(hosts)}/?replicaSet=rs0", uri
    yield uri, hosts
    proc.terminate()
    proc.wait(timeout=10)


def test_pymongo_discovers_the_set_and_follows_a_step_down(replica_set):
    uri, hosts = replica_set
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    coll = client.py_rs.things
    coll.insert_one({"_id": 1})
    before = "%s:%d" % client.primary
    assert before in hosts
    assert set("%s:%d" % s for s in client.secondaries) == set(hosts) - {before}
    client.admin.command("replSetStepDown", 30)
    # The retryable write goes to the new primary (after one retry if the driver had not
    # seen the step-down yet).
    coll.insert_one({"_id": 2})
    after = "%s:%d" % client.primary
    assert after != before
    assert coll.count_documents({}) == 2
    # The former primary, reached directly, refuses writes: mongod's NotWritablePrimary.
    direct = pymongo.MongoClient(before, directConnection=True, retryWrites=False)
    with pytest.raises(NotPrimaryError) as refused:
        direct.py_rs.things.insert_one({"_id": 3})
    assert refused.value.details["code"] == 10107
    assert "topologyVersion" in refused.value.details
    direct.close()
    client.close()


def test_mongosh_follows_a_step_down(replica_set):
    if shutil.which("mongosh") is None:
        pytest.skip("mongosh is not installed")
    uri, _ = replica_set
    script = """
      const c = db.getSiblingDB("sh_rs").things;
      c.insertOne({_id: 1});
      const before = db.hello().primary;
      rs.stepDown(30);
      c.insertOne({_id: 2});
      print(JSON.stringify({changed: db.hello().primary !== before, n: c.countDocuments({})}));
    """
    out = subprocess.run(
        ["mongosh", "--quiet", uri, "--eval", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert out.stdout.strip().splitlines()[-1] == '{"changed":true,"n":2}', out.stdout
