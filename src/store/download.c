/* Transfers with libcurl: small API answers into memory, and files onto disk with HTTP Range resume,
 * a sha256 computed while writing, retries after a dropped connection and a stall timeout. The token
 * goes only to the endpoint's own URLs and never into a message. */
#include <ctype.h>
#include <stdarg.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "store/store_internal.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_status = CURLE_FAILED_INIT;
static void init_curl_once(void) { curl_init_status = curl_global_init(CURL_GLOBAL_DEFAULT); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool has_token(const store_net *net) { return net->token && *net->token; }

/* Common options: redirects, timeouts, the token for the endpoint's URLs, cancellation. */
static struct curl_slist *setup(CURL *c, store_net *net, const char *url, char *errbuf) {
    const kite_pull_params *p = net->params;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "kite/0.1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(p->connect_timeout_ms > 0 ? p->connect_timeout_ms : 15000));
    /* a stall: under 1 byte/s for the stall time */
    long stall_s = ((p->stall_timeout_ms > 0 ? p->stall_timeout_ms : 30000) + 999) / 1000;
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall_s);
    struct curl_slist *headers = NULL;
    size_t elen = strlen(net->endpoint);
    if (has_token(net) && !strncmp(url, net->endpoint, elen) && (url[elen] == '/' || !url[elen])) {
        /* libcurl drops a custom Authorization header when a redirect leaves the host (the CDN). */
        char *h = malloc(strlen(net->token) + 32);
        if (h) {
            sprintf(h, "Authorization: Bearer %s", net->token);
            headers = curl_slist_append(headers, h);
            free(h);
        }
    }
    return headers;
}

/* A message from libcurl with the token (if it ever appeared) replaced. */
static void scrub(const store_net *net, char *s) {
    if (!has_token(net) || strlen(net->token) < 4) return;
    size_t k = strlen(net->token);
    for (char *hit; (hit = strstr(s, net->token));) {
        memset(hit, '*', 3);
        memmove(hit + 3, hit + k, strlen(hit + k) + 1);
    }
}

typedef struct mem_sink {
    char *data;
    size_t len, cap, max;
    bool too_big;
} mem_sink;

static size_t mem_write(char *ptr, size_t size, size_t n, void *user) {
    mem_sink *m = user;
    size_t add = size * n;
    if (m->len + add > m->max) { m->too_big = true; return 0; }
    if (m->len + add + 1 > m->cap) {
        size_t cap = (m->len + add + 1) * 2;
        char *grown = realloc(m->data, cap);
        if (!grown) return 0;
        m->data = grown;
        m->cap = cap;
    }
    memcpy(m->data + m->len, ptr, add);
    m->len += add;
    m->data[m->len] = 0;
    return add;
}

static int cancel_cb(void *user, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln) {
    (void)dlt; (void)dln; (void)ult; (void)uln;
    const store_net *net = user;
    return net->params->cancel && *net->params->cancel;
}

static int transport_error(const store_net *net, CURLcode rc, const char *errbuf, const char *url_what, kite_error *e) {
    char msg[CURL_ERROR_SIZE + 64];
    snprintf(msg, sizeof msg, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    scrub(net, msg);
    if (rc == CURLE_ABORTED_BY_CALLBACK) return kite_fail(e, KITE_ERR_CANCELLED, "%s: cancelled", url_what);
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return kite_fail(e, KITE_ERR_IO, "%s: timed out (%s)", url_what, msg);
    return kite_fail(e, KITE_ERR_IO, "%s: %s", url_what, msg);
}

/* The next page of a paginated answer: `Link: <URL>; rel="next"` (RFC 8288; the hub sends one link). */
typedef struct link_sink {
    char *next;
    size_t cap;
} link_sink;

static size_t link_header_cb(char *buf, size_t size, size_t n, void *user) {
    link_sink *l = user;
    size_t len = size * n;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response after a redirect */
        if (l->cap) l->next[0] = 0;
        return len;
    }
    if (len < 5 || strncasecmp(buf, "Link:", 5) || !l->cap) return len;
    const char *end = buf + len;
    for (const char *p = buf + 5; p < end;) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt) break;
        const char *gt = memchr(lt, '>', (size_t)(end - lt));
        if (!gt) break;
        const char *comma = memchr(gt, ',', (size_t)(end - gt));
        const char *stop = comma ? comma : end;
        bool next = false;
        for (const char *q = gt; q + 8 <= stop; q++) {
            size_t rem = (size_t)(stop - q);
            if ((rem >= 10 && !strncasecmp(q, "rel=\"next\"", 10)) || !strncasecmp(q, "rel=next", 8)) next = true;
        }
        if (next) {
            size_t ulen = (size_t)(gt - lt - 1);
            if (ulen < l->cap) {
                memcpy(l->next, lt + 1, ulen);
                l->next[ulen] = 0;
            }
            break;
        }
        p = stop;
    }
    return len;
}

int store_http_get(store_net *net, const char *url, size_t max_bytes, char **body, size_t *body_len, long *http_status,
                   char *next_url, size_t next_cap, kite_error *e) {
    pthread_once(&curl_once, init_curl_once);
    if (curl_init_status != CURLE_OK) return kite_fail(e, KITE_ERR_IO, "libcurl failed to initialise");
    CURL *c = curl_easy_init();
    if (!c) return kite_fail(e, KITE_ERR_NOMEM, "libcurl: no handle");
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *headers = setup(c, net, url, errbuf);
    headers = curl_slist_append(headers, "Accept: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    mem_sink m = {.max = max_bytes};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    link_sink links = {.next = next_url, .cap = next_url ? next_cap : 0};
    if (links.cap) {
        next_url[0] = 0;
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, link_header_cb);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &links);
    }
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, cancel_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, net);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    if (m.too_big) { free(m.data); return kite_fail(e, KITE_ERR_FORMAT, "%s: the answer is larger than %zu bytes", url, max_bytes); }
    if (rc != CURLE_OK) { free(m.data); return transport_error(net, rc, errbuf, url, e); }
    if (!m.data) m.data = calloc(1, 1);
    if (!m.data) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    *body = m.data;
    *body_len = m.len;
    *http_status = status;
    return KITE_OK;
}

int store_http_error(const store_net *net, long status, const char *what, kite_error *e) {
    if (status == 401 || status == 403) {
        if (has_token(net))
            return kite_fail(e, KITE_ERR_IO, "%s: access denied (HTTP %ld): the token in HF_TOKEN was rejected or has no access (a gated repository needs its terms accepted on the hub)", what, status);
        return kite_fail(e, KITE_ERR_IO, "%s: access denied (HTTP %ld): it is gated, private or does not exist; for a gated or private one, set HF_TOKEN to a token with access", what, status);
    }
    if (status == 404) return kite_fail(e, KITE_ERR_NOT_FOUND, "%s not found (HTTP 404)", what);
    if (status == 429) return kite_fail(e, KITE_ERR_IO, "%s: rate limited by the server (HTTP 429): try again later", what);
    return kite_fail(e, KITE_ERR_IO, "%s: HTTP %ld from the server", what, status);
}

/* ---- files ------------------------------------------------------------------------------------ */

/* The longest wait before a retry of a server error, whatever its Retry-After says. */
#define MAX_RETRY_WAIT_S 30.0

/* Sleeps seconds in steps of 50 ms; true when the pull was cancelled meanwhile. */
static bool wait_cancellable(const store_net *net, double seconds) {
    for (double left = seconds; left > 0; left -= 0.05) {
        if (net->params->cancel && *net->params->cancel) return true;
        struct timespec ts = {0, (long)((left < 0.05 ? left : 0.05) * 1e9)};
        nanosleep(&ts, NULL);
    }
    return net->params->cancel && *net->params->cancel;
}

typedef struct file_sink {
    store_net *net;
    store_file_job *job;
    int fd;
    uint64_t have;           /* bytes in the .part file */
    uint64_t start;          /* bytes there when this request began */
    kite_sha256 sha;
    long status;             /* of the last response (after redirects) */
    bool checked;            /* the status and range were looked at, on the first body byte */
    bool restarted;          /* the server ignored the range: the part was emptied */
    bool bad_range;          /* a 206 starting elsewhere than asked */
    int write_errno;         /* a failed write (ENOSPC, EIO, or the test hook's) */
    uint64_t range_start;    /* from Content-Range */
    bool have_range;
    char linked_etag[80];    /* X-Linked-Etag, from whichever response carried it (the hub's 302 to its CDN) */
    char etag[80];           /* ETag of the final response (a CDN's is no sha256; the hub's own may be) */
    mem_sink error_body;     /* a 4xx/5xx body (not written to the file) */
    int retry_after_s;       /* Retry-After of the last response, in seconds (-1: none) */
    double last_report;
    uint64_t resumed;
} file_sink;

static void trim_value(const char *v, size_t n, char *out, size_t cap) {
    while (n && (*v == ' ' || *v == '\t')) { v++; n--; }
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/') { v += 2; n -= 2; }
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') { v++; n -= 2; }
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
}

static size_t header_cb(char *buf, size_t size, size_t n, void *user) {
    file_sink *s = user;
    size_t len = size * n;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response (redirects): forget the last one's */
        s->have_range = false;
        s->etag[0] = 0;
        s->retry_after_s = -1;
        return len;
    }
    const char *colon = memchr(buf, ':', len);
    if (!colon) return len;
    size_t klen = (size_t)(colon - buf);
    const char *v = colon + 1;
    size_t vlen = len - klen - 1;
    if (klen == 13 && !strncasecmp(buf, "Content-Range", 13)) {
        char val[128];
        trim_value(v, vlen, val, sizeof val);
        unsigned long long a;
        if (sscanf(val, "bytes %llu-", &a) == 1) { s->range_start = a; s->have_range = true; }
    } else if (klen == 13 && !strncasecmp(buf, "X-Linked-Etag", 13)) {
        trim_value(v, vlen, s->linked_etag, sizeof s->linked_etag);
    } else if (klen == 4 && !strncasecmp(buf, "ETag", 4)) {
        trim_value(v, vlen, s->etag, sizeof s->etag);
    } else if (klen == 11 && !strncasecmp(buf, "Retry-After", 11)) {
        char val[32];
        trim_value(v, vlen, val, sizeof val);
        char *end = NULL;
        long secs = strtol(val, &end, 10); /* the delay form; an HTTP date counts as none */
        s->retry_after_s = end != val && *end == 0 && secs >= 0 ? (int)(secs > 3600 ? 3600 : secs) : -1;
    }
    return len;
}

static void report(file_sink *s, bool force, bool finished) {
    const kite_pull_params *p = s->net->params;
    if (!p->progress) return;
    double t = now_s();
    if (!force && t - s->last_report < 0.1) return;
    s->last_report = t;
    kite_pull_progress pr = {
        .file = s->job->rel_path, .file_index = s->net->file_index, .n_files = s->net->n_files,
        .file_done = s->have, .file_total = s->job->expected_size, .done = s->net->done_before + s->have,
        .total = s->net->total, .resumed = s->resumed, .finished = finished,
    };
    p->progress(&pr, p->user_data);
}

static bool write_all(file_sink *s, const char *p, size_t n) {
    uint64_t at = s->net->params->fail_write_at;
    while (n) {
        size_t chunk = n;
        if (at && s->net->written < at && s->net->written + chunk >= at) {
            chunk = (size_t)(at - s->net->written);
            if (chunk == 0) { s->write_errno = ENOSPC; return false; }
        } else if (at && s->net->written >= at) {
            s->write_errno = ENOSPC;
            return false;
        }
        ssize_t w = write(s->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            s->write_errno = errno;
            return false;
        }
        p += w;
        n -= (size_t)w;
        s->net->written += (uint64_t)w;
        kite_sha256_update(&s->sha, p - w, (size_t)w);
        s->have += (uint64_t)w;
    }
    return true;
}

static size_t body_cb(char *ptr, size_t size, size_t n, void *user) {
    file_sink *s = user;
    size_t len = size * n;
    if (!s->checked) {
        s->checked = true;
        if (s->status < 400 && s->start > 0 && s->status == 200) {
            /* the server ignored the range: start over */
            if (ftruncate(s->fd, 0) || lseek(s->fd, 0, SEEK_SET) < 0) { s->write_errno = errno; return 0; }
            kite_sha256_init(&s->sha);
            s->have = 0;
            s->resumed = 0;
            s->restarted = true;
        } else if (s->status == 206 && (!s->have_range || s->range_start != s->start)) {
            s->bad_range = true;
            return 0;
        }
    }
    if (s->status >= 400) return mem_write(ptr, size, n, &s->error_body) == len ? len : 0;
    if (!write_all(s, ptr, len)) return 0;
    report(s, false, false);
    return len;
}

static int file_xferinfo(void *user, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln) {
    (void)dlt; (void)dln; (void)ult; (void)uln;
    file_sink *s = user;
    return s->net->params->cancel && *s->net->params->cancel;
}

/* Response status is only known after headers: a header callback sets it on the blank line. */
static size_t header_status_cb(char *buf, size_t size, size_t n, void *user) {
    file_sink *s = user;
    size_t len = size * n;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) {
        int code = 0;
        const char *sp = memchr(buf, ' ', len);
        if (sp) code = atoi(sp + 1);
        s->status = code;
    }
    return header_cb(buf, size, n, user);
}

static bool is_hex64(const char *s) {
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

/* Hashes the bytes already in the part file (a resume continues the digest from them). */
static int hash_existing(file_sink *s, const char *part, kite_error *e) {
    char buf[1 << 16];
    if (lseek(s->fd, 0, SEEK_SET) < 0) return kite_fail(e, KITE_ERR_IO, "%s: %s", part, strerror(errno));
    uint64_t left = s->have;
    while (left) {
        ssize_t r = read(s->fd, buf, left < sizeof buf ? (size_t)left : sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return kite_fail(e, KITE_ERR_IO, "%s: reading it back: %s", part, r < 0 ? strerror(errno) : "short file");
        kite_sha256_update(&s->sha, buf, (size_t)r);
        left -= (uint64_t)r;
    }
    if (lseek(s->fd, 0, SEEK_END) < 0) return kite_fail(e, KITE_ERR_IO, "%s: %s", part, strerror(errno));
    return KITE_OK;
}

static void note(const store_net *net, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const store_net *net, const char *fmt, ...) {
    if (!net->params->note) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    net->params->note(line, net->params->user_data);
}

int store_download(store_net *net, store_file_job *job, kite_error *e) {
    pthread_once(&curl_once, init_curl_once);
    if (curl_init_status != CURLE_OK) return kite_fail(e, KITE_ERR_IO, "libcurl failed to initialise");
    char part[4200];
    if (snprintf(part, sizeof part, "%s.part", job->final_path) >= (int)sizeof part) return kite_fail(e, KITE_ERR_INVALID_ARG, "path too long: %s", job->final_path);
    file_sink s = {.net = net, .job = job, .fd = -1};
    s.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s.fd < 0) return kite_fail(e, KITE_ERR_IO, "cannot write %s: %s", part, strerror(errno));
    struct stat stt;
    int st = KITE_OK;
    if (fstat(s.fd, &stt)) { st = kite_fail(e, KITE_ERR_IO, "%s: %s", part, strerror(errno)); goto done; }
    s.have = (uint64_t)stt.st_size;
    if (job->expected_size && s.have > job->expected_size) { /* longer than the file: not ours */
        if (ftruncate(s.fd, 0)) { st = kite_fail(e, KITE_ERR_IO, "%s: %s", part, strerror(errno)); goto done; }
        s.have = 0;
    }
    kite_sha256_init(&s.sha);
    if (s.have && (st = hash_existing(&s, part, e))) goto done;
    if (s.have) note(net, "%s: resuming at byte %" PRIu64 " of %" PRIu64, job->rel_path, s.have, job->expected_size);
    s.resumed = s.have;
    int retries = net->params->max_retries < 0 ? 0 : net->params->max_retries == 0 ? 3 : net->params->max_retries;
    char expected_etag[80] = "";
    for (int attempt = 0;; attempt++) {
        if (job->expected_size && s.have == job->expected_size) break; /* complete already */
        CURL *c = curl_easy_init();
        if (!c) { st = kite_fail(e, KITE_ERR_NOMEM, "libcurl: no handle"); goto done; }
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *headers = setup(c, net, job->url, errbuf);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        char range[64];
        if (s.have) {
            snprintf(range, sizeof range, "%" PRIu64 "-", s.have);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        s.start = s.have;
        s.checked = false;
        s.status = 0;
        s.bad_range = false;
        s.retry_after_s = -1;
        s.restarted = false;
        s.error_body.len = 0;
        s.error_body.max = 4096;
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_status_cb);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, file_xferinfo);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
        CURLcode rc = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        curl_slist_free_all(headers);
        /* the sha256 the hub vouches for: X-Linked-Etag (LFS), else an ETag that is one */
        if (!expected_etag[0] && (is_hex64(s.linked_etag) || is_hex64(s.etag)))
            snprintf(expected_etag, sizeof expected_etag, "%s", is_hex64(s.linked_etag) ? s.linked_etag : s.etag);
        if (s.restarted) note(net, "%s: the server ignored the range request; fetching the whole file again", job->rel_path);
        if (s.write_errno) {
            st = kite_fail(e, KITE_ERR_IO, "writing %s: %s", part, strerror(s.write_errno));
            goto done;
        }
        if (rc == CURLE_ABORTED_BY_CALLBACK) { st = kite_fail(e, KITE_ERR_CANCELLED, "pull of %s cancelled", job->what); goto done; }
        if (status == 416 && s.have) { /* the range starts at or past the end: the part is suspect */
            if (ftruncate(s.fd, 0) || lseek(s.fd, 0, SEEK_SET) < 0) { st = kite_fail(e, KITE_ERR_IO, "%s: %s", part, strerror(errno)); goto done; }
            kite_sha256_init(&s.sha);
            s.have = s.resumed = 0;
            if (attempt < retries) continue;
        }
        /* A server error or a rate limit is often passing (a CDN node restarting, a burst): waited out and
           retried like a broken transfer, honouring Retry-After up to MAX_RETRY_WAIT_S. */
        if (rc == CURLE_OK && (status >= 500 || status == 429) && attempt < retries) {
            double wait = s.retry_after_s >= 0 ? s.retry_after_s : 0.5 * (double)(1 << (attempt < 4 ? attempt : 4));
            if (wait > MAX_RETRY_WAIT_S) wait = MAX_RETRY_WAIT_S;
            note(net, "%s: HTTP %ld from the server; retrying in %.1f s", job->rel_path, status, wait);
            if (wait_cancellable(net, wait)) { st = kite_fail(e, KITE_ERR_CANCELLED, "pull of %s cancelled", job->what); goto done; }
            continue;
        }
        if (rc == CURLE_OK && status >= 400) { st = store_http_error(net, status, job->what, e); goto done; }
        if (s.bad_range) { st = kite_fail(e, KITE_ERR_IO, "%s: the server answered a range request with another range", job->what); goto done; }
        if (rc == CURLE_OK && (status == 200 || status == 206)) {
            if (!job->expected_size || s.have == job->expected_size) break;
            if (s.have > job->expected_size) {
                st = kite_fail(e, KITE_ERR_FORMAT, "%s: got %" PRIu64 " bytes, more than the %" PRIu64 " the hub lists", job->what, s.have, job->expected_size);
                goto done;
            }
            rc = CURLE_PARTIAL_FILE; /* short without an error: try to resume */
        } else if (rc == CURLE_OK) {
            st = kite_fail(e, KITE_ERR_IO, "%s: unexpected HTTP %ld", job->what, status);
            goto done;
        }
        if (rc == CURLE_OK) break;
        if (attempt >= retries || rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_COULDNT_RESOLVE_HOST) {
            char what[5000];
            snprintf(what, sizeof what, "%s (%" PRIu64 " bytes kept in %s; kite pull again resumes)", job->what, s.have, part);
            st = transport_error(net, rc, errbuf, s.have ? what : job->what, e);
            goto done;
        }
        note(net, "%s: the transfer broke at byte %" PRIu64 " (%s); resuming", job->rel_path, s.have, curl_easy_strerror(rc));
        s.resumed = s.have;
    }
    if (fsync(s.fd)) { st = kite_fail(e, KITE_ERR_IO, "writing %s: %s", part, strerror(errno)); goto done; }
    kite_sha256_hex(&s.sha, job->sha256_out);
    job->size_out = s.have;
    const char *want = job->expected_sha && *job->expected_sha ? job->expected_sha : is_hex64(expected_etag) ? expected_etag : NULL;
    if (want && strcasecmp(want, job->sha256_out)) {
        close(s.fd);
        s.fd = -1;
        unlink(part);
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: sha256 mismatch (expected %.64s, got %s): the download was deleted", job->what, want, job->sha256_out);
        goto done;
    }
    if (rename(part, job->final_path)) { st = kite_fail(e, KITE_ERR_IO, "renaming %s: %s", part, strerror(errno)); goto done; }
    report(&s, true, true);
done:
    if (s.fd >= 0) close(s.fd);
    free(s.error_body.data);
    return st;
}
