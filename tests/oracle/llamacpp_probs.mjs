// llama.cpp as an independent reference: next-token probabilities for given token ids.
//
//   node llamacpp_probs.mjs REQUEST.json
//
// REQUEST.json: {"threads": 2, "n_ctx": 256,
//                "jobs": [{"model": "x.gguf", "out": "/tmp/x",
//                          "prompts": [{"text": "...", "parse_special": false, "ids": [1, 2, ...],
//                                       "positions": [0, 1, 5, ...]}, ...]}, ...]}
// For each job, writes OUT.json: {"llama_cpp": "node-llama-cpp 3.21.1", "n_vocab": N,
//                                 "prompts": [{"n_positions": n, "text_ids": [...]}, ...]}
// and OUT.bin: for each prompt, for each of the requested positions (all when "positions" is absent), in
// increasing order, N float32 probabilities of the next token in token-id order (host byte order): the
// binding's float softmax of llama.cpp's logits (its rows sum to 1 only within ~1e-3). Every position is evaluated either way; asking for fewer rows
// saves time, since node-llama-cpp hands each row over as a Map of N entries (about 0.15 s per row).
//
// The model runs on the CPU only, through node-llama-cpp's prebuilt binary (never built or downloaded:
// build "never", skipDownload), with the KV cache in F32 and flash attention off, so llama.cpp does the
// same f32 arithmetic as kite up to the order of summation. `text_ids` is llama.cpp's own tokenization of
// `text` (no BOS added), for comparing tokenizers; the probabilities always follow the given `ids`.
// Exit status: 0 on success, 1 when a job failed (its OUT.json then holds {"error": "..."}), 2 for bad
// arguments, 3 when node-llama-cpp is not installed, 4 when llama.cpp cannot start.
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
if (!fs.existsSync(path.join(here, "node_modules", "node-llama-cpp", "package.json"))) {
    console.error(`llamacpp_probs: node-llama-cpp is not installed: run "npm ci" in ${here}`);
    process.exit(3);
}
const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");

const [requestPath] = process.argv.slice(2);
if (!requestPath) {
    console.error("usage: node llamacpp_probs.mjs REQUEST.json");
    process.exit(2);
}
let request, threads, nCtx, version, llama;
try {
    request = JSON.parse(fs.readFileSync(requestPath, "utf8"));
    threads = request.threads ?? 2;
    nCtx = request.n_ctx ?? 256;
    version = JSON.parse(fs.readFileSync(path.join(here, "node_modules", "node-llama-cpp", "package.json"), "utf8")).version;
    llama = await getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        progressLogs: false,
        maxThreads: threads,
        logLevel: LlamaLogLevel.warn,
        logger: (level, message) => process.stderr.write(`[llama.cpp ${level}] ${message.trimEnd()}\n`),
    });
} catch (err) {
    console.error(`llamacpp_probs: cannot start llama.cpp: ${err?.stack ?? err}`);
    process.exit(4);
}

async function runJob(job) {
    const model = await llama.loadModel({modelPath: job.model, gpuLayers: 0});
    const context = await model.createContext({
        contextSize: nCtx,
        batchSize: nCtx,
        threads: {ideal: threads, min: 1},
        flashAttention: false,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
    });
    const sequence = context.getSequence();
    const out = fs.openSync(`${job.out}.bin`, "w");
    const result = {llama_cpp: `node-llama-cpp ${version}`, n_vocab: null, prompts: []};
    for (const prompt of job.prompts) {
        if (prompt.ids.length > nCtx) throw new Error(`prompt of ${prompt.ids.length} tokens exceeds n_ctx ${nCtx}`);
        await sequence.clearHistory();
        const textIds = Array.from(model.tokenize(prompt.text, prompt.parse_special === true));
        const positions = prompt.positions ?? prompt.ids.map((_, i) => i);
        const wanted = new Set(positions);
        const input = prompt.ids.map((id, i) => (wanted.has(i) ? [id, {generateNext: {probabilities: true}}] : id));
        const evaluated = await sequence.controlledEvaluate(input);
        for (const pos of [...wanted].sort((a, b) => a - b)) {
            const probabilities = evaluated[pos]?.next?.probabilities;
            if (!probabilities) throw new Error(`${job.model}: no probabilities at position ${pos}`);
            if (result.n_vocab === null) result.n_vocab = probabilities.size;
            if (probabilities.size !== result.n_vocab)
                throw new Error(`${job.model}: position ${pos} has ${probabilities.size} probabilities, expected ${result.n_vocab}`);
            const row = new Float32Array(result.n_vocab).fill(NaN);
            for (const [token, p] of probabilities) {
                if (!(token >= 0 && token < row.length)) throw new Error(`${job.model}: token id ${token} out of range`);
                row[token] = p;
            }
            fs.writeSync(out, new Uint8Array(row.buffer));
        }
        result.prompts.push({n_positions: wanted.size, text_ids: textIds});
    }
    fs.closeSync(out);
    fs.writeFileSync(`${job.out}.json`, JSON.stringify(result));
    await context.dispose();
    await model.dispose();
}

// A failing job writes {"error": "..."} to its OUT.json and the others still run.
for (const job of request.jobs) {
    try {
        await runJob(job);
    } catch (err) {
        console.error(`llamacpp_probs: ${job.model}: ${err?.stack ?? err}`);
        fs.writeFileSync(`${job.out}.json`, JSON.stringify({error: String(err?.message ?? err)}));
        process.exitCode = 1;
    }
}
await llama.dispose();
