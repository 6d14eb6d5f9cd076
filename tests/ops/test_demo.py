from replay.ops.demo import demo_jobs, run_demo
from replay.ops.run import run


def test_the_demo_replays_its_jobs_side_by_side_with_the_hashes_each_gives_alone(spark, tmp_path):
    summary = run_demo(str(tmp_path), events=3000)
    side_by_side = {"default": summary["output_hash"], **{n: j["output_hash"] for n, j in summary["jobs"].items()}}
    alone = {job.name: run(spark, summary["lake"], job, target="alone", hashed=True).output_hash for job in demo_jobs()}
    assert side_by_side == alone
    assert set(alone) == {"default", "device_minute", "region_alarms"}
