/* kite list, kite show, kite rm, kite pull: the model store (kite_store_* and kite_pull in kite.h), and
 * the store names every --model accepts (kite_cli_resolve_models, called before a verb parses). This file
 * parses, calls the library and prints; the progress bar is drawn here from kite_pull's callback. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kite.h"
#include "store_cli.h"

static const char *g_models_dir; /* --models-dir DIR, NULL = $KITE_MODELS or ~/.cache/kite/models */
static bool g_pull_on_use;       /* --pull: pull a --model NAME that is not in the store yet */

static int store_fail(int code, const char *verb, const char *msg) {
    fprintf(stderr, "kite %s: error: %s\n", verb, msg);
    return code;
}

static int open_store(kite_store **store, const char *verb) {
    char err[1024];
    if (kite_store_open(store, g_models_dir, err, sizeof err)) return store_fail(1, verb, err);
    return 0;
}

static void human(uint64_t b, char *out, size_t n) {
    if (b >= (1ull << 30)) snprintf(out, n, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(out, n, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024) snprintf(out, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(out, n, "%" PRIu64 " B", b);
}

static json_t *entry_json(const kite_store_entry *en, const char *path) {
    json_t *files = json_array();
    for (size_t i = 0; i < en->n_files; i++)
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "path", en->files[i].path, "size", (json_int_t)en->files[i].size,
                                               "sha256", en->files[i].sha256));
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:o}", "name", en->name, "source", en->source, "architecture",
                          en->architecture, "quantization", en->quantization, "date", en->date, "size", (json_int_t)en->size,
                          "files", files);
    if (path) json_object_set_new(o, "path", json_string(path));
    return o;
}

static void print_json(json_t *j) {
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text) puts(text);
    free(text);
    json_decref(j);
}

/* ---- kite list / show / rm -------------------------------------------------------------------- */

static const char LIST_USAGE[] =
    "usage: kite list [--json] [--models-dir DIR]\n"
    "\n"
    "Lists the models in the store ($KITE_MODELS, else ~/.cache/kite/models; --models-dir DIR), as\n"
    "kite pull put them there. Each name works wherever a --model PATH does.\n";

int kite_cmd_list(int argc, char **argv) {
    bool json = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(LIST_USAGE, stdout); return 0; }
        if (!strcmp(argv[i], "--json")) { json = true; continue; }
        fprintf(stderr, "kite list: error: unexpected argument '%s' (see kite list --help)\n", argv[i]);
        return 2;
    }
    kite_store *store;
    int rc = open_store(&store, "list");
    if (rc) return rc;
    kite_store_entry *entries;
    size_t n;
    char err[1024];
    if (kite_store_list(store, &entries, &n, err, sizeof err)) { kite_store_free(store); return store_fail(1, "list", err); }
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(arr, entry_json(&entries[i], NULL));
        print_json(arr);
    } else if (n == 0) {
        printf("no models in %s (kite pull NAME adds one)\n", kite_store_dir(store));
    } else {
        size_t w = 4;
        for (size_t i = 0; i < n; i++) w = strlen(entries[i].name) > w ? strlen(entries[i].name) : w;
        printf("%-*s  %10s  %-12s  %-8s  %s\n", (int)w, "NAME", "SIZE", "ARCH", "QUANT", "PULLED");
        for (size_t i = 0; i < n; i++) {
            char size[32];
            human(entries[i].size, size, sizeof size);
            printf("%-*s  %10s  %-12s  %-8s  %s\n", (int)w, entries[i].name, size, entries[i].architecture[0] ? entries[i].architecture : "-",
                   entries[i].quantization[0] ? entries[i].quantization : "-", entries[i].date);
        }
    }
    kite_store_entries_free(entries, n);
    kite_store_free(store);
    return 0;
}

static const char SHOW_USAGE[] =
    "usage: kite show NAME [--json] [--models-dir DIR]\n"
    "\n"
    "Describes a model in the store: where it came from, its files with their sizes and sha256, its\n"
    "architecture and quantization, and the path kite opens.\n";

static const char RM_USAGE[] =
    "usage: kite rm NAME [--models-dir DIR]\n"
    "\n"
    "Deletes a model's files and its entry from the store.\n";

static int name_verb(int argc, char **argv, const char *verb, const char *usage, const char **name, bool *json) {
    *name = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(usage, stdout); return -1; }
        if (json && !strcmp(argv[i], "--json")) { *json = true; continue; }
        if (argv[i][0] == '-' || *name) {
            fprintf(stderr, "kite %s: error: unexpected argument '%s' (see kite %s --help)\n", verb, argv[i], verb);
            return 2;
        }
        *name = argv[i];
    }
    if (!*name) {
        fprintf(stderr, "kite %s: error: kite %s needs a model NAME (kite list shows them)\n", verb, verb);
        return 2;
    }
    return 0;
}

int kite_cmd_show(int argc, char **argv) {
    const char *name;
    bool json = false;
    int rc = name_verb(argc, argv, "show", SHOW_USAGE, &name, &json);
    if (rc) return rc < 0 ? 0 : rc;
    kite_store *store;
    if ((rc = open_store(&store, "show"))) return rc;
    kite_store_entry *en;
    char err[1024], path[8192];
    if (kite_store_show(store, name, &en, err, sizeof err)) { kite_store_free(store); return store_fail(1, "show", err); }
    if (kite_store_resolve(store, en->name, path, sizeof path, err, sizeof err)) snprintf(path, sizeof path, "(%s)", err);
    if (json) {
        print_json(entry_json(en, path));
    } else {
        char size[32];
        human(en->size, size, sizeof size);
        printf("name:           %s\n", en->name);
        printf("source:         %s\n", en->source);
        printf("path:           %s\n", path);
        printf("architecture:   %s\n", en->architecture[0] ? en->architecture : "(unknown)");
        printf("quantization:   %s\n", en->quantization[0] ? en->quantization : "(unknown)");
        printf("size:           %s (%" PRIu64 " bytes)\n", size, en->size);
        printf("pulled:         %s\n", en->date);
        printf("files:\n");
        for (size_t i = 0; i < en->n_files; i++)
            printf("  %-40s %12" PRIu64 "  sha256 %s\n", en->files[i].path, en->files[i].size,
                   en->files[i].sha256[0] ? en->files[i].sha256 : "(none published)");
    }
    kite_store_entries_free(en, 1);
    kite_store_free(store);
    return 0;
}

int kite_cmd_rm(int argc, char **argv) {
    const char *name;
    int rc = name_verb(argc, argv, "rm", RM_USAGE, &name, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    kite_store *store;
    if ((rc = open_store(&store, "rm"))) return rc;
    char err[1024];
    rc = kite_store_remove(store, name, err, sizeof err) ? store_fail(1, "rm", err) : 0;
    if (!rc) fprintf(stderr, "kite rm: removed %s\n", name);
    kite_store_free(store);
    return rc;
}

/* ---- kite pull -------------------------------------------------------------------------------- */

static volatile int g_cancel;
static void on_sigint(int sig) {
    (void)sig;
    g_cancel = 1;
}

typedef struct pull_view {
    bool tty, quiet;
    double start, last_line;
    uint64_t fetched_base; /* resumed bytes: not part of the speed */
    int32_t file_index;
    bool drawn;
} pull_view;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_progress(const kite_pull_progress *p, void *user) {
    pull_view *v = user;
    if (v->quiet) return;
    double t = mono_s();
    if (p->file_index != v->file_index) {
        v->file_index = p->file_index;
        v->start = t;
        v->fetched_base = p->resumed;
        v->last_line = t;
    }
    double dt = t - v->start;
    double speed = dt > 0.05 ? (double)(p->file_done - v->fetched_base) / dt : 0;
    char done[32], total[32], rate[32], eta[32] = "";
    human(p->file_done, done, sizeof done);
    human(p->file_total, total, sizeof total);
    human((uint64_t)speed, rate, sizeof rate);
    int pct = p->file_total ? (int)(100.0 * (double)p->file_done / (double)p->file_total) : -1;
    if (speed > 0 && p->file_total > p->file_done) {
        double left = (double)(p->file_total - p->file_done) / speed;
        snprintf(eta, sizeof eta, "ETA %d:%02d", (int)left / 60, (int)left % 60);
    }
    if (v->tty) {
        char bar[31];
        int fill = pct < 0 ? 0 : pct * 30 / 100;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r\033[K[%d/%d] %.32s [%s] %3d%% %s/%s %s/s %s", p->file_index + 1, p->n_files, p->file, bar,
                pct < 0 ? 0 : pct, done, p->file_total ? total : "?", rate, eta);
        v->drawn = true;
        if (p->finished) { fputc('\n', stderr); v->drawn = false; }
    } else if (p->finished || t - v->last_line >= 5.0) {
        v->last_line = t;
        if (p->finished) fprintf(stderr, "kite pull: [%d/%d] %s: %s, verified\n", p->file_index + 1, p->n_files, p->file, done);
        else fprintf(stderr, "kite pull: [%d/%d] %s: %s of %s (%d%%), %s/s %s\n", p->file_index + 1, p->n_files, p->file, done,
                     total, pct < 0 ? 0 : pct, rate, eta);
    }
}

static void on_note(const char *note, void *user) {
    pull_view *v = user;
    if (v->quiet) return;
    if (v->drawn) { fputc('\n', stderr); v->drawn = false; }
    fprintf(stderr, "kite pull: %s\n", note);
}

static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0) return false;
    double mult = 1;
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib") || !strcasecmp(end, "kb")) mult = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib") || !strcasecmp(end, "mb")) mult = 1048576.0;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib") || !strcasecmp(end, "gb")) mult = 1073741824.0;
    else if (*end) return false;
    *out = (uint64_t)(v * mult);
    return true;
}

static const char PULL_USAGE[] =
    "usage: kite pull NAME [options]\n"
    "\n"
    "Downloads a model into the store ($KITE_MODELS, else ~/.cache/kite/models; --models-dir DIR). NAME is\n"
    "  user/repo               the GGUF that fits this machine best: the largest under 60% of the available\n"
    "                          memory (Q4_K_M when it is about as large), or the safetensors folder when the\n"
    "                          repository has no GGUF\n"
    "  user/repo:Q4_K_M        the GGUF carrying that quantization tag in its name\n"
    "  user/repo/dir/f.gguf    that file (and the rest of its split set, -00001-of-0000N)\n"
    "  user/repo@REV...        any of these at a branch, tag or commit\n"
    "  https://host/path/f.gguf  one file from anywhere\n"
    "Interrupted downloads resume where they stopped; files are checked against the sha256 the hub\n"
    "publishes. HF_TOKEN is sent for gated or private repositories; HF_ENDPOINT names a mirror.\n"
    "\n"
    "options:\n"
    "  --memory SIZE           choose as if SIZE were available (e.g. 8G; default: MemAvailable)\n"
    "  --endpoint URL          the hub (default: $HF_ENDPOINT, else https://huggingface.co)\n"
    "  --retries N             resume a broken transfer up to N times (default 3; 0 = never)\n"
    "  --stall-timeout S       fail a transfer that receives nothing for S seconds (default 30)\n"
    "  --connect-timeout S     (default 15)\n"
    "  --quiet, -q             no progress\n";

static int run_pull(const char *name, kite_pull_params *pp, bool quiet) {
    kite_store *store;
    int rc = open_store(&store, "pull");
    if (rc) return rc;
    pull_view view = {.tty = isatty(2) == 1, .quiet = quiet, .file_index = -1};
    pp->progress = on_progress;
    pp->note = on_note;
    pp->user_data = &view;
    pp->cancel = &g_cancel;
    /* a test hook: a simulated full disk after this many bytes (tests/store) */
    const char *fail_at = getenv("KITE_TEST_PULL_FAIL_WRITE_AT");
    if (fail_at && *fail_at) pp->fail_write_at = strtoull(fail_at, NULL, 10);
    void (*old)(int) = signal(SIGINT, on_sigint);
    char err[1024];
    int st = kite_pull(store, name, pp, err, sizeof err);
    signal(SIGINT, old);
    if (view.drawn) fputc('\n', stderr);
    if (st) rc = store_fail(st == KITE_ERR_INVALID_ARG ? 2 : st == KITE_ERR_CANCELLED ? 130 : 1, "pull", err);
    else if (!quiet) {
        char path[8192];
        if (kite_store_resolve(store, name, path, sizeof path, err, sizeof err) == KITE_OK) fprintf(stderr, "kite pull: %s is ready: %s\n", name, path);
    }
    kite_store_free(store);
    return rc;
}

int kite_cmd_pull(int argc, char **argv) {
    const char *name = NULL;
    bool quiet = false;
    kite_pull_params pp = kite_pull_default_params();
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) { fputs(PULL_USAGE, stdout); return 0; }
        if (!strcmp(opt, "--quiet") || !strcmp(opt, "-q")) { quiet = true; continue; }
        if (opt[0] != '-') {
            if (name) return store_fail(2, "pull", "one NAME at a time (see kite pull --help)");
            name = opt;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kite pull: error: %s needs a value or is unknown (see kite pull --help)\n", opt);
            return 2;
        }
        const char *val = argv[++i];
        char *end;
        if (!strcmp(opt, "--memory")) {
            if (!parse_size(val, &pp.memory_bytes)) { fprintf(stderr, "kite pull: error: --memory expects a size such as 8G, got '%s'\n", val); return 2; }
        } else if (!strcmp(opt, "--endpoint")) {
            pp.hf_endpoint = val;
        } else if (!strcmp(opt, "--retries") || !strcmp(opt, "--stall-timeout") || !strcmp(opt, "--connect-timeout")) {
            double v = strtod(val, &end);
            if (end == val || *end || v < 0 || v > 100000) { fprintf(stderr, "kite pull: error: %s expects a non-negative number, got '%s'\n", opt, val); return 2; }
            if (!strcmp(opt, "--retries")) pp.max_retries = v == 0 ? -1 : (int32_t)v;
            else if (!strcmp(opt, "--stall-timeout")) pp.stall_timeout_ms = (int32_t)(v * 1000);
            else pp.connect_timeout_ms = (int32_t)(v * 1000);
        } else {
            fprintf(stderr, "kite pull: error: unknown option %s (see kite pull --help)\n", opt);
            return 2;
        }
    }
    if (!name) return store_fail(2, "pull", "kite pull needs a NAME: user/repo, user/repo:QUANT, user/repo/file.gguf or a URL");
    return run_pull(name, &pp, quiet);
}

/* ---- store names wherever --model is taken ---------------------------------------------------- */

/* Store names resolved to paths on this command line (argv points into them until the process ends). */
enum { RESOLVED_PATH_MAX = 8192 };
static char **g_resolved;
static size_t g_n_resolved;

int kite_cli_resolve_models(int *argc, char **argv) {
    /* the global options, wherever they are; removed before the verb parses */
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        if (i >= 1 && !strcmp(argv[i], "--models-dir")) {
            if (i + 1 >= *argc) { fprintf(stderr, "kite: error: option --models-dir needs a value\n"); return 2; }
            g_models_dir = argv[++i];
            continue;
        }
        if (i >= 2 && !strcmp(argv[i], "--pull")) { g_pull_on_use = true; continue; }
        argv[n++] = argv[i];
    }
    *argc = n;
    argv[n] = NULL;
    if (n < 2) return 0;
    const char *verb = argv[1];
    if (!strcmp(verb, "pull") || !strcmp(verb, "list") || !strcmp(verb, "show") || !strcmp(verb, "rm") || !strcmp(verb, "gen-model"))
        return 0;
    kite_store *store = NULL;
    /* kite inspect NAME: the positional is a model too */
    bool inspect = !strcmp(verb, "inspect") && n > 2 && argv[2][0] != '-';
    for (int i = inspect ? 1 : 2; i + 1 < n; i++) {
        bool model = !strcmp(argv[i], "--model") || !strcmp(argv[i], "-m") || (inspect && i == 1);
        bool draft = !strcmp(argv[i], "--draft") && strcmp(argv[i + 1], "ngram") && strcmp(argv[i + 1], "none");
        if (!model && !draft) continue;
        const char *val = argv[++i];
        if (!access(val, F_OK)) continue; /* a path wins */
        char err[1024];
        if (!store && kite_store_open(&store, g_models_dir, err, sizeof err)) {
            fprintf(stderr, "kite: error: %s\n", err);
            return 1;
        }
        /* The resolved path replaces the name in argv for the rest of the process (held by g_resolved). */
        char **grown = realloc(g_resolved, sizeof *g_resolved * (g_n_resolved + 1));
        char *path = malloc(RESOLVED_PATH_MAX);
        if (!grown || !path) {
            if (grown) g_resolved = grown;
            free(path);
            kite_store_free(store);
            fprintf(stderr, "kite: error: out of memory\n");
            return 1;
        }
        g_resolved = grown;
        g_resolved[g_n_resolved++] = path;
        int st = kite_store_resolve(store, val, path, RESOLVED_PATH_MAX, err, sizeof err);
        if (st == KITE_ERR_NOT_FOUND && g_pull_on_use && strstr(err, "kite pull")) {
            kite_pull_params pp = kite_pull_default_params();
            kite_store_free(store);
            store = NULL;
            int rc = run_pull(val, &pp, false);
            if (rc) return rc;
            if (kite_store_open(&store, g_models_dir, err, sizeof err)) { fprintf(stderr, "kite: error: %s\n", err); return 1; }
            st = kite_store_resolve(store, val, path, RESOLVED_PATH_MAX, err, sizeof err);
        }
        /* A missing path (not a name): the verb opens it and says what it was for. */
        if (st == KITE_ERR_NOT_FOUND && !strstr(err, "kite pull")) continue;
        if (st) {
            fprintf(stderr, "kite: error: %s%s\n", draft ? "draft model: " : "", err);
            kite_store_free(store);
            return 1;
        }
        argv[i] = path;
    }
    kite_store_free(store);
    return 0;
}
