# Checks the JSON reports of the examples against numbers computed here from the models' shapes
# (REFERENCE-NUMBERS.md): `python3 check_examples.py gpt3|llama2|offload < report.json`.
import json
import sys


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1)


def gpt_params(L, h, V, s):
    # 12·L·h² + 13·L·h + (V + s)·h + 2h (GPT layout, tied embeddings, learned positions).
    return 12 * L * h * h + 13 * L * h + (V + s) * h + 2 * h


def check_gpt3(report):
    L, h, a, s, V = 96, 12288, 96, 2048, 51200
    psi = gpt_params(L, h, V, s)
    # Narayanan et al.: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)), plus the final norm.
    assert close(psi, 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h)) + 2 * h)
    runs = {run["name"]: run for run in report["runs"]}
    assert list(runs) == ["gpt3_1f1b", "gpt3_interleaved", "gpt3_sp_selective"]
    p, d, t, m, b = 12, 4, 8, 384, 1
    sbh = s * b * h
    expected_activations = {
        # 1F1B: the first stage holds p micro-batches of L/p layers = all L layers of one.
        "gpt3_1f1b": L * 2 * sbh,
        # Interleaving multiplies by 1 + (p - 1)/(p·v), v = 2.
        "gpt3_interleaved": L * 2 * sbh * (1 + (p - 1) / (p * 2)),
        # Tensor + sequence parallel with selective recomputation: s·b·h·34/t per layer.
        "gpt3_sp_selective": L * sbh * 34 / t,
    }
    for name, run in runs.items():
        assert run["model"]["params"] == psi, (run["model"]["params"], psi)
        assert run["devices"] == p * d * t == 384
        assert [(x["name"], x["size"], x["link"]) for x in run["mesh"]] == \
            [("pp", 12, "inter"), ("dp", 4, "inter"), ("tp", 8, "intra")]
        assert run["batch"] == {"micro_batch": 1, "global_batch": 1536,
                                "microbatches_per_step": 384}
        device = run["memory"]["device"]
        assert run["memory"]["stage"] == 0
        assert close(device["activations"], expected_activations[name]), \
            (name, device["activations"], expected_activations[name])
        # Stage 0: the embedding and L/p layers. Tensor parallelism splits the column- and
        # row-parallel matrices and their column biases (12h² + 7h per layer) and the token
        # embedding (V·h) 8 ways; norms, row-parallel biases (6h per layer) and the position
        # embedding (s·h) are replicated. Replicated over d: 2 B per parameter, 16 B in all.
        stage_params = ((12 * h * h + 7 * h) / t + 6 * h) * (L // p) + V * h / t + s * h
        assert close(device["params"], 2 * stage_params), (device["params"], 2 * stage_params)
        assert device["model_states"] == device["params"] * 8  # 2 + 2 + 12 bytes
        assert run["memory"]["fits_device"]
        # Pipeline traffic: b·s·h activation elements (2 B) per micro-batch per boundary.
        sends = [e for e in run["communication"] if e["collective"] == "send"]
        per_call = 2 * sbh / (t if name == "gpt3_sp_selective" else 1)
        assert sends and all(e["message_bytes"] == per_call for e in sends), name
        # Tensor parallelism: two all-reduces of b·s·h per layer forward, two backward, two more
        # in the recomputed forward (Korthikanti et al.); stage 1 has L/p layers, m micro-batches.
        tp = [e for e in run["communication"]
              if e["axis"] == "tp" and e["stage"] == 1 and e["state"] == "activations"]
        calls = sum(e["count"] for e in tp)
        # Sequence parallelism also sums the gradients of the replicated norms and row-parallel
        # biases (6h per layer) over tp, once per layer per micro-batch; without it, nothing.
        grads = [e for e in run["communication"]
                 if e["axis"] == "tp" and e["stage"] == 1 and e["state"] == "grads"]
        if name == "gpt3_sp_selective":
            assert [e["collective"] for e in grads] == ["all-reduce"], grads
            assert grads[0]["count"] == (L // p) * m, grads
            assert grads[0]["message_bytes"] == 2 * 6 * h, grads
        else:
            assert not grads, grads
        if name == "gpt3_sp_selective":
            # An all-gather and a reduce-scatter replace each all-reduce; no recomputed forward;
            # and each layer's backward gathers QKV's and the MLP's inputs again for their weight
            # gradients (sp_inputs = regather; Korthikanti et al. 2022, §4.2.2).
            assert calls == (L // p) * (2 * 2 * 2 + 2) * m, calls
        else:
            assert all(e["collective"] == "all-reduce" for e in tp)
            assert calls == (L // p) * 6 * m, calls
        assert all(e["message_bytes"] == 2 * sbh for e in tp)
        # Model FLOPs: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) (three times the forward; the
        # logits 2·s·h·V per sample).
        flops = 72 * 1536 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
        assert close(run["time"]["flops_per_step"], flops), run["time"]["flops_per_step"]
        # Bubble: (p - 1)/(m·v) of the micro-batches' time.
        v = 2 if name == "gpt3_interleaved" else 1
        work = run["time"]["compute_s"] + run["time"]["exposed_comm_s"]
        assert close(run["time"]["bubble_s"], (p - 1) / (m * v) * work, rel=0.05), name


def check_llama2(report):
    L, h, V, ffn = 32, 4096, 32000, 11008
    # SwiGLU (three h×ffn matrices), RMSNorm, no biases, RoPE, untied output layer.
    psi = L * (4 * h * h + 3 * h * ffn + 2 * h) + V * h + (h + V * h)
    assert psi == 6738415616
    runs = {run["name"]: run for run in report["runs"]}
    fsdp, hsdp = runs["llama2_fsdp"], runs["llama2_hsdp"]
    for run in (fsdp, hsdp):
        assert run["model"]["params"] == psi
        assert run["memory"]["fits_device"]
    assert close(fsdp["memory"]["device"]["model_states"], 16 * psi / 64)
    assert close(hsdp["memory"]["device"]["model_states"], 16 * psi / 8)
    assert [(x["name"], x["size"], x["link"]) for x in hsdp["mesh"]] == \
        [("dp_replicate", 8, "inter"), ("dp_shard", 8, "intra")]
    # Full recomputation: the layer inputs only, 2·s·b·h per layer.
    assert close(fsdp["memory"]["device"]["activations"], L * 2 * 4096 * 2 * h)

    def inter(run):
        return sum(e["sent_bytes"] for e in run["communication"] if e["link"] == "inter")
    # FSDP: gathers (forward, backward) and reduce-scatters of every micro-batch cross the nodes.
    m = fsdp["batch"]["microbatches_per_step"]
    assert m == 8
    assert close(inter(fsdp), 3 * 63 / 64 * 2 * psi * m, rel=1e-6), inter(fsdp)
    # HSDP: one all-reduce per step of each GPU's 1/8 gradient shard over the 8 replicas.
    assert close(inter(hsdp), 2 * 7 / 8 * 2 * psi / 8, rel=1e-6), inter(hsdp)


def check_offload(report):
    psi = gpt_params(50, 4096, 50257, 1024)
    runs = {run["name"]: run for run in report["runs"]}
    for name, n in (("offload_1gpu", 1), ("offload_16gpu", 16)):
        run = runs[name]
        device, host = run["memory"]["device"], run["memory"]["host"]
        assert run["model"]["params"] == psi
        # ZeRO-Offload keeps 2Ψ on the device; gradients and optimizer go to the host.
        assert device["params"] == 2 * psi and device["grads"] == 0 and device["optimizer"] == 0
        assert close(host["grads"], 2 * psi / n) and close(host["optimizer"], 12 * psi / n)
        assert run["memory"]["fits_device"] and run["memory"]["fits_host"]
        # At least 4Ψ bytes per step over the host link per model replica: 2Ψ of fp16 gradients
        # down and 2Ψ of updated fp16 parameters up, split among the n GPUs.
        down = sum(e["total_bytes"] for e in run["communication"]
                   if e["collective"] == "device-to-host")
        up = sum(e["total_bytes"] for e in run["communication"]
                 if e["collective"] == "host-to-device")
        assert close(down * n, 2 * psi, rel=1e-6) and close(up * n, 2 * psi, rel=1e-6), (down, up)
        assert all(e["link"] == "host" for e in run["communication"]
                   if e["collective"] in ("device-to-host", "host-to-device"))


{"gpt3": check_gpt3, "llama2": check_llama2, "offload": check_offload}[sys.argv[1]](
    json.load(sys.stdin))
