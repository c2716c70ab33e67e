/* Hugging Face checkpoints: config.json + model.safetensors, or shards listed in
 * model.safetensors.index.json. Tensors stay in the mapped files; names are translated to kite's
 * canonical ones (see tensors.h and kite_hf_canonical_name). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/source.h"
#include "model/validate.h"
#include "quant/types.h"

#define MAX_JSON_BYTES ((size_t)64 << 20) /* config files are a few KB; index files a few hundred KB */
#define MAX_SHARDS ((int)(sizeof ((kite_source *)0)->maps / sizeof ((kite_source *)0)->maps[0]))

typedef char path_buf[4096];

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int join(path_buf out, const char *dir, const char *name, kite_error *e) {
    int n = snprintf(out, sizeof(path_buf), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(path_buf))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "path too long: %.200s/%.100s", dir, name);
    return KITE_OK;
}

/* Splits a file path into its folder ("." when it has none) and its base name. */
static int split_path(const char *path, path_buf dir, const char **base, kite_error *e) {
    if (strlen(path) >= sizeof(path_buf)) return kite_fail(e, KITE_ERR_INVALID_ARG, "path too long: %.200s...", path);
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, sizeof(path_buf), ".");
        *base = path;
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = 0;
        *base = slash + 1;
    }
    return KITE_OK;
}

/* One weights file, mapped into src->maps[map_index]. */
typedef struct shard {
    char file[256];        /* base name inside the folder */
    kite_safetensors st;
} shard;

typedef struct loader {
    kite_source *src;
    path_buf dir;
    shard shards[64];
    int n_shards;
    json_t *weight_map;    /* index mode: tensor name -> shard file; NULL for a single file */
} loader;

static int find_or_add_shard(loader *ld, const char *file, kite_error *e) {
    for (int i = 0; i < ld->n_shards; i++)
        if (strcmp(ld->shards[i].file, file) == 0) return i;
    if (ld->n_shards >= MAX_SHARDS)
        return -kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: more than %d shards", ld->dir, MAX_SHARDS);
    shard *s = &ld->shards[ld->n_shards];
    snprintf(s->file, sizeof s->file, "%s", file);
    return ld->n_shards++;
}

static int map_shard(loader *ld, int i, kite_error *e) {
    path_buf path;
    int rc = join(path, ld->dir, ld->shards[i].file, e);
    if (rc) return rc;
    kite_source *src = ld->src;
    if (!is_file(path))
        return kite_fail(e, KITE_ERR_IO, "%s: weights file %s is missing", ld->dir, ld->shards[i].file);
    if ((rc = kite_map_file(&src->maps[src->n_maps], path, e))) return rc;
    const kite_mapped_file *m = &src->maps[src->n_maps++];
    return kite_safetensors_parse(&ld->shards[i].st, m->data, m->size, path, e);
}

/* Reads model.safetensors.index.json: every shard it names must be a plain file name in the folder. */
static int load_index(loader *ld, const char *index_path, kite_error *e) {
    char *text = NULL;
    size_t len = 0;
    int rc = kite_read_file(index_path, &text, &len, MAX_JSON_BYTES, e);
    if (rc) return rc;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root) return kite_fail(e, KITE_ERR_FORMAT, "%s: invalid JSON: %s (line %d)", index_path, jerr.text, jerr.line);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(root);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
    }
    json_incref(wm);
    json_decref(root);
    ld->weight_map = wm;
    const char *name;
    json_t *file;
    json_object_foreach(wm, name, file) {
        const char *f = json_is_string(file) ? json_string_value(file) : NULL;
        if (!f || !*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0 || strlen(f) >= sizeof ld->shards[0].file)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%.96s' maps to an invalid shard file name", index_path, name);
        int i = find_or_add_shard(ld, f, e);
        if (i < 0) return -i;
    }
    for (int i = 0; i < ld->n_shards; i++)
        if ((rc = map_shard(ld, i, e))) return rc;
    return KITE_OK;
}

/* Does the index list `file` as one of its shards? (A shard given directly loads the whole model.) */
static bool index_lists(const char *index_path, const char *file) {
    char *text = NULL;
    size_t len = 0;
    if (kite_read_file(index_path, &text, &len, MAX_JSON_BYTES, NULL)) return false;
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    bool found = false;
    const char *name;
    json_t *v;
    json_t *wm = json_object_get(root, "weight_map");
    if (json_is_object(wm))
        json_object_foreach(wm, name, v) if (json_is_string(v) && strcmp(json_string_value(v), file) == 0) found = true;
    json_decref(root);
    return found;
}

typedef struct entry {
    char canon[96];
    const kite_safetensors_tensor *t;
} entry;

static int collect(loader *ld, const char *hf_name, const kite_safetensors_tensor *t, const char *file, entry *out,
                   int64_t *n_out, kite_error *e) {
    const kite_hparams *hp = &ld->src->hp;
    entry *en = &out[*n_out];
    int r = kite_hf_canonical_name_arch(hp->arch, hf_name, hp->n_layers, en->canon, sizeof en->canon);
    if (r == 0) {
        kite_log(KITE_LOG_DEBUG, "%s: ignoring tensor %s", file, hf_name);
        return KITE_OK;
    }
    if (r == -1)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s' names a layer outside 0..%d (config.json has %d layers)", file,
                         hf_name, hp->n_layers - 1, hp->n_layers);
    if (r == -2) return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor '%s' is not supported by kite", file, hf_name);
    uint64_t elem = t->type == KITE_TYPE_F32 ? 4 : 2;
    if (t->offset % elem != 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor '%s' data at byte %llu is not aligned to %llu bytes", file,
                         hf_name, (unsigned long long)t->offset, (unsigned long long)elem);
    en->t = t;
    (*n_out)++;
    return KITE_OK;
}

static int64_t find_entry(const entry *en, int64_t n, const char *canon) {
    for (int64_t i = 0; i < n; i++)
        if (strcmp(en[i].canon, canon) == 0) return i;
    return -1;
}

/* Translates every tensor and adds it to src, sorting out tied embeddings on the way. */
static int add_tensors(loader *ld, bool config_tied, kite_error *e) {
    kite_source *src = ld->src;
    int64_t total = 0;
    for (int i = 0; i < ld->n_shards; i++) total += ld->shards[i].st.n_tensors;
    entry *en = calloc(total ? (size_t)total : 1, sizeof *en);
    if (!en) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    int64_t n = 0;
    int rc = KITE_OK;
    if (ld->weight_map) {
        const char *name;
        json_t *file;
        json_object_foreach(ld->weight_map, name, file) {
            int s = 0;
            while (strcmp(ld->shards[s].file, json_string_value(file)) != 0) s++; /* added by load_index */
            const kite_safetensors_tensor *t = kite_safetensors_find(&ld->shards[s].st, name);
            if (!t) {
                rc = kite_fail(e, KITE_ERR_FORMAT, "%s: model.safetensors.index.json places tensor '%.96s' in %s, which does not hold it",
                               ld->dir, name, ld->shards[s].file);
                goto done;
            }
            if ((rc = collect(ld, name, t, ld->shards[s].file, en, &n, e))) goto done;
        }
    } else {
        const kite_safetensors *st = &ld->shards[0].st;
        for (int64_t i = 0; i < st->n_tensors; i++)
            if ((rc = collect(ld, st->tensors[i].name, &st->tensors[i], ld->shards[0].file, en, &n, e))) goto done;
    }

    /* Tied embeddings. Some exports (TinyStories-656K) store only lm_head.weight and alias the
     * embedding to it in __metadata__: the one matrix then serves as both. Otherwise, when the config
     * ties them or both names share the same bytes, output.weight is dropped and token_embd reused. */
    int64_t embd = find_entry(en, n, "token_embd.weight"), out = find_entry(en, n, "output.weight");
    if (embd < 0 && out >= 0) {
        if (!config_tied) {
            rc = kite_fail(e, KITE_ERR_FORMAT, "%s: model.embed_tokens.weight is missing and tie_word_embeddings is false",
                           ld->dir);
            goto done;
        }
        snprintf(en[out].canon, sizeof en[out].canon, "token_embd.weight");
        embd = out;
        out = -1;
    } else if (embd >= 0 && out >= 0 && (config_tied || en[embd].t->data == en[out].t->data)) {
        en[out].canon[0] = 0; /* dropped */
        out = -1;
    }
    src->hp.tied_embeddings = out < 0;

    for (int64_t i = 0; i < n; i++) {
        if (!en[i].canon[0]) continue;
        const kite_safetensors_tensor *t = en[i].t;
        if (!kite_source_add_tensor(src, en[i].canon, t->type, t->n_dims, t->ne, t->data, t->n_bytes, e)) {
            rc = e ? e->status : KITE_ERR_FORMAT;
            goto done;
        }
    }
done:
    free(en);
    return rc;
}

/* Qwen3.5's next-n (MTP) blocks: as many as config.json's mtp_num_hidden_layers that the folder holds under
 * mtp.* (a checkpoint saved without them still runs; --draft mtp then says it has no head), or, where the
 * config does not say (as Qwen3-Next's does not), as many as it holds. */
static void settle_nextn_layers(kite_source *src, const char *dir) {
    kite_hparams *hp = &src->hp;
    char name[96];
    int32_t held = 0;
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", hp->n_layers);
    if (kite_source_find(src, name))
        while (held < KITE_MAX_NEXTN_LAYERS) {
            snprintf(name, sizeof name, "blk.%d.attn_q.weight", hp->n_layers + held);
            if (!kite_source_find(src, name)) break;
            held++;
        }
    if (hp->n_nextn_layers > held)
        kite_log(KITE_LOG_INFO, "%s: config.json names %d next-n (MTP) layers but the folder holds %d (mtp.*)%s", dir,
                 hp->n_nextn_layers, held, held ? "" : ": it runs without an MTP drafter");
    if (hp->n_nextn_layers == 0 || hp->n_nextn_layers > held) hp->n_nextn_layers = held;
}

static int read_configs(kite_source *src, const char *dir, kite_error *e) {
    path_buf path;
    int rc = join(path, dir, "config.json", e);
    if (rc) return rc;
    char *text = NULL;
    size_t len = 0;
    if (!is_file(path))
        return kite_fail(e, KITE_ERR_IO, "%s: no config.json (a Hugging Face model folder needs one)", dir);
    if ((rc = kite_read_file(path, &text, &len, MAX_JSON_BYTES, e))) return rc;
    rc = kite_hf_parse_config(text, len, path, &src->hp, &src->bos_id, &src->eos_id, e);
    free(text);
    if (rc) return rc;

    src->gen_defaults = kite_gen_default_params();
    if ((rc = join(path, dir, "generation_config.json", e))) return rc;
    if (is_file(path)) {
        int32_t bos = -1, eos = -1;
        if ((rc = kite_read_file(path, &text, &len, MAX_JSON_BYTES, e))) return rc;
        rc = kite_hf_parse_generation_config(text, len, path, &src->gen_defaults, &bos, &eos, e);
        free(text);
        if (rc) return rc;
        if (src->bos_id < 0 && bos >= 0 && bos < src->hp.n_vocab) src->bos_id = bos;
        if (src->eos_id < 0 && eos >= 0 && eos < src->hp.n_vocab) src->eos_id = eos;
    }

    if ((rc = join(path, dir, "tokenizer.json", e))) return rc;
    if (is_file(path)) snprintf(src->tokenizer_json, sizeof src->tokenizer_json, "%s", path);
    if ((rc = join(path, dir, "tokenizer_config.json", e))) return rc;
    if (is_file(path)) snprintf(src->tokenizer_config_json, sizeof src->tokenizer_config_json, "%s", path);
    if ((rc = join(path, dir, "chat_template.jinja", e))) return rc;
    if (is_file(path)) snprintf(src->chat_template_jinja, sizeof src->chat_template_jinja, "%s", path);
    return KITE_OK;
}

static int open_hf(kite_source *src, loader *ld, const char *path, kite_error *e) {
    path_buf index_path;
    const char *single = NULL; /* base name of a lone weights file */
    bool use_index = false;
    int rc;
    if (is_dir(path)) {
        if (strlen(path) >= sizeof ld->dir) return kite_fail(e, KITE_ERR_INVALID_ARG, "path too long: %.200s...", path);
        snprintf(ld->dir, sizeof ld->dir, "%s", path);
        for (size_t n = strlen(ld->dir); n > 1 && ld->dir[n - 1] == '/'; n--) ld->dir[n - 1] = 0;
        path_buf probe;
        if ((rc = join(probe, ld->dir, "model.safetensors", e))) return rc;
        if (is_file(probe)) {
            single = "model.safetensors";
        } else {
            if ((rc = join(index_path, ld->dir, "model.safetensors.index.json", e))) return rc;
            if (!is_file(index_path))
                return kite_fail(e, KITE_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json in the folder", path);
            use_index = true;
        }
    } else {
        const char *base = path;
        if ((rc = split_path(path, ld->dir, &base, e))) return rc;
        if (!is_file(path)) return kite_fail(e, KITE_ERR_IO, "%s: no such file or folder", path);
        if (ends_with(base, ".safetensors")) {
            if ((rc = join(index_path, ld->dir, "model.safetensors.index.json", e))) return rc;
            use_index = is_file(index_path) && index_lists(index_path, base);
            if (!use_index) single = base;
        } else if (strcmp(base, "config.json") == 0) {
            path_buf folder;
            memcpy(folder, ld->dir, sizeof folder);
            return open_hf(src, ld, folder, e);
        } else if (ends_with(base, ".json")) {
            snprintf(index_path, sizeof index_path, "%s", path);
            use_index = true;
        } else {
            return kite_fail(e, KITE_ERR_UNSUPPORTED,
                             "%s: expected a Hugging Face folder, a .safetensors file or model.safetensors.index.json", path);
        }
    }
    if ((rc = read_configs(src, ld->dir, e))) return rc;
    if (use_index) {
        if ((rc = load_index(ld, index_path, e))) return rc;
    } else {
        if (strlen(single) >= sizeof ld->shards[0].file)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "file name too long: %.200s", single);
        find_or_add_shard(ld, single, e);
        if ((rc = map_shard(ld, 0, e))) return rc;
    }
    const bool config_tied = src->hp.tied_embeddings;
    if ((rc = add_tensors(ld, config_tied, e))) return rc;
    if (src->hp.arch == KITE_ARCH_QWEN35) settle_nextn_layers(src, ld->dir);
    return kite_source_validate(src, e);
}

int kite_source_open_hf(kite_source *src, const char *path, kite_error *e) {
    memset(src, 0, sizeof *src);
    snprintf(src->format, sizeof src->format, "safetensors");
    src->bos_id = -1;
    src->eos_id = -1;
    loader *ld = calloc(1, sizeof *ld);
    if (!ld) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    ld->src = src;
    int rc = open_hf(src, ld, path, e);
    for (int i = 0; i < ld->n_shards; i++) kite_safetensors_free(&ld->shards[i].st);
    json_decref(ld->weight_map);
    free(ld);
    if (rc) kite_source_close(src);
    return rc;
}
