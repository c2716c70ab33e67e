/* The model store's rooms: names (what a pull reference means), the index (index.json and each model's
 * manifest), the hub's API and the transfers. Nothing here prints; errors are one line in a kite_error. */
#ifndef KITE_STORE_INTERNAL_H
#define KITE_STORE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "kite.h"

/* ---- names (hub.c) ---- */
typedef enum store_ref_kind { STORE_REF_HUB, STORE_REF_URL } store_ref_kind;

typedef struct store_ref {
    store_ref_kind kind;
    char name[1024];    /* normalised: no hf.co/ prefix, no @main, the tag upper-cased */
    char repo[256];     /* "user/repo" (hub) */
    char revision[128]; /* branch, tag or commit; "main" when not given */
    char file[512];     /* a path inside the repository, "" for the whole repo or a tag */
    char quant[32];     /* an upper-cased quantization tag, "" when not given */
    char url[2048];     /* URL kind: the URL */
} store_ref;

/* Parses a pull reference; a malformed one fails with KITE_ERR_INVALID_ARG naming the fault and its
 * byte offset. */
int store_parse_name(const char *text, store_ref *ref, kite_error *e);
/* The folder a name's files live in: the name with unsafe bytes replaced, plus 8 hex digits of its
 * sha256 (so "a/b_c" and "a_b/c" never share one). */
void store_name_dir(const char *name, char *dir, size_t dir_size);
/* Whether the file name (its last component) carries the quantization tag (upper-case), delimited by
 * '-', '.', '_' or the ends: "Q4_K" does not match "x-Q4_K_M.gguf". */
bool store_name_has_quant(const char *file, const char *tag);
/* A split GGUF part "...-00001-of-00003.gguf": fills the 1-based part and the count. */
bool store_split_part(const char *file, int *part, int *count);

/* ---- index (index.c) ---- */
typedef struct store_index {
    kite_store_entry *entries;
    size_t n;
} store_index;

/* Reads index text. A text that is not a JSON object with a "models" array fails (KITE_ERR_FORMAT with
 * the line and column); entries that are not well-formed are dropped (*n_dropped counts them). */
int store_index_parse(const char *text, size_t len, store_index *ix, size_t *n_dropped, kite_error *e);
/* One entry from its JSON object (as in the index and a manifest). */
int store_entry_from_json(const json_t *obj, kite_store_entry *out, kite_error *e);
json_t *store_entry_to_json(const kite_store_entry *entry);
void store_entry_clear(kite_store_entry *entry);
int store_entry_copy(kite_store_entry *dst, const kite_store_entry *src);
void store_index_clear(store_index *ix);
/* The index as text (sorted by name), malloc'd. */
char *store_index_dump(const store_index *ix);

/* ---- transfers (download.c) ---- */
typedef struct store_net {
    const kite_pull_params *params;
    const char *endpoint;  /* no trailing slash */
    const char *token;     /* NULL or "" = none */
    uint64_t written;      /* bytes of the model written so far (the fail_write_at hook counts them) */
    uint64_t done_before;  /* bytes of earlier files of this pull (progress) */
    uint64_t total;        /* all files' bytes, 0 if unknown (progress) */
    int32_t file_index, n_files;
} store_net;

/* GETs url into a NUL-terminated malloc'd body (at most max_bytes). *http_status gets the final status;
 * a transport failure fails with KITE_ERR_IO. Sends the token only when url is under the endpoint.
 * next_url (when not NULL, next_cap bytes): the target of a `Link: <...>; rel="next"` header (the hub's
 * pagination), "" when there is none or it does not fit. */
int store_http_get(store_net *net, const char *url, size_t max_bytes, char **body, size_t *body_len,
                   long *http_status, char *next_url, size_t next_cap, kite_error *e);
/* The standard one-line error for a failed hub request about what ("repository user/repo"). */
int store_http_error(const store_net *net, long http_status, const char *what, kite_error *e);

typedef struct store_file_job {
    const char *url;
    const char *what;          /* for messages: "user/repo/file.gguf" */
    const char *rel_path;      /* progress: the file's name in the model folder */
    const char *final_path;    /* <dir>/<file>; the transfer writes final_path + ".part" */
    uint64_t expected_size;    /* 0 = unknown */
    const char *expected_sha;  /* 64 hex digits, or NULL/"" = take X-Linked-Etag when it is one */
    char sha256_out[65];       /* the file's sha256 */
    uint64_t size_out;
} store_file_job;

/* Fetches one file with resume and verification (see kite_pull). */
int store_download(store_net *net, store_file_job *job, kite_error *e);

/* ---- the hub (hub.c) ---- */
typedef struct hub_file {
    char *path;
    uint64_t size;      /* 0 when the API gave none */
    char sha256[65];    /* lfs.oid, "" for files kept in git (no checksum published) */
} hub_file;

typedef struct hub_listing {
    hub_file *files;
    size_t n;
    char commit[64];    /* the revision's commit sha, "" if unknown */
} hub_listing;

/* The repository's files at ref->revision: model info (siblings, commit), then the recursive tree
 * (sizes, LFS oids). */
int hub_list(store_net *net, const store_ref *ref, hub_listing *out, kite_error *e);
void hub_listing_clear(hub_listing *l);

/* Which files of listing a reference takes (indices into listing->files, *n_pick of them), and what the
 * model path is (the first GGUF of a set, or "" for a folder); reason gets a sentence for people. */
int hub_choose(const store_ref *ref, const hub_listing *listing, uint64_t memory_bytes, size_t *pick, size_t *n_pick,
               char *model_file, size_t model_file_size, char *reason, size_t reason_size, kite_error *e);

/* An URL-encoded copy of a repository path (slashes kept), malloc'd. */
char *hub_escape_path(const char *path);

#endif
