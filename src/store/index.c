/* The index (index.json) and the manifests (<model folder>/.kite-model.json) share one entry form:
 *   {"name", "source", "path", "architecture", "quantization", "date", "size",
 *    "files": [{"path", "size", "sha256"}]}
 * The index is {"version": 1, "models": [entry...]}. Everything read is checked: an entry with a missing
 * or mistyped field, a path leaving the store ("..", absolute) or a size that disagrees with its files is
 * dropped, never trusted. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"

void store_entry_clear(kite_store_entry *en) {
    if (!en) return;
    free(en->name);
    free(en->source);
    free(en->path);
    for (size_t i = 0; i < en->n_files; i++) free(en->files[i].path);
    free(en->files);
    memset(en, 0, sizeof *en);
}

void store_index_clear(store_index *ix) {
    for (size_t i = 0; i < ix->n; i++) store_entry_clear(&ix->entries[i]);
    free(ix->entries);
    memset(ix, 0, sizeof *ix);
}

void kite_store_entries_free(kite_store_entry *entries, size_t n) {
    if (!entries) return;
    for (size_t i = 0; i < n; i++) store_entry_clear(&entries[i]);
    free(entries);
}

/* A relative path that stays inside the model's folder. */
static bool safe_rel_path(const char *p) {
    if (!strcmp(p, ".")) return true; /* the model's folder itself */
    if (!*p || p[0] == '/' || strlen(p) > 1024) return false;
    for (const char *s = p; *s;) {
        size_t seg = strcspn(s, "/");
        if (seg == 0 || (seg == 1 && s[0] == '.') || (seg == 2 && s[0] == '.' && s[1] == '.')) return false;
        s += seg;
        if (*s == '/') s++;
    }
    for (const char *s = p; *s; s++)
        if ((unsigned char)*s < 0x20) return false;
    return true;
}

static int get_str(const json_t *obj, const char *key, bool required, char **out, const char *name, kite_error *e) {
    const json_t *v = json_object_get(obj, key);
    if (!v && !required) { *out = strdup(""); return *out ? KITE_OK : kite_fail(e, KITE_ERR_NOMEM, "out of memory"); }
    if (!json_is_string(v) || (required && json_string_length(v) == 0))
        return kite_fail(e, KITE_ERR_FORMAT, "entry %s: \"%s\" is missing or not a non-empty string", name, key);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return kite_fail(e, KITE_ERR_FORMAT, "entry %s: \"%s\" holds a NUL byte", name, key);
    *out = strdup(json_string_value(v));
    return *out ? KITE_OK : kite_fail(e, KITE_ERR_NOMEM, "out of memory");
}

static void copy_small(char *dst, size_t cap, const json_t *v) {
    const char *s = json_string_value(v);
    snprintf(dst, cap, "%s", s ? s : "");
    for (char *c = dst; *c; c++)
        if ((unsigned char)*c < 0x20) *c = '?';
}

int store_entry_from_json(const json_t *obj, kite_store_entry *out, kite_error *e) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(obj)) return kite_fail(e, KITE_ERR_FORMAT, "an entry is not a JSON object");
    const char *shown = json_string_value(json_object_get(obj, "name"));
    char name[128];
    snprintf(name, sizeof name, "\"%.100s\"", shown ? shown : "(no name)");
    int st;
    if ((st = get_str(obj, "name", true, &out->name, name, e)) || (st = get_str(obj, "source", false, &out->source, name, e)) ||
        (st = get_str(obj, "path", true, &out->path, name, e)))
        goto fail;
    if (!safe_rel_path(out->path)) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: \"path\" leaves the model's folder", name); goto fail; }
    copy_small(out->architecture, sizeof out->architecture, json_object_get(obj, "architecture"));
    copy_small(out->quantization, sizeof out->quantization, json_object_get(obj, "quantization"));
    copy_small(out->date, sizeof out->date, json_object_get(obj, "date"));
    const json_t *size = json_object_get(obj, "size");
    if (!json_is_integer(size) || json_integer_value(size) < 0) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: \"size\" is not a non-negative integer", name); goto fail; }
    out->size = (uint64_t)json_integer_value(size);
    const json_t *files = json_object_get(obj, "files");
    if (!json_is_array(files) || json_array_size(files) == 0 || json_array_size(files) > 10000) {
        st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: \"files\" is not an array of 1 to 10000 files", name);
        goto fail;
    }
    out->files = calloc(json_array_size(files), sizeof *out->files);
    if (!out->files) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto fail; }
    uint64_t sum = 0;
    size_t i;
    const json_t *f;
    json_array_foreach(files, i, f) {
        kite_store_file *sf = &out->files[out->n_files];
        if (!json_is_object(f)) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: file %zu is not an object", name, i); goto fail; }
        if ((st = get_str(f, "path", true, &sf->path, name, e))) goto fail;
        out->n_files++;
        if (!safe_rel_path(sf->path) || !strcmp(sf->path, ".")) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: file %zu's path leaves the model's folder", name, i); goto fail; }
        const json_t *fs = json_object_get(f, "size");
        if (!json_is_integer(fs) || json_integer_value(fs) < 0) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: file %zu has no valid size", name, i); goto fail; }
        sf->size = (uint64_t)json_integer_value(fs);
        if (sum + sf->size < sum) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: file sizes overflow", name); goto fail; }
        sum += sf->size;
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        if (sha && *sha) {
            bool ok = strlen(sha) == 64;
            for (int k = 0; ok && k < 64; k++) ok = isxdigit((unsigned char)sha[k]) && !isupper((unsigned char)sha[k]);
            if (!ok) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: file %zu's sha256 is not 64 lower-case hex digits", name, i); goto fail; }
            memcpy(sf->sha256, sha, 65);
        }
    }
    if (sum != out->size) { st = kite_fail(e, KITE_ERR_FORMAT, "entry %s: \"size\" is not the sum of its files' sizes", name); goto fail; }
    return KITE_OK;
fail:
    store_entry_clear(out);
    return st;
}

json_t *store_entry_to_json(const kite_store_entry *en) {
    json_t *files = json_array();
    for (size_t i = 0; i < en->n_files; i++)
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "path", en->files[i].path, "size", (json_int_t)en->files[i].size,
                                               "sha256", en->files[i].sha256));
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:o}", "name", en->name, "source", en->source ? en->source : "", "path",
                     en->path, "architecture", en->architecture, "quantization", en->quantization, "date", en->date, "size",
                     (json_int_t)en->size, "files", files);
}

int store_entry_copy(kite_store_entry *dst, const kite_store_entry *src) {
    json_t *j = store_entry_to_json(src);
    if (!j) return KITE_ERR_NOMEM;
    int st = store_entry_from_json(j, dst, NULL);
    json_decref(j);
    return st;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const kite_store_entry *)a)->name, ((const kite_store_entry *)b)->name);
}

int store_index_parse(const char *text, size_t len, store_index *ix, size_t *n_dropped, kite_error *e) {
    memset(ix, 0, sizeof *ix);
    *n_dropped = 0;
    json_error_t jerr;
    /* depth is bounded by jansson itself (JSON_PARSER_MAX_DEPTH, 2048) */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return kite_fail(e, KITE_ERR_FORMAT, "index.json: line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    const json_t *models = json_object_get(root, "models");
    if (!json_is_object(root) || !json_is_array(models)) {
        json_decref(root);
        return kite_fail(e, KITE_ERR_FORMAT, "index.json: not an object with a \"models\" array");
    }
    ix->entries = calloc(json_array_size(models) + 1, sizeof *ix->entries);
    if (!ix->entries) { json_decref(root); return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the index"); }
    size_t i;
    const json_t *m;
    json_array_foreach(models, i, m) {
        kite_error inner = {0};
        kite_store_entry en;
        if (store_entry_from_json(m, &en, &inner)) { (*n_dropped)++; continue; }
        bool dup = false;
        for (size_t k = 0; k < ix->n && !dup; k++) dup = !strcmp(ix->entries[k].name, en.name);
        if (dup) { (*n_dropped)++; store_entry_clear(&en); continue; }
        ix->entries[ix->n++] = en;
    }
    json_decref(root);
    qsort(ix->entries, ix->n, sizeof *ix->entries, by_name);
    return KITE_OK;
}

char *store_index_dump(const store_index *ix) {
    kite_store_entry *sorted = ix->n ? malloc(ix->n * sizeof *sorted) : NULL;
    if (ix->n && !sorted) return NULL;
    if (ix->n) memcpy(sorted, ix->entries, ix->n * sizeof *sorted);
    if (ix->n) qsort(sorted, ix->n, sizeof *sorted, by_name);
    json_t *models = json_array();
    for (size_t i = 0; i < ix->n; i++) json_array_append_new(models, store_entry_to_json(&sorted[i]));
    free(sorted);
    json_t *root = json_pack("{s:i, s:o}", "version", 1, "models", models);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return text;
}
