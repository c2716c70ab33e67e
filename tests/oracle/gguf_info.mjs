// node-llama-cpp's own GGUF reader as an independent check of files kite writes (e.g. kite imatrix).
//
//   node gguf_info.mjs FILE.gguf
//
// Prints one JSON object: {"version", "metadata" (nested by key path, as node-llama-cpp returns it),
// "tensors": [{"name", "dims", "type" (ggml type id), "offset"}]}; exits 1 when the file does not parse.
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
if (!fs.existsSync(path.join(here, "node_modules", "node-llama-cpp", "package.json"))) {
    console.error(`gguf_info: node-llama-cpp is not installed: run "npm ci" in ${here}`);
    process.exit(3);
}
const {readGgufFileInfo} = await import("node-llama-cpp");
try {
    const info = await readGgufFileInfo(process.argv[2], {readTensorInfo: true, logWarnings: false});
    const tensors = (info.fullTensorInfo ?? []).map((t) => ({
        name: t.name, dims: t.dimensions.map(Number), type: t.ggmlType, offset: Number(t.offset),
    }));
    console.log(JSON.stringify({version: info.version, metadata: info.metadata, tensors},
                               (k, v) => (typeof v === "bigint" ? Number(v) : v)));
} catch (err) {
    console.error(`gguf_info: ${process.argv[2]}: ${err?.message ?? err}`);
    process.exit(1);
}
