#!/usr/bin/env python3
"""An independent reader of llama.cpp's imatrix files, written from the format descriptions (GGUF's
specification and llama.cpp's tools/imatrix), not from kite's writer: the test of kite's writer.

    imatrix_parse.py FILE OUT.json

GGUF: "GGUF", u32 version, u64 tensor count, u64 kv count; kv pairs (u64-length key, u32 type, value);
tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset); data from the next multiple of
general.alignment (32 by default), each tensor's offset relative to it and aligned. The imatrix form has
general.type "imatrix", imatrix.datasets (strings), imatrix.chunk_count / chunk_size (u32), and per weight
F32 tensors "<name>.in_sum2" [n_cols, n_mat] and "<name>.counts" [1, n_mat].

Legacy .dat: i32 entry count; per entry i32 name length, name, i32 ncall, i32 value count, f32 values; then
i32 chunk count, i32 dataset name length, name. Nothing may follow.

Writes OUT.json with what it read; exits 1 with a message on any violation."""
import json
import struct
import sys


class Bad(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise Bad(f"truncated at byte {self.pos} (wanted {n} bytes of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self):
        n = self.unpack("Q")
        return self.take(n).decode("utf-8")


SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_value(r, vtype):
    if vtype in SCALARS:
        return vtype, r.unpack(SCALARS[vtype])
    if vtype == 8:
        return vtype, r.string()
    if vtype == 9:
        etype, n = r.unpack("I"), r.unpack("Q")
        return vtype, {"elem_type": etype, "values": [gguf_value(r, etype)[1] for _ in range(n)]}
    raise Bad(f"unknown value type {vtype} at byte {r.pos}")


def parse_gguf(data):
    r = Reader(data)
    if r.take(4) != b"GGUF":
        raise Bad("not GGUF")
    version = r.unpack("I")
    if version != 3:
        raise Bad(f"version {version}, llama.cpp writes 3")
    n_tensors, n_kv = r.unpack("Q"), r.unpack("Q")
    kv, kv_types, key_order = {}, {}, []
    for _ in range(n_kv):
        key = r.string()
        vtype = r.unpack("I")
        kv_types[key], kv[key] = gguf_value(r, vtype)
        key_order.append(key)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("I")
        ne = [r.unpack("Q") for _ in range(n_dims)]
        ttype, offset = r.unpack("I"), r.unpack("Q")
        infos.append((name, ne, ttype, offset))
    alignment = kv.get("general.alignment", 32)
    start = (r.pos + alignment - 1) // alignment * alignment
    # The checks an imatrix file must pass (llama.cpp's writer and its loader's expectations).
    if kv.get("general.type") != "imatrix" or kv_types.get("general.type") != 8:
        raise Bad("general.type is not the string 'imatrix'")
    ds = kv.get("imatrix.datasets")
    if kv_types.get("imatrix.datasets") != 9 or ds["elem_type"] != 8:
        raise Bad("imatrix.datasets is not an array of strings")
    for key in ("imatrix.chunk_count", "imatrix.chunk_size"):
        if kv_types.get(key) != 4:
            raise Bad(f"{key} is not a u32")
    tensors = {}
    for name, ne, ttype, offset in infos:
        if ttype != 0:
            raise Bad(f"{name}: type {ttype}, not F32")
        if offset % alignment:
            raise Bad(f"{name}: offset {offset} not aligned to {alignment}")
        count = 1
        for d in ne:
            count *= d
        at = start + offset
        if at + 4 * count > len(data):
            raise Bad(f"{name}: data past the end of the file")
        if name in tensors:
            raise Bad(f"{name}: twice")
        tensors[name] = (ne, list(struct.unpack_from(f"<{count}f", data, at)))
    entries = {}
    for name, (ne, values) in tensors.items():
        if name.endswith(".in_sum2"):
            base = name[: -len(".in_sum2")]
            if base + ".counts" not in tensors:
                raise Bad(f"{name} has no {base}.counts")
            cne, counts = tensors[base + ".counts"]
            if len(ne) != 2 or cne != [1, ne[1]]:
                raise Bad(f"{base}: shapes {ne} and {cne} do not pair as [n_cols, n_mat] and [1, n_mat]")
            entries[base] = {"n_cols": ne[0], "n_mat": ne[1], "sums": values, "counts": counts}
        elif not name.endswith(".counts"):
            raise Bad(f"{name}: neither .in_sum2 nor .counts")
        elif name[: -len(".counts")] + ".in_sum2" not in tensors:
            raise Bad(f"{name} has no .in_sum2")
    return {"format": "gguf", "version": version, "key_order": key_order,
            "datasets": ds["values"], "chunk_count": kv["imatrix.chunk_count"], "chunk_size": kv["imatrix.chunk_size"],
            "tensor_order": [i[0] for i in infos], "entries": entries}


def parse_dat(data):
    r = Reader(data)
    n = r.unpack("i")
    if n < 0:
        raise Bad(f"{n} entries")
    entries, order = {}, []
    for _ in range(n):
        length = r.unpack("i")
        name = r.take(length).decode("utf-8")
        ncall, nval = r.unpack("i"), r.unpack("i")
        if nval < 0:
            raise Bad(f"{name}: {nval} values")
        values = list(struct.unpack(f"<{nval}f", r.take(4 * nval)))
        entries[name] = {"ncall": ncall, "values": values}
        order.append(name)
    chunk_count = r.unpack("i")
    length = r.unpack("i")
    dataset = r.take(length).decode("utf-8")
    if r.pos != len(data):
        raise Bad(f"{len(data) - r.pos} bytes after the dataset name")
    return {"format": "dat", "entries": entries, "order": order, "chunk_count": chunk_count, "dataset": dataset}


def main():
    path, out = sys.argv[1], sys.argv[2]
    data = open(path, "rb").read()
    try:
        result = parse_gguf(data) if data[:4] == b"GGUF" else parse_dat(data)
    except (Bad, UnicodeDecodeError, struct.error) as err:
        print(f"imatrix_parse: {path}: {err}", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
