#!/usr/bin/env python3
"""Reads the pairs.jsonl that bench/vs-llamacpp writes and prints, per (type, threads), each metric's
kite value, llama.cpp value and the ratio per pair (min / median / max), then the pairs themselves
with the bandwidth probed before and after each.

Ratios are speed ratios, so > 1 always means kite is faster: tok/s kite / llama.cpp, and for times
(ms per batch pass) llama.cpp / kite."""
import json
import statistics
import sys


def median(v):
    return statistics.median(v) if v else float("nan")


def fmt(x, digits=1):
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def llama_bench_metric(rows, n_prompt, n_gen):
    for r in rows:
        if r.get("n_prompt") == n_prompt and r.get("n_gen") == n_gen and r.get("n_depth", 0) == 0:
            return r["avg_ts"]
    return None


def main(path):
    pairs = [json.loads(line) for line in open(path) if line.strip()]
    if not pairs:
        print("no pairs")
        return 1
    groups = {}
    for p in pairs:
        groups.setdefault((p["type"], p["threads"]), []).append(p)
    first = pairs[0]["kite"]
    kernels = first["kernels"] if first["kernels"] != "unknown" else pairs[0]["probe_before"]["kernels"]
    print(f"kite kernels: {kernels}")
    print("ratio = speed of kite / speed of llama.cpp per pair (>1: kite faster); min / median / max over pairs\n")
    for (typ, threads), ps in groups.items():
        rows = []  # (metric, kite values, llama values, ratios, unit)
        prompt = ps[0]["kite"]["prompt_tokens"]
        gen = ps[0]["kite"]["gen_tokens"]

        def add(name, kv, lv, time_like=False):
            ratios = [(l / k if time_like else k / l) for k, l in zip(kv, lv) if k and l]
            rows.append((name, kv, lv, ratios))

        add(f"prefill tok/s (P={prompt})", [p["kite"]["prefill_tok_s"] for p in ps],
            [llama_bench_metric(p["llama"]["bench"], prompt, 0) for p in ps])
        add(f"decode tok/s (G={gen})", [p["kite"]["decode_tok_s"] for p in ps],
            [llama_bench_metric(p["llama"]["bench"], 0, gen) for p in ps])
        curve = ps[0]["kite"].get("batch_curve")
        if curve:
            for b in sorted(curve, key=int):
                kv = [p["kite"]["batch_curve"].get(b) for p in ps]
                lv = []
                for p in ps:
                    m = [r for r in p["llama"]["batched"] if str(r["pl"]) == b]
                    lv.append(m[0]["t_tg"] * 1e3 / m[0]["tg"] if m else None)
                add(f"batch pass B={b} (ms)", kv, lv, time_like=True)
            # the curve's shape: T(B)/T(1) for each engine (medians)
        k0 = ps[0]["kite"]
        print(f"== {typ}, {threads} threads, {len(ps)} pairs ==")
        print(f"model {k0['model']} (hash {k0['model_hash']}, {k0['model_size_bytes'] / 2**20:.1f} MiB, "
              f"{k0['decode_bytes_per_token'] / 2**20:.1f} MiB read per decoded token)")
        print(f"{'metric':28} {'kite':>10} {'llama.cpp':>10}   {'ratio min':>9} {'median':>7} {'max':>7}")
        for name, kv, lv, ratios in rows:
            kvv = [x for x in kv if x]
            lvv = [x for x in lv if x]
            r = sorted(ratios)
            print(f"{name:28} {fmt(median(kvv), 2):>10} {fmt(median(lvv), 2):>10}   "
                  f"{fmt(r[0] if r else None, 2):>9} {fmt(median(r), 2):>7} {fmt(r[-1] if r else None, 2):>7}")
        if curve:
            t1k = median([p["kite"]["batch_curve"]["1"] for p in ps if "1" in p["kite"]["batch_curve"]])
            t1l = median([r["t_tg"] * 1e3 / r["tg"] for p in ps for r in p["llama"]["batched"] if r["pl"] == 1])
            line_k, line_l = [], []
            for b in sorted(curve, key=int):
                tk = median([p["kite"]["batch_curve"][b] for p in ps])
                tl = median([r["t_tg"] * 1e3 / r["tg"] for p in ps for r in p["llama"]["batched"] if str(r["pl"]) == b])
                line_k.append(f"{b}:{tk / t1k:.2f}")
                line_l.append(f"{b}:{tl / t1l:.2f}" if tl == tl and t1l == t1l else f"{b}:-")
            print(f"{'T(B)/T(1) kite':28} " + " ".join(line_k))
            print(f"{'T(B)/T(1) llama.cpp':28} " + " ".join(line_l))
            # Roofline per pass: every weight byte read once at the probes' bandwidth, or every
            # multiply-add at their int8 peak, whichever takes longer (medians of the probes).
            probes = [q for p in ps for q in (p["probe_before"], p["probe_after"])]
            read_gbs = median([q["read_gbs"] for q in probes])
            int8_gops = median([q["int8_gops"] for q in probes])
            params = k0.get("matmul_params")
            if params and read_gbs and int8_gops:
                line_r = []
                for b in sorted(curve, key=int):
                    roof_ms = max(k0["decode_bytes_per_token"] / (read_gbs * 1e9),
                                  2.0 * params * int(b) / (int8_gops * 1e9)) * 1e3
                    tk = median([p["kite"]["batch_curve"][b] for p in ps])
                    line_r.append(f"{b}:{tk / roof_ms:.2f}")
                print(f"{'T(B)/roofline kite':28} " + " ".join(line_r) +
                      f"   (roofline: max(weight bytes / {read_gbs:.1f} GB/s, 2 x params x B / {int8_gops:.0f} GOP/s))")
        bw = [p["kite"]["bandwidth_gbs"] for p in ps]
        probe_bw = [(p["probe_before"]["read_gbs"] + p["probe_after"]["read_gbs"]) / 2 for p in ps]
        print(f"{'kite decode GB/s':28} {fmt(median(bw), 1):>10}   ({fmt(100 * median(bw) / median(probe_bw), 0)}% of the probes' "
              f"median {fmt(median(probe_bw), 1)} GB/s)")
        print("pairs:")
        for p in ps:
            lb = p["llama"]["bench"]
            print(f"  rep {p['rep']} {p['order']:11}  load {p.get('loadavg', float('nan')):4.1f}"
                  f" busy {p.get('busy_before', float('nan')):4.2f}  probe {p['probe_before']['read_gbs']:5.1f} -> {p['probe_after']['read_gbs']:5.1f} GB/s"
                  f"  prefill {fmt(p['kite']['prefill_tok_s'])} vs {fmt(llama_bench_metric(lb, prompt, 0))}"
                  f"  decode {fmt(p['kite']['decode_tok_s'])} vs {fmt(llama_bench_metric(lb, 0, gen))}"
                  f"  tokens {p['kite']['tokens_hash']}")
        print()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: vs_llamacpp_report.py pairs.jsonl", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
