"""What the search checks share: the plan the search wrote out (`-o`) is the plan it timed, and a
search exploring a fold holds the search without it."""
import json


def check_written_plan(report_path, best):
    """The report of the best plan as the search wrote it has the search's step and peak."""
    report = json.load(open(report_path))["runs"][0]
    assert abs(report["time"]["step_s"] - best["step_seconds"]) <= 1e-9 * best["step_seconds"], \
        (report["time"]["step_s"], best["step_seconds"])
    assert report["memory"]["device"]["peak"] == best["peak_bytes"], \
        (report["memory"]["device"]["peak"], best["peak_bytes"])
    print("the plan written out: the search's step and peak memory")


def check_folds(without, with_, setting, valid):
    """A search exploring `setting`'s fold (with.json) against the same search without it: the
    split plans are exactly the other search's, every folded plan passes `valid` (an assertion
    of its own), each holds no more memory than its split twin (some are paired), and the best
    step is no slower (its space holds the other). Returns the folded plans and the pairs."""
    assert all(c[setting] == "split" for c in without["top"])

    def key(c):
        return tuple(sorted((k, json.dumps(v)) for k, v in c.items()
                            if k not in (setting, "step_seconds", "peak_bytes", "mfu",
                                         "tflops_per_device", "inter_node_bytes")))

    split = [c for c in with_["top"] if c[setting] == "split"]
    folded = [c for c in with_["top"] if c[setting] == "fold"]
    assert folded, "no folded plan"
    assert sorted(map(key, split)) == sorted(map(key, without["top"])), "the split plans differ"
    twins = {key(c): c for c in split}
    paired = 0
    for c in folded:
        valid(c)
        twin = twins.get(key(c))
        if twin is None:
            continue
        paired += 1
        assert c["peak_bytes"] <= twin["peak_bytes"], (c, twin)
    assert paired > 0
    assert with_["top"][0]["step_seconds"] <= without["top"][0]["step_seconds"]
    return folded, paired
