// llama.cpp's own tokenizer as a reference for kite's GGUF tokenizers (node-llama-cpp's prebuilt CPU
// binary, installed under tests/oracle/node_modules; never built or downloaded here).
//
//   node llamacpp_tokenize.mjs REQUEST.json
//
// REQUEST.json: {"strings": "texts.json", "jobs": [{"model": "x.gguf", "out": "x.ids.json", "n_vocab": N}, ...]}
// texts.json is a JSON array of strings. Each job loads the model's vocabulary only and writes
// {"plain": [[ids...], ...], "special": [[ids...], ...], "eog": [ids...] or null}: llama_tokenize without BOS,
// with parse_special off and on, and the ids llama_vocab_is_eog accepts. Exit status: 0 on success, 3 when node-llama-cpp is not installed, 1 on failure.
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.join(here, "..", "oracle", "node_modules", "node-llama-cpp");
if (!fs.existsSync(path.join(pkg, "package.json"))) {
    console.error(`llamacpp_tokenize: node-llama-cpp is not installed under ${pkg}`);
    process.exit(3);
}
const manifest = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8"));
const entry = manifest.exports?.["."]?.import ?? manifest.exports?.["."]?.default ?? manifest.main ?? "dist/index.js";
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(path.join(pkg, typeof entry === "string" ? entry : entry.default)).href);

const request = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const strings = JSON.parse(fs.readFileSync(request.strings, "utf8"));
try {
    const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                                  progressLogs: false, logLevel: LlamaLogLevel.error});
    for (const job of request.jobs) {
        const model = await llama.loadModel({modelPath: job.model, vocabOnly: true, gpuLayers: 0});
        const result = {
            plain: strings.map((s) => Array.from(model.tokenize(s, false))),
            special: strings.map((s) => Array.from(model.tokenize(s, true))),
            eog: null,
        };
        if (typeof model.isEogToken === "function") {
            result.eog = [];
            for (let id = 0; id < (job.n_vocab ?? 0); id++) if (model.isEogToken(id)) result.eog.push(id);
        }
        fs.writeFileSync(job.out, JSON.stringify(result));
        await model.dispose();
    }
} catch (err) {
    console.error(`llamacpp_tokenize: ${err?.stack ?? err}`);
    process.exit(1);
}
