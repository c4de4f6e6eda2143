"""Fail points and change streams through pymongo."""

import threading
import time

from pymongo.errors import OperationFailure


def test_fail_command_with_error_code(db, fail_command):
    fail_command({"times": 1}, failCommands=["find"], errorCode=2)
    try:
        db.c.find_one({})
        raise AssertionError("the fail point did not fire")
    except OperationFailure as error:
        assert error.code == 2
        assert "failCommand" in str(error)
    assert db.c.find_one({}) is None


def test_close_connection_is_retried_once(db, fail_command):
    fail_command({"times": 1}, failCommands=["insert"], closeConnection=True)
    db.c.insert_one({"_id": 1})
    assert db.c.count_documents({}) == 1


def test_change_stream_sees_writes_in_order(db):
    db.c.insert_one({"_id": 0})
    with db.c.watch(max_await_time_ms=2000) as stream:
        def write():
            time.sleep(0.1)
            db.c.insert_one({"_id": 1})
            db.c.update_one({"_id": 1}, {"$set": {"x": 1}})
            db.c.delete_one({"_id": 1})

        writer = threading.Thread(target=write)
        writer.start()
        kinds = [stream.next()["operationType"] for _ in range(3)]
        writer.join()
        assert kinds == ["insert", "update", "delete"]
        token = stream.resume_token
    assert token is not None
