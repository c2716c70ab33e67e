/* The store on disk:
 *   <store>/index.json             every complete model (written to a temporary file, fsync'd, renamed)
 *   <store>/.lock                  flock: shared to read the index, exclusive to change it
 *   <store>/<name folder>/         a model's files, its manifest .kite-model.json (the entry again, so a
 *                                  lost or damaged index is rebuilt from the folders), .pull.lock while
 *                                  a pull runs, and <file>.part while a file is incomplete
 * A model enters the index only after all its files are complete and verified, so an interrupted pull
 * leaves at most .part files (resumed by the next pull) and never an entry. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "store/store_internal.h"

struct kite_store {
    char *dir;
};

static const char MANIFEST[] = ".kite-model.json";

const char *kite_store_dir(const kite_store *store) { return store ? store->dir : NULL; }

int kite_store_open(kite_store **out, const char *dir, char *err, size_t err_size) {
    kite_error e = {0};
    *out = NULL;
    char buf[4096];
    if (!dir || !*dir) {
        const char *env = getenv("KITE_MODELS");
        if (env && *env) dir = env;
        else {
            const char *home = getenv("HOME");
            if (!home || !*home) {
                kite_fail(&e, KITE_ERR_INVALID_ARG, "no model store: neither KITE_MODELS nor HOME is set (give --models-dir DIR)");
                return kite_error_export(&e, err, err_size);
            }
            const char *xdg = getenv("XDG_CACHE_HOME");
            if (xdg && *xdg) snprintf(buf, sizeof buf, "%s/kite/models", xdg);
            else snprintf(buf, sizeof buf, "%s/.cache/kite/models", home);
            dir = buf;
        }
    }
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len >= 3000) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "model store path of %zu bytes is too long", len);
        return kite_error_export(&e, err, err_size);
    }
    /* A path that exists must be a folder; one under a regular file can never become one. */
    struct stat st;
    char probe[3100];
    snprintf(probe, sizeof probe, "%.*s", (int)len, dir);
    if (stat(probe, &st) == 0 && !S_ISDIR(st.st_mode)) {
        kite_fail(&e, KITE_ERR_IO, "model store %s is not a folder", probe);
        return kite_error_export(&e, err, err_size);
    }
    if (stat(probe, &st) != 0 && errno == ENOTDIR) {
        kite_fail(&e, KITE_ERR_IO, "model store %s cannot be created: a part of its path is a file, not a folder", probe);
        return kite_error_export(&e, err, err_size);
    }
    kite_store *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strndup(dir, len))) {
        free(s);
        kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
        return kite_error_export(&e, err, err_size);
    }
    *out = s;
    return KITE_OK;
}

void kite_store_free(kite_store *store) {
    if (!store) return;
    free(store->dir);
    free(store);
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static int mkdir_p(const char *path, kite_error *e) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST)
                return kite_fail(e, KITE_ERR_IO, "cannot create the folder %s: %s", buf, strerror(errno));
            struct stat st;
            if (stat(buf, &st) || !S_ISDIR(st.st_mode))
                return kite_fail(e, KITE_ERR_IO, "cannot create the folder %s: %s is not a folder", path, buf);
            *p = c;
            if (!c) break;
        }
    }
    if (access(path, W_OK))
        return kite_fail(e, KITE_ERR_IO, "the model store %s is not writable: %s", path, strerror(errno));
    return KITE_OK;
}

/* flock on path; fd >= 0 on success. shared: LOCK_SH. A store that does not exist yet has no lock and
 * nothing to read: *fd = -1 and KITE_OK. */
static int lock_file(const char *path, bool exclusive, bool create, int *fd, kite_error *e) {
    *fd = open(path, (create ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC, 0644);
    if (*fd < 0) {
        if (!create && errno == ENOENT) return KITE_OK;
        return kite_fail(e, KITE_ERR_IO, "cannot open the lock %s: %s", path, strerror(errno));
    }
    while (flock(*fd, exclusive ? LOCK_EX : LOCK_SH)) {
        if (errno == EINTR) continue;
        int code = errno;
        close(*fd);
        *fd = -1;
        return kite_fail(e, KITE_ERR_IO, "cannot lock %s: %s", path, strerror(code));
    }
    return KITE_OK;
}

static void unlock_file(int fd) {
    if (fd >= 0) close(fd); /* closing releases the flock */
}

static int write_atomic(const char *path, const char *text, kite_error *e) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return kite_fail(e, KITE_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int code = w < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return kite_fail(e, KITE_ERR_IO, "writing %s: %s", tmp, strerror(code));
        }
        off += (size_t)w;
    }
    if (fsync(fd) || close(fd)) {
        int code = errno;
        unlink(tmp);
        return kite_fail(e, KITE_ERR_IO, "writing %s: %s", tmp, strerror(code));
    }
    if (rename(tmp, path)) {
        int code = errno;
        unlink(tmp);
        return kite_fail(e, KITE_ERR_IO, "renaming %s: %s", tmp, strerror(code));
    }
    return KITE_OK;
}

static void model_dir(const kite_store *s, const char *name, char *out, size_t n) {
    char leaf[256];
    store_name_dir(name, leaf, sizeof leaf);
    snprintf(out, n, "%s/%s", s->dir, leaf);
}

/* The normalised form of a name, or the text itself when it is not a pull reference. */
static void normalise(const char *name, char *out, size_t n) {
    store_ref ref;
    if (store_parse_name(name, &ref, NULL) == KITE_OK) snprintf(out, n, "%s", ref.name);
    else snprintf(out, n, "%s", name);
}

/* Whether an entry's files are all on disk with their sizes. */
static bool entry_on_disk(const kite_store *s, const kite_store_entry *en) {
    char dir[4096], path[8192];
    model_dir(s, en->name, dir, sizeof dir);
    for (size_t i = 0; i < en->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, en->files[i].path);
        struct stat st;
        if (stat(path, &st) || (uint64_t)st.st_size != en->files[i].size) return false;
    }
    return true;
}

static int entry_order(const void *a, const void *b) {
    return strcmp(((const kite_store_entry *)a)->name, ((const kite_store_entry *)b)->name);
}

/* Rebuilds the index from the manifests in the model folders. */
static int rebuild(const kite_store *s, store_index *ix, kite_error *e) {
    memset(ix, 0, sizeof *ix);
    DIR *d = opendir(s->dir);
    if (!d) return errno == ENOENT ? KITE_OK : kite_fail(e, KITE_ERR_IO, "cannot read the model store %s: %s", s->dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s/%s", s->dir, de->d_name, MANIFEST);
        char *text = NULL;
        size_t len = 0;
        kite_error inner = {0};
        if (kite_read_file(path, &text, &len, 1u << 24, &inner)) continue;
        json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
        free(text);
        kite_store_entry en;
        int st = j ? store_entry_from_json(j, &en, &inner) : KITE_ERR_FORMAT;
        json_decref(j);
        if (st) { kite_log(KITE_LOG_WARN, "model store: %s is damaged; that model is left out", path); continue; }
        char leaf[256];
        store_name_dir(en.name, leaf, sizeof leaf);
        if (strcmp(leaf, de->d_name) || !entry_on_disk(s, &en)) { store_entry_clear(&en); continue; }
        kite_store_entry *grown = realloc(ix->entries, (ix->n + 1) * sizeof *grown);
        if (!grown) { store_entry_clear(&en); closedir(d); store_index_clear(ix); return kite_fail(e, KITE_ERR_NOMEM, "out of memory"); }
        ix->entries = grown;
        ix->entries[ix->n++] = en;
    }
    closedir(d);
    if (ix->n) qsort(ix->entries, ix->n, sizeof *ix->entries, entry_order);
    return KITE_OK;
}

/* Loads the index (the caller holds the lock). A missing index is empty unless model folders say
 * otherwise; a damaged one is rebuilt, with a warning. *rebuilt tells the caller to write it back. */
static int load_index(const kite_store *s, store_index *ix, bool *rebuilt, kite_error *e) {
    memset(ix, 0, sizeof *ix);
    *rebuilt = false;
    char path[4200];
    snprintf(path, sizeof path, "%s/index.json", s->dir);
    char *text = NULL;
    size_t len = 0;
    kite_error inner = {0};
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT) return kite_fail(e, KITE_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        int rs = rebuild(s, ix, e);
        if (!rs && ix->n) *rebuilt = true;
        return rs;
    }
    if (kite_read_file(path, &text, &len, 1u << 26, &inner)) return kite_fail(e, inner.status, "%s", inner.msg);
    size_t dropped = 0;
    int ps = store_index_parse(text, len, ix, &dropped, &inner);
    free(text);
    if (ps == KITE_ERR_NOMEM) return kite_fail(e, ps, "%s", inner.msg);
    if (ps || dropped) {
        if (ps) kite_log(KITE_LOG_WARN, "model store: %s is damaged (%s); rebuilding it from the model folders", path, inner.msg);
        else kite_log(KITE_LOG_WARN, "model store: %s has %zu damaged entr%s; rebuilding it from the model folders", path, dropped, dropped == 1 ? "y" : "ies");
        store_index_clear(ix);
        int rs = rebuild(s, ix, e);
        if (!rs) *rebuilt = true;
        return rs;
    }
    return KITE_OK;
}

static int save_index(const kite_store *s, const store_index *ix, kite_error *e) {
    char *text = store_index_dump(ix);
    if (!text) return kite_fail(e, KITE_ERR_NOMEM, "out of memory writing the index");
    char path[4200];
    snprintf(path, sizeof path, "%s/index.json", s->dir);
    int st = write_atomic(path, text, e);
    free(text);
    return st;
}

static void lock_path(const kite_store *s, char *out, size_t n) { snprintf(out, n, "%s/.lock", s->dir); }

/* Reads the index under a shared lock; writes back a rebuilt one when the folder is writable. */
static int read_index(kite_store *s, store_index *ix, kite_error *e) {
    char lp[4200];
    lock_path(s, lp, sizeof lp);
    int fd;
    int st = lock_file(lp, false, false, &fd, e);
    if (st) return st;
    bool rebuilt = false;
    st = load_index(s, ix, &rebuilt, e);
    unlock_file(fd);
    if (!st && rebuilt && access(s->dir, W_OK) == 0) {
        kite_error ignored = {0};
        if (lock_file(lp, true, true, &fd, &ignored) == KITE_OK) {
            store_index fresh;
            bool again;
            if (load_index(s, &fresh, &again, &ignored) == KITE_OK) {
                if (again) save_index(s, &fresh, &ignored);
                store_index_clear(&fresh);
            }
            unlock_file(fd);
        }
    }
    return st;
}

/* ---- list, show, remove, resolve -------------------------------------------------------------- */

int kite_store_list(kite_store *store, kite_store_entry **entries, size_t *n, char *err, size_t err_size) {
    kite_error e = {0};
    *entries = NULL;
    *n = 0;
    store_index ix;
    if (read_index(store, &ix, &e)) return kite_error_export(&e, err, err_size);
    *entries = ix.entries;
    *n = ix.n;
    return KITE_OK;
}

static const kite_store_entry *find(const store_index *ix, const char *name) {
    for (size_t i = 0; i < ix->n; i++)
        if (!strcmp(ix->entries[i].name, name)) return &ix->entries[i];
    return NULL;
}

int kite_store_show(kite_store *store, const char *name, kite_store_entry **entry, char *err, size_t err_size) {
    kite_error e = {0};
    *entry = NULL;
    char norm[1024];
    normalise(name, norm, sizeof norm);
    store_index ix;
    if (read_index(store, &ix, &e)) return kite_error_export(&e, err, err_size);
    const kite_store_entry *f = find(&ix, norm);
    if (!f) kite_fail(&e, KITE_ERR_NOT_FOUND, "model \"%s\" is not in the store (%s)", norm, store->dir);
    else if (!(*entry = calloc(1, sizeof **entry)) || store_entry_copy(*entry, f)) {
        free(*entry);
        *entry = NULL;
        kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
    }
    store_index_clear(&ix);
    return kite_error_export(&e, err, err_size);
}

/* Deletes the regular files of a model folder and the folder (it has no sub-folders). */
static int remove_folder(const char *dir, kite_error *e) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? KITE_OK : kite_fail(e, KITE_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *de;
    int st = KITE_OK;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) && !st) st = kite_fail(e, KITE_ERR_IO, "cannot delete %s: %s", path, strerror(errno));
    }
    closedir(d);
    if (!st && rmdir(dir)) st = kite_fail(e, KITE_ERR_IO, "cannot delete %s: %s", dir, strerror(errno));
    return st;
}

int kite_store_remove(kite_store *store, const char *name, char *err, size_t err_size) {
    kite_error e = {0};
    char norm[1024], dir[4096], lp[4200], pull_lock[4200];
    normalise(name, norm, sizeof norm);
    lock_path(store, lp, sizeof lp);
    model_dir(store, norm, dir, sizeof dir);
    snprintf(pull_lock, sizeof pull_lock, "%s/.pull.lock", dir);
    struct stat st;
    if (stat(store->dir, &st)) {
        kite_fail(&e, KITE_ERR_NOT_FOUND, "model \"%s\" is not in the store (%s)", norm, store->dir);
        return kite_error_export(&e, err, err_size);
    }
    int fd, pfd = -1;
    if (lock_file(lp, true, true, &fd, &e)) return kite_error_export(&e, err, err_size);
    store_index ix;
    bool rebuilt;
    if (load_index(store, &ix, &rebuilt, &e)) { unlock_file(fd); return kite_error_export(&e, err, err_size); }
    size_t at;
    for (at = 0; at < ix.n && strcmp(ix.entries[at].name, norm); at++) {}
    if (at == ix.n) {
        kite_fail(&e, KITE_ERR_NOT_FOUND, "model \"%s\" is not in the store (%s)", norm, store->dir);
        goto done;
    }
    pfd = open(pull_lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (pfd >= 0 && flock(pfd, LOCK_EX | LOCK_NB)) {
        kite_fail(&e, KITE_ERR_IO, "model \"%s\" is being pulled by another process: try again when it is done", norm);
        goto done;
    }
    store_entry_clear(&ix.entries[at]);
    memmove(&ix.entries[at], &ix.entries[at + 1], (ix.n - at - 1) * sizeof *ix.entries);
    ix.n--;
    /* the entry goes first, so a failure half-way through deleting files leaves no entry to trust */
    if (save_index(store, &ix, &e) == KITE_OK) remove_folder(dir, &e);
done:
    if (pfd >= 0) close(pfd);
    store_index_clear(&ix);
    unlock_file(fd);
    return kite_error_export(&e, err, err_size);
}

/* What cannot be a store name but looks like a path: shown as a missing file, not as a pull hint. */
static bool looks_like_path(const char *s) {
    if (s[0] == '/' || s[0] == '.' || s[0] == '~') return true;
    const char *slash = strchr(s, '/');
    if (!slash || strchr(slash + 1, '/')) return false; /* user/repo/file.gguf is a hub name */
    size_t n = strlen(s);
    static const char *const exts[] = {".gguf", ".bin", ".safetensors", ".json", ".model"};
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t m = strlen(exts[i]);
        if (n > m && !strcasecmp(s + n - m, exts[i])) return true;
    }
    return false;
}

int kite_store_resolve(kite_store *store, const char *name, char *path, size_t path_size, char *err, size_t err_size) {
    kite_error e = {0};
    if (!name || !*name || !path || path_size == 0) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_store_resolve: empty name or no room for the path");
        return kite_error_export(&e, err, err_size);
    }
    struct stat st;
    if (stat(name, &st) == 0) {
        if ((size_t)snprintf(path, path_size, "%s", name) >= path_size) kite_fail(&e, KITE_ERR_INVALID_ARG, "path too long: %s", name);
        return kite_error_export(&e, err, err_size);
    }
    store_ref ref;
    kite_error perr = {0};
    bool is_name = store_parse_name(name, &ref, &perr) == KITE_OK;
    if (store) {
        char norm[1024];
        normalise(name, norm, sizeof norm);
        store_index ix;
        if (read_index(store, &ix, &e)) return kite_error_export(&e, err, err_size);
        const kite_store_entry *f = find(&ix, norm);
        if (f) {
            char dir[4096];
            model_dir(store, f->name, dir, sizeof dir);
            bool whole = !strcmp(f->path, ".");
            if ((size_t)snprintf(path, path_size, "%s%s%s", dir, whole ? "" : "/", whole ? "" : f->path) >= path_size) kite_fail(&e, KITE_ERR_INVALID_ARG, "path too long for %s", norm);
            else if (stat(path, &st)) kite_fail(&e, KITE_ERR_IO, "model \"%s\" is in the store but %s is missing: run `kite rm %s` and `kite pull %s`", norm, path, norm, norm);
            store_index_clear(&ix);
            return kite_error_export(&e, err, err_size);
        }
        store_index_clear(&ix);
    }
    if (is_name && !looks_like_path(name)) kite_fail(&e, KITE_ERR_NOT_FOUND, "model \"%s\" is not in the store: run `kite pull %s`", ref.name, ref.name);
    else kite_fail(&e, KITE_ERR_NOT_FOUND, "%s: no such file or folder, and not a model in the store", name);
    return kite_error_export(&e, err, err_size);
}

/* ---- pull ------------------------------------------------------------------------------------- */

kite_pull_params kite_pull_default_params(void) {
    kite_pull_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 8ull << 30;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb ? (uint64_t)kb * 1024 : 8ull << 30;
}

static const char *ftype_name(uint32_t t) {
    static const char *const names[] = {
        [0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [7] = "Q8_0", [8] = "Q5_0", [9] = "Q5_1", [10] = "Q2_K",
        [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S", [15] = "Q4_K_M", [16] = "Q5_K_S",
        [17] = "Q5_K_M", [18] = "Q6_K", [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S", [25] = "IQ4_NL", [26] = "IQ3_S", [27] = "IQ3_M", [28] = "IQ2_S",
        [29] = "IQ2_M", [30] = "IQ4_XS", [31] = "IQ1_M", [32] = "BF16", [36] = "TQ1_0", [37] = "TQ2_0"};
    return t < sizeof names / sizeof *names ? names[t] : NULL;
}

/* Architecture and quantization from the GGUF header or config.json (best effort: "" when unknown). */
static void read_metadata(const char *model_path, bool folder, kite_store_entry *en) {
    kite_error e = {0};
    if (folder) {
        char path[8192];
        snprintf(path, sizeof path, "%s/config.json", model_path);
        char *text = NULL;
        size_t len = 0;
        if (kite_read_file(path, &text, &len, 1u << 22, &e)) return;
        json_t *j = json_loadb(text, len, 0, NULL);
        free(text);
        const char *arch = json_string_value(json_object_get(j, "model_type"));
        const char *dtype = json_string_value(json_object_get(j, "torch_dtype"));
        if (!dtype) dtype = json_string_value(json_object_get(j, "dtype"));
        snprintf(en->architecture, sizeof en->architecture, "%s", arch ? arch : "");
        snprintf(en->quantization, sizeof en->quantization, "%s",
                 !dtype ? "" : !strcmp(dtype, "bfloat16") ? "BF16" : !strcmp(dtype, "float16") ? "F16" : !strcmp(dtype, "float32") ? "F32" : dtype);
        json_decref(j);
        return;
    }
    kite_mapped_file m;
    if (kite_map_file(&m, model_path, &e)) return;
    kite_gguf *g = NULL;
    if (kite_gguf_open(&g, m.data, m.size, &e) == KITE_OK) {
        kite_gguf_str s;
        if (kite_gguf_get_str(g, "general.architecture", &s))
            snprintf(en->architecture, sizeof en->architecture, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
        uint32_t ft;
        const char *q = kite_gguf_get_u32(g, "general.file_type", &ft) ? ftype_name(ft) : NULL;
        if (q) snprintf(en->quantization, sizeof en->quantization, "%s", q);
        kite_gguf_free(g);
    }
    kite_unmap_file(&m);
    if (!en->quantization[0]) { /* from the file name, as the hub's tags are */
        static const char *const tags[] = {"Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q3_K_M", "Q3_K_S", "Q3_K_L", "Q2_K", "Q6_K",
                                           "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "F16", "F32", "IQ4_XS", "IQ4_NL"};
        for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
            if (store_name_has_quant(model_path, tags[i])) { snprintf(en->quantization, sizeof en->quantization, "%s", tags[i]); break; }
    }
}

static void notef(const kite_pull_params *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notef(const kite_pull_params *p, const char *fmt, ...) {
    if (!p->note) return;
    char line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->note(line, p->user_data);
}

static bool in_index(kite_store *s, const char *name) {
    store_index ix;
    kite_error e = {0};
    if (read_index(s, &ix, &e)) return false;
    bool found = find(&ix, name) && entry_on_disk(s, find(&ix, name));
    store_index_clear(&ix);
    return found;
}

static const char *leaf_of(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Fetches the files of ref into dir (the caller holds the model's pull lock) and fills en. */
static int fetch(kite_store *s, const store_ref *ref, const kite_pull_params *p, store_net *net, const char *dir,
                 kite_store_entry *en, kite_error *e) {
    hub_listing listing = {0};
    size_t *pick = NULL, n_pick = 0;
    char model_file[512] = "", reason[1024] = "";
    store_file_job *jobs = NULL;
    char **urls = NULL, **finals = NULL, **whats = NULL;
    int st = KITE_OK;
    if (ref->kind == STORE_REF_URL) {
        n_pick = 1;
        snprintf(model_file, sizeof model_file, "%s", ref->file);
        listing.files = calloc(1, sizeof *listing.files);
        if (!listing.files || !(listing.files[0].path = strdup(ref->file))) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
        listing.n = 1;
        pick = calloc(1, sizeof *pick);
        if (!pick) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    } else {
        if ((st = hub_list(net, ref, &listing, e))) goto done;
        pick = calloc(listing.n, sizeof *pick);
        if (!pick) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
        uint64_t mem = p->memory_bytes ? p->memory_bytes : mem_available();
        if ((st = hub_choose(ref, &listing, mem, pick, &n_pick, model_file, sizeof model_file, reason, sizeof reason, e))) goto done;
        if (reason[0]) notef(p, "%s", reason);
    }
    jobs = calloc(n_pick, sizeof *jobs);
    urls = calloc(n_pick, sizeof *urls);
    finals = calloc(n_pick, sizeof *finals);
    whats = calloc(n_pick, sizeof *whats);
    en->files = calloc(n_pick, sizeof *en->files);
    if (!jobs || !urls || !finals || !whats || !en->files) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    net->total = 0;
    for (size_t i = 0; i < n_pick; i++) {
        const hub_file *f = &listing.files[pick[i]];
        if (f->size == 0) net->total = UINT64_MAX;
        else if (net->total != UINT64_MAX) net->total += f->size;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(leaf_of(listing.files[pick[k]].path), leaf_of(f->path))) { st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: two chosen files are both named %s", ref->name, leaf_of(f->path)); goto done; }
    }
    if (net->total == UINT64_MAX) net->total = 0;
    net->n_files = (int32_t)n_pick;
    net->done_before = 0;
    for (size_t i = 0; i < n_pick; i++) {
        const hub_file *f = &listing.files[pick[i]];
        size_t need = strlen(net->endpoint) + strlen(ref->repo) + strlen(f->path) * 3 + 256;
        urls[i] = malloc(need);
        finals[i] = malloc(strlen(dir) + strlen(f->path) + 2);
        whats[i] = malloc(strlen(ref->repo) + strlen(f->path) + 8);
        if (!urls[i] || !finals[i] || !whats[i]) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
        if (ref->kind == STORE_REF_URL) {
            snprintf(urls[i], need, "%s", ref->url);
            snprintf(whats[i], strlen(ref->repo) + strlen(f->path) + 8, "%s", f->path);
        } else {
            char *esc = hub_escape_path(f->path);
            char *rev = hub_escape_path(listing.commit[0] ? listing.commit : ref->revision);
            if (!esc || !rev) { free(esc); free(rev); st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
            snprintf(urls[i], need, "%s/%s/resolve/%s/%s", net->endpoint, ref->repo, rev, esc);
            free(esc);
            free(rev);
            sprintf(whats[i], "%s/%s", ref->repo, f->path);
        }
        sprintf(finals[i], "%s/%s", dir, leaf_of(f->path));
        store_file_job *j = &jobs[i];
        j->url = urls[i];
        j->what = whats[i];
        j->rel_path = leaf_of(f->path);
        j->final_path = finals[i];
        j->expected_size = f->size;
        j->expected_sha = f->sha256;
        /* a file completed by an earlier, interrupted pull of this name is checked again and kept */
        struct stat stt;
        if (stat(finals[i], &stt) == 0) {
            char part[8200];
            snprintf(part, sizeof part, "%s.part", finals[i]);
            if (rename(finals[i], part)) { st = kite_fail(e, KITE_ERR_IO, "renaming %s: %s", finals[i], strerror(errno)); goto done; }
        }
        net->file_index = (int32_t)i;
        if ((st = store_download(net, j, e))) goto done;
        net->done_before += j->size_out;
        kite_store_file *sf = &en->files[en->n_files];
        if (!(sf->path = strdup(j->rel_path))) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
        en->n_files++;
        sf->size = j->size_out;
        memcpy(sf->sha256, j->sha256_out, 65);
        en->size += j->size_out;
    }
    bool folder = ref->kind == STORE_REF_HUB && !model_file[0];
    /* "." names the folder itself (a Hugging Face folder is opened as one) */
    if (!(en->path = strdup(folder ? "." : model_file))) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    char model_path[8192];
    snprintf(model_path, sizeof model_path, "%s/%s", dir, folder ? "" : model_file);
    if (folder) model_path[strlen(model_path) - 1] = 0;
    read_metadata(model_path, folder, en);
    char src[2400];
    if (ref->kind == STORE_REF_URL) snprintf(src, sizeof src, "%s", ref->url);
    else snprintf(src, sizeof src, "hf:%s@%s", ref->repo, listing.commit[0] ? listing.commit : ref->revision);
    if (!(en->source = strdup(src))) st = kite_fail(e, KITE_ERR_NOMEM, "out of memory");
done:
    for (size_t i = 0; i < n_pick && urls && finals && whats; i++) { free(urls[i]); free(finals[i]); free(whats[i]); }
    free(urls);
    free(finals);
    free(whats);
    free(jobs);
    free(pick);
    hub_listing_clear(&listing);
    (void)s;
    return st;
}

int kite_pull(kite_store *store, const char *name, const kite_pull_params *params, char *err, size_t err_size) {
    kite_error e = {0};
    kite_pull_params defaults = kite_pull_default_params();
    const kite_pull_params *p = params ? params : &defaults;
    store_ref ref;
    if (store_parse_name(name, &ref, &e)) return kite_error_export(&e, err, err_size);
    if (in_index(store, ref.name)) {
        notef(p, "%s is already in the store", ref.name);
        return KITE_OK;
    }
    char endpoint[2048];
    const char *ep = p->hf_endpoint && *p->hf_endpoint ? p->hf_endpoint : getenv("HF_ENDPOINT");
    snprintf(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    for (size_t n = strlen(endpoint); n > 0 && endpoint[n - 1] == '/'; n--) endpoint[n - 1] = 0;
    if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "HF_ENDPOINT \"%s\" is not an http(s):// URL", endpoint);
        return kite_error_export(&e, err, err_size);
    }
    const char *token = p->hf_token ? p->hf_token : getenv("HF_TOKEN");
    store_net net = {.params = p, .endpoint = endpoint, .token = token};
    char dir[4096], pull_lock[4200], lp[4200];
    model_dir(store, ref.name, dir, sizeof dir);
    snprintf(pull_lock, sizeof pull_lock, "%s/.pull.lock", dir);
    lock_path(store, lp, sizeof lp);
    if (mkdir_p(store->dir, &e) || mkdir_p(dir, &e)) return kite_error_export(&e, err, err_size);
    int pfd = open(pull_lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (pfd < 0) {
        kite_fail(&e, KITE_ERR_IO, "cannot create %s: %s", pull_lock, strerror(errno));
        return kite_error_export(&e, err, err_size);
    }
    if (flock(pfd, LOCK_EX | LOCK_NB)) {
        notef(p, "another kite pull of %s is running: waiting for it", ref.name);
        while (flock(pfd, LOCK_EX) && errno == EINTR) {}
    }
    /* A folder deleted by kite rm while waiting: make it again (the lock file went with it). */
    struct stat stt;
    if (stat(pull_lock, &stt)) {
        close(pfd);
        return kite_pull(store, name, params, err, err_size);
    }
    kite_store_entry en;
    memset(&en, 0, sizeof en);
    int st = KITE_OK;
    if (in_index(store, ref.name)) {
        notef(p, "%s was pulled by the other process", ref.name);
        goto done;
    }
    if ((st = fetch(store, &ref, p, &net, dir, &en, &e))) goto done;
    if (!(en.name = strdup(ref.name))) { st = kite_fail(&e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(en.date, sizeof en.date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *j = store_entry_to_json(&en);
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    char manifest[4400];
    snprintf(manifest, sizeof manifest, "%s/%s", dir, MANIFEST);
    st = text ? write_atomic(manifest, text, &e) : kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
    free(text);
    if (st) goto done;
    int fd;
    if ((st = lock_file(lp, true, true, &fd, &e))) goto done;
    store_index ix;
    bool rebuilt;
    if (!(st = load_index(store, &ix, &rebuilt, &e))) {
        size_t at;
        for (at = 0; at < ix.n && strcmp(ix.entries[at].name, en.name); at++) {}
        if (at < ix.n) store_entry_clear(&ix.entries[at]);
        else {
            kite_store_entry *grown = realloc(ix.entries, (ix.n + 1) * sizeof *grown);
            if (!grown) st = kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
            else { ix.entries = grown; ix.n++; }
        }
        if (!st) {
            ix.entries[at] = en;
            memset(&en, 0, sizeof en);
            st = save_index(store, &ix, &e);
        }
        store_index_clear(&ix);
    }
    unlock_file(fd);
done:
    store_entry_clear(&en);
    close(pfd);
    return kite_error_export(&e, err, err_size);
}
