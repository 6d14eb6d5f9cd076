"""What the tests' S3 server (S3Proxy 4.0 with its filesystem backend, tests/support/s3_server.py) answers as S3 does, asked
with boto3, and a Delta table at s3a://bucket/... written and read through it by Spark (hadoop-aws 3.5.0 and the AWS
SDK modules set-up resolves into infra/jars/spark). A lease on an object store (issue 47) rests on the conditional
puts; a landing's arrival times on LastModified."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from botocore.exceptions import ClientError

from tests.support.s3_server import s3_server  # noqa: F401  (the module's server)


def status(error: ClientError) -> int:
    return error.response["ResponseMetadata"]["HTTPStatusCode"]


def test_a_second_put_with_if_none_match_star_of_a_key_fails_412_and_keeps_the_first(s3_server):
    s3 = s3_server.client()
    s3.put_object(Bucket=s3_server.bucket, Key="lease/a", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=s3_server.bucket, Key="lease/a", Body=b"second", IfNoneMatch="*")
    assert status(refused.value) == 412
    assert s3.get_object(Bucket=s3_server.bucket, Key="lease/a")["Body"].read() == b"first"


def test_a_put_with_if_match_replaces_only_the_version_whose_etag_it_names(s3_server):
    s3 = s3_server.client()
    first = s3.put_object(Bucket=s3_server.bucket, Key="lease/b", Body=b"v1")["ETag"]
    s3.put_object(Bucket=s3_server.bucket, Key="lease/b", Body=b"v2", IfMatch=first)
    with pytest.raises(ClientError) as refused:  # `first` is no longer the object's ETag
        s3.put_object(Bucket=s3_server.bucket, Key="lease/b", Body=b"v3", IfMatch=first)
    assert status(refused.value) == 412
    assert s3.get_object(Bucket=s3_server.bucket, Key="lease/b")["Body"].read() == b"v2"


def test_a_multipart_upload_joins_its_parts_and_completes_only_if_none_match_holds(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket

    def upload(key: str, parts: list[bytes], **condition) -> dict:
        upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        etags = [s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body)["ETag"]
                 for n, body in enumerate(parts, 1)]
        return s3.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, **condition,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})

    upload("big", [b"a" * 5 * 2**20, b"b" * 10])  # every part but the last is at least 5 MiB
    assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == 5 * 2**20 + 10
    with pytest.raises(ClientError) as refused:
        upload("big", [b"c"], IfNoneMatch="*")
    assert status(refused.value) == 412


def test_listing_by_prefix_and_delimiter_gives_keys_and_common_prefixes_page_by_page(s3_server):
    s3, bucket = s3_server.client(), s3_server.bucket
    for key in ("landing/part-0/a.jsonl", "landing/part-0/b.jsonl", "landing/part-1/a.jsonl", "landing/_manifest"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"{}\n")
    level = s3.list_objects_v2(Bucket=bucket, Prefix="landing/", Delimiter="/")
    assert [o["Key"] for o in level["Contents"]] == ["landing/_manifest"]
    assert [p["Prefix"] for p in level["CommonPrefixes"]] == ["landing/part-0/", "landing/part-1/"]
    # S3Proxy 4.0 sends a continuation token URL-encoded when boto3 asks for encoded keys (its default) and takes it
    # back undecoded: with a key that needs encoding (`p=0`, a space) the next page is the same page again
    pages, token = [], {}
    while len(pages) < 10:
        page = s3.list_objects_v2(Bucket=bucket, Prefix="landing/part-", MaxKeys=2, **token)
        pages.append([o["Key"] for o in page["Contents"]])
        if not page["IsTruncated"]:
            break
        token = {"ContinuationToken": page["NextContinuationToken"]}
    assert pages == [["landing/part-0/a.jsonl", "landing/part-0/b.jsonl"], ["landing/part-1/a.jsonl"]]


def test_an_objects_last_modified_is_the_time_of_its_put_to_the_second(s3_server):
    s3 = s3_server.client()
    before = datetime.now(timezone.utc).replace(microsecond=0)
    s3.put_object(Bucket=s3_server.bucket, Key="arrivals/x.jsonl", Body=b"{}\n")
    after = datetime.now(timezone.utc)
    listed = s3.list_objects_v2(Bucket=s3_server.bucket, Prefix="arrivals/")["Contents"][0]["LastModified"]
    head = s3.head_object(Bucket=s3_server.bucket, Key="arrivals/x.jsonl")["LastModified"]
    assert listed == head and before <= head <= after + timedelta(seconds=1)
    assert head.microsecond == 0  # whole seconds, as S3's


def test_spark_writes_and_reads_a_delta_table_at_an_s3a_path(s3_server, spark):
    for key, value in s3_server.spark_conf().items():  # S3A reads its settings when it opens the bucket
        spark.sparkContext._jsc.hadoopConfiguration().set(key.removeprefix("spark.hadoop."), value)
    path = f"s3a://{s3_server.bucket}/tables/x"
    spark.range(0, 1000).selectExpr("id", "id % 7 AS k").write.format("delta").save(path)
    spark.range(1000, 1500).selectExpr("id", "id % 7 AS k").write.format("delta").mode("append").save(path)
    back = spark.read.format("delta").load(path)
    assert (back.count(), back.agg({"id": "sum"}).first()[0]) == (1500, sum(range(1500)))
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(
        Bucket=s3_server.bucket, Prefix="tables/x/_delta_log/")["Contents"]]
    assert "tables/x/_delta_log/00000000000000000000.json" in keys
    assert "tables/x/_delta_log/00000000000000000001.json" in keys
