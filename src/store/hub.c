/* Pull references and the Hugging Face hub's API, as huggingface_hub speaks it:
 *   GET {endpoint}/api/models/{repo}/revision/{rev}          model info: "sha" (the commit), "siblings"
 *   GET {endpoint}/api/models/{repo}/tree/{rev}?recursive=true  entries {type, path, size, lfs{oid,size}}
 *   GET {endpoint}/{repo}/resolve/{rev}/{path}               the file (download.c)
 * An LFS file's oid is the sha256 of its content; files kept in git publish no sha256. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "store/store_internal.h"

/* ---- names ------------------------------------------------------------------------------------ */

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }

/* A hub user or repository name: [A-Za-z0-9._-]{1,96}, not starting or ending with '.' or '-', no "..". */
static int check_segment(const char *text, const char *seg, size_t len, const char *what, kite_error *e) {
    size_t at = (size_t)(seg - text);
    if (len == 0) return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": empty %s at byte %zu", text, what, at);
    if (len > 96) return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": %s longer than 96 bytes at byte %zu", text, what, at);
    for (size_t i = 0; i < len; i++)
        if (!name_char(seg[i]))
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": character '%c' at byte %zu is not allowed in a %s (letters, digits, '-', '_', '.')",
                             text, isprint((unsigned char)seg[i]) ? seg[i] : '?', at + i, what);
    if (seg[0] == '.' || seg[0] == '-' || seg[len - 1] == '.' || seg[len - 1] == '-')
        return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": a %s may not start or end with '.' or '-' (byte %zu)", text, what, at);
    for (size_t i = 0; i + 1 < len; i++)
        if (seg[i] == '.' && seg[i + 1] == '.')
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": \"..\" at byte %zu", text, at + i);
    return KITE_OK;
}

int store_parse_name(const char *text, store_ref *ref, kite_error *e) {
    memset(ref, 0, sizeof *ref);
    if (!text || !*text) return kite_fail(e, KITE_ERR_INVALID_ARG, "empty model name (expected user/repo, user/repo:QUANT, user/repo/file.gguf or a URL)");
    size_t len = strlen(text);
    if (len >= 1000) return kite_fail(e, KITE_ERR_INVALID_ARG, "model name of %zu bytes is too long (at most 999)", len);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] <= ' ' || text[i] == 0x7f)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name: a space or control character at byte %zu", i);
    if (!strncmp(text, "http://", 7) || !strncmp(text, "https://", 8)) {
        const char *host = strstr(text, "://") + 3;
        const char *slash = strchr(host, '/');
        if (slash == host || !*host) return kite_fail(e, KITE_ERR_INVALID_ARG, "URL \"%s\": no host", text);
        if (!slash || !slash[1]) return kite_fail(e, KITE_ERR_INVALID_ARG, "URL \"%s\": no file path after the host", text);
        const char *end = text + strcspn(text, "?#");
        const char *base = end;
        while (base > slash + 1 && base[-1] != '/') base--;
        if (base == end) return kite_fail(e, KITE_ERR_INVALID_ARG, "URL \"%s\": the path ends in '/', naming no file", text);
        ref->kind = STORE_REF_URL;
        snprintf(ref->url, sizeof ref->url, "%s", text);
        snprintf(ref->name, sizeof ref->name, "%s", text);
        snprintf(ref->file, sizeof ref->file, "%.*s", (int)(end - base), base);
        if (!strcmp(ref->file, ".") || !strcmp(ref->file, "..") || ref->file[0] == '.')
            return kite_fail(e, KITE_ERR_INVALID_ARG, "URL \"%s\": the file name \"%s\" is not usable", text, ref->file);
        return KITE_OK;
    }
    ref->kind = STORE_REF_HUB;
    const char *p = text;
    static const char *const prefixes[] = {"hf.co/", "huggingface.co/", "hf://"};
    /* every prefix, repeatedly: the normal form then never starts with one, so it parses to itself */
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(p, prefixes[i], strlen(prefixes[i]))) {
            p += strlen(prefixes[i]);
            i = (size_t)-1;
        }
    /* user */
    const char *user = p;
    size_t user_len = strcspn(user, "/");
    if (!user[user_len])
        return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": expected user/repo (a Hugging Face repository), user/repo:QUANT, user/repo/file.gguf or an http(s):// URL", text);
    int st = check_segment(text, user, user_len, "user name", e);
    if (st) return st;
    /* repo, then @revision, :TAG or /path */
    const char *repo = user + user_len + 1;
    size_t repo_len = strcspn(repo, "/@:");
    if ((st = check_segment(text, repo, repo_len, "repository name", e))) return st;
    snprintf(ref->repo, sizeof ref->repo, "%.*s/%.*s", (int)user_len, user, (int)repo_len, repo);
    snprintf(ref->revision, sizeof ref->revision, "main");
    const char *q = repo + repo_len;
    if (*q == '@') {
        const char *rev = q + 1;
        size_t rev_len = strcspn(rev, "/:");
        if (rev_len == 0 || rev_len >= sizeof ref->revision)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": the revision after '@' (byte %zu) is empty or too long", text, (size_t)(q - text));
        for (size_t i = 0; i < rev_len; i++)
            if (!name_char(rev[i]))
                return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": character '%c' at byte %zu is not allowed in a revision", text, rev[i], (size_t)(rev + i - text));
        if (rev[0] == '.' || strstr(rev, ".."))
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": revision at byte %zu may not start with '.' nor hold \"..\"", text, (size_t)(rev - text));
        snprintf(ref->revision, sizeof ref->revision, "%.*s", (int)rev_len, rev);
        q = rev + rev_len;
    }
    if (*q == ':') {
        const char *tag = q + 1;
        size_t tag_len = strlen(tag);
        if (tag_len == 0 || tag_len >= sizeof ref->quant)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": the quantization tag after ':' (byte %zu) is empty or longer than 31 bytes", text, (size_t)(q - text));
        for (size_t i = 0; i < tag_len; i++) {
            if (!isalnum((unsigned char)tag[i]) && tag[i] != '_')
                return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": character '%c' at byte %zu is not allowed in a quantization tag (e.g. Q4_K_M)", text, tag[i], (size_t)(tag + i - text));
            ref->quant[i] = (char)toupper((unsigned char)tag[i]);
        }
    } else if (*q == '/') {
        const char *path = q + 1;
        size_t path_len = strlen(path);
        if (path_len == 0 || path_len >= sizeof ref->file)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": the file path after byte %zu is empty or too long", text, (size_t)(q - text));
        for (const char *s = path; *s;) {
            size_t seg = strcspn(s, "/");
            if (seg == 0 || (seg == 1 && s[0] == '.') || (seg == 2 && s[0] == '.' && s[1] == '.'))
                return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": an empty, '.' or '..' path component at byte %zu", text, (size_t)(s - text));
            for (size_t i = 0; i < seg; i++)
                if (!name_char(s[i]) && s[i] != '+' && s[i] != '=')
                    return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": character '%c' at byte %zu is not allowed in a file path", text, s[i], (size_t)(s + i - text));
            s += seg;
            if (*s == '/') s++;
            if (!*s && s[-1] == '/') return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": the path ends in '/'", text);
        }
        snprintf(ref->file, sizeof ref->file, "%s", path);
    } else if (*q) {
        return kite_fail(e, KITE_ERR_INVALID_ARG, "model name \"%s\": unexpected '%c' at byte %zu", text, *q, (size_t)(q - text));
    }
    /* The normalised name: what a user would type, without defaults. */
    int n = snprintf(ref->name, sizeof ref->name, "%s", ref->repo);
    if (strcmp(ref->revision, "main")) n += snprintf(ref->name + n, sizeof ref->name - (size_t)n, "@%s", ref->revision);
    if (ref->quant[0]) snprintf(ref->name + n, sizeof ref->name - (size_t)n, ":%s", ref->quant);
    else if (ref->file[0]) snprintf(ref->name + n, sizeof ref->name - (size_t)n, "/%s", ref->file);
    return KITE_OK;
}

void store_name_dir(const char *name, char *dir, size_t dir_size) {
    kite_sha256 h;
    kite_sha256_init(&h);
    kite_sha256_update(&h, name, strlen(name));
    char hex[65];
    kite_sha256_hex(&h, hex);
    char safe[128];
    size_t n = 0;
    for (const char *p = name; *p && n < 96; p++) {
        if (!strncmp(p, "https://", 8)) { p += 7; continue; }
        if (!strncmp(p, "http://", 7)) { p += 6; continue; }
        char c = *p;
        safe[n++] = (isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : (c == '/' ? '-' : '_');
    }
    while (n > 0 && safe[0] == '.') memmove(safe, safe + 1, --n); /* never a hidden or ".." folder */
    safe[n] = 0;
    snprintf(dir, dir_size, "%s-%.8s", n ? safe : "model", hex);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

bool store_name_has_quant(const char *file, const char *tag) {
    const char *base = base_name(file);
    size_t tlen = strlen(tag);
    if (!tlen) return false;
    for (const char *p = base; *p; p++) {
        if (strncasecmp(p, tag, tlen)) continue;
        bool left = p == base || p[-1] == '-' || p[-1] == '.' || p[-1] == '_';
        char r = p[tlen];
        bool right = r == 0 || r == '-' || r == '.';
        if (left && right) return true;
    }
    return false;
}

bool store_split_part(const char *file, int *part, int *count) {
    const char *base = base_name(file);
    size_t n = strlen(base);
    /* -00001-of-00003.gguf: 5 + 4 + 5 + 5 = 20 bytes, and at least one before */
    if (n < 21 || !ends_with_ci(base, ".gguf")) return false;
    const char *s = base + n - 20;
    if (s[0] != '-' || strncmp(s + 6, "-of-", 4)) return false;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)s[1 + i]) || !isdigit((unsigned char)s[10 + i])) return false;
    int a = atoi(s + 1), b = atoi(s + 10);
    if (a < 1 || b < 1 || a > b) return false;
    *part = a;
    *count = b;
    return true;
}

/* ---- the API ---------------------------------------------------------------------------------- */

char *hub_escape_path(const char *path) {
    size_t n = strlen(path);
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (const char *p = path; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') out[k++] = (char)c;
        else k += (size_t)sprintf(out + k, "%%%02X", c);
    }
    out[k] = 0;
    return out;
}

void hub_listing_clear(hub_listing *l) {
    for (size_t i = 0; i < l->n; i++) free(l->files[i].path);
    free(l->files);
    memset(l, 0, sizeof *l);
}

static bool is_sha256_hex(const char *s) {
    if (!s || strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

static int add_file(hub_listing *l, const char *path, uint64_t size, const char *sha, kite_error *e) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->files[i].path, path)) { /* the tree refines what siblings said */
            if (size) l->files[i].size = size;
            if (sha && is_sha256_hex(sha)) {
                for (int k = 0; k < 64; k++) l->files[i].sha256[k] = (char)tolower((unsigned char)sha[k]);
                l->files[i].sha256[64] = 0;
            }
            return KITE_OK;
        }
    if (l->n >= 100000) return kite_fail(e, KITE_ERR_FORMAT, "the repository lists more than 100000 files");
    hub_file *grown = realloc(l->files, (l->n + 1) * sizeof *grown);
    if (!grown) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the file list");
    l->files = grown;
    hub_file *f = &l->files[l->n];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the file list");
    l->n++;
    return add_file(l, path, size, sha, e);
}

static int get_json(store_net *net, const char *url, const char *what, json_t **out, char *next_url, size_t next_cap,
                    kite_error *e) {
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    int st = store_http_get(net, url, 64u << 20, &body, &len, &status, next_url, next_cap, e);
    if (st) return st;
    if (status != 200) {
        free(body);
        return store_http_error(net, status, what, e);
    }
    json_error_t jerr;
    *out = json_loadb(body, len, 0, &jerr);
    free(body);
    if (!*out) return kite_fail(e, KITE_ERR_FORMAT, "%s: the hub's answer is not JSON (line %d, column %d: %s)", what, jerr.line, jerr.column, jerr.text);
    return KITE_OK;
}

/* Pages of a file tree followed at most (10^5 files at the hub's 1000 a page). */
#define HUB_MAX_TREE_PAGES 100

int hub_list(store_net *net, const store_ref *ref, hub_listing *out, kite_error *e) {
    memset(out, 0, sizeof *out);
    char what[400], url[2048];
    snprintf(what, sizeof what, "repository %s", ref->repo);
    char *rev = hub_escape_path(ref->revision);
    if (!rev) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", net->endpoint, ref->repo, rev);
    json_t *info = NULL;
    int st = get_json(net, url, what, &info, NULL, 0, e);
    if (st) { free(rev); return st; }
    const char *sha = json_string_value(json_object_get(info, "sha"));
    if (sha && strlen(sha) < sizeof out->commit) snprintf(out->commit, sizeof out->commit, "%s", sha);
    json_t *siblings = json_object_get(info, "siblings");
    size_t i;
    json_t *s;
    json_array_foreach(siblings, i, s) {
        const char *name = json_string_value(json_object_get(s, "rfilename"));
        if (name && (st = add_file(out, name, 0, NULL, e))) break;
    }
    json_decref(info);
    if (st) { free(rev); hub_listing_clear(out); return st; }
    /* Sizes and sha256 from the tree at the commit just seen (the same files even if main moves on). */
    snprintf(url, sizeof url, "%s/api/models/%s/tree/%s?recursive=true", net->endpoint, ref->repo, out->commit[0] ? out->commit : rev);
    free(rev);
    /* The hub pages long listings (about 1000 entries a page): Link rel="next" to the following one. */
    for (int page = 0; url[0]; page++) {
        if (page == HUB_MAX_TREE_PAGES) {
            hub_listing_clear(out);
            return kite_fail(e, KITE_ERR_FORMAT, "%s: the hub's file tree goes on past %d pages", what, HUB_MAX_TREE_PAGES);
        }
        json_t *tree = NULL;
        char next[2048];
        if ((st = get_json(net, url, what, &tree, next, sizeof next, e))) { hub_listing_clear(out); return st; }
        if (!json_is_array(tree)) {
            json_decref(tree);
            hub_listing_clear(out);
            return kite_fail(e, KITE_ERR_FORMAT, "%s: the hub's file tree is not a JSON array", what);
        }
        json_array_foreach(tree, i, s) {
            const char *type = json_string_value(json_object_get(s, "type"));
            const char *path = json_string_value(json_object_get(s, "path"));
            if (!path || (type && strcmp(type, "file"))) continue;
            json_t *size = json_object_get(s, "size");
            json_t *lfs = json_object_get(s, "lfs");
            json_int_t sz = json_is_integer(size) ? json_integer_value(size) : 0;
            if (sz < 0) sz = 0;
            if ((st = add_file(out, path, (uint64_t)sz, json_string_value(json_object_get(lfs, "oid")), e))) break;
        }
        json_decref(tree);
        if (st) { hub_listing_clear(out); return st; }
        snprintf(url, sizeof url, "%s", next);
    }
    if (out->n == 0) return kite_fail(e, KITE_ERR_NOT_FOUND, "%s at %s has no files", ref->repo, ref->revision);
    return KITE_OK;
}

/* ---- choosing files --------------------------------------------------------------------------- */

/* A GGUF file or a split set: the files that make one model. */
typedef struct gguf_group {
    size_t first;        /* index of part 1 (or the file) */
    size_t members[64];
    size_t n_members;
    int count;           /* parts the name announces */
    uint64_t size;
} gguf_group;

static bool is_gguf(const char *path) { return ends_with_ci(path, ".gguf"); }

/* Same split set: the same name up to "-0000k-of-0000N.gguf". */
static bool same_set(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    return na == nb && na > 20 && !strncmp(a, b, na - 20) && !strcmp(a + na - 14, b + nb - 14);
}

static size_t group_ggufs(const hub_listing *l, gguf_group *groups, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < l->n && n < cap; i++) {
        const char *p = l->files[i].path;
        if (!is_gguf(p)) continue;
        /* mmproj (vision projector) and imatrix-style side files are not models to run */
        if (strstr(base_name(p), "mmproj")) continue;
        int part, count;
        if (store_split_part(p, &part, &count)) {
            if (part != 1) continue;
            gguf_group *g = &groups[n];
            memset(g, 0, sizeof *g);
            g->first = i;
            g->count = count;
            for (size_t k = 0; k < l->n && g->n_members < 64; k++) {
                int pk, ck;
                if (store_split_part(l->files[k].path, &pk, &ck) && ck == count && same_set(p, l->files[k].path)) {
                    g->members[g->n_members++] = k;
                    g->size += l->files[k].size;
                }
            }
            if ((int)g->n_members != count) continue; /* an incomplete set cannot be loaded */
            n++;
        } else {
            gguf_group *g = &groups[n++];
            memset(g, 0, sizeof *g);
            g->first = i;
            g->count = 1;
            g->members[0] = i;
            g->n_members = 1;
            g->size = l->files[i].size;
        }
    }
    return n;
}

static void human_size(uint64_t b, char *out, size_t n) {
    if (b >= (1ull << 30)) snprintf(out, n, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(out, n, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024) snprintf(out, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(out, n, "%" PRIu64 " B", b);
}

static void take_group(const gguf_group *g, const hub_listing *l, size_t *pick, size_t *n_pick, char *model_file,
                       size_t mf_size) {
    /* parts in order 1..N, so the first file is the one to open */
    *n_pick = 0;
    for (int part = 1; part <= g->count; part++)
        for (size_t k = 0; k < g->n_members; k++) {
            int pk = 1, ck = 1;
            store_split_part(l->files[g->members[k]].path, &pk, &ck);
            if (pk == part) pick[(*n_pick)++] = g->members[k];
        }
    snprintf(model_file, mf_size, "%s", base_name(l->files[g->first].path));
}

static bool wanted_in_folder(const char *path) {
    if (strchr(path, '/')) return false; /* sub-folders hold other formats (onnx/, original/) */
    static const char *const exact[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "tokenizer.model", "chat_template.jinja",
                                        "model.safetensors.index.json", "vocab.json", "merges.txt", "added_tokens.json"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (!strcmp(path, exact[i])) return true;
    return ends_with_ci(path, ".safetensors");
}

int hub_choose(const store_ref *ref, const hub_listing *l, uint64_t memory_bytes, size_t *pick, size_t *n_pick,
               char *model_file, size_t mf_size, char *reason, size_t reason_size, kite_error *e) {
    *n_pick = 0;
    reason[0] = 0;
    model_file[0] = 0;
    enum { MAX_GROUPS = 256 };
    gguf_group *groups = malloc(MAX_GROUPS * sizeof *groups);
    if (!groups) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    size_t n_groups = group_ggufs(l, groups, MAX_GROUPS);
    int st = KITE_OK;
    char sz[32], lim[32];
    if (ref->file[0]) {
        /* one file, with the rest of its split set */
        size_t g;
        for (g = 0; g < n_groups; g++) {
            bool member = false;
            for (size_t k = 0; k < groups[g].n_members; k++) member |= !strcmp(l->files[groups[g].members[k]].path, ref->file);
            if (member) break;
        }
        if (g < n_groups) {
            take_group(&groups[g], l, pick, n_pick, model_file, mf_size);
            if (groups[g].count > 1) snprintf(reason, reason_size, "%s is part of a split set of %d files: fetching all of them", ref->file, groups[g].count);
        } else {
            size_t i;
            for (i = 0; i < l->n && strcmp(l->files[i].path, ref->file); i++) {}
            if (i == l->n) st = kite_fail(e, KITE_ERR_NOT_FOUND, "%s/%s not found: the repository has no file %s at %s", ref->repo, ref->file, ref->file, ref->revision);
            else {
                pick[(*n_pick)++] = i;
                snprintf(model_file, mf_size, "%s", base_name(l->files[i].path));
            }
        }
    } else if (ref->quant[0]) {
        size_t found = SIZE_MAX, n_found = 0;
        for (size_t g = 0; g < n_groups; g++)
            if (store_name_has_quant(l->files[groups[g].first].path, ref->quant)) { found = g; n_found++; }
        if (n_found == 0) {
            char list[400] = "";
            size_t at = 0;
            for (size_t g = 0; g < n_groups && at + 2 < sizeof list; g++)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "", base_name(l->files[groups[g].first].path));
            st = kite_fail(e, KITE_ERR_NOT_FOUND, "%s has no GGUF file tagged %s%s%s", ref->repo, ref->quant, n_groups ? "; it has: " : " (it has no GGUF file)", list);
        } else if (n_found > 1) {
            st = kite_fail(e, KITE_ERR_INVALID_ARG, "%s has %zu GGUF files tagged %s: name one as %s/FILE.gguf", ref->repo, n_found, ref->quant, ref->repo);
        } else {
            take_group(&groups[found], l, pick, n_pick, model_file, mf_size);
            human_size(groups[found].size, sz, sizeof sz);
            snprintf(reason, reason_size, "%s: %s (%s)", ref->quant, model_file, sz);
        }
    } else if (n_groups > 0) {
        /* The largest that fits in 60% of memory, the usual Q4_K_M when it is about as large. */
        uint64_t limit = memory_bytes / 10 * 6;
        size_t best = SIZE_MAX, q4 = SIZE_MAX, smallest = 0;
        for (size_t g = 0; g < n_groups; g++) {
            if (groups[g].size < groups[smallest].size) smallest = g;
            if (groups[g].size >= limit) continue;
            if (best == SIZE_MAX || groups[g].size > groups[best].size) best = g;
            if (store_name_has_quant(l->files[groups[g].first].path, "Q4_K_M")) q4 = g;
        }
        human_size(limit, lim, sizeof lim);
        if (best == SIZE_MAX) {
            human_size(groups[smallest].size, sz, sizeof sz);
            st = kite_fail(e, KITE_ERR_UNSUPPORTED, "no GGUF file of %s fits in 60%% of the available memory (%s): the smallest, %s, takes %s; pull it by name (%s/%s) to take it anyway",
                           ref->repo, lim, base_name(l->files[groups[smallest].first].path), sz, ref->repo, l->files[groups[smallest].first].path);
        } else {
            const char *why = "the largest";
            if (q4 != SIZE_MAX && q4 != best && groups[q4].size >= groups[best].size / 100 * 85) {
                best = q4;
                why = "Q4_K_M, about as large as the largest";
            }
            take_group(&groups[best], l, pick, n_pick, model_file, mf_size);
            human_size(groups[best].size, sz, sizeof sz);
            snprintf(reason, reason_size, "chose %s (%s): %s of the %zu GGUF models of %s that fit in 60%% of the available memory (%s)",
                     model_file, sz, why, n_groups, ref->repo, lim);
        }
    } else {
        /* No GGUF: a Hugging Face folder (config.json, tokenizer, safetensors). */
        bool has_config = false, has_weights = false;
        for (size_t i = 0; i < l->n; i++) {
            if (!wanted_in_folder(l->files[i].path)) continue;
            has_config |= !strcmp(l->files[i].path, "config.json");
            has_weights |= ends_with_ci(l->files[i].path, ".safetensors");
            pick[(*n_pick)++] = i;
        }
        if (!has_config || !has_weights) {
            *n_pick = 0;
            st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s has neither a GGUF file nor config.json with .safetensors weights: nothing kite can run", ref->repo);
        } else {
            snprintf(reason, reason_size, "%s has no GGUF file: fetching its safetensors folder (%zu files)", ref->repo, *n_pick);
        }
    }
    free(groups);
    return st;
}
