"""CRUD, indexes and error shapes through pymongo."""

import pymongo
import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure


def test_insert_find_sort_limit(db):
    db.c.insert_many([{"_id": i, "v": i % 3} for i in range(20)])
    got = list(db.c.find({"v": 1}, {"_id": 1}).sort("_id", -1).limit(3))
    assert got == [{"_id": 19}, {"_id": 16}, {"_id": 13}]
    assert db.c.count_documents({"v": {"$in": [0, 2]}}) == 13
    assert sorted(db.c.distinct("v")) == [0, 1, 2]


def test_update_operators_and_upsert(db):
    db.c.insert_one({"_id": 1, "tags": ["a"], "n": 1})
    r = db.c.update_one({"_id": 1}, {"$addToSet": {"tags": "b"}, "$inc": {"n": 5}})
    assert (r.matched_count, r.modified_count) == (1, 1)
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "tags": ["a", "b"], "n": 6}
    r = db.c.update_one({"name": "x"}, {"$set": {"n": 0}}, upsert=True)
    assert r.upserted_id is not None
    assert db.c.find_one({"_id": r.upserted_id}) == {"_id": r.upserted_id, "name": "x", "n": 0}


def test_find_one_and_update_with_pipeline(db):
    db.c.insert_one({"_id": "r", "fence": 1})
    doc = db.c.find_one_and_update(
        {"_id": "r"},
        [{"$set": {"fence": {"$add": ["$fence", 1]}, "at": "$$NOW"}}],
        return_document=pymongo.ReturnDocument.AFTER,
    )
    assert doc["fence"] == 2
    assert "at" in doc


def test_duplicate_key_error_shape(db):
    db.c.create_index("k", unique=True)
    db.c.insert_one({"k": 1})
    with pytest.raises(DuplicateKeyError) as info:
        db.c.insert_one({"k": 1})
    details = info.value.details
    assert details["code"] == 11000
    assert details["keyPattern"] == {"k": 1}
    assert details["keyValue"] == {"k": 1}
    assert "index: k_1 dup key: { k: 1 }" in details["errmsg"]


def test_unknown_command_and_operator(db):
    with pytest.raises(OperationFailure) as info:
        db.command("frobnicate")
    assert info.value.code == 59
    with pytest.raises(OperationFailure) as info:
        list(db.c.find({"a": {"$frob": 1}}))
    assert info.value.code == 2


def test_indexes_are_idempotent_and_listed(db):
    db.c.create_index([("a", 1), ("b", -1)], name="ab")
    db.c.create_index([("a", 1), ("b", -1)], name="ab")
    names = [ix["name"] for ix in db.c.list_indexes()]
    assert names == ["_id_", "ab"]
    db.c.drop_index("ab")
    assert [ix["name"] for ix in db.c.list_indexes()] == ["_id_"]


def test_aggregate(db):
    db.c.insert_many([{"k": i % 2, "v": i} for i in range(6)])
    got = list(db.c.aggregate([{"$group": {"_id": "$k", "total": {"$sum": "$v"}}}, {"$sort": {"_id": 1}}]))
    assert got == [{"_id": 0, "total": 6}, {"_id": 1, "total": 9}]
