"""What the search checks share: the plan the search wrote out (`-o`) is the plan it timed."""
import json


def check_written_plan(report_path, best):
    """The report of the best plan as the search wrote it has the search's step and peak."""
    report = json.load(open(report_path))["runs"][0]
    assert abs(report["time"]["step_s"] - best["step_seconds"]) <= 1e-9 * best["step_seconds"], \
        (report["time"]["step_s"], best["step_seconds"])
    assert report["memory"]["device"]["peak"] == best["peak_bytes"], \
        (report["memory"]["device"]["peak"], best["peak_bytes"])
    print("the plan written out: the search's step and peak memory")
